"""Successive-elimination sampling (Reinforce-Ada-Seq), free of any model.

One training step, for a batch of prompts:

    active <- every prompt
    for round in 1..max_rounds:
        draw `samples_per_round` completions for each active prompt, score them
        retire a prompt once its exit rule holds (and it has a full group) or its budget is spent
        stop when no prompt is active (on any process)
    downsample each prompt's pool to `group_size` completions, half positive where it can

Completions are opaque handles: the caller's `generate` returns them and `score` turns them into rewards, so the
same loop runs inside the trainer (handles are row indices into TRL's generation output) and in simulations
(handles are Bernoulli draws).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

STRATEGIES = ("balanced", "positive", "uniform")


@dataclass(frozen=True)
class ExitRule:
    """A prompt is resolved once its pool holds at least `min_positives` positives and `min_negatives` negatives."""

    min_positives: int
    min_negatives: int

    def __post_init__(self) -> None:
        if self.min_positives < 0 or self.min_negatives < 0:
            raise ValueError(f"Exit counts must be >= 0, got {self.min_positives=} and {self.min_negatives=}.")

    def holds(self, num_positive: int, num_negative: int) -> bool:
        return num_positive >= self.min_positives and num_negative >= self.min_negatives

    @classmethod
    def for_strategy(
        cls,
        strategy: str,
        group_size: int,
        min_positives: int | None = None,
        min_negatives: int | None = None,
    ) -> ExitRule:
        """The paper's rules: `balanced` waits for a half-positive, half-negative group; `positive` for one
        correct answer; `uniform` (plain GRPO) accepts whatever one round gives. Explicit counts override."""
        defaults = {
            "balanced": (group_size // 2, group_size - group_size // 2),
            "positive": (1, 0),
            "uniform": (0, 0),
        }
        if strategy not in defaults:
            raise ValueError(f"Unknown sampling strategy {strategy!r}; expected one of {STRATEGIES}.")
        default_pos, default_neg = defaults[strategy]
        return cls(
            default_pos if min_positives is None else min_positives,
            default_neg if min_negatives is None else min_negatives,
        )


@dataclass(frozen=True)
class Schedule:
    """How many completions to draw per round, for how many rounds, and when a prompt is done."""

    group_size: int  # completions per prompt handed to the loss (GRPO's num_generations)
    samples_per_round: int
    max_rounds: int
    exit_rule: ExitRule
    positive_threshold: float = 0.5  # a completion is positive when its reward is strictly greater

    def __post_init__(self) -> None:
        if self.group_size < 1 or self.samples_per_round < 1 or self.max_rounds < 1:
            raise ValueError(
                f"group_size, samples_per_round and max_rounds must be >= 1, got {self.group_size}, "
                f"{self.samples_per_round} and {self.max_rounds}."
            )
        if self.budget < self.group_size:
            raise ValueError(
                f"The per-prompt budget samples_per_round * max_rounds = {self.budget} is smaller than the group size "
                f"{self.group_size}: a prompt could never fill its group."
            )

    @property
    def budget(self) -> int:
        """The most completions any prompt may receive in one step."""
        return self.samples_per_round * self.max_rounds

    @classmethod
    def from_strategy(
        cls,
        strategy: str,
        group_size: int,
        samples_per_round: int = 8,
        max_rounds: int = 4,
        positive_threshold: float = 0.5,
        min_positives: int | None = None,
        min_negatives: int | None = None,
    ) -> Schedule:
        """`uniform` is plain GRPO: a single round of exactly `group_size` completions."""
        rule = ExitRule.for_strategy(strategy, group_size, min_positives, min_negatives)
        if strategy == "uniform":
            samples_per_round, max_rounds = group_size, 1
        return cls(group_size, samples_per_round, max_rounds, rule, positive_threshold)


@dataclass
class Pool:
    """Every completion drawn for one prompt during a step, with its reward (NaN: unscorable) and round."""

    positive_threshold: float
    samples: list[Any] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    resolved: bool = False  # the exit rule held when sampling stopped

    def add(self, samples: Sequence[Any], rewards: Sequence[float], round_index: int) -> None:
        if len(samples) != len(rewards):
            raise ValueError(f"Got {len(rewards)} rewards for {len(samples)} completions.")
        self.samples.extend(samples)
        self.rewards.extend(float(r) for r in rewards)
        self.rounds.extend([round_index] * len(samples))

    def __len__(self) -> int:
        return len(self.samples)

    def is_positive(self, index: int) -> bool:
        return self.rewards[index] > self.positive_threshold  # False for NaN

    def is_negative(self, index: int) -> bool:
        return self.rewards[index] <= self.positive_threshold  # False for NaN

    @property
    def num_positive(self) -> int:
        return sum(self.is_positive(i) for i in range(len(self)))

    @property
    def num_negative(self) -> int:
        return sum(self.is_negative(i) for i in range(len(self)))

    @property
    def scored_rewards(self) -> list[float]:
        return [r for r in self.rewards if not math.isnan(r)]

    @property
    def pass_rate(self) -> float:
        """Share of scorable completions that are positive; NaN when nothing could be scored."""
        scored = len(self.scored_rewards)
        return self.num_positive / scored if scored else math.nan

    @property
    def mean(self) -> float:
        scored = self.scored_rewards
        return sum(scored) / len(scored) if scored else math.nan

    @property
    def std(self) -> float:
        """Unbiased standard deviation of the scorable rewards (NaN below two), as TRL's `nanstd`."""
        scored = self.scored_rewards
        if len(scored) < 2:
            return math.nan
        mean = sum(scored) / len(scored)
        return math.sqrt(sum((r - mean) ** 2 for r in scored) / (len(scored) - 1))

    def first_round_has_zero_std(self) -> bool:
        """Whether the first round alone (what fixed-n sampling sees) had all-equal rewards."""
        first = [r for r, k in zip(self.rewards, self.rounds, strict=True) if k == 0 and not math.isnan(r)]
        return len(set(first)) <= 1


@dataclass(frozen=True)
class Request:
    """Draw `num_samples` completions of prompt number `prompt_index`."""

    prompt_index: int
    num_samples: int


GenerateFn = Callable[[list[Request]], list[Any]]
ScoreFn = Callable[[list[Request], list[Any]], Sequence[float]]


@dataclass
class SamplingResult:
    pools: list[Pool]
    rounds: int  # generation calls made this step


def _is_finished(pool: Pool, schedule: Schedule) -> bool:
    if len(pool) >= schedule.budget:
        return True
    # A rule like (1 positive, 0 negatives) can hold before the group is full; keep sampling until it is.
    return len(pool) >= schedule.group_size and schedule.exit_rule.holds(pool.num_positive, pool.num_negative)


def sample_adaptively(
    num_prompts: int,
    schedule: Schedule,
    generate: GenerateFn,
    score: ScoreFn,
    any_active: Callable[[bool], bool] = bool,
) -> SamplingResult:
    """Run the successive-elimination rounds for `num_prompts` prompts.

    `generate(requests)` returns a flat list of completion handles, `request.num_samples` per request, in request
    order; `score(requests, handles)` returns one reward per handle. `any_active(local)` lets several processes
    agree on whether another round is needed: every process must run the same number of rounds because generation
    is a collective call (vLLM server, ZeRO-3), so a process with nothing left still calls `generate([])`.
    """
    pools = [Pool(schedule.positive_threshold) for _ in range(num_prompts)]
    active = list(range(num_prompts))
    rounds = 0
    while rounds < schedule.max_rounds and any_active(bool(active)):
        requests = [Request(i, schedule.samples_per_round) for i in active]
        handles = generate(requests)
        rewards = list(score(requests, handles))
        expected = sum(r.num_samples for r in requests)
        if len(handles) != expected or len(rewards) != expected:
            raise RuntimeError(
                f"Round {rounds}: requested {expected} completions, got {len(handles)} completions and "
                f"{len(rewards)} rewards."
            )
        start = 0
        for request in requests:
            end = start + request.num_samples
            pools[request.prompt_index].add(handles[start:end], rewards[start:end], rounds)
            start = end
        active = [i for i in active if not _is_finished(pools[i], schedule)]
        rounds += 1
    for pool in pools:
        pool.resolved = schedule.exit_rule.holds(pool.num_positive, pool.num_negative)
    return SamplingResult(pools, rounds)


def downsample(pool: Pool, group_size: int, rng: random.Random) -> list[int]:
    """Pick `group_size` pool indices at random: `group_size // 2` positives and the rest negatives, topping up
    from the other kind when one is short. Unscorable completions are used only when nothing else is left."""
    if len(pool) < group_size:
        raise ValueError(f"A pool of {len(pool)} completions cannot fill a group of {group_size}.")
    positives = [i for i in range(len(pool)) if pool.is_positive(i)]
    negatives = [i for i in range(len(pool)) if pool.is_negative(i)]
    unscored = [i for i in range(len(pool)) if math.isnan(pool.rewards[i])]
    num_pos = min(len(positives), group_size // 2)
    num_neg = min(len(negatives), group_size - num_pos)
    num_pos = min(len(positives), group_size - num_neg)
    chosen = (
        rng.sample(positives, num_pos)
        + rng.sample(negatives, num_neg)
        + rng.sample(unscored, group_size - num_pos - num_neg)
    )
    return sorted(chosen)


@dataclass
class Tally:
    """Additive per-step counts, summed across processes before they become metrics."""

    prompts: int = 0
    samples: int = 0
    max_samples: int = 0
    resolved: int = 0
    zero_std_first_round: int = 0
    pass_rate_sum: float = 0.0
    pass_rate_count: int = 0  # prompts with at least one scorable completion
    weight_sum: float = 0.0

    @classmethod
    def of(cls, pools: Sequence[Pool], weights: Sequence[float] | None = None) -> Tally:
        pass_rates = [p.pass_rate for p in pools if not math.isnan(p.pass_rate)]
        return cls(
            prompts=len(pools),
            samples=sum(len(p) for p in pools),
            max_samples=max((len(p) for p in pools), default=0),
            resolved=sum(p.resolved for p in pools),
            zero_std_first_round=sum(p.first_round_has_zero_std() for p in pools),
            pass_rate_sum=sum(pass_rates),
            pass_rate_count=len(pass_rates),
            weight_sum=float(sum(weights)) if weights is not None else float(len(pools)),
        )

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            prompts=self.prompts + other.prompts,
            samples=self.samples + other.samples,
            max_samples=max(self.max_samples, other.max_samples),
            resolved=self.resolved + other.resolved,
            zero_std_first_round=self.zero_std_first_round + other.zero_std_first_round,
            pass_rate_sum=self.pass_rate_sum + other.pass_rate_sum,
            pass_rate_count=self.pass_rate_count + other.pass_rate_count,
            weight_sum=self.weight_sum + other.weight_sum,
        )

    def metrics(self, rounds: int) -> dict[str, float]:
        prompts = max(self.prompts, 1)
        return {
            "ada/rounds": float(rounds),
            "ada/samples_per_prompt": self.samples / prompts,
            "ada/samples_per_prompt_max": float(self.max_samples),
            "ada/frac_resolved": self.resolved / prompts,
            "ada/frac_zero_std_first_round": self.zero_std_first_round / prompts,
            "ada/pool_pass_rate": self.pass_rate_sum / self.pass_rate_count if self.pass_rate_count else math.nan,
            "ada/difficulty_weight_mean": self.weight_sum / prompts,
        }
