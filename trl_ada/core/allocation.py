"""Split one step's sampling budget across prompts from their estimated pass rates (Reinforce-Ada-Est).

Each prompt gets `n_i = clip(lam * score(p_i), min_samples, max_samples)`, with the one `lam` that makes the `n_i` sum
to the budget (water-filling: the budget a clipped prompt cannot take goes to the unclipped ones, in proportion to
their scores), then rounded to integers by largest remainder, which keeps both the sum and the bounds. Rules:

| rule               | score(p)          | origin                                                           |
|--------------------|-------------------|------------------------------------------------------------------|
| `inv_sqrt_p`       | 1 / sqrt(p)       | the paper's Algorithm 1 (default)                                |
| `inv_p`            | 1 / p             | the score of the authors' code: about K / p draws give K         |
|                    |                   | positives (their code gives every prompt 1 sample plus a share   |
|                    |                   | of the rest proportional to 1 / p, uncapped; here, as for every  |
|                    |                   | rule, the shares are water-filled within the bounds)             |
| `variance_optimal` | sqrt((1 - p) / p) | the paper's appendix: minimises sum (1 - p) / (p n), the summed  |
|                    |                   | variance of the prompts' 1/p-weighted (log-objective) estimates  |

All three decrease in `p`: hard prompts get more samples. `p` is clipped into `[P_CLIP, 1 - P_CLIP]` first so every
score is finite and positive (`variance_optimal` would give 0 at p = 1; `min_samples` keeps such prompts sampled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral

ALLOCATION_RULES = ("inv_sqrt_p", "inv_p", "variance_optimal")
P_CLIP = 1e-6


def allocation_scores(p_hat: Sequence[float], rule: str = "inv_sqrt_p") -> list[float]:
    """The unnormalised share of the budget each prompt asks for, from its estimated pass rate (see module table)."""
    if rule not in ALLOCATION_RULES:
        raise ValueError(f"Unknown allocation rule {rule!r}; expected one of {ALLOCATION_RULES}.")
    scores = []
    for p in p_hat:
        if math.isnan(p):
            raise ValueError("allocation got a NaN pass rate; give unseen prompts the memory's prior mean instead.")
        p = min(max(p, P_CLIP), 1.0 - P_CLIP)
        if rule == "inv_sqrt_p":
            scores.append(1.0 / math.sqrt(p))
        elif rule == "inv_p":
            scores.append(1.0 / p)
        else:
            scores.append(math.sqrt((1.0 - p) / p))
    return scores


def allocate(
    p_hat: Sequence[float],
    total: int,
    min_samples: int,
    max_samples: int,
    rule: str = "inv_sqrt_p",
    multiple_of: int = 1,
) -> list[int]:
    """Samples per prompt: sums to `total` exactly, each within `[min_samples, max_samples]` and a multiple of
    `multiple_of`, proportional to `allocation_scores(p_hat, rule)` where no bound binds.

    Deterministic and order-free: the result for a prompt depends on the multiset of pass rates, not on their order,
    except that equal fractional shares are rounded up in index order. Raises `ValueError` when the budget cannot be
    met (`len(p_hat) * min_samples <= total <= len(p_hat) * max_samples` must hold).
    """
    for name, value in (("total", total), ("min_samples", min_samples), ("max_samples", max_samples)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}.")
    if isinstance(multiple_of, bool) or not isinstance(multiple_of, Integral) or multiple_of < 1:
        raise ValueError(f"multiple_of must be a positive integer, got {multiple_of!r}.")
    total, min_samples, max_samples, multiple_of = int(total), int(min_samples), int(max_samples), int(multiple_of)
    if min_samples > max_samples:
        raise ValueError(f"min_samples={min_samples} exceeds max_samples={max_samples}.")
    for name, value in (("total", total), ("min_samples", min_samples), ("max_samples", max_samples)):
        if value % multiple_of:
            raise ValueError(f"{name}={value} is not a multiple of multiple_of={multiple_of}; round it first.")
    scores = allocation_scores(p_hat, rule)
    n = len(scores)
    if not n * min_samples <= total <= n * max_samples:
        raise ValueError(
            f"Cannot split {total} samples over {n} prompts with {min_samples} to {max_samples} each: the total must "
            f"lie in [{n * min_samples}, {n * max_samples}]. Change the budget or the per-prompt bounds."
        )
    lo, hi, budget = min_samples // multiple_of, max_samples // multiple_of, total // multiple_of
    shares = _water_fill(scores, budget, lo, hi)
    return [units * multiple_of for units in _round_largest_remainder(shares, budget, hi)]


def _water_fill(scores: list[float], total: int, lo: int, hi: int) -> list[float]:
    """Real shares `clip(lam * s, lo, hi)` summing to `total`. Their sum is piecewise linear and non-decreasing in
    `lam`, with kinks at `lo / s` and `hi / s`: find the last kink where the sum is still <= `total`, then solve the
    linear piece after it. `math.fsum` is exactly rounded, so the result does not depend on the order of `scores`."""

    def filled(lam: float) -> float:
        return math.fsum(min(max(lam * s, lo), hi) for s in scores)

    kinks = sorted({bound / s for s in scores for bound in (lo, hi)})
    start, left, right = 0.0, 0, len(kinks)  # filled(0) = n * lo <= total
    while left < right:  # binary search for the last kink with filled(kink) <= total
        middle = (left + right) // 2
        if filled(kinks[middle]) <= total:
            start, left = kinks[middle], middle + 1
        else:
            right = middle
    # Prompts that grow with lam just after `start`: past their lower kink, before their upper one. Compare kinks,
    # not `start * s` with the bounds: at its own kink `start * s` may round to just below `lo`.
    slope = math.fsum(s for s in scores if lo / s <= start < hi / s)
    lam = start if slope == 0 else start + (total - filled(start)) / slope
    return [min(max(lam * s, lo), hi) for s in scores]


def _round_largest_remainder(shares: list[float], total: int, hi: int) -> list[int]:
    """Integers within one of `shares`, summing to `total`: floor every share, then add one to the largest
    fractional parts (ties by index). Floors of shares in `[lo, hi]` stay in `[lo, hi]`; a share at `hi` has no
    fractional part, so it is never raised."""
    counts = [min(math.floor(x), hi) for x in shares]
    missing = total - sum(counts)
    order = sorted((i for i in range(len(shares)) if counts[i] < hi), key=lambda i: (-(shares[i] - counts[i]), i))
    if not 0 <= missing <= len(order):
        raise AssertionError(f"Rounding cannot reach the budget: {missing} units for {len(order)} prompts.")
    for i in order[:missing]:
        counts[i] += 1
    return counts


def allocate_step(
    p_hat: Sequence[float], strategy: str, mean: int, min_samples: int, max_samples: int, rule: str
) -> list[int] | None:
    """Reinforce-Ada-Est: one process's budget for a step, `mean` samples per prompt, split by `rule` within
    `[min_samples, max_samples]` (deterministic, so a resumed run allocates as an uninterrupted one). None for the
    Seq strategies, whose rounds size themselves."""
    if strategy != "estimate":
        return None
    return allocate(p_hat, mean * len(p_hat), min_samples, max_samples, rule)
