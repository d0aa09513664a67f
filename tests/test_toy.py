"""Tests for trl_ada.toy (the arithmetic task): the offline tokenizer, model, data, reward and cached model folder."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_ada import toy
from trl_ada.toy import arithmetic, cache

ROUND_TRIP_TEXTS = [
    "47-8",
    "a  b\n\nc \t d",
    "  leading spaces",
    "trailing space and newline \n",
    "windows\r\nline\r\n",
    "12345 678\n9",
    "The answer is 39.\n",
    "héllo wörld ✓ 漢字",
    "<|im_start|>user\n3+4<|im_end|>\n<|im_start|>assistant\n7<|im_end|>\n",
]


@pytest.fixture
def cold_dir(toy_cold_dir):
    """The session's untrained toy model folder, in a private cache (see conftest.py)."""
    return toy_cold_dir


@pytest.fixture(scope="module")
def tokenizer():
    return toy.build_toy_tokenizer()


# --- tokenizer ------------------------------------------------------------------------------------------------------


def test_tokenizer_special_tokens(tokenizer):
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") not in (None, tokenizer.unk_token_id)
    assert len({tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.convert_tokens_to_ids("<|im_start|>")}) == 3
    assert 259 <= len(tokenizer) <= 300  # 256 bytes + 3 specials + a few merges


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_tokenizer_round_trip_in_memory(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_tokenizer_round_trip_after_reload(tokenizer, cold_dir):
    reloaded = AutoTokenizer.from_pretrained(cold_dir)
    # transformers 5 rebuilds a qwen2 model's tokenizer as Qwen2Tokenizer: the case that loses whitespace if the
    # pre-tokenizer is not byte-level. Check we really exercise it.
    assert type(reloaded).__name__ == "Qwen2Tokenizer"
    assert len(reloaded) == len(tokenizer)
    for text in ROUND_TRIP_TEXTS:
        ids = reloaded.encode(text, add_special_tokens=False)
        assert reloaded.decode(ids) == text
        assert ids == tokenizer.encode(text, add_special_tokens=False)  # same ids as the in-memory tokenizer
    assert reloaded.eos_token == "<|im_end|>"
    assert reloaded.pad_token == "<|endoftext|>"


def test_digits_are_single_tokens(tokenizer):
    for digit in "0123456789":
        assert len(tokenizer.encode(digit, add_special_tokens=False)) == 1
    for number in ["1234567890", "99", "198", "00", "47-8", "12+34"]:
        tokens = tokenizer.convert_ids_to_tokens(tokenizer.encode(number, add_special_tokens=False))
        assert tokens == list(number)


def test_chat_template(tokenizer, cold_dir):
    reloaded = AutoTokenizer.from_pretrained(cold_dir)
    for tok in (tokenizer, reloaded):
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": "3+4"}], add_generation_prompt=True, tokenize=False
        )
        assert prompt == "<|im_start|>user\n3+4<|im_end|>\n<|im_start|>assistant\n"
        assert prompt.endswith("<|im_start|>assistant\n")
        full = tok.apply_chat_template(
            [{"role": "user", "content": "3+4"}, {"role": "assistant", "content": "7"}], tokenize=False
        )
        assert full == "<|im_start|>user\n3+4<|im_end|>\n<|im_start|>assistant\n7<|im_end|>\n"
        ids = tok.apply_chat_template([{"role": "user", "content": "47-8"}], add_generation_prompt=True)
        ids = ids["input_ids"] if not isinstance(ids, list) else ids
        assert tok.convert_ids_to_tokens(ids)[:2] == ["<|im_start|>", "user"]


# --- model ----------------------------------------------------------------------------------------------------------


def test_model_config(tokenizer):
    model = toy.build_toy_model(tokenizer, seed=0)
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (128, 2, 512)
    assert (config.num_attention_heads, config.head_dim, config.num_key_value_heads) == (4, 32, 2)
    assert config.vocab_size == len(tokenizer)
    assert config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    assert config.max_position_embeddings == 128
    assert model.dtype == torch.float32
    assert config.eos_token_id == model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert config.pad_token_id == model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 0.6e6


def test_model_seed_is_deterministic_and_leaves_global_rng_alone(tokenizer):
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = toy.build_toy_model(tokenizer, seed=0)
    assert torch.equal(torch.rand(1), expected_next)
    b = toy.build_toy_model(tokenizer, seed=0)
    c = toy.build_toy_model(tokenizer, seed=1)
    assert torch.equal(a.model.embed_tokens.weight, b.model.embed_tokens.weight)
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


# --- data -----------------------------------------------------------------------------------------------------------


def _evaluate(expression: str) -> tuple[int, str, int, int]:
    """Parse "a+b" / "a-b" independently of the module and return (value, op, a, b)."""
    match = re.fullmatch(r"(\d+)([+-])(\d+)", expression)
    assert match, expression
    a, op, b = int(match[1]), match[2], int(match[3])
    return (a + b if op == "+" else a - b), op, a, b


def test_dataset_columns_and_answers():
    dataset = toy.make_arithmetic_dataset(300, seed=0)
    assert set(dataset.column_names) == {"prompt", "answer", "level"}
    digits = {1: (1, 1), 2: (2, 1), 3: (2, 2)}
    for row in dataset:
        assert isinstance(row["answer"], str)
        assert len(row["prompt"]) == 1 and row["prompt"][0]["role"] == "user"
        value, _, a, b = _evaluate(row["prompt"][0]["content"])
        assert row["answer"] == str(value)
        assert a >= b
        assert (len(str(a)), len(str(b))) == digits[row["level"]]
    assert set(dataset["level"]) == {1, 2, 3}
    ops = {_evaluate(p[0]["content"])[1] for p in dataset["prompt"]}
    assert ops == {"+", "-"}


def test_dataset_is_deterministic():
    a = toy.make_arithmetic_dataset(50, seed=3)
    b = toy.make_arithmetic_dataset(50, seed=3)
    c = toy.make_arithmetic_dataset(50, seed=4)
    assert a.to_dict() == b.to_dict()
    assert a.to_dict() != c.to_dict()


def test_dataset_levels_and_splits():
    assert set(toy.make_arithmetic_dataset(40, levels=(3,))["level"]) == {3}
    assert set(toy.make_arithmetic_dataset(60, levels=(1, 2))["level"]) == {1, 2}
    train, heldout = toy.toy_dataset_split(400, 200, seed=0)
    train_problems = {p[0]["content"] for p in train["prompt"]}
    heldout_problems = {p[0]["content"] for p in heldout["prompt"]}
    assert train_problems.isdisjoint(heldout_problems)
    assert all(toy.problem_split(p) == "eval" for p in heldout_problems)


# --- reward ---------------------------------------------------------------------------------------------------------


def test_reward_plain_strings():
    completions = ["39", "The answer is 39.", "38", "", "no number here", "39 or maybe 40", "40, no: 39", " 39\n"]
    assert toy.arithmetic_reward(completions, ["39"] * len(completions)) == [1, 1, 0, 0, 0, 0, 1, 1]


def test_reward_negative_numbers_and_expressions():
    completions = ["-5", "5", "x = -5", "47-8", "47-8=39", "-05"]
    answers = ["-5", "-5", "-5", "8", "39", "-5"]
    # "47-8": the minus between digits is subtraction, so the last integer is 8, not -8.
    assert toy.arithmetic_reward(completions, answers) == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]


def test_reward_conversational_and_extra_kwargs():
    completions = [
        [{"role": "assistant", "content": "12"}],
        [{"role": "assistant", "content": "13"}],
        [{"role": "assistant", "content": ""}],
        [],
    ]
    rewards = toy.arithmetic_reward(
        completions, answer=["12", "12", "12", "12"], prompts=[None] * 4, level=[1] * 4, trainer_state=None
    )
    assert rewards == [1.0, 0.0, 0.0, 0.0]
    assert toy.arithmetic_reward(["7"], [7]) == [1.0]  # int answers work too
    assert toy.arithmetic_reward.__name__ == "arithmetic_reward"


# --- evaluation helper ----------------------------------------------------------------------------------------------


def test_sampled_accuracy_is_seeded(tokenizer):
    model = toy.build_toy_model(tokenizer, seed=0)
    dataset = toy.make_arithmetic_dataset(8, seed=0)
    torch.manual_seed(5)
    expected_next = torch.rand(1)
    torch.manual_seed(5)
    rates = toy.per_prompt_pass_rates(model, tokenizer, dataset, num_samples=3, seed=1)
    assert torch.equal(torch.rand(1), expected_next)  # caller's RNG untouched
    assert rates == toy.per_prompt_pass_rates(model, tokenizer, dataset, num_samples=3, seed=1)
    assert len(rates) == 8 and all(0.0 <= r <= 1.0 for r in rates)
    model.train()
    accuracy = toy.sampled_accuracy(model, tokenizer, dataset)
    assert 0.0 <= accuracy <= 1.0
    assert model.training  # generation switches to eval mode only temporarily


# --- cached folder --------------------------------------------------------------------------------------------------


def test_cold_dir_loads(cold_dir):
    assert cold_dir.name == f"toy-{toy.TOY_VERSION}-seed0-cold"
    info = json.loads((cold_dir / "toy_info.json").read_text())
    assert info["warmup"] is False
    model = AutoModelForCausalLM.from_pretrained(cold_dir)
    tokenizer = AutoTokenizer.from_pretrained(cold_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.vocab_size == len(tokenizer)
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id


def test_cache_reuse_does_not_rebuild(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_ADA_CACHE", str(tmp_path))
    first = Path(toy.toy_model_dir(warmup=False, seed=3))
    assert first.parent == tmp_path
    marker_mtime = (first / "toy_info.json").stat().st_mtime_ns

    def fail(*args, **kwargs):
        raise AssertionError("the cached folder should have been reused")

    monkeypatch.setattr(cache, "build_toy_model", fail)  # where toy_model_dir looks them up
    monkeypatch.setattr(cache, "build_toy_tokenizer", fail)
    assert toy.toy_model_dir(warmup=False, seed=3) == str(first)
    assert toy.toy_model_dir(tmp_path, warmup=False, seed=3) == str(first)
    assert (first / "toy_info.json").stat().st_mtime_ns == marker_mtime
    # Only the finished folder and the lock file remain: no temporary folders.
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [first.name]


def test_incomplete_folder_is_rebuilt(tmp_path):
    target = tmp_path / f"toy-{toy.TOY_VERSION}-seed0-cold"
    target.mkdir()
    (target / "config.json").write_text("{}")  # a half-written folder without the marker
    assert toy.toy_model_dir(tmp_path, warmup=False) == str(target)
    assert (target / "toy_info.json").is_file()
    AutoModelForCausalLM.from_pretrained(target)


# --- TRL integration ------------------------------------------------------------------------------------------------


def test_grpo_trainer_runs_two_steps(cold_dir, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        max_steps=2,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=str(cold_dir),
        processing_class=AutoTokenizer.from_pretrained(cold_dir),
        reward_funcs=toy.arithmetic_reward,
        args=args,
        train_dataset=toy.make_arithmetic_dataset(64),
    )
    trainer.train()
    assert trainer.state.global_step == 2
    logged = [entry for entry in trainer.state.log_history if "rewards/arithmetic_reward/mean" in entry]
    assert len(logged) == 2


def test_plain_grpo_trainer_takes_toy_model_dir_as_its_model(tmp_path):
    """The A/B baseline as one writes it: TRL's own trainer, given toy_model_dir() where a model name goes."""
    from trl import GRPOConfig, GRPOTrainer

    model_dir = toy.toy_model_dir()
    assert isinstance(model_dir, str)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=1,
        report_to="none",
        save_strategy="no",
    )
    trainer = GRPOTrainer(model_dir, toy.arithmetic_reward, args=args, train_dataset=toy.make_arithmetic_dataset(8))
    assert trainer.model.config.name_or_path == model_dir


# --- the warm model: shipped with the package ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def warm_dir():
    return Path(toy.toy_model_dir(warmup=True))


def test_the_shipped_warm_model_is_what_toy_model_dir_returns():
    info = json.loads((toy.SHIPPED_WARM_DIR / "toy_info.json").read_text())
    assert toy.toy_model_dir() == str(toy.SHIPPED_WARM_DIR)
    assert info["warmup"] and info["seed"] == 0 and info["version"] == toy.TOY_VERSION
    weights = (toy.SHIPPED_WARM_DIR / "model.safetensors").read_bytes()
    assert hashlib.sha256(weights).hexdigest() == info["model_sha256"]
    # The shipped tokenizer is the one the code builds, so cold and warm models share token ids.
    shipped, built = AutoTokenizer.from_pretrained(toy.SHIPPED_WARM_DIR), toy.build_toy_tokenizer()
    assert shipped.get_vocab() == built.get_vocab()


def test_toy_model_dir_other_seeds_and_prebuilt_false_still_build(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(
        arithmetic,
        "_warmup",
        lambda model, tokenizer, seed: calls.append(seed) or {"steps": 0, "check_accuracy": 0.0, "seconds": 0.0},
    )
    assert toy.toy_model_dir(tmp_path, seed=0, prebuilt=False) == str(tmp_path / f"toy-{toy.TOY_VERSION}-seed0-warm")
    assert toy.toy_model_dir(tmp_path, seed=1) == str(tmp_path / f"toy-{toy.TOY_VERSION}-seed1-warm")
    assert calls == [0, 1]


@pytest.mark.slow
def test_warm_model_has_spread_pass_rates(warm_dir):
    info = json.loads((warm_dir / "toy_info.json").read_text())
    assert info["warmup"] is True and info["check_accuracy"] >= 0.40
    model = AutoModelForCausalLM.from_pretrained(warm_dir)
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    heldout = toy.make_arithmetic_dataset(64, seed=99, split="eval")
    rates = toy.per_prompt_pass_rates(model, tokenizer, heldout, num_samples=16)
    accuracy = sum(rates) / len(rates)
    assert 0.2 < accuracy < 0.7
    assert sum(0 < r < 1 for r in rates) >= 20  # many prompts with a learning signal for GRPO


@pytest.mark.slow
def test_the_warm_up_that_built_the_shipped_model_still_runs(tmp_path, monkeypatch):
    """The shipped weights spare users the warm-up; its code still runs (cut to 10 steps, so it stops at the cap)."""
    monkeypatch.setattr(arithmetic, "_WARMUP_MAX_STEPS", 10)
    monkeypatch.setattr(arithmetic, "_WARMUP_CHECK_EVERY", 5)
    with pytest.warns(RuntimeWarning, match="10-step cap"):
        folder = Path(toy.toy_model_dir(tmp_path, prebuilt=False))
    info = json.loads((folder / "toy_info.json").read_text())
    assert (info["steps"], info["hit_step_cap"]) == (10, True) and 0.0 <= info["check_accuracy"] < 0.4
    AutoModelForCausalLM.from_pretrained(folder)


@pytest.mark.parametrize(("value", "threads"), [(None, 1), ("", 1), ("3", 3), ("0", 1), ("two", 1)])
def test_toy_threads_default_to_one_unless_omp_num_threads_says_otherwise(value, threads, monkeypatch):
    if value is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert toy.toy_num_threads() == threads
    before = torch.get_num_threads()
    with toy.toy_threads() as inside:
        assert inside == threads == torch.get_num_threads()
    assert torch.get_num_threads() == before  # the caller's count comes back
    try:
        assert toy.use_toy_threads() == threads == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
