"""Sampling the toy model: completions, per-prompt pass rates, sampled accuracy, and the measured properties of a start
model (the benchmarks' testbed)."""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import datasets
import torch
import transformers

from .rewards import arithmetic_reward


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
    if reward is None:
        reward = arithmetic_reward
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
