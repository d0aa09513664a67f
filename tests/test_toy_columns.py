"""The columns task (benchmarks/testbeds/columns): worked solutions against hand-worked column arithmetic, the chain
checker's verdicts, the reward, the data's properties (answer prior, held-out overlap, fresh prompts) and the
instrument's properties on hand-made counts. No model is trained here."""

import pathlib
import random
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import testbeds.columns as C
from testbeds.columns import curriculum as columns_warmup
from testbeds.columns import problems

from trl_ada.toy import toy_task

# --------------------------------------------------------------------------------------------------------------------
# Solutions, worked by hand
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "solution", "answer"),
    [
        # 385 + 652: 5+2 = 07, 8+5+0 = 13, 3+6+1 = 10 -> "10", then 3, then 7.
        ("385+652", "07\n13\n10\n#1037", "1037"),
        # 523 - 187: 3-7 borrows (13-7 = 6, "16"), 2-8-1 borrows (12-9 = 3, "13"), 5-1-1 = 3.
        ("523-187", "16\n13\n03\n#336", "336"),
        # Octal 647 + 222 (421 + 146 = 567 = 1067 octal): 7+2 = 9 = 11 octal, 4+2+1 = 07, 6+2 = 8 = 10 octal.
        ("647&222", "11\n07\n10\n#1071", "1071"),
        # Octal 672 - 176 (442 - 126 = 316 = 474 octal): 2-6 borrows (10+2-6 = 4), 7-7-1 borrows (7), 6-1-1 = 4.
        ("672~176", "14\n17\n04\n#474", "474"),
    ],
)
def test_solve_matches_hand_worked_columns(expression, solution, answer):
    assert C.solve(expression) == (solution, answer)


def test_every_rule_spells_its_arithmetic_on_random_items():
    rng = random.Random(5)
    for rule, spec in C.RULES.items():
        for _ in range(2000):
            expression = C.sample_expression(rng, rule)
            _, a, b = C.parse(expression)
            # The answer is the rule's arithmetic in its base, computed here without the columns.
            expected = a + b if rule in "+&" else a - b
            assert int(C.solve(expression)[1], spec.base) == expected
            assert len(C.solve(expression)[0].split("\n")) == 4  # three columns and the answer


def test_parse_refuses_what_the_task_does_not_make():
    for bad in ("12+3", "385+652 1+2", "389&222", "100-99", "0385+652", "523-500"):
        with pytest.raises(ValueError):
            C.parse(bad)


# --------------------------------------------------------------------------------------------------------------------
# Chain checker and reward
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "verdict"),
    [
        ("07\n13\n10\n#1037", "correct"),
        ("07\n12\n10\n#1037", "step_error"),  # a wrong middle column beside the right answer: flawed
        ("07\n13\n10\n#1027", "answer_mismatch"),
        ("07\n13\n#1037", "stopped_early"),
        ("07\n13", "stopped_early"),
        ("07\n1 3\n10\n#1037", "malformed"),
        ("07\n13\n10\n#1037\n", "extra_text"),
        ("07\n13\n10\nx", "extra_text"),
    ],
)
def test_check_chain_names_the_first_error(completion, verdict):
    assert C.check_chain("385+652", completion) == verdict


def test_reward_reads_only_the_final_answer_and_refuses_truncation():
    answers = ["1037"] * 5
    completions = ["07\n13\n10\n#1037", "07\n12\n10\n#1037", "#1037", "07\n13\n10\n#01037", "07\n13\n10\n#1037 "]
    assert C.columns_reward(completions, answers) == [1.0, 1.0, 1.0, 0.0, 0.0]
    eos = C.EOS_TOKEN_ID
    assert C.columns_reward(["#1037", "#1037"], ["1037"] * 2, completion_ids=[[5, eos], [5, 6]]) == [1.0, 0.0]
    conversation = [[{"role": "assistant", "content": "#1037"}]]
    assert C.columns_reward(conversation, ["1037"]) == [1.0]


def test_chain_verdicts_mark_truncated_samples():
    eos = C.EOS_TOKEN_ID
    verdicts = C.chain_verdicts(["385+652"] * 2, ["07\n13\n10\n#1037"] * 2, [[1, eos], [1, 2, 3]])
    assert verdicts == ["correct", "truncated"]


# --------------------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------------------


def test_answer_prior_max_counts_the_commonest_answer_per_rule():
    prior = C.answer_prior_max(["5", "5", "7", "9", "8", "9"], ["+", "+", "+", "&", "&", "~"])
    assert prior["max"] == 1.0 and prior["rule"] == "~"  # one prompt of "~", its answer on all of them
    assert prior["by_rule"]["+"] == {"answer": "5", "share": 2 / 3}
    # On the real data no constant answer earns more than a few percent of any rule's prompts.
    heldout = C.columns_heldout()
    train = C.columns_train_rows(4800, seed=0)
    assert C.answer_prior_max([*heldout["answer"], *train["answer"]], [*heldout["rule"], *train["rule"]])["max"] < 0.05


def test_heldout_items_are_never_training_or_warmup_items():
    heldout = [p[-1]["content"] for p in C.columns_heldout()["prompt"]]
    train = [p[-1]["content"] for p in C.columns_train_rows(4800, seed=3)["prompt"]]
    curriculum = C.Curriculum()
    curriculum.phase = "hard"
    warmup = curriculum.examples(seed=0)
    seen = train + [next(warmup)[0] for _ in range(20_000)]
    assert C.heldout_fact_overlap(heldout, seen) == 0.0
    assert C.heldout_fact_overlap(heldout, heldout) == 1.0
    hard = [e for e in heldout if C.RULES[C.parse(e)[0]].hard]
    assert C.heldout_fact_overlap(heldout, hard[:32]) == 32 / len(hard)


def test_train_rows_are_fresh_or_fixed_epochs():
    fresh = C.columns_train_rows(4800, seed=1)
    contents = [p[-1]["content"] for p in fresh["prompt"]]
    assert len(set(contents)) == 4800  # one visit per prompt
    assert contents[:100] == [p[-1]["content"] for p in C.columns_train_rows(100, seed=1)["prompt"]]
    epochs = C.columns_train_rows(4800, seed=1, epochs=C.EPOCHS)
    assert len(set(p[-1]["content"] for p in epochs["prompt"])) == C.EPOCH_PROMPTS
    mix = {rule: fresh["rule"].count(rule) / 4800 for rule in C.RULES}
    for rule, share in C.TRAIN_RULE_WEIGHTS.items():
        assert abs(mix[rule] - share) < 0.025


def test_heldout_holds_the_same_number_of_each_rule():
    heldout = C.columns_heldout()
    assert [heldout["rule"].count(rule) for rule in C.RULES] == [C.HELDOUT_PER_RULE] * 4
    with pytest.raises(ValueError, match="multiple"):
        C.columns_heldout(10)


# --------------------------------------------------------------------------------------------------------------------
# The warm-up's curriculum and stop rule
# --------------------------------------------------------------------------------------------------------------------


def test_curriculum_mixes_only_active_hard_rules():
    curriculum = C.Curriculum()
    assert set(curriculum.weights()) == set(C.EASY_RULES)
    curriculum.phase = "hard"
    weights = curriculum.weights()
    assert weights["&"] == weights["~"] == columns_warmup.HARD_EXPOSURE and sum(weights.values()) == pytest.approx(1.0)
    curriculum.active.discard("&")
    assert "&" not in curriculum.weights() and sum(curriculum.weights().values()) == pytest.approx(1.0)


def test_warmup_stop_rule():
    samples = C.WARMUP_CHECK_SAMPLES
    assert C.warmup_should_stop([2, 3, 4, 5, 6] * 4, samples)  # median 4/64 = 0.0625
    assert C.warmup_should_stop([0, 0, 4, 5, 60] * 4, samples)  # 40% at 0, the median still 4/64
    assert not C.warmup_should_stop([0, 0, 0, 5, 6] * 4, samples)  # median 0
    assert not C.warmup_should_stop([20, 30, 40] * 4, samples)  # median above the band
    with pytest.raises(ValueError):
        C.warmup_should_stop([], samples)


# --------------------------------------------------------------------------------------------------------------------
# The instrument's properties from counts
# --------------------------------------------------------------------------------------------------------------------


def test_instrument_properties_from_hand_made_counts():
    samples = 128
    # Four prompts: an easy one (right 120 times, all correct chains), two hard ones at low correct-chain p (one with
    # 2 flawed rewarded samples), and a hard one never right.
    rewarded = [120, 10, 4, 0]
    correct = [120, 8, 4, 0]
    rules = ["+", "&", "~", "&"]
    verdicts = ["correct"] * 132 + ["step_error"] * 380
    props = C.instrument_properties(rewarded, correct, verdicts, rules, samples)
    assert props["flawed_rewarded_share"] == pytest.approx(2 / 134)
    assert props["flawed_rewarded_share_low_p"] == pytest.approx(2 / 14)  # p = 8/128 and 4/128 are low, 0 too
    assert props["frac_hard_low_p"] == pytest.approx(2 / 4)  # 8/128 and 4/128 in (1/128, 0.1]; 0 is not
    assert props["frac_hard_zero"] == pytest.approx(1 / 4)
    assert props["by_rule"]["&"]["frac_zero"] == 0.5
    assert props["first_errors"] == {"step_error": 1.0}


def test_the_task_is_registered_with_its_chain_checker():
    task = toy_task("columns")
    assert task.chain_verdicts is C.chain_verdicts and task.reward is C.columns_reward
    assert toy_task("columns-epochs").name == "columns-epochs"


def test_hard_items_need_the_octal_carries():
    # 567 + 706 (octal): 7+6 = 15 carries, 6+0+1 = 7 does not, 5+7 = 14 carries: two columns, kept; 777 + 111
    # carries in all three.
    assert not problems._octal_add_items(int("777", 8), int("111", 8))
    assert problems._octal_add_items(int("567", 8), int("706", 8))
    # 123 + 144: no column reaches 8, right by decimal habit: not an item of "&".
    assert not problems._octal_add_items(int("123", 8), int("144", 8))
    # 610 - 163 (octal): 0-3 borrows, 1-6-1 borrows, 6-1-1 = 4: kept; 675 - 123 borrows nowhere.
    assert problems._octal_subtract_items(int("610", 8), int("163", 8))
    assert not problems._octal_subtract_items(int("675", 8), int("123", 8))
    rng = random.Random(2)
    for rule in C.HARD_RULES:
        for _ in range(300):
            _, a, b = C.parse(C.sample_expression(rng, rule))
            carries = problems._carries(C.RULES[rule].column, 8, a, b)
            assert (sum(carries) == 2) if rule == "&" else carries[:2] == [1, 1]


def test_a_wrong_line_example_teaches_the_answer_to_spell_the_lines():
    rng = random.Random(0)
    for expression in ("385+652", "523-187", "647&222", "610~163"):
        rule = C.RULES[C.parse(expression)[0]]
        right = C.solve(expression)[0].split("\n")[:-1]
        for _ in range(50):
            prompt, completion, shown = C.spelled_from_a_wrong_line(expression, rng)
            lines = shown.rstrip("\n").split("\n")
            assert prompt == expression and completion.startswith(shown)
            assert sum(a != b for a, b in zip(lines, right, strict=True)) == 1
            assert all(len(line) == 2 and int(line[0]) < rule.base and int(line[1]) < rule.base for line in lines)
            # The answer is what the shown lines spell, worked here by hand: last line's value, then digits.
            value = int(lines[-1], rule.base)
            expected = C.RULES[C.parse(expression)[0]].write(value) + lines[1][1] + lines[0][1]
            assert completion == f"{shown}#{expected}" and not expected.startswith("0")
    assert C.spell(["07", "13", "10"], 10) == "1037"


def test_the_warmup_learns_nothing_of_the_shown_part(tmp_path):
    """An example's third item is shown to the model but takes no loss: its label ids are -100."""
    from trl_ada.toy import build_toy_model, build_toy_tokenizer
    from trl_ada.toy.warmup import WarmupRecipe, supervised_warmup

    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer)
    seen = []
    forward = model.forward

    def spy(*args, **kwargs):
        seen.append(kwargs["labels"].clone())
        return forward(*args, **kwargs)

    model.forward = spy
    example = ("385+652", "07\n13\n10\n#1037", "07\n13\n10\n")
    recipe = WarmupRecipe(
        examples=lambda seed: iter([example] * 2),
        check_set=lambda: C.columns_heldout(4),
        target_accuracy=1.0,
        reward=C.columns_reward,
        max_new_tokens=4,
        check_every=100,
        max_steps=1,
        batch_size=2,
    )
    with pytest.warns(RuntimeWarning, match="cap"):
        supervised_warmup(model, tokenizer, 0, recipe)
    learned = [t for t in seen[0][0].tolist() if t != -100]
    # "#1037" and EOS: each character is one token.
    assert tokenizer.decode(learned[:-1]) == "#1037" and learned[-1] == tokenizer.eos_token_id


def test_the_shipped_warm_model_is_the_one_the_results_were_measured_from(tmp_path):
    """Seed 0's warm model lives next to the task, outside the package, bit for bit the file the committed columns
    results started from (moved from trl_ada/toy_warm_columns, never saved again); other seeds keep their cache
    folders' names, so a cache built before the move stays valid."""
    import hashlib

    from trl_ada.toy import toy_model_dir

    assert toy_model_dir(task="columns") == str(C.SHIPPED_WARM_DIR)
    assert C.SHIPPED_WARM_DIR == pathlib.Path(C.__file__).resolve().parent / "warm"
    weights = (C.SHIPPED_WARM_DIR / "model.safetensors").read_bytes()
    assert hashlib.sha256(weights).hexdigest() == "09f2d50bec1399ade99c4404902432042212922ebb3b8c0b5e35f5ad6369b25f"
    built = tmp_path / "toy-columns-c1-seed3-warm"  # as an earlier build left it
    built.mkdir()
    (built / "toy_info.json").write_text("{}")
    assert toy_model_dir(tmp_path, seed=3, task="columns") == str(built)
