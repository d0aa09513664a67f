"""One step, composed once: from a step's sampled pools to what the loss sees. The trainer, the asynchronous worker
and the budget simulator all call `compose_step`, each with the `StepSettings` it builds from its own configuration.

In order: each prompt's memory pass rate and counts are read (before this step's evidence), the memory records every
sampled pool (refilled ones too; unscorable completions are not counted), each kept pool is downsampled to the group,
the kept rows get their pool advantages and each prompt its weight, and the step's `ada/*` metrics are counted.
Everything a process must agree on with the others arrives as a callable (`gather_objects`, `gather_tensor`); on one
process they are the identity.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .advantages import pool_advantages
from .engine import SamplingResult, downsample
from .memory import PassRateMemory, memory_updates
from .metrics import Moments, StepCounts, reward_metrics, reward_moments, shown_counters, signal_metrics, step_metrics


@dataclass(frozen=True)
class StepSettings:
    """The algorithm's fields a step reads, as plain values (built by the adapter from `ReinforceAdaConfig`, by the
    asynchronous worker from `AdaRolloutConfig`, by the simulator from its `Strategy`)."""

    group_size: int  # rows per prompt handed to the loss (num_generations)
    budget: int  # the most completions a pool may hold (the advantages' padding)
    downsample: str = "balanced"
    baseline: str = "pool"  # advantage_baseline
    scale_rewards: str = "none"
    weighting: str = "none"  # difficulty_weighting
    max_weight: float = 4.0  # max_difficulty_weight
    normalize_then_sum: bool = False  # multi_objective_aggregation="normalize_then_sum"
    pilot_size: int = 0
    positive_threshold: float = 0.5
    refill: bool = False
    selection: bool = False  # prompt_selection is on

    @property
    def first_draws(self) -> int:
        """Each prompt's first draws in request order, whose rewards are logged (metrics.py): the group, or the
        pilot, after which a prompt may stop."""
        return self.pilot_size or self.group_size

    @property
    def advantage_options(self) -> dict[str, str | float]:
        """`pool_advantages`' options."""
        return {
            "baseline": self.baseline,
            "scale_rewards": self.scale_rewards,
            "weighting": self.weighting,
            "max_weight": self.max_weight,
        }

    @property
    def shown_counters(self) -> list[str]:
        return shown_counters(self.refill, self.selection, self.pilot_size > 0)


@dataclass
class ComposedStep:
    """What `compose_step` returns: the kept rows, their advantages, and what the step's metrics need."""

    result: SamplingResult
    kept: list  # handles of the kept rows: `group_size` per prompt slot, in slot order
    kept_rewards_per_func: torch.Tensor  # (local kept rows, reward functions), NaN where a function returned None
    advantages: torch.Tensor  # (local kept rows,)
    weights: torch.Tensor  # (local prompt slots,): each prompt's difficulty weight
    p_hat: list[float]  # the memory's pass rate of each prompt slot, read before this step's update
    memory_counts: list[tuple[float, float]]  # and its decayed (N_pos, N_total), read then too
    counts: StepCounts  # every process's counts, summed
    pool_rewards_per_func: list[torch.Tensor] | None = None  # per kept pool (N, reward functions): normalize_then_sum

    def signal_metrics(self, settings: StepSettings) -> dict[str, float]:
        """Whether the batch had a reward, or a positive, at all (every process's; metrics.py)."""
        return signal_metrics(self.counts.maxima["highest_reward"], settings.positive_threshold)

    def step_metrics(self, settings: StepSettings, memory_size: int) -> dict[str, float]:
        """The step's `ada/*` metrics (every process's), `memory_size` the memory's prompts after the update."""
        return step_metrics(self.counts, settings.shown_counters, memory_size)

    def first_draw_metrics(self, func_names: Sequence[str]) -> dict[str, float]:
        """GRPOTrainer's `reward*` metrics over each prompt's first draws (every process's; metrics.py)."""
        return reward_metrics(self.counts.first_draws, func_names)


def _local(values: list) -> list:
    return values


def compose_step(
    settings: StepSettings,
    result: SamplingResult,
    keys: Sequence[str],
    memory: PassRateMemory | None,
    rewards_per_func: Callable[[list], torch.Tensor],
    reward_weights: torch.Tensor,
    rng: random.Random,
    *,
    seconds: tuple[float, float] = (0.0, 0.0),
    skipped: int = 0,
    gather_objects: Callable[[list], list] = _local,
    gather_tensor: Callable[[torch.Tensor], torch.Tensor] = lambda tensor: tensor,
) -> ComposedStep:
    """Take a step's sampling `result` (its pools, `keys[i]` the memory key of pool `i`) to what the loss sees.
    The `memory` (None: none is kept) is read for each prompt slot, then records every pool's scored completions.

    `rewards_per_func(handles)` gives the (rows, reward functions) rewards of pool handles, `reward_weights` their
    weights; `rng` draws the downsampling; `seconds` (generation, scoring) and `skipped` (prompts selection replaced)
    are this process's, for the metrics. `gather_objects` concatenates a list over processes in rank order (the
    memory then takes every process's evidence, and the counts are summed); `gather_tensor` concatenates a tensor
    (`scale_rewards="batch"`, `normalize_then_sum`)."""
    slot_keys = [keys[i] for i in result.slots]  # read before this step's update (ODC, the memory baseline)
    if memory is None:  # a caller that keeps none (the simulator's GRPO and DAPO rows)
        p_hat, memory_counts = [math.nan] * len(slot_keys), [(0.0, 0.0)] * len(slot_keys)
    else:
        p_hat, memory_counts = memory.p_hat_many(slot_keys), [memory.counts(key) for key in slot_keys]
        memory.update_many(gather_objects(memory_updates(keys, result.pools)))  # every process's, in rank order
    group_size, pools = settings.group_size, result.kept_pools
    kept = [pool.samples[i] for pool in pools for i in downsample(pool, group_size, rng, settings.downsample)]
    first = [handle for pool in result.pools for handle in pool.samples[: settings.first_draws]]
    first_moments: list[Moments] = reward_moments(rewards_per_func(first), reward_weights)
    per_func = [rewards_per_func(pool.samples) for pool in pools] if settings.normalize_then_sum else None
    kept_rewards = rewards_per_func(kept)
    advantages, weights = pool_advantages(
        kept_rewards,
        reward_weights,
        [pool.rewards for pool in pools],
        [pool.pass_rate for pool in pools],
        p_hat,
        group_size=group_size,
        budget=settings.budget,
        **settings.advantage_options,
        pool_rewards_per_func=per_func,
        memory_counts=memory_counts,
        gather=gather_tensor,
    )
    local = StepCounts.of(result, weights.tolist(), p_hat, first_moments, seconds, skipped)
    counts = sum(gather_objects([local]), StepCounts())
    return ComposedStep(result, kept, kept_rewards, advantages, weights, p_hat, memory_counts, counts, per_func)
