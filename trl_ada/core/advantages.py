"""Advantage estimators for Reinforce-Ada, as pure tensor functions.

Shapes: `P` prompts, `G` kept completions per prompt, `N` pool slots per prompt (NaN-padded; NaN also marks a
completion no reward function could score). Nothing here knows about models, processes or TRL: the one
cross-process statistic (`scale_rewards="batch"`, `normalize_then_sum`'s batch standardisation) comes through the
`gather` the caller passes in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

EPS = 1e-4  # TRL's GRPO adds the same epsilon to the std
WEIGHTINGS = ("none", "inv_sqrt_p", "inv_p")


def nan_mean_std(values: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased std over `dim`, ignoring NaNs. Std is NaN where fewer than two values are present."""
    present = ~torch.isnan(values)
    count = present.sum(dim=dim)
    filled = torch.where(present, values, torch.zeros_like(values))
    mean = filled.sum(dim=dim) / count
    squared = torch.where(present, (values - mean.unsqueeze(dim)) ** 2, torch.zeros_like(values))
    variance = squared.sum(dim=dim) / (count - 1)
    std = torch.where(count > 1, variance.sqrt(), torch.full_like(variance, float("nan")))
    return mean, std


def difficulty_weights(pass_rate: torch.Tensor, scheme: str = "none", max_weight: float = 4.0) -> torch.Tensor:
    """Per-prompt weight on the policy gradient from the prompt's pass rate `p`.

    `inv_sqrt_p` (1/sqrt(p), the paper's hybrid) and `inv_p` (1/p, the log-objective weight) up-weight hard
    prompts. `p` is clamped from below so that no weight exceeds `max_weight`; an unknown pass rate (NaN: nothing
    was scorable) gets weight 1.
    """
    if scheme == "none":
        return torch.ones_like(pass_rate)
    if scheme == "inv_sqrt_p":
        weights = pass_rate.clamp(min=1.0 / max_weight**2).rsqrt()
    elif scheme == "inv_p":
        weights = pass_rate.clamp(min=1.0 / max_weight).reciprocal()
    else:
        raise ValueError(f"Unknown difficulty weighting {scheme!r}; expected one of {WEIGHTINGS}.")
    # Rounding in the clamped 1/max_weight**2 (or 1/max_weight) can push the weight an ulp above the cap (a cap of 7
    # gave 7.0000005 in float32): clamp the weight itself too.
    return torch.nan_to_num(weights.clamp(max=max_weight), nan=1.0)


def normalized_advantages(
    rewards: torch.Tensor,
    baseline: torch.Tensor,
    scale: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    eps: float = EPS,
) -> torch.Tensor:
    """`A = w * (r - baseline) / (scale + eps)` for rewards of shape (P, G) and per-prompt baseline, scale and weight
    of shape (P,) (or scalars). `scale=None` skips the division (the authors' recipe). Unscorable rewards, and
    rows whose scale is undefined, get advantage 0, as in TRL."""
    advantages = rewards - _per_prompt(baseline, rewards)
    if scale is not None:
        advantages = advantages / (_per_prompt(scale, rewards) + eps)
    if weights is not None:
        advantages = advantages * _per_prompt(weights, rewards)
    return torch.nan_to_num(advantages, nan=0.0)


def _per_prompt(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    value = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    return value.unsqueeze(-1) if value.dim() == 1 else value


def odc_weights(p_hat: torch.Tensor | list[float], max_weight: float = 4.0) -> torch.Tensor:
    """Oversample-Downsample-Correct weights: `1 / p_hat` per prompt, capped at `max_weight` (NaN gives 1).

    `p_hat` must be the pass-rate *memory*'s estimate read before this step's rewards are recorded. The weight is
    then fixed before the prompt's completions are drawn, so it scales the expected update exactly: a group whose
    expected update is the pass-rate gradient `grad p` becomes `grad p / p_hat`, which is `grad log p` when
    `p_hat = p`. Weighting by the pool's own pass rate (`difficulty_weights(..., "inv_p")`) aims at the same
    objective but is correlated with the rewards it scales, hence biased. Unbiased requires that the kept group be a
    uniform draw from the pool (or the whole pool): the balanced downsample already re-weights each prompt's expected
    update, by `(p^2 + (1 - p)^2) / (2 p (1 - p))` with the pool-mean baseline once the pool holds enough of both
    kinds, so 1/p_hat on top of it targets a different objective. The pool-mean baseline, which includes the sample
    it is subtracted from, scales a pool of `N` by `(N - 1) / N`; a baseline independent of the sample (such as
    p_hat) does not. The cap trades bias on prompts with `p < 1 / max_weight` for bounded variance.

    Objective each per-prompt weighting ascends (weight `w(p)` on the gradient of `p` means objective `E[f(p)]`
    with `f' = w`), with the default `scale_rewards="none"` and a uniformly drawn kept group:

    | weighting                     | weight w(p)  | objective                |
    |-------------------------------|--------------|--------------------------|
    | `none`                        | 1            | E[p] (GRPO's)            |
    | `inv_sqrt_p`                  | 1 / sqrt(p)  | E[2 sqrt(p)], roughly    |
    | `inv_p` (pool p), ODC (p_hat) | 1 / p        | E[log p]                 |

    Dividing advantages by the group std (`scale_rewards="group"`) multiplies each weight by about
    `1 / sqrt(p (1 - p))`. With `inv_sqrt_p` and `inv_p` the weight is the pool's own pass rate, a noisy function
    of the rewards it scales, so they ascend their objectives only roughly (`inv_sqrt_p`: 0.76x the E[2 sqrt p]
    gradient at p = 0.1 with a pool of 8, by exact enumeration in `tests/test_odc.py`).
    """
    p_hat = torch.as_tensor(p_hat, dtype=p_hat.dtype if isinstance(p_hat, torch.Tensor) else torch.float64)
    return difficulty_weights(p_hat, "inv_p", max_weight)


def normalize_then_sum(
    kept: torch.Tensor, reference: torch.Tensor, weights: torch.Tensor, eps: float = EPS
) -> torch.Tensor:
    """TRL's `multi_objective_aggregation="normalize_then_sum"` with Reinforce-Ada's statistics: each reward
    function's rewards of the kept rows `kept` (P, G, F) are standardised with the mean and std of the prompt's
    reference set `reference` (P, N, F; the pool or the kept group, NaN-padded), weighted and summed over the `F`
    functions. A function's std is 0 where the set holds fewer than two of its rewards; a row no function scored is
    NaN, as in TRL. The caller then standardises the sums over the whole batch, as TRL does."""
    mean, std = nan_mean_std(reference, dim=1)
    normalized = (kept - mean.unsqueeze(1)) / (torch.nan_to_num(std, nan=0.0).unsqueeze(1) + eps)
    summed = (normalized * weights.to(kept.device)).nansum(dim=-1)
    return summed.masked_fill(torch.isnan(kept).all(dim=-1), float("nan"))


def total_reward(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted sum over reward functions; NaN when no function could score the completion (as in TRL)."""
    total = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    return total.masked_fill(torch.isnan(rewards_per_func).all(dim=1), float("nan"))


def padded_pools(pools: Sequence[torch.Tensor], budget: int, dtype: torch.dtype) -> torch.Tensor:
    """Stack per-prompt rewards of different lengths, (n_i, ...) each, into (P, budget, ...) padded with NaN."""
    stacked = []
    for rewards in pools:
        padding = torch.full((budget - len(rewards), *rewards.shape[1:]), float("nan"), dtype=dtype)
        stacked.append(torch.cat([rewards.to(dtype), padding]))
    return torch.stack(stacked)


def memory_baselines(counts: Sequence[tuple[float, float]]) -> torch.Tensor:
    """Each prompt's baseline from its pass-rate memory: `(1 + N_pos) / (2 + N_total)`, the posterior-mean pass rate
    under a uniform Beta(1, 1) prior, from the decayed counts of *earlier* steps (0.5 for a prompt never seen).

    Read before the step's samples are drawn, the baseline is independent of them, so `r - b` is an unbiased
    policy-gradient weight for every completion, and a group whose rewards all agree still carries signal (an
    all-right group on a prompt the memory puts at 0.7 gets +0.3 each). The group mean, by contrast, zeroes such a
    group and scales the rest of the gradient by `(n - 1) / n` (the sample is part of its own baseline). The uniform
    prior, not the memory's own (which assumes a prompt never seen is hard, for budgets), keeps the baseline of a
    new or rarely seen prompt in the middle. It is a pass rate: the matching baseline for a binary reward (1 right,
    0 wrong, with `positive_threshold` between); for other rewards it stays unbiased but reduces variance less.
    """
    return torch.tensor([(1.0 + n_pos) / (2.0 + n_total) for n_pos, n_total in counts], dtype=torch.float64)


def memory_baseline_mismatch(num_reward_funcs: int = 1, totals: Sequence[float] = ()) -> str | None:
    """Why `memory_baselines` does not fit these rewards, or None when it does: one reward function whose weighted
    totals (`totals`, NaN for an unscorable completion) are 0 or 1.

    The baseline is a pass rate, which is the expected reward, and what is said of it (the expected update is the
    gradient of E[p]; an agreeing group on a prompt at `b` gets `1 - b` or `-b`) holds, only for one 0/1 reward. With
    several reward functions, or other totals, it is still fixed before the step's samples, so the update ascends the
    expected weighted total without bias; but it is on another scale than that total, so it need not centre the
    rewards, and the advantages can carry an offset (more variance than a baseline that matches them)."""
    if num_reward_funcs > 1:
        found = f"{num_reward_funcs} reward functions"
    else:
        other = next((t for t in totals if not math.isnan(t) and t not in (0.0, 1.0)), None)
        if other is None:
            return None
        found = f"a weighted total reward of {other:g}, neither 0 nor 1"
    return (
        f"advantage_baseline='memory' with {found}: the baseline is a pass rate from earlier steps (the share of "
        "completions above positive_threshold), the expected reward only for one 0/1 reward. The update still "
        "ascends the expected weighted total without bias (the baseline is fixed before the step's samples), but "
        "not the pass rate its documentation speaks of, and a baseline on another scale than the rewards need not "
        "centre them (more variance). Use advantage_baseline='pool' (or 'group') for these rewards."
    )


def pool_advantages(
    kept_rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    pool_rewards: Sequence[Sequence[float]],
    pass_rates: Sequence[float],
    p_hat: Sequence[float],
    *,
    group_size: int,
    budget: int,
    baseline: str = "pool",
    scale_rewards: str = "none",
    weighting: str = "none",
    max_weight: float = 4.0,
    pool_rewards_per_func: Sequence[torch.Tensor] | None = None,
    memory_counts: Sequence[tuple[float, float]] | None = None,
    gather: Callable[[torch.Tensor], torch.Tensor] = lambda tensor: tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reinforce-Ada's advantages of the kept rows and each prompt's weight: `((P * G,), (P,))`.

    `kept_rewards_per_func` (P * G, F) are the kept rows' rewards, `pool_rewards` each prompt's weighted totals over
    its whole pool (the baseline's reference under `baseline="pool"`, else the kept group is), `pass_rates` each
    pool's pass rate (for `weighting`) and `p_hat` the memory's estimate before this step (for `weighting="odc"`).
    `scale_rewards` is GRPO's: `"group"` divides by the reference's std, `"batch"` by the std over every process's
    references (`gather` concatenates them), `"none"` not at all. With `pool_rewards_per_func` (per prompt, (N, F)),
    TRL's `normalize_then_sum` is applied with the same reference sets, then standardised over the gathered batch.
    `baseline="memory"` subtracts `memory_baselines(memory_counts)` (each prompt's memory counts, read before this
    step) instead; the batch std then comes from the kept rewards, and `scale_rewards="group"` is refused (an
    agreeing group has no std to divide by).
    """
    kept = total_reward(kept_rewards_per_func, reward_weights).view(-1, group_size)
    if baseline == "pool":
        pools = [torch.tensor(list(rewards), dtype=kept.dtype) for rewards in pool_rewards]
        reference = padded_pools(pools, budget, kept.dtype)
    else:
        reference = kept
    if baseline == "memory":
        if memory_counts is None or len(memory_counts) != kept.shape[0]:
            raise ValueError("baseline='memory' needs the memory's counts of every prompt (memory_counts).")
        if scale_rewards == "group" or pool_rewards_per_func is not None:
            raise ValueError("baseline='memory' takes scale_rewards 'none' or 'batch', and no normalize_then_sum.")
        mean, std = memory_baselines(memory_counts).to(kept.dtype), None  # no group std: refused above
    else:
        mean, std = nan_mean_std(reference)
    if scale_rewards == "group":
        scale = std
    elif scale_rewards == "batch":  # std over every process's reference sets
        scale = nan_mean_std(gather(reference).flatten())[1]
    else:
        scale = None
    if weighting == "odc":
        weights = odc_weights(list(p_hat), max_weight).to(kept.dtype)
    else:
        weights = difficulty_weights(torch.tensor(list(pass_rates), dtype=kept.dtype), weighting, max_weight)
    if pool_rewards_per_func is not None:
        num_funcs = kept_rewards_per_func.shape[1]
        kept_per_func = kept_rewards_per_func.view(-1, group_size, num_funcs)
        by_func = padded_pools(pool_rewards_per_func, budget, kept.dtype) if baseline == "pool" else kept_per_func
        summed = normalize_then_sum(kept_per_func, by_func, reward_weights.to(kept.dtype))
        batch_mean, batch_std = nan_mean_std(gather(summed).flatten())  # as TRL, over the whole batch
        advantages = normalized_advantages(summed, batch_mean, batch_std, weights)
    else:
        advantages = normalized_advantages(kept, mean, scale, weights)
    return advantages.flatten(), weights
