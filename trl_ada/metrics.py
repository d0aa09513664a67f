"""Step metrics that mean what a TRL user reads into them, as pure functions of per-process tallies.

GRPOTrainer computes `reward`, `reward_std` and `rewards/<func>/mean|std` over the rows handed to the loss. Under
Reinforce-Ada those rows are chosen by reward (balanced downsampling keeps half positives), so their mean reports the
downsampling, not the policy. The trainer logs instead the rewards of each prompt's first `num_generations` draws in
request order: every pool holds them (no prompt stops before its group is full), and whether they were drawn never
depends on a reward, so they estimate the policy's rewards on the step's prompts as GRPO's own groups do. The kept
rows' statistics move to `ada/kept_*`.

Completion lengths: GRPOTrainer logs them once per generation call, so under rounds a step's `completions/*` became a
mean of per-round means. `length_metrics` computes them once over every completion of the step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .advantages import total_reward

LENGTH_METRICS = (
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "completions/mean_terminated_length",
    "completions/min_terminated_length",
    "completions/max_terminated_length",
)


def length_metrics(lengths: Sequence[int], ended: Sequence[bool]) -> dict[str, float]:
    """GRPOTrainer's seven `completions/*` metrics over these completions: `lengths` in generated tokens, `ended`
    whether each ended on an EOS or pad token (the others were clipped). Terminated statistics are 0 when none
    terminated, as in GRPOTrainer."""
    if not lengths or len(lengths) != len(ended):
        raise ValueError(f"need as many lengths as ended flags, at least one; got {len(lengths)} and {len(ended)}")
    terminated = [n for n, done in zip(lengths, ended, strict=True) if done] or [0]
    return {
        "completions/mean_length": sum(lengths) / len(lengths),
        "completions/min_length": float(min(lengths)),
        "completions/max_length": float(max(lengths)),
        "completions/clipped_ratio": sum(not done for done in ended) / len(ended),
        "completions/mean_terminated_length": sum(terminated) / len(terminated),
        "completions/min_terminated_length": float(min(terminated)),
        "completions/max_terminated_length": float(max(terminated)),
    }


@dataclass
class Moments:
    """Count, sum and sum of squares of the non-NaN values of one column: additive across processes."""

    count: int = 0
    total: float = 0.0
    squares: float = 0.0

    @classmethod
    def of(cls, values: torch.Tensor) -> Moments:
        present = values[~torch.isnan(values)].double()
        return cls(int(present.numel()), float(present.sum()), float((present**2).sum()))

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.count + other.count, self.total + other.total, self.squares + other.squares)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    @property
    def std(self) -> float:
        """With Bessel's correction, as TRL's `nanstd`; NaN below two values."""
        if self.count < 2:
            return math.nan
        variance = max(self.squares / self.count - self.mean**2, 0.0) * self.count / (self.count - 1)
        return math.sqrt(variance)


def reward_moments(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> list[Moments]:
    """Moments of the weighted total reward, then of each reward function's column (NaN: not scored)."""
    columns = [total_reward(rewards_per_func, weights)] + [
        rewards_per_func[:, i] for i in range(rewards_per_func.shape[1])
    ]
    return [Moments.of(column) for column in columns]


def reward_metrics(moments: Sequence[Moments], func_names: Sequence[str], prefix: str = "") -> dict[str, float]:
    """GRPOTrainer's reward metric names (with `prefix`) from `reward_moments` summed over processes."""
    total, *per_func = moments
    metrics = {f"{prefix}reward": total.mean, f"{prefix}reward_std": total.std}
    for name, column in zip(func_names, per_func, strict=True):
        metrics[f"{prefix}rewards/{name}/mean"] = column.mean
        metrics[f"{prefix}rewards/{name}/std"] = column.std
    return metrics
