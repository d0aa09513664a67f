"""Predicting a group's signal from the pass-rate memory: prompt selection before sampling, and the pilot's stop rule.

Prompt selection skips prompts whose next group would almost surely carry no signal.

A group of `n` completions of one prompt gives GRPO-style training no gradient when its rewards are all equal: all
right or all wrong. The memory holds each prompt's decayed counts from earlier visits; under a uniform Beta(1, 1)
prior (not the memory's own prior, which assumes every unseen prompt is hard and would skip prompts never seen) the
posterior predictive probability that the next `n` draws all agree is the Beta-binomial

    P(no signal) = B(a + n, b) / B(a, b) + B(a, b + n) / B(a, b),   a = 1 + N_pos,  b = 1 + N_total - N_pos.

A prompt whose P(no signal) is at least `threshold` is sampled only with probability `floor` (and replaced
otherwise); every other prompt is always sampled. The floor keeps every prompt reachable, so a prompt the policy
has started to get wrong (or right) shows it: its memory can change. A prompt never seen has P(no signal) =
2 / (n + 1), which stays below any useful threshold.

The pilot (`pilot_stop_rule`, `pilot_size`) asks the same question after a prompt's first completions: when they all
agree, how likely is it that the rest of its group would agree with them too? That answer needs a prior that fits the
prompts: on a training set where most prompts are (nearly) always right or always wrong, Beta(1, 1) badly
underestimates how sticky an agreeing pilot is. `fit_beta_prior` fits Beta(a, b) to the memory's own counts by the
method of moments (an empirical Bayes prior), and `agreement_probability` is the posterior predictive under it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Pool
    from .memory import PassRateMemory

PROMPT_SELECTIONS = ("none", "pass_rate")
UNIFORM_PRIOR = (1.0, 1.0)
MIN_PROMPTS_TO_FIT = 20  # below this many prompts with counts, the fitted prior falls back to UNIFORM_PRIOR
# The fitted prior's 1 / (a + b + 1) is kept within these bounds: a prior of total weight between 0.05 and 99
# pseudo-counts, so that a few prompts cannot make it a point mass or a flat line.
MIN_INTRACLASS, MAX_INTRACLASS = 0.01, 0.95


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


def fit_beta_prior(
    counts: Iterable[tuple[float, float]], fallback: tuple[float, float] = UNIFORM_PRIOR
) -> tuple[float, float]:
    """The Beta(a, b) prior on pass rates that fits prompts' `(num_positive, num_total)` counts, by the method of
    moments of the beta-binomial: with m and v the mean and (unbiased) variance across prompts of `num_positive /
    num_total`, and h the mean of `1 / num_total`,

        v = m (1 - m) (rho + (1 - rho) h),   rho = 1 / (a + b + 1),   a = m (a + b),   b = (1 - m) (a + b).

    Prompts with `num_total == 0` carry no evidence and are left out. `fallback` is returned when fewer than
    `MIN_PROMPTS_TO_FIT` prompts have counts, when every prompt has a single draw (`h == 1` leaves rho undetermined)
    or when the mean is 0 or 1. Decayed (fractional) counts are used as they are."""
    observed = [(pos, total) for pos, total in counts if total > 0]
    if len(observed) < MIN_PROMPTS_TO_FIT:
        return fallback
    rates = [pos / total for pos, total in observed]
    mean = sum(rates) / len(rates)
    variance = sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)
    harmonic = sum(1 / total for _, total in observed) / len(observed)
    if not 0 < mean < 1 or harmonic >= 1:
        return fallback
    rho = (variance / (mean * (1 - mean)) - harmonic) / (1 - harmonic)
    rho = min(max(rho, MIN_INTRACLASS), MAX_INTRACLASS)
    weight = 1 / rho - 1
    return mean * weight, (1 - mean) * weight


def agreement_probability(
    num_positive: float, num_negative: float, more: int, positive: bool, prior: tuple[float, float] = UNIFORM_PRIOR
) -> float:
    """Posterior predictive probability that `more` fresh draws are all positive (`positive`) or all negative, given
    counts (possibly decayed, so fractional) and a Beta(a, b) prior: B(a' + more, b') / B(a', b') for all positive,
    with a' = a + num_positive and b' = b + num_negative."""
    if num_positive < 0 or num_negative < 0 or not math.isfinite(num_positive + num_negative):
        raise ValueError(f"Counts must be finite and >= 0, got {num_positive}, {num_negative}.")
    if more < 0:
        raise ValueError(f"more must be >= 0, got {more}.")
    a, b = prior[0] + num_positive, prior[1] + num_negative
    same = a if positive else b
    return math.exp(math.lgamma(same + more) - math.lgamma(same) + math.lgamma(a + b) - math.lgamma(a + b + more))


def pilot_stop_rule(
    memory: PassRateMemory, keys: Sequence[str], group_size: int, threshold: float
) -> Callable[[int, Pool], bool]:
    """The pilot's `stop` for one generation batch (`trl_ada.core.engine.Pilot`): prompt `index` (memory key
    `keys[index]`; refills append keys) stops after its pilot, whose scored completions all agree, when the probability
    that the other `group_size - len(pilot)` completions of its group would agree with them too is at least
    `threshold`. The probability is the posterior predictive given the prompt's memory counts and its pilot, under
    the prior `fit_beta_prior` fits to the whole memory (read once, when the rule is made, before this batch's
    update). A pilot with nothing scorable never stops."""
    prior = fit_beta_prior(memory.records())

    def stop(index: int, pool: Pool) -> bool:
        positives, negatives = pool.num_positive, pool.num_negative
        if positives + negatives == 0:
            return False
        num_positive, num_total = memory.counts(keys[index])
        probability = agreement_probability(
            num_positive + positives,
            num_total - num_positive + negatives,
            max(group_size - len(pool), 0),
            positive=positives > 0,
            prior=prior,
        )
        return probability >= threshold

    return stop
