"""Budget simulator: what each sampling strategy costs and how much signal it finds, before any GPU is rented.

Prompts get pass rates drawn from a distribution and 0/1 rewards drawn from their pass rates; every strategy runs
through the trainer's own engine (`sample_adaptively`, `downsample`, `Tally`), with no model. Strategies:

- GRPO with `n` samples per prompt: `Schedule.from_strategy("uniform", n)`.
- DAPO-style dynamic sampling: GRPO batches of fresh prompts, groups with all-equal rewards dropped, until the batch
  is full or the cap on generation batches is hit (then the batch is topped up with dropped groups).
- Reinforce-Ada, positive or balanced, with fixed or posterior-sized rounds.
- The sequential limit of an Ada rule: one sample at a time, stopping the instant the rule holds (same budget). A
  schedule with the same rule and budget can only match its samples by drawing in more generation calls, so it is the
  floor the others are measured against.
- Reinforce-Ada-Est: one round per step, the step's budget split across its prompts by `allocation.allocate` from a
  `PassRateMemory` carried across steps (and epochs), as the trainer does with `sampling_strategy="estimate"`.
- Refill and prompt selection (`refill=True`, `prompt_selection="pass_rate"` in the trainer) on any engine schedule:
  the engine's per-slot refill and the trainer's own side stream (`trl_ada.prompt_stream.SidePrompts`) over the same
  prompt set, with a `PassRateMemory` carried across steps. "DAPO n=4, per slot" is GRPO sampling with refill, what
  the trainer runs as DAPO; "DAPO n=4" above is verl's batch-level loop, for comparison. Pass rates stay fixed here,
  so a skipped prompt never changes: the simulator shows the most selection can save, not what a learning policy
  that drifts away from its memory gets.

The prompt set is fixed and visited `epochs` times (the memory needs repeated visits to learn; the first epoch starts
from the prior), in a fresh order each epoch after the first. Each prompt's rewards are one fixed stream per epoch
shared by every engine strategy (common random numbers), so an Ada schedule and its sequential limit resolve exactly
the same prompts and their sample counts compare directly.

    trl-ada simulate --pass-rates beta:0.5,4 --prompts 4096 --plot signal.png
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..core.allocation import ALLOCATION_RULES, allocate
from ..core.engine import (
    ExitRule,
    Pool,
    Request,
    RoundsBackend,
    Schedule,
    Tally,
    downsample,
    sample,
    sample_adaptively,
)
from ..core.memory import PassRateMemory
from ..core.prompt_stream import PromptStream, SidePrompts
from .cli import EXIT_USAGE, show_defaults

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
        name = (
            name
            or f"Ada Est {estimate.rule}, mean {estimate.mean} in [{estimate.min_samples}, {estimate.max_samples}]"
        )
        return cls(name, estimate.schedule(group_size), estimate=estimate)

    @property
    def has_exit_rule(self) -> bool:
        return self.refill_batches == 0 and self.schedule.exit_rule != ExitRule(0, 0)

    @property
    def uses_side_stream(self) -> bool:
        return self.refill or self.selection is not None


def sequential_limit(schedule: Schedule) -> Schedule:
    """The same exit rule and budget, one sample per round: no overshoot."""
    return replace(schedule, samples_per_round=1, max_rounds=schedule.budget, round_sizing="fixed")


def default_strategies(
    group_size: int = 4,
    samples_per_round: int = 8,
    max_rounds: int = 4,
    grpo_sizes: Sequence[int] = (4, 8, 16),
    refill_batches: int = 10,
    round_sizings: Sequence[str] = ("fixed", "posterior"),
    rules: Sequence[str] = ("positive", "balanced"),
    min_positives: int | None = None,
    min_negatives: int | None = None,
    estimate_means: Sequence[int] = (),
    allocation_rule: str = "inv_sqrt_p",
) -> list[Strategy]:
    """GRPO at each size, DAPO at `group_size`, then per Ada rule: each round sizing and the sequential limit; then
    Est for each mean in `estimate_means`, within `[group_size, samples_per_round * max_rounds]` (the trainer's
    defaults)."""
    strategies = [Strategy(f"GRPO n={n}", Schedule.from_strategy("uniform", n)) for n in grpo_sizes]
    if refill_batches > 0:
        dapo = Schedule.from_strategy("uniform", group_size)
        strategies.append(Strategy(f"DAPO n={group_size}", dapo, refill_batches=refill_batches))
    for rule in rules:
        for sizing in round_sizings:
            schedule = Schedule.from_strategy(
                rule, group_size, samples_per_round, max_rounds, 0.5, min_positives, min_negatives, sizing
            )
            rounds = f"{samples_per_round}x{max_rounds}" if sizing == "fixed" else f"posterior, {max_rounds} rounds"
            strategies.append(Strategy(f"Ada {rule} {rounds}", schedule))
        schedule = Schedule.from_strategy(
            rule, group_size, samples_per_round, max_rounds, 0.5, min_positives, min_negatives
        )
        strategies.append(Strategy(f"sequential limit ({rule})", sequential_limit(schedule), is_sequential_limit=True))
    for mean in estimate_means:
        estimate = Estimate(mean, group_size, samples_per_round * max_rounds, allocation_rule)
        strategies.append(Strategy.est(group_size, estimate))
    return strategies


# ---------------------------------------------------------------------------------------------------- simulation
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


class _Rewards:
    """0/1 rewards: sample `t` of prompt `i` is positive iff `uniforms[i, t] < pass_rates[i]`. `prompt_ids` names
    each row's prompt (rows are permuted between epochs; the memory keys on the id)."""

    def __init__(self, pass_rates: np.ndarray, uniforms: np.ndarray, prompt_ids: np.ndarray | None = None):
        self.pass_rates, self.uniforms = pass_rates, uniforms
        self.prompt_ids = np.arange(len(pass_rates)) if prompt_ids is None else prompt_ids
        self.served = np.zeros(len(pass_rates), dtype=np.int64)

    def generate(self, offset: int) -> Callable[[list[Request]], list[float]]:
        """`generate` for prompts `offset, offset + 1, ...`; the handles are the rewards themselves."""

        def generate(requests: list[Request]) -> list[float]:
            rewards: list[float] = []
            for request in requests:
                i = offset + request.prompt_index
                start = self.served[i]
                self.served[i] += request.num_samples
                rewards.extend((self.uniforms[i, start : self.served[i]] < self.pass_rates[i]).astype(float).tolist())
            return rewards

        return generate


def _identity_score(requests: list[Request], handles: list[float]) -> list[float]:
    return handles


def _final_group(pool: Pool, group_size: int, rng: random.Random) -> list[float]:
    return [pool.rewards[i] for i in downsample(pool, group_size, rng)]


def _run_engine(strategy: Strategy, epochs: list[_Rewards], batch_size: int, seed: int) -> Outcome:
    """Every epoch: the prompts in that epoch's order (`_Rewards` already permuted), `batch_size` per step."""
    schedule, rng = strategy.schedule, random.Random(seed)
    estimate = strategy.estimate
    memory = estimate.memory() if estimate is not None else None
    tally, rounds, samples, groups = Tally(), [], [], []
    for rewards in epochs:
        for offset in range(0, len(rewards.pass_rates), batch_size):
            num = min(batch_size, len(rewards.pass_rates) - offset)
            sizes, keys = None, None
            if estimate is not None:
                keys = [str(i) for i in rewards.prompt_ids[offset : offset + num]]
                p_hat = memory.p_hat_many(keys)
                sizes = allocate(p_hat, estimate.mean * num, estimate.min_samples, estimate.max_samples, estimate.rule)
            result = sample_adaptively(
                num, schedule, rewards.generate(offset), _identity_score, first_round_sizes=sizes
            )
            if memory is not None:
                memory.update_many((k, p.num_positive, len(p)) for k, p in zip(keys, result.pools, strict=True))
            tally += Tally.of(result.pools)
            rounds.append(result.rounds)
            samples.extend(len(pool) for pool in result.pools)
            groups.extend(_final_group(pool, schedule.group_size, rng) for pool in result.pools)
    return _outcome(strategy, tally.samples / tally.prompts, np.percentile(samples, 95), rounds, groups, tally)


def _run_refill(strategy: Strategy, pass_rates: PassRates, steps: int, batch_size: int, seed: int) -> Outcome:
    """DAPO: draw whole GRPO batches of fresh prompts, keep groups with signal, until `batch_size` are kept."""
    schedule, rng = strategy.schedule, random.Random(seed)
    np_rng = np.random.default_rng([seed, 1])
    rounds, per_step_samples, groups = [], [], []
    for _ in range(steps):
        kept, dropped, drawn, batches = [], [], 0, 0
        while len(kept) < batch_size and batches < strategy.refill_batches:
            rates = pass_rates.draw(np_rng, batch_size)
            rewards = _Rewards(rates, np_rng.random((batch_size, schedule.budget)))
            result = sample_adaptively(batch_size, schedule, rewards.generate(0), _identity_score)
            batches += 1
            drawn += sum(len(pool) for pool in result.pools)
            for pool in result.pools:
                group = _final_group(pool, schedule.group_size, rng)
                (kept if len(set(group)) > 1 else dropped).append(group)
        step_groups = (kept + dropped)[:batch_size]  # the cap was hit: top up with groups that carry no signal
        groups.extend(step_groups)
        rounds.append(batches)
        per_step_samples.append(drawn / batch_size)
    mean = float(np.mean(per_step_samples))
    return _outcome(strategy, mean, np.percentile(per_step_samples, 95), rounds, groups, None)


def _run_side_stream(
    strategy: Strategy, rates: np.ndarray, orders: list[np.ndarray], batch_size: int, seed: int
) -> Outcome:
    """The trainer's refill and prompt selection: each step's prompts in that epoch's order, skipped prompts and
    pools with no signal replaced from a `SidePrompts` stream over the same prompts, the memory updated with every
    pool (replaced ones included). Samples per prompt count every completion drawn per trained prompt."""
    schedule, rng = strategy.schedule, random.Random(seed)
    np_rng = np.random.default_rng([seed, 3])
    memory = PassRateMemory()
    threshold, floor = strategy.selection if strategy.selection is not None else (None, 1.0)
    side = SidePrompts(
        [{"id": i} for i in range(len(rates))],
        PromptStream(len(rates), seed),
        memory,
        key=lambda row: str(row["id"]),
        group_size=schedule.round_size(Pool(schedule.positive_threshold), 0),
        threshold=threshold,
        floor=floor,
    )
    tally, rounds, samples, groups, drawn, trained = Tally(), [], [], [], 0, 0
    for order in orders:
        for offset in range(0, len(order), batch_size):
            ids = [int(i) for i in order[offset : offset + batch_size]]
            for slot, prompt in enumerate(list(ids)):
                if not side.keep(str(prompt), rng):
                    ids[slot] = side.draw(rng)["id"]
            left = batch_size if strategy.max_refills is None else strategy.max_refills

            def refill(index: int, ids: list[int] = ids) -> int | None:
                nonlocal left
                if not strategy.refill or left == 0:
                    return None
                left -= 1
                ids.append(side.draw(rng)["id"])
                return len(ids) - 1

            def generate(requests: list[Request], ids: list[int] = ids) -> list[float]:
                return [float(u < rates[ids[r.prompt_index]]) for r in requests for u in np_rng.random(r.num_samples)]

            num = len(ids)
            result = sample(num, schedule, RoundsBackend(generate), _identity_score, refill=refill)
            memory.update_many((str(ids[i]), p.num_positive, len(p)) for i, p in enumerate(result.pools))
            kept = result.kept_pools
            tally += Tally.of(kept)
            rounds.append(result.rounds)
            step_samples = sum(len(pool) for pool in result.pools)
            drawn, trained = drawn + step_samples, trained + num
            samples.append(step_samples / num)
            groups.extend(_final_group(pool, schedule.group_size, rng) for pool in kept)
    return _outcome(strategy, drawn / trained, np.percentile(samples, 95), rounds, groups, tally)


def _outcome(
    strategy: Strategy,
    samples_per_prompt: float,
    p95: float,
    rounds: list[int],
    groups: list[list[float]],
    tally: Tally | None,
) -> Outcome:
    signal = sum(len(set(g)) > 1 for g in groups) / len(groups)
    resolved = tally.resolved / tally.prompts if tally is not None and strategy.has_exit_rule else math.nan
    return Outcome(
        strategy=strategy.name,
        samples_per_prompt=float(samples_per_prompt),
        samples_p95=float(p95),
        rounds=float(np.mean(rounds)),
        max_rounds=int(max(rounds)),
        signal=signal,
        zero_std=sum(len(set(g)) <= 1 for g in groups) / len(groups),
        resolved=resolved,
    )


def simulate(
    pass_rates: PassRates,
    strategies: Sequence[Strategy],
    num_prompts: int = 4096,
    batch_size: int = 256,
    seed: int = 0,
    epochs: int = 1,
) -> list[Outcome]:
    """Run every strategy on `num_prompts` prompts, `epochs` passes over them, `batch_size` prompts per step.

    Engine strategies all see the same prompts, in the same order, and the same reward stream per prompt and epoch.
    DAPO draws fresh prompts from `pass_rates` for each generation batch (as many steps). An Ada strategy's
    `sequential_ratio` is filled in when the list holds the sequential limit of its schedule. Outcomes average over
    every epoch, the first (memory still at its prior) included.
    """
    if num_prompts < 1 or batch_size < 1 or epochs < 1:
        raise ValueError(
            f"num_prompts, batch_size and epochs must be >= 1, got {num_prompts}, {batch_size} and {epochs}."
        )
    if not strategies:
        raise ValueError("No strategies to simulate.")
    np_rng = np.random.default_rng([seed, 0])
    rates = pass_rates.draw(np_rng, num_prompts)
    width = max(s.schedule.budget for s in strategies)
    uniforms = np_rng.random((num_prompts, width * epochs))
    orders = [np.arange(num_prompts)] + [
        np.random.default_rng([seed, 2, e]).permutation(num_prompts) for e in range(1, epochs)
    ]
    steps = math.ceil(num_prompts / batch_size) * epochs
    outcomes = []
    for strategy in strategies:
        if strategy.refill_batches:
            outcomes.append(_run_refill(strategy, pass_rates, steps, batch_size, seed))
        elif strategy.uses_side_stream:
            outcomes.append(_run_side_stream(strategy, rates, orders, batch_size, seed))
        else:
            rewards = [
                _Rewards(rates[order], uniforms[order, e * width : (e + 1) * width], order)
                for e, order in enumerate(orders)
            ]
            outcomes.append(_run_engine(strategy, rewards, batch_size, seed))
    floors = {
        _rule_key(s.schedule): o.samples_per_prompt
        for s, o in zip(strategies, outcomes, strict=True)
        if s.is_sequential_limit
    }
    return [
        replace(o, sequential_ratio=o.samples_per_prompt / floors[_rule_key(s.schedule)])
        if s.has_exit_rule and _rule_key(s.schedule) in floors
        else o
        for s, o in zip(strategies, outcomes, strict=True)
    ]


def _rule_key(schedule: Schedule) -> tuple:
    return schedule.exit_rule, schedule.group_size, schedule.budget, schedule.positive_threshold


# ---------------------------------------------------------------------------------------------------- output
COLUMNS = ("strategy", "samples/prompt", "p95", "rounds/step", "signal", "zero-std", "resolved", "x seq. limit")


def format_table(outcomes: Sequence[Outcome]) -> str:
    """A Markdown table, readable on a terminal."""

    def number(x: float, digits: int = 2) -> str:
        return "-" if math.isnan(x) else f"{x:.{digits}f}"

    rows = [
        (
            o.strategy,
            number(o.samples_per_prompt),
            number(o.samples_p95, 0),
            f"{number(o.rounds)} (max {o.max_rounds})",
            number(o.signal, 3),
            number(o.zero_std, 3),
            number(o.resolved, 3),
            number(o.sequential_ratio, 3),
        )
        for o in outcomes
    ]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    lines = [COLUMNS, tuple("-" * w for w in widths), *rows]
    return "\n".join(
        "| "
        + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
        + " |"
        for line in lines
    )


_MARKERS = {"GRPO": "o", "DAPO": "s", "Ada positive": "^", "Ada balanced": "v", "Ada Est": "D", "sequential": "*"}


def draw(ax, outcomes: Sequence[Outcome], title: str = "") -> None:
    """Signal fraction against samples per prompt on a matplotlib axis: one point per strategy, marker per family."""
    for o in outcomes:
        marker = next((m for prefix, m in _MARKERS.items() if o.strategy.startswith(prefix)), "x")
        ax.scatter(o.samples_per_prompt, o.signal, marker=marker, s=40, label=o.strategy)
    ax.set(xlabel="samples per prompt", ylabel="final groups with signal", title=title)
    ax.grid(alpha=0.3)


def plot(outcomes: Sequence[Outcome], path: str | Path, title: str = "") -> None:
    """Save `draw`'s figure as a PNG, with the legend beside it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(
            "Plotting needs matplotlib: pip install -e '.[plot]' in the trl-ada clone (or pip install matplotlib)."
        ) from None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    draw(ax, outcomes, title)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trl-ada simulate",
        description="Samples, generation rounds and signal per sampling strategy, on simulated 0/1 rewards.",
    )
    parser.add_argument(
        "--pass-rates",
        default="uniform",
        help="uniform, beta:A,B, or a file of per-prompt pass rates (one number per line, CSV with a pass_rate "
        "column, or JSONL with a pass_rate key, as `trl-ada prepare` writes); default: uniform",
    )
    parser.add_argument(
        "--all-prompts",
        action="store_true",
        help="with a pass-rate file from `trl-ada prepare`: also use the prompts it did not keep (kept = false)",
    )
    parser.add_argument("--prompts", type=int, default=4096, help="distinct prompts (default: 4096)")
    parser.add_argument(
        "--epochs", type=int, default=4, help="passes over the prompts; Est's memory learns across them (default: 4)"
    )
    parser.add_argument("--batch-size", type=int, default=256, help="prompts per training step (default: 256)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--group-size", type=int, default=4, help="num_generations: the final group (default: 4)")
    parser.add_argument("--samples-per-round", type=int, default=8)
    parser.add_argument("--max-rounds", type=int, default=4)
    parser.add_argument("--min-positives", type=int, default=None, help="override the rules' positive count")
    parser.add_argument("--min-negatives", type=int, default=None, help="override the rules' negative count")
    parser.add_argument("--grpo", type=int, nargs="*", default=[4, 8, 16], help="GRPO group sizes (default: 4 8 16)")
    parser.add_argument(
        "--dapo-batches",
        type=int,
        default=10,
        help="DAPO: cap on generation batches per step; 0 leaves DAPO out (default: 10)",
    )
    parser.add_argument(
        "--rules", nargs="*", default=["positive", "balanced"], choices=["positive", "balanced"], help="Ada rules"
    )
    parser.add_argument(
        "--round-sizing", nargs="*", default=["fixed", "posterior"], choices=["fixed", "posterior"], dest="sizings"
    )
    parser.add_argument(
        "--estimate",
        type=int,
        nargs="*",
        default=[8, 16],
        metavar="MEAN",
        help="Reinforce-Ada-Est rows: mean samples per prompt, each within [group size, samples-per-round x "
        "max-rounds] (default: 8 16)",
    )
    parser.add_argument(
        "--allocation-rule", default="inv_sqrt_p", choices=list(ALLOCATION_RULES), help="Est's allocation rule"
    )
    parser.add_argument("--plot", metavar="PNG", help="also save signal fraction vs samples per prompt")
    return show_defaults(parser)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        pass_rates = parse_pass_rates(args.pass_rates, kept_only=not args.all_prompts)
        strategies = default_strategies(
            args.group_size,
            args.samples_per_round,
            args.max_rounds,
            args.grpo,
            args.dapo_batches,
            args.sizings,
            args.rules,
            args.min_positives,
            args.min_negatives,
            args.estimate,
            args.allocation_rule,
        )
        outcomes = simulate(pass_rates, strategies, args.prompts, args.batch_size, args.seed, args.epochs)
    except (ValueError, FileNotFoundError) as error:  # every one names a flag's value: usage errors
        print(f"trl-ada simulate: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"{pass_rates.name}: {args.prompts} prompts x {args.epochs} epochs, {args.batch_size} per step, "
        f"seed {args.seed}; "
        f"Ada: group {args.group_size}, budget {args.samples_per_round} x {args.max_rounds}"
    )
    print(format_table(outcomes))
    if args.plot:
        plot(outcomes, args.plot, title=pass_rates.name)
        print(f"plot saved to {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
