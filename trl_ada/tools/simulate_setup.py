"""What a budget simulation is given and what it returns: the prompts' pass rates (a Beta, a file or a list), the
strategies to compare (GRPO, DAPO, Reinforce-Ada's rules, their sequential limits, Est) and each one's `Outcome`."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..core.allocation import ALLOCATION_RULES
from ..core.engine import ADAPTIVE_STRATEGIES, ExitRule, Schedule, is_adaptive
from ..core.memory import PassRateMemory
from ..core.step import StepSettings

Draw = Callable[[np.random.Generator, int], np.ndarray]


# ---------------------------------------------------------------------------------------------------- pass rates
@dataclass(frozen=True)
class PassRates:
    """A distribution of per-prompt pass rates: `draw(rng, n)` returns `n` values in [0, 1]."""

    name: str
    draw: Draw

    @classmethod
    def beta(cls, a: float, b: float) -> PassRates:
        if not (a > 0 and b > 0):
            raise ValueError(f"Beta parameters must be > 0, got beta:{a},{b}.")
        return cls(f"Beta({a:g},{b:g})", lambda rng, n: rng.beta(a, b, n))

    @classmethod
    def empirical(cls, values: Sequence[float], name: str = "file") -> PassRates:
        """Resample the given per-prompt pass rates with replacement."""
        values = np.asarray(values, dtype=float)
        if values.size == 0:
            raise ValueError(f"No pass rates in {name}.")
        bad = values[~((values >= 0) & (values <= 1))]
        if bad.size:
            raise ValueError(f"Pass rates must lie in [0, 1]; {name} holds {bad[0]!r}.")
        return cls(name, lambda rng, n: rng.choice(values, n, replace=True))


def parse_pass_rates(spec: str, kept_only: bool = True) -> PassRates:
    """`uniform`, `beta:A,B`, or a file of per-prompt pass rates (see `read_pass_rates`)."""
    if spec == "uniform":
        return PassRates("uniform(0,1)", lambda rng, n: rng.random(n))
    if spec.startswith("beta:"):
        try:
            a, b = (float(x) for x in spec[len("beta:") :].split(","))
        except ValueError:
            raise ValueError(
                f"Cannot read {spec!r}: write the Beta distribution as beta:A,B, e.g. beta:0.5,4."
            ) from None
        return PassRates.beta(a, b)
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"{spec!r} is neither `uniform`, `beta:A,B` nor an existing file of pass rates.")
    return PassRates.empirical(read_pass_rates(path, kept_only), name=path.name)


def read_pass_rates(path: str | Path, kept_only: bool = True) -> list[float]:
    """Pass rates from JSONL (a `pass_rate` key per line), CSV (a `pass_rate` column) or plain text (one number per
    line). Blank lines are skipped; so are rows whose pass rate is empty or null (prompts never scored) and, with
    `kept_only`, rows whose `kept` field is false (prompts `trl-ada prepare` left out of the training set)."""
    path = Path(path)
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        return []
    first = lines[0].strip()
    if first.startswith("{"):
        rows = []
        for number, line in enumerate(lines, 1):
            rows.append(json.loads(line))
            if "pass_rate" not in rows[-1]:
                raise ValueError(f"{path}:{number} has no `pass_rate` key (keys: {sorted(rows[-1])}).")
    elif "pass_rate" in first:
        rows = list(csv.DictReader(lines))
    else:
        rows = [{"pass_rate": line} for line in lines]
    if kept_only:
        rows = [row for row in rows if str(row.get("kept", True)).strip().lower() not in ("false", "0")]
    try:
        return [float(row["pass_rate"]) for row in rows if row["pass_rate"] not in (None, "")]
    except ValueError as error:
        raise ValueError(
            f"{path}: {error}; expected numbers (plain text), a CSV `pass_rate` column or JSONL."
        ) from None


# ---------------------------------------------------------------------------------------------------- strategies
@dataclass(frozen=True)
class Estimate:
    """Reinforce-Ada-Est's knobs (see `ReinforceAdaConfig`): per-prompt samples within `[min_samples, max_samples]`
    averaging `mean`, split by `rule` from a pass-rate memory with a Beta(alpha, beta) prior and `decay`."""

    mean: int
    min_samples: int
    max_samples: int
    rule: str = "inv_sqrt_p"
    alpha: float = 1.0
    beta: float = 16.0
    decay: float = 0.9

    def __post_init__(self) -> None:
        if self.rule not in ALLOCATION_RULES:
            raise ValueError(f"Unknown allocation rule {self.rule!r}; expected one of {ALLOCATION_RULES}.")
        if not 1 <= self.min_samples <= self.mean <= self.max_samples:
            raise ValueError(
                f"Need 1 <= min_samples <= mean <= max_samples, got {self.min_samples}, {self.mean}, "
                f"{self.max_samples}."
            )

    def schedule(self, group_size: int) -> Schedule:
        """The one-round schedule whose per-prompt sizes the allocation fills in."""
        return Schedule.from_strategy("estimate", group_size, samples_per_round=self.max_samples)

    def memory(self) -> PassRateMemory:
        return PassRateMemory(self.alpha, self.beta, self.decay)


@dataclass(frozen=True)
class Strategy:
    """A named way to sample one step. `refill_batches > 0` makes it DAPO-style dynamic sampling over its (uniform)
    schedule, with at most that many generation batches per step. `estimate` makes it Reinforce-Ada-Est (its
    schedule must then be `estimate.schedule(group_size)`)."""

    name: str
    schedule: Schedule
    refill_batches: int = 0
    is_sequential_limit: bool = False
    estimate: Estimate | None = None
    refill: bool = False  # per-slot refill through the engine, as the trainer's `refill=True`
    max_refills: int | None = None  # per step; None: the batch size
    selection: tuple[float, float] | None = None  # (selection_threshold, selection_floor) of prompt_selection

    @classmethod
    def est(cls, group_size: int, estimate: Estimate, name: str | None = None) -> Strategy:
        if estimate.min_samples < group_size:
            raise ValueError(
                f"Est's min_samples={estimate.min_samples} is below the group size {group_size}: a pool would be too "
                "small to downsample."
            )
        rule = "" if estimate.rule == "inv_sqrt_p" else "-" + estimate.rule.replace("_", "")  # the catalog's names
        name = name or f"est-{estimate.mean}{rule} in [{estimate.min_samples}, {estimate.max_samples}]"
        return cls(name, estimate.schedule(group_size), estimate=estimate)

    @property
    def has_exit_rule(self) -> bool:
        return self.refill_batches == 0 and self.schedule.exit_rule != ExitRule(0, 0)

    @property
    def uses_side_stream(self) -> bool:
        return self.refill or self.selection is not None

    @property
    def step_settings(self) -> StepSettings:
        """What the core's step reads (`trl_ada.core.step`): the trainer's defaults for this schedule, one 0/1
        reward, balanced downsampling."""
        schedule = self.schedule
        return StepSettings(
            schedule.group_size,
            schedule.budget,
            positive_threshold=schedule.positive_threshold,
            refill=self.refill or self.refill_batches > 0,
            selection=self.selection is not None,
        )


def sequential_limit(schedule: Schedule) -> Schedule:
    """The same exit rule and budget, one sample per round: no overshoot."""
    return replace(schedule, samples_per_round=1, max_rounds=schedule.budget, round_sizing="fixed")


DEFAULT_RULES = ("positive", "balanced")  # the paper's two rules; any adaptive rule of `EXIT_RULES` may be asked for


def default_strategies(
    group_size: int = 4,
    samples_per_round: int = 8,
    max_rounds: int = 4,
    grpo_sizes: Sequence[int] = (4, 8, 16),
    refill_batches: int = 10,
    round_sizings: Sequence[str] = ("fixed", "posterior"),
    rules: Sequence[str] = DEFAULT_RULES,
    min_positives: int | None = None,
    min_negatives: int | None = None,
    estimate_means: Sequence[int] = (),
    allocation_rule: str = "inv_sqrt_p",
) -> list[Strategy]:
    """GRPO at each size, DAPO at `group_size`, then per Ada rule: each round sizing and the sequential limit; then
    Est for each mean in `estimate_means`, within `[group_size, samples_per_round * max_rounds]` (the trainer's
    defaults)."""
    strategies = [Strategy(f"grpo-{n}", Schedule.from_strategy("uniform", n)) for n in grpo_sizes]
    if refill_batches > 0:
        dapo = Schedule.from_strategy("uniform", group_size)
        strategies.append(Strategy(f"dapo-{group_size}", dapo, refill_batches=refill_batches))
    for rule in rules:
        if not is_adaptive(rule):  # the registry's adaptive rules (uniform is GRPO, above)
            raise ValueError(f"Unknown Ada rule {rule!r}; expected one of {tuple(ADAPTIVE_STRATEGIES)}.")
        for sizing in round_sizings:
            schedule = Schedule.from_strategy(
                rule, group_size, samples_per_round, max_rounds, 0.5, min_positives, min_negatives, sizing
            )
            posterior = "" if sizing == "fixed" else "-posterior"  # each row named as docs/names.md names it
            strategies.append(Strategy(f"seq-{rule}-{samples_per_round}x{max_rounds}{posterior}", schedule))
        schedule = Schedule.from_strategy(
            rule, group_size, samples_per_round, max_rounds, 0.5, min_positives, min_negatives
        )
        strategies.append(Strategy(f"sequential limit ({rule})", sequential_limit(schedule), is_sequential_limit=True))
    budget = samples_per_round * max_rounds
    for mean in estimate_means:
        if not group_size <= mean <= budget:  # Estimate's own message would not say which bound came from where
            raise ValueError(
                f"Est mean {mean} is outside [group_size, samples_per_round * max_rounds] = [{group_size}, {budget}]."
            )
        estimate = Estimate(mean, group_size, budget, allocation_rule)
        strategies.append(Strategy.est(group_size, estimate))
    return strategies


@dataclass(frozen=True)
class Outcome:
    """What one strategy did, over every simulated step."""

    strategy: str
    samples_per_prompt: float  # completions drawn per trained prompt
    samples_p95: float  # 95th percentile of completions per prompt (DAPO: of a step's completions per trained prompt)
    rounds: float  # generation calls per step, mean over steps
    max_rounds: int  # generation calls in the busiest step
    signal: float  # share of trained prompts whose final group holds both a positive and a negative
    zero_std: float  # share of final groups whose rewards are all equal (what TRL logs as frac_reward_zero_std)
    resolved: float  # share of prompts whose exit rule held; NaN for strategies without one
    sequential_ratio: float = math.nan  # samples_per_prompt / that of the sequential limit of the same rule
