"""A prompt's pool (every completion drawn for it in a step, with its reward and round), what one step's sampling
returns (`SamplingResult`), whether a pool carries signal, and the additive counts of a step (`Tally`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Pool:
    """Every completion drawn for one prompt during a step, with its reward (NaN: unscorable) and round."""

    positive_threshold: float
    samples: list[Any] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    resolved: bool = False  # the exit rule held when sampling stopped
    _counted: int = field(default=0, init=False, repr=False, compare=False)
    _positives: int = field(default=0, init=False, repr=False, compare=False)
    _negatives: int = field(default=0, init=False, repr=False, compare=False)

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
        return self._counts()[0]

    @property
    def num_negative(self) -> int:
        return self._counts()[1]

    def _counts(self) -> tuple[int, int]:
        # Counted incrementally (pools only grow), so the exit check stays O(round size) per prompt and round.
        for i in range(self._counted, len(self)):
            self._positives += self.is_positive(i)
            self._negatives += self.is_negative(i)
        self._counted = len(self)
        return self._positives, self._negatives

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


def has_signal(pool: Pool) -> bool:
    """Whether any two scored rewards of the pool differ. Without that, every advantage of the prompt is zero."""
    return len(set(pool.scored_rewards)) > 1


@dataclass
class SamplingResult:
    pools: list[Pool]
    rounds: int  # rounds: generation calls made this step; streaming: the most submission waves of any prompt
    in_flight_max: int = 0  # the most draws in flight at once on this process
    generated_tokens: int = 0  # every token the backend reported generating, aborted and dropped draws included
    aborted_tokens: int = 0  # tokens of draws aborted in flight or dropped after their prompt stopped
    aborted: int = 0  # draws aborted in flight
    dropped: int = 0  # draws that finished after their prompt had stopped (beyond its pool): generated, not used
    slots: list[int] = field(default_factory=list)  # per prompt of the batch: the pool it ends with (refill)
    refills: int = 0  # pools replaced by a fresh prompt because they ended with no signal
    pilot_stopped: int = 0  # prompts (refills included) that stopped after their pilot

    @property
    def kept_pools(self) -> list[Pool]:
        """The pool each prompt slot of the batch ends with: what is downsampled and trained on."""
        return [self.pools[i] for i in self.slots]

    @property
    def replaced_pools(self) -> list[Pool]:
        """Pools sampled this step and then replaced by refill (their completions are generated, not trained on)."""
        kept = set(self.slots)
        return [pool for i, pool in enumerate(self.pools) if i not in kept]


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
