"""Prompt selection from the pass-rate memory: skip prompts whose next group would almost surely carry no signal.

A group of `n` completions of one prompt gives GRPO-style training no gradient when its rewards are all equal: all
right or all wrong. The memory holds each prompt's decayed counts from earlier visits; under a uniform Beta(1, 1)
prior (not the memory's own prior, which assumes every unseen prompt is hard and would skip prompts never seen) the
posterior predictive probability that the next `n` draws all agree is the Beta-binomial

    P(no signal) = B(a + n, b) / B(a, b) + B(a, b + n) / B(a, b),   a = 1 + N_pos,  b = 1 + N_total - N_pos.

A prompt whose P(no signal) is at least `threshold` is sampled only with probability `floor` (and replaced
otherwise); every other prompt is always sampled. The floor keeps every prompt reachable, so a prompt the policy
has started to get wrong (or right) shows it: its memory can change. A prompt never seen has P(no signal) =
2 / (n + 1), which stays below any useful threshold.
"""

from __future__ import annotations

import math

PROMPT_SELECTIONS = ("none", "pass_rate")


def no_signal_probability(num_positive: float, num_total: float, group_size: int) -> float:
    """Posterior predictive probability that `group_size` fresh draws of a prompt are all positive or all negative,
    given (possibly decayed, so fractional) counts from earlier visits and a Beta(1, 1) prior."""
    if not 0 <= num_positive <= num_total or not math.isfinite(num_total):
        raise ValueError(f"Counts must satisfy 0 <= num_positive <= num_total, got {num_positive}, {num_total}.")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}.")
    a, b = 1.0 + num_positive, 1.0 + num_total - num_positive
    log_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    all_positive = math.lgamma(a + group_size) + math.lgamma(b) - math.lgamma(a + b + group_size) - log_beta
    all_negative = math.lgamma(a) + math.lgamma(b + group_size) - math.lgamma(a + b + group_size) - log_beta
    return min(1.0, math.exp(all_positive) + math.exp(all_negative))


def keep_probability(num_positive: float, num_total: float, group_size: int, threshold: float, floor: float) -> float:
    """The probability of sampling a prompt: `floor` when its next group is predicted to carry no signal with
    probability at least `threshold`, else 1."""
    if num_total == 0:
        return 1.0
    return floor if no_signal_probability(num_positive, num_total, group_size) >= threshold else 1.0
