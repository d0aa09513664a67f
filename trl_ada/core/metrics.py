"""Step metrics that mean what a TRL user reads into them, as pure functions of per-process tallies.

GRPOTrainer computes `reward`, `reward_std` and `rewards/<func>/mean|std` over the rows handed to the loss. Under
Reinforce-Ada those rows are chosen by reward (balanced downsampling keeps half positives), so their mean reports the
downsampling, not the policy. The trainer logs instead the rewards of each prompt's first `num_generations` draws in
request order: every pool holds them (no prompt stops before its group is full), and whether they were drawn never
depends on a reward, so they estimate the policy's rewards on the step's prompts as GRPO's own groups do. With a pilot
a prompt may stop after its first `pilot_size` draws, so those, which every pool holds, are the ones logged. The kept
rows' statistics move to `ada/kept_*`.

Completion lengths and tool calls: GRPOTrainer logs them once per generation call, so under rounds a step's
`completions/*` and `tools/*` became means of per-round means. `length_metrics` and `tool_metrics` compute them once
over every completion of the step; the adapter puts that one entry where the per-call entries were
(`trl_ada.adapter.trl_logs`).

`StepCounts` is one process's share of the step's `ada/*` metrics, additive across processes; `step_metrics` turns
the sum into the logged values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .advantages import total_reward
from .engine import SamplingResult, Tally, has_signal

LENGTH_METRICS = (
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "completions/mean_terminated_length",
    "completions/min_terminated_length",
    "completions/max_terminated_length",
)
TOOL_METRICS = ("tools/call_frequency", "tools/failure_frequency")


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


def tool_metrics(calls: int, failures: int, rollouts: int) -> dict[str, float]:
    """GRPOTrainer's `tools/*` metrics: tool calls per rollout and failures per call (0 when there are none)."""
    return {
        "tools/call_frequency": calls / rollouts if rollouts else 0.0,
        "tools/failure_frequency": failures / calls if calls else 0.0,
    }


@dataclass
class StepCounts:
    """One process's share of a step's `ada/*` metrics; `+` combines processes (in rank order)."""

    tally: Tally = field(default_factory=Tally)
    p_hat: list[float] = field(default_factory=list)  # memory pass rate of each prompt, read before the update
    sizes: list[int] = field(default_factory=list)  # samples drawn per kept prompt
    summed: dict[str, float] = field(default_factory=dict)  # counters summed over processes
    maxima: dict[str, float] = field(default_factory=dict)  # values whose maximum over processes is logged
    first_draws: list[Moments] = field(default_factory=list)  # `reward_moments` of each pool's first draws

    @classmethod
    def of(
        cls,
        result: SamplingResult,
        weights: Sequence[float],
        p_hat: list[float],
        first_draws: list[Moments],
        seconds: tuple[float, float],
        skipped: int = 0,
    ) -> StepCounts:
        """This process's counts for a generation batch: its sampling `result`, each kept prompt's difficulty
        weight, memory pass rate and first draws' reward moments, its wall time generating and scoring (two
        numbers), prompts selection skipped."""
        kept_pools = result.kept_pools
        summed = {
            "ada/completion_tokens": result.generated_tokens,
            "ada/aborted_tokens": result.aborted_tokens,
            "ada/refills": result.refills,
            "ada/refill_samples": sum(len(pool) for pool in result.replaced_pools),
            "ada/unfilled": sum(not has_signal(pool) for pool in kept_pools),
            "ada/skipped": skipped,
            "ada/pilot_stopped": result.pilot_stopped,
        }
        # Rounds: the same on every process; streaming: each process's own.
        maxima = {
            "ada/in_flight_max": result.in_flight_max,
            "ada/generation_seconds": seconds[0],
            "ada/reward_seconds": seconds[1],
            "ada/rounds": result.rounds,
            "highest_reward": max((r for pool in result.pools for r in pool.scored_rewards), default=-math.inf),
        }
        sizes = [len(pool) for pool in kept_pools]
        return cls(Tally.of(kept_pools, list(weights)), p_hat, sizes, summed, maxima, first_draws)

    def __add__(self, other: StepCounts) -> StepCounts:
        return StepCounts(
            self.tally + other.tally,
            self.p_hat + other.p_hat,
            self.sizes + other.sizes,
            {name: self.summed.get(name, 0) + value for name, value in other.summed.items()},
            {
                name: max(self.maxima[name], value) if name in self.maxima else value
                for name, value in other.maxima.items()
            },
            [a + b for a, b in zip(self.first_draws, other.first_draws, strict=True)]
            if self.first_draws
            else [Moments() + b for b in other.first_draws],
        )


def shown_counters(refill: bool, selection: bool, pilot: bool = False) -> list[str]:
    """The summed counters a run logs: tokens always, refill's, selection's and the pilot's when they are on."""
    shown = ["ada/completion_tokens", "ada/aborted_tokens"]
    shown += ["ada/refills", "ada/refill_samples", "ada/unfilled"] if refill else []
    shown += ["ada/skipped"] if selection else []
    shown += ["ada/pilot_stopped"] if pilot else []
    return shown


def step_metrics(counts: StepCounts, shown: Sequence[str], memory_size: int) -> dict[str, float]:
    """The step's `ada/*` metrics from every process's `StepCounts`: the tally's, the counters named in `shown`
    (summed), the in-flight peak and the generation and scoring times (maxima), the mean memory pass rate of the
    step's prompts, the memory's size after the update, and the spread of samples per prompt (under `"estimate"`,
    the allocation)."""
    metrics = counts.tally.metrics(int(counts.maxima["ada/rounds"]))
    for name in shown:
        metrics[name] = float(counts.summed[name])
    metrics["ada/in_flight_max"] = float(counts.maxima["ada/in_flight_max"])
    metrics["ada/generation_seconds"] = counts.maxima["ada/generation_seconds"]
    metrics["ada/reward_seconds"] = counts.maxima["ada/reward_seconds"]
    p_hat, sizes = counts.p_hat, counts.sizes
    metrics.update(
        {
            "ada/p_hat_mean": sum(p_hat) / max(len(p_hat), 1),
            "ada/memory_size": float(memory_size),
            "ada/alloc_min": float(min(sizes, default=0)),
            "ada/alloc_mean": sum(sizes) / max(len(sizes), 1),
            "ada/alloc_max": float(max(sizes, default=0)),
        }
    )
    return metrics


def signal_metrics(highest_reward: float, positive_threshold: float) -> dict[str, float]:
    """Whether a generation batch had anything to learn from, from the highest total reward scored in it on every
    process (-inf when nothing was scorable): `ada/frac_batches_no_reward` is 1 when no completion scored above 0,
    `ada/frac_batches_no_positive` when none scored above `positive_threshold`. One entry per batch, so the logged mean
    is the share of the logging window's generation batches."""
    return {
        "ada/frac_batches_no_reward": float(not highest_reward > 0),
        "ada/frac_batches_no_positive": float(not highest_reward > positive_threshold),
    }
