"""Tests for trl_ada.toy.reasoning: the step-by-step toy task's problems, datasets, reward, warm-up stop rule and the
shipped warm model's measured properties."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_ada import toy
from trl_ada.toy import reasoning
from trl_ada.toy import warmup as toy_warmup


@pytest.fixture(scope="module")
def tokenizer():
    return toy.build_toy_tokenizer()


# --- problems and datasets ------------------------------------------------------------------------------------------


def test_solve_writes_one_line_per_operation_then_the_answer():
    assert reasoning.solve("7+5-3+8") == ("7+5=12\n12-3=9\n9+8=17\n#17", 17)
    assert reasoning.solve("3+4") == ("3+4=7\n#7", 7)
    assert reasoning.solve("9-9+0-0") == ("9-9=0\n0+0=0\n0-0=0\n#0", 0)
    for bad in ("7", "12+3", "7+", "7*3", "7+-3", " 7+3"):
        with pytest.raises(ValueError):
            reasoning.solve(bad)


def _check_row(row):
    expression = row["prompt"][0]["content"]
    operands = [int(d) for d in re.findall(r"\d", expression)]
    ops = re.findall(r"[+-]", expression)
    assert len(operands) == row["level"] == len(ops) + 1 and 2 <= row["level"] <= 8
    value = operands[0]
    for op, operand in zip(ops, operands[1:], strict=True):
        value = value + operand if op == "+" else value - operand
        assert value >= 0  # the running result never goes below zero
    assert row["answer"] == str(value)


def test_datasets_are_valid_distinct_deterministic_and_disjoint():
    train = reasoning.reasoning_train_set()
    heldout = reasoning.reasoning_heldout(256)
    assert len(train) == reasoning.TRAIN_PROMPTS and len(heldout) == 256
    assert set(train.column_names) == {"prompt", "answer", "level"}
    for row in [*train, *heldout]:
        _check_row(row)
    train_problems = [p[0]["content"] for p in train["prompt"]]
    heldout_problems = [p[0]["content"] for p in heldout["prompt"]]
    assert len(set(train_problems)) == len(train_problems) and len(set(heldout_problems)) == len(heldout_problems)
    assert set(train_problems).isdisjoint(heldout_problems)
    assert {toy.problem_split(p) for p in train_problems} == {"train"}
    assert {toy.problem_split(p) for p in heldout_problems} == {"eval"}
    assert set(train["level"]) == set(reasoning.LEVELS)
    assert reasoning.reasoning_train_set().to_dict() == train.to_dict()
    assert reasoning.make_reasoning_dataset(20, seed=1).to_dict() != reasoning.make_reasoning_dataset(20).to_dict()
    assert set(reasoning.make_reasoning_dataset(30, levels=(3,))["level"]) == {3}


def test_train_rows_are_whole_epochs_in_a_seeded_order():
    rows = reasoning.reasoning_train_rows(8 * reasoning.TRAIN_PROMPTS, seed=0)
    visits = Counter(p[0]["content"] for p in rows["prompt"])
    assert len(visits) == reasoning.TRAIN_PROMPTS and set(visits.values()) == {8}
    first_epoch = {p[0]["content"] for p in rows.select(range(reasoning.TRAIN_PROMPTS))["prompt"]}
    assert len(first_epoch) == reasoning.TRAIN_PROMPTS  # every prompt once before any comes back
    other = reasoning.reasoning_train_rows(8 * reasoning.TRAIN_PROMPTS, seed=1)
    assert other["prompt"] != rows["prompt"] and Counter(p[0]["content"] for p in other["prompt"]) == visits
    assert set(Counter(p[0]["content"] for p in reasoning.reasoning_train_rows(1000)["prompt"]).values()) == {2, 3}


def test_completions_run_from_9_to_60_tokens_and_fit_the_budget(tokenizer):
    train = reasoning.reasoning_train_set()
    lengths = {}
    for row in train:
        solution, _ = reasoning.solve(row["prompt"][0]["content"])
        ids = tokenizer.encode(solution, add_special_tokens=False)
        assert tokenizer.convert_ids_to_tokens(ids) == [("Ċ" if c == "\n" else c) for c in solution]  # 1 char, 1 token
        lengths.setdefault(row["level"], []).append(len(ids) + 1)  # + EOS
    assert min(lengths[2]) >= 9 and max(lengths[8]) <= reasoning.MAX_COMPLETION_LENGTH
    assert max(lengths[2]) * 4 <= min(lengths[8])  # more operands, more steps: 4x longer
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "9+9+9+9+9+9+9+9"}], add_generation_prompt=True
    )
    prompt = prompt["input_ids"] if not isinstance(prompt, list) else prompt
    assert len(prompt) + reasoning.MAX_COMPLETION_LENGTH <= 128  # the toy model's positions


# --- reward ---------------------------------------------------------------------------------------------------------


def test_reward_reads_the_final_answer_after_the_marker():
    completions = [
        "7+5=12\n12-3=9\n9+8=17\n#17",  # right
        "#17",  # right: only the answer counts, not the steps
        "7+5=12\n12-3=9\n9+8=18\n#18",  # wrong answer
        "7+5=12\n12-3=9\n9+8=17",  # no marker
        "17",  # no marker
        "#17\n",  # trailing whitespace is fine
        "#17\n#18",  # the last answer counts
        "#17 and more",  # text after the answer
        "#017",  # the same integer, but not in its canonical form
        "",
    ]
    assert reasoning.reasoning_reward(completions, ["17"] * len(completions)) == [1, 1, 0, 0, 0, 1, 0, 0, 0, 0]
    assert reasoning.reasoning_reward(["#0", "#-3"], [0, "-3"]) == [1.0, 1.0]


def test_reward_reads_only_the_canonical_integer():
    """ASCII digits, no leading zeros but "0" itself, a minus sign only before a nonzero number."""
    cases = [
        ("#12", "12", 1.0),
        ("#012", "12", 0.0),
        ("#00", "0", 0.0),
        ("#0", "0", 1.0),
        ("#-0", "0", 0.0),
        ("#+12", "12", 0.0),
        ("#-12", "-12", 1.0),
        ("#-012", "-12", 0.0),
        ("#\uff11\uff12", "12", 0.0),  # full-width digits
        ("#\u0661\u0662", "12", 0.0),  # Arabic-Indic digits
        ("#1\uff12", "12", 0.0),
        ("3+9=12\n#12", "12", 1.0),
    ]
    completions, answers, expected = zip(*cases, strict=True)
    assert reasoning.reasoning_reward(list(completions), list(answers)) == list(expected)


def test_reward_without_ids_counts_a_text_of_the_whole_budget_as_truncated(tokenizer):
    """Every character a completion of this task is made of is one token, so the text's length is its token count:
    one of MAX_COMPLETION_LENGTH characters had no room for EOS."""
    budget = reasoning.MAX_COMPLETION_LENGTH
    for character in "0123456789+-=#\n":
        assert len(tokenizer.encode(character, add_special_tokens=False)) == 1
    for row in reasoning.make_reasoning_dataset(200, seed=9):
        solution = reasoning.solve(row["prompt"][0]["content"])[0]
        assert len(tokenizer.encode(solution, add_special_tokens=False)) == len(solution) < budget
    # The only tokens decoding to several characters are merges of lowercase letters (and the special tokens).
    multi = {token for token in tokenizer.get_vocab() if len(tokenizer.convert_tokens_to_string([token])) > 1}
    assert all(token.isalpha() and token.islower() for token in multi - set(tokenizer.all_special_tokens))

    def padded(length):  # ends with "#17" after steps of the task's characters, exactly ``length`` characters long
        return "1+0=1\n" * ((length - 3) // 6) + "0" * ((length - 3) % 6) + "#17"

    texts = [padded(budget - 1), padded(budget), padded(budget + 5), "#17"]
    assert [len(text) for text in texts] == [budget - 1, budget, budget + 5, 3]
    assert reasoning.reasoning_reward(texts, ["17"] * 4) == [1.0, 0.0, 0.0, 1.0]
    conversations = [[{"role": "assistant", "content": text}] for text in texts]
    assert reasoning.reasoning_reward(conversations, ["17"] * 4) == [1.0, 0.0, 0.0, 1.0]
    # Given ids, they decide: the same long text finished with EOS within a larger budget is right.
    ids = [[*tokenizer.encode(text, add_special_tokens=False), reasoning.EOS_TOKEN_ID] for text in texts]
    assert reasoning.reasoning_reward(texts, ["17"] * 4, completion_ids=ids) == [1.0, 1.0, 1.0, 1.0]


def test_reward_scores_truncated_completions_wrong(tokenizer):
    eos = reasoning.EOS_TOKEN_ID
    assert eos == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    text = "7+5=12\n12-3=9\n9+8=17\n#17"
    ids = tokenizer.encode(text, add_special_tokens=False)
    completions = [text, text, text, ""]
    completion_ids = [[*ids, eos], ids, ids[:-1], []]  # finished; cut just before EOS; cut earlier; nothing
    assert reasoning.reasoning_reward(completions, ["17"] * 4, completion_ids=completion_ids) == [1, 0, 0, 0]


def test_reward_conversational_and_extra_kwargs():
    completions = [[{"role": "assistant", "content": "3+4=7\n#7"}], [{"role": "assistant", "content": "#8"}], []]
    rewards = reasoning.reasoning_reward(
        completions, answer=["7", "7", "7"], completion_ids=[[5, 2], [5, 2], [2]], prompts=[None] * 3, level=[2] * 3
    )
    assert rewards == [1.0, 0.0, 0.0]
    assert reasoning.reasoning_reward.__name__ == "reasoning_reward"
    assert toy.toy_task("reasoning").reward is reasoning.reasoning_reward


# --- warm-up stop rule ----------------------------------------------------------------------------------------------


def _scripted_accuracies(monkeypatch, accuracies):
    """Make every warm-up check return the next of ``accuracies``; record the checks' settings."""
    calls = []

    def scripted(model, tokenizer, dataset, num_samples=1, max_new_tokens=8, seed=0, reward=None):
        calls.append({"prompts": len(dataset), "samples": num_samples, "tokens": max_new_tokens, "reward": reward})
        return accuracies[len(calls) - 1]

    monkeypatch.setattr(toy_warmup, "sampled_accuracy", scripted)  # where supervised_warmup looks it up
    monkeypatch.setattr(reasoning, "_WARMUP_CHECK_EVERY", 1)
    monkeypatch.setattr(reasoning, "_WARMUP_CHECK_PROMPTS", 8)
    return calls


def test_warmup_draws_short_problems_more_often():
    """Levels in proportion to 1 / sqrt(L - 1), thinned by each level's share of problems on the "train" side of the
    split (measured apart, from problems drawn without the weights): chi-square over 20,000 examples."""
    import random

    examples = reasoning._warmup_examples(seed=3)
    counts = Counter(len(re.findall(r"\d", next(examples)[0].split("=")[0])) for _ in range(20_000))
    rng = random.Random(0)
    train_share = {
        level: sum(toy.problem_split(reasoning._sample_expression(rng, level)) == "train" for _ in range(4000)) / 4000
        for level in reasoning.LEVELS
    }
    weights = {level: train_share[level] / (level - 1) ** 0.5 for level in reasoning.LEVELS}
    expected = {level: 20_000 * w / sum(weights.values()) for level, w in weights.items()}
    chi2 = sum((counts[level] - expected[level]) ** 2 / expected[level] for level in reasoning.LEVELS)
    assert chi2 < 30, (counts, expected)  # 6 degrees of freedom: p < 1e-4 at 30
    assert counts[2] > 2 * counts[8]


def test_warmup_stops_at_the_first_check_reaching_the_target(tmp_path, monkeypatch):
    target = reasoning.WARMUP_TARGET_ACCURACY
    calls = _scripted_accuracies(monkeypatch, [0.1, target - 0.01, target, 0.2, 0.9])
    folder = Path(toy.toy_model_dir(tmp_path, seed=5, task="reasoning"))
    assert folder.name == f"toy-reasoning-{reasoning.REASONING_VERSION}-seed5-warm"
    info = json.loads((folder / "toy_info.json").read_text())
    assert (info["steps"], info["check_accuracy"], info["hit_step_cap"]) == (3, target, False)
    assert [check["accuracy"] for check in info["checks"]] == [0.1, target - 0.01, target]
    assert info["task"] == "reasoning" and info["version"] == reasoning.REASONING_VERSION
    assert calls[0] == {"prompts": 8, "samples": 4, "tokens": 64, "reward": reasoning.reasoning_reward}
    AutoModelForCausalLM.from_pretrained(folder)


def test_warmup_that_never_reaches_the_target_stops_at_the_cap(tmp_path, monkeypatch):
    _scripted_accuracies(monkeypatch, [0.1, 0.2, 0.3])
    monkeypatch.setattr(reasoning, "_WARMUP_MAX_STEPS", 3)
    with pytest.warns(RuntimeWarning, match="3-step cap"):
        folder = Path(toy.toy_model_dir(tmp_path, prebuilt=False, task="reasoning"))
    info = json.loads((folder / "toy_info.json").read_text())
    assert (info["steps"], info["check_accuracy"], info["hit_step_cap"]) == (3, 0.3, True)


def test_toy_model_dir_task_names(tmp_path, monkeypatch):
    monkeypatch.setattr(reasoning, "warmup", lambda model, tokenizer, seed: {"steps": 0, "check_accuracy": 0.0})
    assert toy.toy_model_dir(task="reasoning") == str(reasoning.SHIPPED_WARM_DIR)
    cold = toy.toy_model_dir(tmp_path, warmup=False, task="reasoning")
    assert Path(cold).name == f"toy-reasoning-{reasoning.REASONING_VERSION}-seed0-cold"
    assert toy.toy_model_dir(tmp_path, warmup=False) != cold  # the arithmetic task's folders keep their names
    with pytest.raises(ValueError, match="unknown toy task"):
        toy.toy_model_dir(tmp_path, task="chess")


def test_always_agree_token_share_counts_only_prompts_whose_samples_all_agree():
    # Four prompts of 4 samples: 0 right (mean length 40), 4 right (10), 2 right (20), 1 right (30). The first two
    # agree: (40 + 10) / (40 + 10 + 20 + 30) = 0.5 of the tokens.
    assert toy.always_agree_token_share([0, 4, 2, 1], [40.0, 10.0, 20.0, 30.0], 4) == pytest.approx(0.5)
    assert toy.always_agree_token_share([1, 3], [5.0, 7.0], 4) == 0.0


# --- the shipped warm model -----------------------------------------------------------------------------------------


def test_the_shipped_warm_model_is_what_toy_model_dir_returns():
    info = json.loads((reasoning.SHIPPED_WARM_DIR / "toy_info.json").read_text())
    assert info["warmup"] and info["seed"] == 0 and info["task"] == "reasoning"
    assert info["version"] == reasoning.REASONING_VERSION and not info["hit_step_cap"]
    assert info["check_accuracy"] >= reasoning.WARMUP_TARGET_ACCURACY
    assert all(check["accuracy"] < reasoning.WARMUP_TARGET_ACCURACY for check in info["checks"][:-1])
    weights = (reasoning.SHIPPED_WARM_DIR / "model.safetensors").read_bytes()
    assert hashlib.sha256(weights).hexdigest() == info["model_sha256"]
    shipped = AutoTokenizer.from_pretrained(reasoning.SHIPPED_WARM_DIR)
    assert shipped.get_vocab() == toy.build_toy_tokenizer().get_vocab()


@pytest.mark.slow
def test_the_shipped_warm_model_has_the_testbed_properties():
    """Measured from the model's own samples (16 per training prompt, fixed seed), not imposed by the reward."""
    model = AutoModelForCausalLM.from_pretrained(reasoning.SHIPPED_WARM_DIR)
    tokenizer = AutoTokenizer.from_pretrained(reasoning.SHIPPED_WARM_DIR)
    train = reasoning.reasoning_train_set()
    with toy.toy_threads():
        mix = toy.sample_properties(
            model, tokenizer, train, reasoning.reasoning_reward, reasoning.MAX_COMPLETION_LENGTH, seed=0
        )
    assert mix["frac_all_correct_n4"] >= 0.25 and mix["frac_all_wrong_n4"] >= 0.20
    assert mix["len_p90_over_p10"] >= 4
    assert mix["mean_len_wrong"] > mix["mean_len_right"]
    by_level = mix["by_level"]
    assert by_level["2"]["accuracy"] > 0.9 > 0.2 > by_level["8"]["accuracy"]  # harder prompts, more steps, more wrong
