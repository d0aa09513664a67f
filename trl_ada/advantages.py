"""Advantage estimators for Reinforce-Ada, as pure tensor functions.

Shapes: `P` prompts, `G` kept completions per prompt, `N` pool slots per prompt (NaN-padded; NaN also marks a
completion no reward function could score). Nothing here knows about models, processes or TRL.
"""

from __future__ import annotations

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
