"""What a held-out evaluation measures besides mean accuracy: pass@k, accuracy per label and the policy's entropy.

`HeldoutCurve` (`trl_ada.tools.demo`) records, at each checkpoint, every held-out prompt's count of correct samples,
the accuracy of each label of the held-out set's ``rule`` or ``level`` column, and optionally the mean token entropy of
the sampled completions; the learning benchmark (`benchmarks/learning_stats.py`) turns the counts into pass@k.

The first three functions are pure arithmetic on counts; `mean_token_entropy` runs the model (torch loads on first
use).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

LABEL_COLUMNS = ("rule", "level")  # held-out columns accuracy is broken down by, the first one present
PASS_AT_K = (1, 8, 32)


def pass_at_k(num_samples: int, correct: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``correct`` of ``num_samples`` samples of one prompt: the chance that k of
    them, drawn without replacement, hold at least one correct, 1 - C(n - c, k) / C(n, k). Refuses k > n."""
    if not 0 <= correct <= num_samples:
        raise ValueError(f"{correct} correct of {num_samples} samples")
    if not 1 <= k <= num_samples:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {num_samples}")
    return 1.0 - math.comb(num_samples - correct, k) / math.comb(num_samples, k)


def mean_pass_at_k(correct: Sequence[int], num_samples: int, k: int) -> float | None:
    """`pass_at_k` averaged over prompts (``correct[i]`` of ``num_samples`` right on prompt i); None when k exceeds
    the samples per prompt (undefined) or there are no prompts."""
    if k > num_samples or not correct:
        return None
    return sum(pass_at_k(num_samples, c, k) for c in correct) / len(correct)


def accuracy_by_label(correct: Sequence[int], num_samples: int, labels: Sequence[Hashable]) -> dict[str, float]:
    """Mean accuracy (correct / num_samples, averaged over prompts) of the prompts of each label (a level, a rule),
    keyed by the label as a string (JSON's keys), in sorted label order."""
    if len(correct) != len(labels):
        raise ValueError(f"{len(correct)} prompts' counts for {len(labels)} labels")
    groups: dict[Hashable, list[int]] = {}
    for count, label in zip(correct, labels, strict=True):
        groups.setdefault(label, []).append(count)
    return {str(label): sum(groups[label]) / (len(groups[label]) * num_samples) for label in sorted(groups)}


def mean_token_entropy(
    model: Any,
    tokenizer: Any,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    batch_size: int = 64,
) -> float:
    """The policy's mean next-token entropy (nats, temperature 1) over the tokens of sampled completions.

    ``prompt_ids[i]`` and ``completion_ids[i]`` are the token ids of completion i's prompt (as the model saw it) and of
    the completion itself, up to and including its EOS. One teacher-forced forward pass over prompt + completion
    (right-padded, padding masked) gives, at the position before each completion token, the distribution that token
    was drawn from; the result is the mean of those distributions' entropies over every completion token of every
    completion (EOS included, padding and prompt excluded). Sequences are batched ``batch_size`` at a time in order of
    length, to pad little. The model runs in eval mode under no_grad, and is put back in the mode it was in; no random
    numbers are drawn.
    """
    import torch

    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts for {len(completion_ids)} completions")
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("every completion needs a non-empty prompt: the first completion token is predicted from it")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    order = sorted(range(len(completion_ids)), key=lambda i: len(prompt_ids[i]) + len(completion_ids[i]))
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(order), batch_size):
                prompts = [prompt_ids[i] for i in order[start : start + batch_size]]
                completions = [completion_ids[i] for i in order[start : start + batch_size]]
                width = max(len(p) + len(c) for p, c in zip(prompts, completions, strict=True))
                input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
                attention = torch.zeros((len(prompts), width), dtype=torch.long)
                scored = torch.zeros((len(prompts), width), dtype=torch.bool)
                for row, (p, c) in enumerate(zip(prompts, completions, strict=True)):
                    input_ids[row, : len(p) + len(c)] = torch.tensor([*p, *c], dtype=torch.long)
                    attention[row, : len(p) + len(c)] = 1
                    scored[row, len(p) - 1 : len(p) - 1 + len(c)] = True  # the logits that predict c's tokens
                logits = model(input_ids=input_ids.to(model.device), attention_mask=attention.to(model.device)).logits
                entropy = torch.special.entr(torch.softmax(logits.double(), dim=-1)).sum(-1)  # -p log p, 0 at p = 0
                total += entropy[scored.to(entropy.device)].sum().item()
                count += int(scored.sum())
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("no completion tokens to take the entropy over")
    return total / count
