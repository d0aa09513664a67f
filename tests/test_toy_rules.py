"""The rules task: problems, the chain checker and the reward on hand-worked chains, the warm-up's stop rule, the
instrument's properties on hand-made counts, the two training settings, and the shipped model's properties."""

import collections

import pytest

from trl_ada.toy import rules


@pytest.mark.parametrize(
    ("expression", "solution", "answer"),
    [
        ("38%7 23%4", "38%7=3\n23%4=3\n#3,3", "3,3"),  # 38 = 5*7 + 3, 23 = 5*4 + 3
        ("17@5 39@9", "17@5=1\n39@9=3\n#1,3", "1,3"),  # 85 = 14*6 + 1, 351 = 58*6 + 3
        ("21+7 31+5", "21+7=28\n31+5=36\n#28,36", "28,36"),
        ("12-0 29-9", "12-0=12\n29-9=20\n#12,20", "12,20"),
        ("30%3 10@9", None, None),  # two rules in one prompt
        ("3%7 23%4", "3%7=3\n23%4=3\n#3,3", "3,3"),  # parse accepts it; the generator never draws a < 10
    ],
)
def test_solve_works_the_pairs_by_hand(expression, solution, answer):
    if solution is None:
        with pytest.raises(ValueError, match="one rule"):
            rules.solve(expression)
        return
    assert rules.solve(expression) == (solution, answer)


@pytest.mark.parametrize("expression", ["38%07 23%4", "38%7  23%4", "38*7 23*4", "", "38%7"])
def test_parse_refuses_what_the_task_never_makes_or_reads_a_single_pair(expression):
    if expression == "38%7":
        assert rules.parse(expression) == ("%", [(38, 7)])
        return
    with pytest.raises(ValueError):
        rules.parse(expression)


@pytest.mark.parametrize(
    ("completion", "verdict"),
    [
        ("38%7=3\n23%4=3\n#3,3", "correct"),
        ("28%7=3\n23%4=3\n#3,3", "operand_error"),  # miscopied 38; the result is still 38 % 7
        ("38@7=3\n23%4=3\n#3,3", "operand_error"),  # the wrong rule
        ("38%7=3\n23%5=3\n#3,3", "operand_error"),
        ("38%7=4\n23%4=3\n#4,3", "arith_error"),
        ("38%7=3\n23%4=2\n#3,2", "arith_error"),
        ("38%7=3\n#3", "stopped_early"),
        ("38%7=3\n23%4=3", "stopped_early"),
        ("38%7=3\n23%4=3\n", "stopped_early"),
        ("", "stopped_early"),
        ("38%7=3\n23%4==3\n#3,3", "malformed"),
        ("38%7 3\n23%4=3\n#3,3", "malformed"),
        ("38%7=3\n23%4=3\n#3,4", "answer_mismatch"),
        ("38%7=3\n23%4=3\n#3,03", "malformed"),  # not a canonical answer list at all
        ("38%7=3\n23%4=3\n#3,3\n#3,3", "extra_text"),
        ("38%7=3\n23%4=3\nso\n#3,3", "extra_text"),
    ],
)
def test_check_chain_names_the_first_error_of_hand_worked_chains(completion, verdict):
    assert rules.check_chain("38%7 23%4", completion) == verdict


def test_the_hand_worked_chains_cover_every_error_class():
    marks = test_check_chain_names_the_first_error_of_hand_worked_chains.pytestmark
    verdicts = {verdict for mark in marks if mark.name == "parametrize" for _, verdict in mark.args[1]}
    assert verdicts == {"correct", *rules.CHAIN_ERRORS}


def test_reward_reads_the_canonical_final_answer_and_checks_truncation():
    eos = rules.EOS_TOKEN_ID
    right = "38%7=3\n23%4=3\n#3,3"
    completions = [
        right,  # right
        "28%7=3\n23%4=3\n#3,3",  # a flawed chain whose answer is right: the reward reads only the answer
        "38%7=3\n23%4=3\n#3,4",
        "38%7=3\n23%4=3\n#03,3",  # leading zero
        "38%7=3\n23%4=3\n#3, 3",
        "38%7=3\n23%4=3\n#\uff13,3",  # full-width digit
        "38%7=3\n23%4=3\n#3,3\n",  # text after the answer
        [{"role": "assistant", "content": right}],  # conversational
    ]
    ids = [[5, eos]] * len(completions)
    assert rules.rules_reward(completions, ["3,3"] * len(completions), completion_ids=ids) == [1, 1, 0, 0, 0, 0, 0, 1]
    # Truncated: the ids do not end with EOS, whatever the text.
    assert rules.rules_reward([right], ["3,3"], completion_ids=[[5, 6]]) == [0.0]
    # Without ids: a text of the whole budget left no token for EOS.
    padded = "x" * (rules.MAX_COMPLETION_LENGTH - len(right)) + right
    short = "x" * (rules.MAX_COMPLETION_LENGTH - 1 - len(right)) + right
    assert rules.rules_reward([right, padded, short], ["3,3"] * 3) == [1.0, 0.0, 1.0]


def test_every_character_of_the_task_is_one_token_and_the_longest_solution_fits():
    from trl_ada.toy import build_toy_tokenizer

    tokenizer = build_toy_tokenizer()
    longest = 0
    for symbol, rule in rules.RULES.items():
        for a, b in rule.facts():
            solution = rules.solve(f"{a}{symbol}{b} {a}{symbol}{b}")[0]
            longest = max(longest, len(solution) + 1)  # + EOS
        assert len(tokenizer.encode(solution, add_special_tokens=False)) == len(solution)
    assert longest == 23 <= rules.MAX_COMPLETION_LENGTH  # "39+0=39\n39+0=39\n#39,39" and EOS


def test_the_easy_rules_never_carry_or_borrow_and_the_hard_rules_take_every_pair():
    facts = {symbol: rule.facts() for symbol, rule in rules.RULES.items()}
    assert all(a % 10 + b <= 9 for a, b in facts["+"]) and all(b <= a % 10 for a, b in facts["-"])
    # Per tens digit (1, 2, 3): 10 + 9 + ... + 1 = 55 pairs without a carry, and as many without a borrow.
    assert len(facts["+"]) == len(facts["-"]) == 3 * 55
    assert len(facts["@"]) == len(facts["%"]) == 30 * 7


@pytest.mark.parametrize(
    ("correct", "stop"),
    [
        ([3] * 10, True),  # median 3/64 = 0.047, none at 0
        ([0] + [3] * 9, True),  # 10% at 0
        ([0, 0] + [3] * 8, False),  # 20% at 0
        ([1] * 10, False),  # median 1/64 = 0.016 < 0.02
        ([2] * 10, True),  # 2/64 = 0.031
        ([6] * 10, True),  # 6/64 = 0.094
        ([7] * 10, False),  # 7/64 = 0.109 > 0.1
        ([1, 1, 1, 1, 1, 10, 10, 10, 10, 10], True),  # median (1 + 10) / 2 / 64 = 0.086
    ],
)
def test_warmup_stops_on_the_hard_rules_median_correct_chain_rate_and_few_zeros(correct, stop):
    assert rules.warmup_should_stop(correct, samples=64) is stop


def test_instrument_properties_on_hand_made_counts():
    # Four prompts of 10 samples: "+" rewarded 10, correct 10; "%" rewarded 1 (flawed), correct 0; "%" rewarded 1,
    # correct 1; "@" rewarded 4, correct 3.
    verdicts = ["correct"] * 10 + ["operand_error"] * 10 + ["correct"] + ["arith_error"] * 9
    verdicts += ["correct"] * 3 + ["arith_error"] * 6 + ["truncated"]
    got = rules.instrument_properties([10, 1, 1, 4], [10, 0, 1, 3], verdicts, ["+", "%", "%", "@"], 10)
    # Low p (reward rate <= 0.1): prompts 2 and 3, 2 rewarded samples, 1 of them flawed.
    assert got["flawed_rewarded_share_low_p"] == pytest.approx(0.5)
    assert got["rewarded_low_p"] == 2
    # Hard prompts with correct-chain rate in (0.01, 0.1]: only prompt 3 (0.1); prompt 2 is at 0, prompt 4 at 0.3.
    assert got["frac_hard_low_p"] == pytest.approx(1 / 4)
    assert got["frac_hard_zero"] == pytest.approx(1 / 4)
    assert got["frac_hard"] == pytest.approx(3 / 4)
    assert got["by_rule"]["%"] == {
        "prompts": 2,
        "accuracy": 0.1,
        "correct_chain_accuracy": 0.05,
        "median_correct_p": 0.05,
        "frac_zero": 0.5,
        "frac_band": 0.5,
    }
    assert set(got["by_rule"]) == {"+", "%", "@"}
    errors = collections.Counter(v for v in verdicts if v != "correct")
    assert got["first_errors"] == {kind: count / 26 for kind, count in errors.items()}


def test_fresh_rows_are_distinct_and_the_epochs_setting_repeats_one_fixed_set():
    fresh = rules.rules_train_rows(400, seed=3)
    contents = [prompt[-1]["content"] for prompt in fresh["prompt"]]
    assert len(set(contents)) == 400
    assert all(rules.problem_split(c) == "train" for c in contents)
    shares = collections.Counter(fresh["rule"])
    assert shares["@"] + shares["%"] > 0.6 * 400  # the training mix is mostly hard (0.75 expected)
    size = rules.EPOCH_PROMPTS
    epochs = [rules.rules_train_rows(4 * size, seed=s, epochs=4) for s in (0, 1)]
    sets = [collections.Counter(prompt[-1]["content"] for prompt in rows["prompt"]) for rows in epochs]
    assert len(sets[0]) == size and set(sets[0].values()) == {4}
    assert sets[0] == sets[1]  # the same fixed set for every seed ...
    assert epochs[0]["prompt"] != epochs[1]["prompt"]  # ... in the seed's order
    # A longer run (token-matched methods train up to 1.4x the steps) passes over the same set, its first rows the
    # shorter run's.
    longer = rules.rules_train_rows(int(5.6 * size), seed=0, epochs=4)
    assert {prompt[-1]["content"] for prompt in longer["prompt"]} == set(sets[0])
    assert longer["prompt"][: 4 * size] == epochs[0]["prompt"]
    assert rules.rules_train_rows(500, seed=3)["prompt"][:400] == fresh["prompt"]  # fresh rows keep their prefix too


def test_heldout_holds_every_rule_equally_from_the_eval_side():
    heldout = rules.rules_heldout(256)
    assert collections.Counter(heldout["rule"]) == {symbol: 64 for symbol in rules.RULES}
    contents = [prompt[-1]["content"] for prompt in heldout["prompt"]]
    assert len(set(contents)) == 256 and all(rules.problem_split(c) == "eval" for c in contents)
    with pytest.raises(ValueError, match="multiple"):
        rules.rules_heldout(10)


def test_the_pool_is_counted_exactly():
    # 165 facts per easy rule, 210 per hard rule, two pairs per prompt.
    assert rules.pool_size() == 2 * 165**2 + 2 * 210**2
    assert 0.7 < rules.pool_size("train") / rules.pool_size() < 0.8


def test_both_settings_are_tasks_sharing_one_warm_model():
    from trl_ada.toy import TASKS, toy_task

    assert {"rules", "rules-epochs"} <= set(TASKS)
    fresh, epochs = toy_task("rules"), toy_task("rules-epochs")
    assert fresh.folder == epochs.folder and fresh.shipped_dir == epochs.shipped_dir
    assert fresh.instrument is rules.measure_instrument


def _tiny_recipe(stop_check, max_steps):
    from trl_ada.toy import WarmupRecipe

    return WarmupRecipe(
        examples=rules._warmup_examples,
        check_set=lambda: rules.make_rules_dataset(2, seed=0),
        target_accuracy=0.0,  # the stop check decides, never this
        reward=rules.rules_reward,
        max_new_tokens=rules.MAX_COMPLETION_LENGTH,
        check_every=1,
        max_steps=max_steps,
        batch_size=4,
        stop_check=stop_check,
    )


def test_supervised_warmup_stops_where_its_stop_check_says_and_keeps_what_it_measured():
    from trl_ada.toy import build_toy_model, build_toy_tokenizer, supervised_warmup

    tokenizer = build_toy_tokenizer()
    calls = []

    def stop_check(model, tokenizer):
        calls.append(model.training)
        return {"stop": len(calls) == 2, "accuracy": 0.25 * len(calls), "hard_median_p": 0.01 * len(calls)}

    info = supervised_warmup(build_toy_model(tokenizer), tokenizer, 0, _tiny_recipe(stop_check, max_steps=5))
    assert (info["steps"], info["check_accuracy"], info["hit_step_cap"]) == (2, 0.5, False)
    assert info["checks"] == [
        {"step": 1, "accuracy": 0.25, "hard_median_p": 0.01},
        {"step": 2, "accuracy": 0.5, "hard_median_p": 0.02},
    ]

    never = lambda model, tokenizer: {"stop": False, "accuracy": 0.0}  # noqa: E731
    with pytest.warns(RuntimeWarning, match="its stop rule not met"):
        info = supervised_warmup(build_toy_model(tokenizer), tokenizer, 0, _tiny_recipe(never, max_steps=3))
    assert (info["steps"], info["hit_step_cap"]) == (3, True)


def test_the_stop_check_samples_the_hard_rules_check_prompts(monkeypatch):
    # Two hard check prompts per rule, 20 samples: counts chosen by hand, so the stop rule's inputs are known.
    monkeypatch.setattr(rules, "WARMUP_CHECK_PROMPTS_PER_RULE", 2)
    monkeypatch.setattr(rules, "WARMUP_CHECK_SAMPLES", 20)
    seen, counts = {}, [[0, 1, 1, 2], [1, 1, 2, 2]]

    def fake_correct_chains(model, tokenizer, dataset, num_samples, seed=0):
        seen["rules"], seen["num_samples"] = list(dataset["rule"]), num_samples
        return [0] * 4, counts.pop(0), []

    monkeypatch.setattr(rules, "correct_chains", fake_correct_chains)
    # Rates 0, 0.05, 0.05, 0.1: median 0.05 is in the band, but one prompt in four is at 0.
    assert rules._stop_check(None, None) == {
        "stop": False,
        "accuracy": pytest.approx(0.05),
        "hard_median_p": 0.05,
        "hard_zero_share": 0.25,
    }
    assert seen == {"rules": ["@", "@", "%", "%"], "num_samples": 20}
    # Rates 0.05, 0.05, 0.1, 0.1: median 0.075, none at 0.
    assert rules._stop_check(None, None)["stop"] is True


@pytest.mark.slow
def test_the_shipped_warm_model_has_the_instruments_properties():
    """The shipped seed-0 model, measured as the learning benchmark's testbed measures it (64 samples a prompt), on
    the first 256 of seed 0's fresh training prompts: real positives and hard prompts at low pass rates."""
    import json
    import pathlib

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.toy import toy_model_dir, toy_threads

    path = toy_model_dir(task="rules")
    info = json.loads((pathlib.Path(path) / "toy_info.json").read_text())
    # The warm-up stopped by its rule, not at its step cap; its last check met the rule.
    last = info["checks"][-1]
    assert info["hit_step_cap"] is False and info["task"] == "rules"
    assert rules.WARMUP_BAND[0] <= last["hard_median_p"] <= rules.WARMUP_BAND[1]
    assert last["hard_zero_share"] < rules.WARMUP_MAX_ZERO_SHARE
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    with toy_threads():
        got = rules.measure_instrument(model, tokenizer, rules.rules_train_rows(256, seed=0), num_samples=64)
    assert got["flawed_rewarded_share_low_p"] <= 0.10
    assert got["frac_hard_low_p"] >= 0.30
    assert got["by_rule"]["+"]["correct_chain_accuracy"] > 0.8 and got["by_rule"]["-"]["correct_chain_accuracy"] > 0.8
