"""An offline toy task for adaptive-sampling RL on CPU: small-integer arithmetic with a tiny Qwen2 model.

Everything here is built locally (no model hub): a byte-level BPE tokenizer with a ChatML template, a ~0.53M
parameter Qwen2 model, a dataset of prompts such as ``47-8`` with their answers, a binary reward, and a supervised
warm-up that stops once the model is *partly* right. The point of the warm-up is a policy whose per-prompt pass rates
spread across (0, 1): prompts that are always or never solved give GRPO no gradient, so adaptive sampling has
something to improve on.

The warm model for seed 0 ships with the package (``trl_ada/toy_warm``, 2.1 MB): where learning "clicks" during the
warm-up depends on the last bits of every float operation, so the same code stops at a different step on another
CPU (500 steps on one machine, 600 on another) and every number measured after it differs. Shipping the weights gives
every machine the same start; ``toy_model_dir(prebuilt=False)`` rebuilds them (and other seeds are built) in a cache.

A second task, "reasoning" (:mod:`trl_ada.toy_reasoning`: ``7+5-3+8`` worked one operation per line), shares the
tokenizer, model and warm-up loop; :func:`toy_task` describes each task and ``toy_model_dir(task=...)`` picks one.

Typical use::

    path = toy_model_dir()  # the shipped warm model; instant
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    train, heldout = toy_dataset_split(1024, 256)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import datasets
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

__all__ = [
    "TOY_SYSTEM",
    "TOY_VERSION",
    "arithmetic_reward",
    "build_toy_model",
    "build_toy_tokenizer",
    "make_arithmetic_dataset",
    "per_prompt_pass_rates",
    "sample_completions",
    "sample_properties",
    "sampled_accuracy",
    "supervised_warmup",
    "toy_dataset_split",
    "toy_model_dir",
    "toy_num_threads",
    "toy_task",
    "toy_threads",
    "use_toy_threads",
]

TOY_SYSTEM = None  # no system prompt: shorter prompts, and nothing for the tiny model to attend past
# Bump whenever anything that changes the saved model changes (tokenizer, architecture, data, warm-up recipe):
# it is part of the cache folder name, so stale caches are never reused.
TOY_VERSION = "v2"  # v2: gradient clipping and 2 threads in the warm-up

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

# Qwen2's pre-tokenizer regex. transformers 5 reloads any qwen2 model's tokenizer as Qwen2Tokenizer, which rebuilds
# this exact pipeline (Split on the regex, then ByteLevel without its own regex) around the saved vocab and merges.
# Training with the same pipeline keeps the in-memory and the reloaded tokenizer identical, and its `\p{N}` branch
# isolates every digit, so no merge can ever join two digits.
_QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Qwen-style ChatML (system messages are rendered if given, but none is added by default).
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

_MAX_POSITIONS = 128

# The warm model for seed 0, as built by the warm-up below (its toy_info.json says where and how).
SHIPPED_WARM_DIR = pathlib.Path(__file__).resolve().parent / "toy_warm"
SHIPPED_WARM_SEED = 0

# One torch thread for everything that trains or samples the toy model. Its matrices (hidden size 128, batches of
# tens of rows) are far too small to split across threads: OpenMP workers spin waiting for work, and when another
# process holds one of 2 cores a 2-thread run crawls (benchmarks/README.md#threads-for-the-toy-model).
TOY_NUM_THREADS = 1

# --------------------------------------------------------------------------------------------------------------------
# Task: problems, datasets and reward
# --------------------------------------------------------------------------------------------------------------------

Split = Literal["train", "eval"]


def _sample_problem(rng: random.Random, level: int) -> tuple[str, str]:
    """Draw one problem ``a op b`` (with a >= b, so answers are never negative) and return (expression, answer).

    Level 1: 1-digit op 1-digit; level 2: 2-digit op 1-digit; level 3: 2-digit op 2-digit.
    """
    if level == 1:
        a, b = rng.randint(0, 9), rng.randint(0, 9)
    elif level == 2:
        a, b = rng.randint(10, 99), rng.randint(0, 9)
    elif level == 3:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
    else:
        raise ValueError(f"unknown level {level!r}; expected 1, 2 or 3")
    a, b = max(a, b), min(a, b)
    op = rng.choice("+-")
    return f"{a}{op}{b}", str(a + b if op == "+" else a - b)


def problem_split(expression: str) -> Split:
    """Assign every problem for good to the "train" (~75%) or the "eval" (~25%) side of a fixed partition.

    A stable hash (not Python's salted ``hash``) of the expression decides, so the split is the same in every process.
    The warm-up never trains on "eval" problems, which keeps held-out numbers honest even for level 1, whose 110
    distinct problems would otherwise all be seen in training.
    """
    return "eval" if zlib.crc32(expression.encode()) % 4 == 0 else "train"


def _problem_stream(rng: random.Random, levels: Sequence[int], split: Split | None) -> Iterator[tuple[str, str, int]]:
    """Yield (expression, answer, level) forever: a level uniformly from ``levels``, then a problem of that level."""
    levels = tuple(levels)
    if not levels:
        raise ValueError("levels must not be empty")
    while True:
        level = rng.choice(levels)
        expression, answer = _sample_problem(rng, level)
        if split is None or problem_split(expression) == split:
            yield expression, answer, level


def make_arithmetic_dataset(
    num_prompts: int, seed: int = 0, levels: tuple[int, ...] = (1, 2, 3), split: Split | None = None
) -> datasets.Dataset:
    """Return ``num_prompts`` random problems of mixed difficulty, deterministic given ``seed``.

    Columns: ``prompt`` (conversational, ``[{"role": "user", "content": "47-8"}]``), ``answer`` (str, e.g. ``"39"``)
    and ``level`` (int). Levels are drawn uniformly from ``levels``; problems may repeat (there are only 110 distinct
    level-1 problems). ``split`` restricts the draws to one side of :func:`problem_split` (None: no restriction).
    """
    stream = _problem_stream(random.Random(seed), levels, split)
    rows = [next(stream) for _ in range(num_prompts)]
    return datasets.Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": expression}] for expression, _, _ in rows],
            "answer": [answer for _, answer, _ in rows],
            "level": [level for _, _, level in rows],
        }
    )


def toy_dataset_split(
    num_train: int, num_eval: int, seed: int = 0, levels: tuple[int, ...] = (1, 2, 3)
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Return (train, eval) datasets whose problems are disjoint (see :func:`problem_split`).

    The eval problems are also disjoint from everything the warm-up trained on.
    """
    train = make_arithmetic_dataset(num_train, seed=seed, levels=levels, split="train")
    heldout = make_arithmetic_dataset(num_eval, seed=seed + 1_000_003, levels=levels, split="eval")
    return train, heldout


# An integer, optionally negative; a "-" right after a digit is subtraction, not a sign ("47-8" -> 47, 8).
_INTEGER = re.compile(r"(?<!\d)-?\d+")


def _completion_text(completion: Any) -> str:
    """Text of a completion given as a plain string or as a conversation (list of messages)."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return ""
    content = completion[-1].get("content", "")
    return content if isinstance(content, str) else ""


def arithmetic_reward(completions: Sequence[Any], answer: Sequence[str | int], **kwargs: Any) -> list[float]:
    """TRL reward function: 1.0 if the last integer in a completion equals the answer, else 0.0.

    ``completions`` may be strings or conversations (``[{"role": "assistant", "content": "39"}]``); ``answer`` is
    the dataset column of the same name. Extra keyword arguments (prompts, trainer_state, ...) are ignored.
    """
    rewards = []
    for completion, target in zip(completions, answer, strict=True):
        numbers = _INTEGER.findall(_completion_text(completion))
        rewards.append(1.0 if numbers and int(numbers[-1]) == int(target) else 0.0)
    return rewards


arithmetic_reward.__name__ = "arithmetic_reward"  # TRL logs rewards under the function's __name__


# --------------------------------------------------------------------------------------------------------------------
# Tokenizer and model
# --------------------------------------------------------------------------------------------------------------------


def build_toy_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """Train a tiny byte-level BPE tokenizer offline and wrap it with ChatML special tokens and chat template.

    The vocabulary is the 256 byte symbols, the three special tokens and a handful of merges (role names): about
    270 tokens. Digits are always single tokens. ``<|im_end|>`` is the EOS token and ``<|endoftext|>`` the padding.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()

    # The corpus is the chat-formatted task text with the special tokens left out: the BPE trainer would otherwise
    # spend merges on fragments such as "<|" and "_start" that never occur outside the (atomic) special tokens.
    rng = random.Random(12345)
    corpus = []
    for _ in range(400):
        level = rng.choice((1, 2, 3))
        expression, answer = _sample_problem(rng, level)
        corpus.append(f"system\nuser\n{expression}\nassistant\n{answer}\n")
    trainer = trainers.BpeTrainer(
        vocab_size=512,  # an upper bound: the corpus only supports a few merges
        min_frequency=2,
        special_tokens=[PAD_TOKEN, IM_START, IM_END],  # ids 0, 1, 2
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, so any text round-trips
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)

    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        additional_special_tokens=[IM_START],
        chat_template=CHATML_TEMPLATE,
        model_max_length=_MAX_POSITIONS,
    )


def build_toy_model(tokenizer: transformers.PreTrainedTokenizerBase, seed: int = 0) -> transformers.Qwen2ForCausalLM:
    """Build a randomly initialised ~0.53M-parameter Qwen2 model sized to ``tokenizer`` (float32).

    head_dim is 32 because vLLM's CPU attention rejects smaller head sizes, so the same folder also loads there.
    The global torch RNG of the caller is left untouched.
    """
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        head_dim=32,
        num_key_value_heads=2,
        intermediate_size=512,
        tie_word_embeddings=True,
        max_position_embeddings=_MAX_POSITIONS,
        # Qwen has no BOS token in the text; like Qwen's configs, point bos at <|endoftext|>.
        bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = config.bos_token_id
    return model


# --------------------------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------------------------


def _fork_rng(device: torch.device) -> contextlib.AbstractContextManager:
    """Fork the CPU RNG, and the GPU's if ``device`` is one, so that seeding inside never leaks out to the caller."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.random.fork_rng(devices=[index])
    return torch.random.fork_rng(devices=[])


def sample_completions(
    model: transformers.PreTrainedModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    dataset: datasets.Dataset,
    num_samples: int = 16,
    max_new_tokens: int = 8,
    seed: int = 0,
    batch_size: int = 512,
) -> tuple[list[str], list[list[int]]]:
    """Sample ``num_samples`` completions per prompt (temperature 1.0, no top-k/top-p); return (texts, token ids).

    Each prompt's samples are contiguous. The token ids of a completion run up to and including its first EOS, as
    GRPOTrainer hands them to reward functions: a completion that does not end in EOS was cut at ``max_new_tokens``.
    Sampling uses its own seeded RNG (the caller's global torch RNG is restored afterwards), so the result is
    deterministic for a given model, dataset, seed and thread count. Sampling settings match GRPO's defaults.
    """
    prompts = tokenizer.apply_chat_template(list(dataset["prompt"]), add_generation_prompt=True, tokenize=False)
    rows = [text for text in prompts for _ in range(num_samples)]
    texts: list[str] = []
    completion_ids: list[list[int]] = []
    was_training = model.training
    model.eval()
    try:
        with _fork_rng(model.device), torch.no_grad():
            torch.manual_seed(seed)
            for start in range(0, len(rows), batch_size):
                batch = tokenizer(
                    rows[start : start + batch_size],
                    padding=True,
                    padding_side="left",  # decoder-only generation continues from the right edge
                    add_special_tokens=False,
                    return_tensors="pt",
                ).to(model.device)
                output = model.generate(
                    **batch,
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=max_new_tokens,
                    eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id,
                )
                generated = output[:, batch["input_ids"].shape[1] :]
                texts += tokenizer.batch_decode(generated, skip_special_tokens=True)
                for ids in generated.tolist():
                    end = ids.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in ids else len(ids)
                    completion_ids.append(ids[:end])
    finally:
        model.train(was_training)
    return texts, completion_ids


def per_prompt_pass_rates(
    model: transformers.PreTrainedModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    dataset: datasets.Dataset,
    num_samples: int = 16,
    max_new_tokens: int = 8,
    seed: int = 0,
    batch_size: int = 512,
    reward: Callable[..., list[float]] | None = None,
) -> list[float]:
    """Sample ``num_samples`` completions per prompt (see :func:`sample_completions`) and return each pass rate.

    ``reward`` (default :func:`arithmetic_reward`) is called as GRPOTrainer calls it: completion texts, the dataset's
    ``answer`` column and ``completion_ids``.
    """
    reward = reward or arithmetic_reward
    texts, completion_ids = sample_completions(
        model, tokenizer, dataset, num_samples, max_new_tokens, seed, batch_size
    )
    answers = [answer for answer in dataset["answer"] for _ in range(num_samples)]
    rewards = reward(texts, answers, completion_ids=completion_ids)
    return [sum(rewards[i : i + num_samples]) / num_samples for i in range(0, len(rewards), num_samples)]


def sampled_accuracy(
    model: transformers.PreTrainedModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    dataset: datasets.Dataset,
    num_samples: int = 1,
    max_new_tokens: int = 8,
    seed: int = 0,
    reward: Callable[..., list[float]] | None = None,
) -> float:
    """Mean reward of ``num_samples`` sampled completions (temperature 1.0) per prompt of ``dataset``."""
    if len(dataset) == 0:
        raise ValueError("sampled_accuracy needs a non-empty dataset")
    rates = per_prompt_pass_rates(model, tokenizer, dataset, num_samples, max_new_tokens, seed, reward=reward)
    return sum(rates) / len(rates)


# --------------------------------------------------------------------------------------------------------------------
# Measured properties of a start model (the benchmarks' testbed)
# --------------------------------------------------------------------------------------------------------------------


def _percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def always_agree_token_share(right: Sequence[float], mean_length: Sequence[float], num_samples: int) -> float:
    """The share of sampling tokens spent on prompts whose ``num_samples`` samples all agree (none or all right).

    With ``right[i]`` of ``num_samples`` right and a mean completion length ``mean_length[i]``, a group of any fixed
    size costs prompt i tokens in proportion to ``mean_length[i]``; prompts whose samples all agree have an unbiased
    estimate of 0 for the chance that a group of theirs carries signal. So this is the most that skipping prompts could
    save while keeping every group with signal, had the sampler known each prompt's pass rate before sampling it."""
    agree = sum(length for c, length in zip(right, mean_length, strict=True) if c in (0, num_samples))
    return agree / sum(mean_length)


def sample_properties(
    model: transformers.PreTrainedModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    dataset: datasets.Dataset,
    reward: Callable[..., list[float]],
    max_new_tokens: int,
    num_samples: int = 16,
    group: int = 4,
    seed: int = 0,
) -> dict[str, Any]:
    """Measure the pass-rate mix and completion lengths of ``model`` from its own samples on ``dataset``.

    ``num_samples`` completions per prompt (temperature 1, :func:`trl_ada.sample_completions`), scored by
    ``reward`` with their token ids (truncated = wrong). For a prompt with c right of n samples,
    C(c, group) / C(n, group) is the chance that ``group`` of its samples drawn without replacement are all right (an
    unbiased estimate of p^group): ``frac_all_correct_n4`` averages it over prompts, ``frac_all_wrong_n4`` the same for
    all wrong. Lengths are completion tokens with EOS (``max_new_tokens`` when truncated); ``len_p90_over_p10`` is the
    spread of the per-prompt mean length across prompts.
    """
    texts, ids = sample_completions(model, tokenizer, dataset, num_samples, max_new_tokens, seed)
    answers = [answer for answer in dataset["answer"] for _ in range(num_samples)]
    rewards = reward(texts, answers, completion_ids=ids)
    lengths = [len(row) for row in ids]
    prompts = len(dataset)
    per_prompt = [range(i * num_samples, (i + 1) * num_samples) for i in range(prompts)]
    right = [sum(rewards[j] for j in rows) for rows in per_prompt]
    mean_length = [sum(lengths[j] for j in rows) / num_samples for rows in per_prompt]
    total = math.comb(num_samples, group)
    right_lengths = [n for n, r in zip(lengths, rewards, strict=True) if r > 0]
    wrong_lengths = [n for n, r in zip(lengths, rewards, strict=True) if r == 0]
    levels = dataset["level"] if "level" in dataset.column_names else [None] * prompts
    by_level: dict[str, dict[str, float]] = {}
    for level in sorted(set(levels), key=str):
        members = [i for i in range(prompts) if levels[i] == level]
        by_level[str(level)] = {
            "prompts": len(members),
            "accuracy": sum(right[i] for i in members) / (len(members) * num_samples),
            "mean_len": sum(mean_length[i] for i in members) / len(members),
        }
    p10, p90 = _percentile(mean_length, 10), _percentile(mean_length, 90)
    return {
        "prompts": prompts,
        "samples_per_prompt": num_samples,
        "accuracy": sum(rewards) / len(rewards),
        f"frac_all_correct_n{group}": sum(math.comb(int(c), group) for c in right) / (total * prompts),
        f"frac_all_wrong_n{group}": sum(math.comb(num_samples - int(c), group) for c in right) / (total * prompts),
        f"frac_all_correct_first{group}": sum(all(rewards[j] for j in rows[:group]) for rows in per_prompt) / prompts,
        f"frac_all_wrong_first{group}": sum(not any(rewards[j] for j in rows[:group]) for rows in per_prompt)
        / prompts,
        "frac_prompts_never_right": sum(c == 0 for c in right) / prompts,
        "frac_tokens_prompts_always_agree": always_agree_token_share(right, mean_length, num_samples),
        "frac_prompts_always_right": sum(c == num_samples for c in right) / prompts,
        "mean_len_right": statistics.fmean(right_lengths) if right_lengths else None,
        "mean_len_wrong": statistics.fmean(wrong_lengths) if wrong_lengths else None,
        "mean_len": statistics.fmean(lengths),
        "len_p10": p10,
        "len_p90": p90,
        "len_p90_over_p10": p90 / p10,
        "frac_truncated": sum(
            n == max_new_tokens and (not row or row[-1] != tokenizer.eos_token_id)
            for n, row in zip(lengths, ids, strict=True)
        )
        / len(ids),
        "by_level": by_level,
        # Per prompt, in the dataset's order: how many of its samples were right, and their mean length.
        "per_prompt": {"right": right, "mean_len": mean_length},
    }


# --------------------------------------------------------------------------------------------------------------------
# Supervised warm-up
# --------------------------------------------------------------------------------------------------------------------

# The recipe is calibrated on 2 CPU cores (see the project notes): a larger lr learned slower or not at all.
_WARMUP_BATCH_SIZE = 64
_WARMUP_LR = 1.5e-3
_WARMUP_CHECK_EVERY = 50
_WARMUP_TARGET_ACCURACY = 0.40
# Clipping made the step where learning clicks less seed-dependent: on 2 cores, steps to the target for seeds 0, 1, 2,
# 4 were 600, 1000, 1050, 1050 with clipping and 2900, 950, 1250, 1650 without.
_WARMUP_MAX_GRAD_NORM = 1.0
_WARMUP_MAX_STEPS = 3000
_WARMUP_CHECK_PROMPTS = 64
_WARMUP_CHECK_SAMPLES = 4  # 256 samples: a less noisy stopping signal than one sample per prompt, still ~0.2 s
_WARMUP_CHECK_SEED = 777  # picks the fixed held-out check set (eval side of the split); sampling uses seed 0
# Where learning "clicks" is sensitive to tiny numeric differences, and the thread count can change the float
# summation order, so it is fixed whatever OMP_NUM_THREADS says. 1 and 2 threads built bitwise-identical models here
# (500 steps); 1 thread does not crawl when another process holds a core.
_WARMUP_NUM_THREADS = TOY_NUM_THREADS


def _log(message: str) -> None:
    print(f"[trl_ada.toy] {message}", file=sys.stderr, flush=True)


def _check_set() -> datasets.Dataset:
    """The fixed held-out prompts the warm-up measures its stopping accuracy on."""
    return make_arithmetic_dataset(_WARMUP_CHECK_PROMPTS, seed=_WARMUP_CHECK_SEED, split="eval")


@dataclass(frozen=True)
class WarmupRecipe:
    """A supervised warm-up that stops on accuracy: what :func:`supervised_warmup` trains on and when it stops.

    ``examples(seed)`` yields (user message, completion text) pairs forever; the model learns
    "prompt -> completion<|im_end|>". Every ``check_every`` steps it samples ``check_samples`` completions per prompt
    of ``check_set()`` (``max_new_tokens`` at most, scored by ``reward``) and stops at the first check whose mean
    reward is >= ``target_accuracy``, or at ``max_steps``.
    """

    examples: Callable[[int], Iterator[tuple[str, str]]]
    check_set: Callable[[], datasets.Dataset]
    target_accuracy: float
    reward: Callable[..., list[float]]
    max_new_tokens: int
    check_every: int
    max_steps: int
    check_samples: int = _WARMUP_CHECK_SAMPLES
    batch_size: int = _WARMUP_BATCH_SIZE
    lr: float = _WARMUP_LR
    max_grad_norm: float = _WARMUP_MAX_GRAD_NORM


def _arithmetic_examples(seed: int) -> Iterator[tuple[str, str]]:
    return (
        (expression, answer)
        for expression, answer, _ in _problem_stream(random.Random(seed + 2_000_003), (1, 2, 3), split="train")
    )


def _arithmetic_recipe() -> WarmupRecipe:
    # Read at call time, so tests can shorten the warm-up by patching the module constants.
    return WarmupRecipe(
        examples=_arithmetic_examples,
        check_set=_check_set,
        target_accuracy=_WARMUP_TARGET_ACCURACY,
        reward=arithmetic_reward,
        max_new_tokens=8,
        check_every=_WARMUP_CHECK_EVERY,
        max_steps=_WARMUP_MAX_STEPS,
    )


def _warmup(model: transformers.Qwen2ForCausalLM, tokenizer: transformers.PreTrainedTokenizerBase, seed: int) -> dict:
    """The arithmetic task's warm-up: "prompt -> answer<|im_end|>" until the sampled held-out accuracy reaches 0.40."""
    return supervised_warmup(model, tokenizer, seed, _arithmetic_recipe())


def supervised_warmup(
    model: transformers.Qwen2ForCausalLM,
    tokenizer: transformers.PreTrainedTokenizerBase,
    seed: int,
    recipe: WarmupRecipe,
) -> dict:
    """Train ``model`` in place on ``recipe``'s examples until the sampled held-out accuracy reaches its target.

    Returns a summary (steps, accuracy, seconds, whether the step cap was hit, the accuracy at every check).
    """
    torch.manual_seed(seed)
    stream = recipe.examples(seed)
    check_set = recipe.check_set()
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    prompt_cache: dict[str, list[int]] = {}  # thousands of distinct train problems: skip re-rendering the template

    def encode(expression: str, completion: str) -> tuple[list[int], list[int]]:
        if expression not in prompt_cache:
            message = [{"role": "user", "content": expression}]
            text = tokenizer.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
            prompt_cache[expression] = tokenizer.encode(text, add_special_tokens=False)
        return prompt_cache[expression], [*tokenizer.encode(completion, add_special_tokens=False), eos_id]

    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr)
    model.train()
    start, step, accuracy, loss_value = time.perf_counter(), 0, 0.0, math.nan
    checks: list[tuple[int, float]] = []
    while step < recipe.max_steps:
        batch = [next(stream) for _ in range(recipe.batch_size)]
        examples = [encode(expression, completion) for expression, completion in batch]
        length = max(len(p) + len(c) for p, c in examples)
        input_ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        labels = torch.full_like(input_ids, -100)  # loss only on the completion tokens
        for row, (prompt_ids, completion_ids) in enumerate(examples):
            ids = prompt_ids + completion_ids
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
            labels[row, len(prompt_ids) : len(ids)] = torch.tensor(completion_ids)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step, loss_value = step + 1, loss.item()

        if step % recipe.check_every == 0:
            accuracy = sampled_accuracy(
                model,
                tokenizer,
                check_set,
                num_samples=recipe.check_samples,
                max_new_tokens=recipe.max_new_tokens,
                seed=0,
                reward=recipe.reward,
            )
            checks.append((step, accuracy))
            elapsed = time.perf_counter() - start
            _log(f"warm-up step {step:4d} loss {loss_value:.4f} held-out sampled acc {accuracy:.3f} ({elapsed:.0f}s)")
            if accuracy >= recipe.target_accuracy:
                break
    capped = accuracy < recipe.target_accuracy
    if capped:
        warnings.warn(
            f"toy warm-up hit the {recipe.max_steps}-step cap at held-out accuracy {accuracy:.3f} "
            f"(< {recipe.target_accuracy}); saving it anyway",
            RuntimeWarning,
            stacklevel=4,
        )
    model.eval()
    return {
        "steps": step,
        "final_loss": loss_value,
        "check_accuracy": accuracy,
        "seconds": round(time.perf_counter() - start, 2),
        "hit_step_cap": capped,
        "checks": [{"step": check_step, "accuracy": check_accuracy} for check_step, check_accuracy in checks],
    }


def toy_num_threads() -> int:
    """Torch threads for the toy model: ``OMP_NUM_THREADS`` when it is set, else :data:`TOY_NUM_THREADS` (1)."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else TOY_NUM_THREADS


def use_toy_threads() -> int:
    """Set torch's intra-op threads for the toy model (see :func:`toy_num_threads`) and return the count."""
    threads = toy_num_threads()
    torch.set_num_threads(threads)
    return threads


@contextlib.contextmanager
def toy_threads() -> Iterator[int]:
    """Run a block on the toy model's thread count (:func:`toy_num_threads`), then restore the caller's count."""
    previous = torch.get_num_threads()
    try:
        yield use_toy_threads()
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def _num_threads(n: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# --------------------------------------------------------------------------------------------------------------------
# Cached model folder
# --------------------------------------------------------------------------------------------------------------------

_MARKER = "toy_info.json"  # written last: its presence means the folder is complete


def _cache_root(cache_dir: str | os.PathLike | None) -> pathlib.Path:
    if cache_dir is not None:
        return pathlib.Path(cache_dir)
    if os.environ.get("TRL_ADA_CACHE"):
        return pathlib.Path(os.environ["TRL_ADA_CACHE"])
    return pathlib.Path.home() / ".cache" / "trl_ada"


@contextlib.contextmanager
def _file_lock(path: pathlib.Path) -> Iterator[None]:
    """Serialise builders of the same folder across processes, so concurrent callers train once, not N times.

    Correctness does not depend on it (the folder appears atomically); without fcntl (Windows) it is a no-op.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class ToyTask:
    """A built-in toy task: its reward, completion budget, warm-up, shipped warm model and benchmark datasets.

    ``train_rows(rows, seed)`` gives a benchmark's ``rows`` training rows for a seed (the order the trainer sees them
    in is TRL's seeded shuffle of these); ``heldout(n)`` the held-out prompts, the same for every seed and never
    trained on. ``folder`` names the cached model folders (with the seed and warm/cold after it).
    """

    name: str
    version: str
    folder: str
    reward: Callable[..., list[float]]
    max_completion_length: int
    warmup: Callable[[transformers.Qwen2ForCausalLM, transformers.PreTrainedTokenizerBase, int], dict]
    target_accuracy: float
    shipped_dir: pathlib.Path
    train_rows: Callable[[int, int], datasets.Dataset]
    heldout: Callable[[int], datasets.Dataset]


TASKS = ("arithmetic", "reasoning")


def toy_task(name: str = "arithmetic") -> ToyTask:
    """The built-in toy task ``name``: "arithmetic" (``47-8``, the default) or "reasoning" (``7+5-3+8``, worked step by
    step; :mod:`trl_ada.toy_reasoning`)."""
    if name == "arithmetic":
        return ToyTask(
            name="arithmetic",
            version=TOY_VERSION,
            folder=f"toy-{TOY_VERSION}",
            reward=arithmetic_reward,
            max_completion_length=8,
            warmup=lambda model, tokenizer, seed: _warmup(model, tokenizer, seed),  # looked up late: tests patch it
            target_accuracy=_WARMUP_TARGET_ACCURACY,
            shipped_dir=SHIPPED_WARM_DIR,
            train_rows=lambda rows, seed: make_arithmetic_dataset(rows, seed=seed, split="train"),
            heldout=lambda n: make_arithmetic_dataset(n, seed=1_000_003, split="eval"),
        )
    if name == "reasoning":
        from .toy_reasoning import reasoning_task

        return reasoning_task()
    raise ValueError(f"unknown toy task {name!r}; expected one of {TASKS}")


def toy_model_dir(
    cache_dir: str | os.PathLike | None = None,
    warmup: bool = True,
    seed: int = 0,
    prebuilt: bool = True,
    task: str = "arithmetic",
) -> pathlib.Path:
    """Return a folder holding the saved toy model and tokenizer for ``task``, building it on first use.

    The folder loads with ``AutoModelForCausalLM.from_pretrained(path)`` and ``AutoTokenizer.from_pretrained(path)``.
    ``warmup=False`` gives the untrained random model; ``warmup=True`` the task's supervised warm-up, which stops at
    the first check whose sampled held-out accuracy reaches the task's target (0.40 for "arithmetic"). For
    ``warmup=True, seed=0`` that is the folder shipped with the package (:data:`SHIPPED_WARM_DIR` for "arithmetic",
    ``trl_ada/toy_warm_reasoning`` for "reasoning"; read-only, the same on every machine) unless ``prebuilt=False``.

    Built folders live under ``cache_dir``, else ``$TRL_ADA_CACHE``, else ``~/.cache/trl_ada``, and are named after
    the task's version, the seed and the warm-up flag (e.g. ``toy-v2-seed0-warm``, ``toy-reasoning-r1-seed3-warm``).
    A folder is written to a temporary sibling and renamed into place with the completion marker already inside, so
    concurrent processes and interrupted runs never see a half-written folder.
    """
    spec = toy_task(task)
    if warmup and seed == SHIPPED_WARM_SEED and prebuilt:
        if not (spec.shipped_dir / _MARKER).is_file():
            raise FileNotFoundError(
                f"the shipped warm toy model is missing from {spec.shipped_dir}: reinstall trl-ada, or build it with "
                f"toy_model_dir(prebuilt=False, task={task!r})"
            )
        return spec.shipped_dir
    root = _cache_root(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"{spec.folder}-seed{seed}-{'warm' if warmup else 'cold'}"
    if (target / _MARKER).is_file():
        return target

    with _file_lock(root / f".{target.name}.lock"):
        if (target / _MARKER).is_file():  # another process finished while we waited for the lock
            return target
        if target.exists():  # incomplete leftover (not produced by this code's atomic rename): replace it
            shutil.rmtree(target)

        start = time.perf_counter()
        tokenizer = build_toy_tokenizer()
        model = build_toy_model(tokenizer, seed=seed)
        info: dict[str, Any] = {"version": spec.version, "seed": seed, "warmup": warmup}
        if task != "arithmetic":
            info["task"] = task
        if warmup:
            _log(f"building {target} (supervised warm-up, stops at accuracy >= {spec.target_accuracy})")
            with _num_threads(_WARMUP_NUM_THREADS), torch.random.fork_rng(devices=[]):
                info |= spec.warmup(model, tokenizer, seed)
            _log(f"warm-up done: {info['steps']} steps, accuracy {info['check_accuracy']:.3f}, {info['seconds']:.0f}s")

        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=root))
        try:
            tmp.chmod(0o755)  # mkdtemp creates it private; the cache may be shared
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            info["build_seconds"] = round(time.perf_counter() - start, 2)
            (tmp / _MARKER).write_text(json.dumps(info, indent=2) + "\n")
            os.replace(tmp, target)  # atomic; fails if target exists (another process won a race the lock missed)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (target / _MARKER).is_file():
                raise
    return target
