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
  the engine's per-slot refill and the trainer's own side stream (`trl_ada.core.prompt_stream.SidePrompts`) over the
  same prompt set, with a `PassRateMemory` carried across steps. "DAPO n=4, per slot" is GRPO sampling with refill,
  what the trainer runs as DAPO; "DAPO n=4" above is verl's batch-level loop, for comparison. Pass rates stay fixed
  here, so a skipped prompt never changes: the simulator shows the most selection can save, not what a learning policy
  that drifts away from its memory gets.

The prompt set is fixed and visited `epochs` times (the memory needs repeated visits to learn; the first epoch starts
from the prior), in a fresh order each epoch after the first. Each prompt's rewards are one fixed stream per epoch
shared by every engine strategy (common random numbers), so an Ada schedule and its sequential limit resolve exactly
the same prompts and their sample counts compare directly.

    trl-ada simulate --pass-rates beta:0.5,4 --prompts 4096 --plot signal.png
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import torch

from ..core.allocation import ALLOCATION_RULES, allocate
from ..core.engine import (
    ADAPTIVE_STRATEGIES,
    Pool,
    Request,
    RoundsBackend,
    SamplingResult,
    Schedule,
    Tally,
    sample,
    sample_adaptively,
)
from ..core.memory import PassRateMemory
from ..core.prompt_stream import PromptStream, SidePrompts
from ..core.step import ComposedStep, compose_step
from .cli import EXIT_USAGE, show_defaults
from .simulate_report import format_step_times, format_table, plot
from .simulate_setup import DEFAULT_RULES, Outcome, PassRates, Strategy, default_strategies, parse_pass_rates
from .step_time_model import RECORD_SETS, StepWork, fit, parse_parameters, project

# ---------------------------------------------------------------------------------------------------- simulation


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


_ONE_REWARD = torch.ones(1, dtype=torch.float64)


def _reward_column(handles: list[float]) -> torch.Tensor:
    """The simulator's handles are the 0/1 rewards themselves: one reward function's column."""
    return torch.tensor(handles, dtype=torch.float64).view(len(handles), 1)


def simulated_step(
    strategy: Strategy, result: SamplingResult, keys: Sequence[str], memory: PassRateMemory | None, rng: random.Random
) -> ComposedStep:
    """The core's step (`trl_ada.core.step.compose_step`, as the trainer runs it) on a simulated step's pools: the
    memory records them, each kept pool is downsampled to the group, with its advantages and the step's counts."""
    return compose_step(strategy.step_settings, result, keys, memory, _reward_column, _ONE_REWARD, rng)


def _step_groups(
    strategy: Strategy, result: SamplingResult, keys: Sequence[str], memory: PassRateMemory | None, rng: random.Random
) -> list[list[float]]:
    """`simulated_step`'s kept groups: each one's rewards."""
    kept, size = simulated_step(strategy, result, keys, memory, rng).kept, strategy.schedule.group_size
    return [kept[start : start + size] for start in range(0, len(kept), size)]


def _run_engine(strategy: Strategy, epochs: list[_Rewards], batch_size: int, seed: int) -> Outcome:
    """Every epoch: the prompts in that epoch's order (`_Rewards` already permuted), `batch_size` per step."""
    schedule, rng = strategy.schedule, random.Random(seed)
    estimate = strategy.estimate
    memory = estimate.memory() if estimate is not None else None
    tally, rounds, samples, groups = Tally(), [], [], []
    for rewards in epochs:
        for offset in range(0, len(rewards.pass_rates), batch_size):
            num = min(batch_size, len(rewards.pass_rates) - offset)
            sizes, keys = None, [str(i) for i in rewards.prompt_ids[offset : offset + num]]
            if estimate is not None:
                p_hat = memory.p_hat_many(keys)
                sizes = allocate(p_hat, estimate.mean * num, estimate.min_samples, estimate.max_samples, estimate.rule)
            result = sample_adaptively(
                num, schedule, rewards.generate(offset), _identity_score, first_round_sizes=sizes
            )
            tally += Tally.of(result.pools)
            rounds.append(result.rounds)
            samples.extend(len(pool) for pool in result.pools)
            groups.extend(_step_groups(strategy, result, keys, memory, rng))
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
            for group in _step_groups(strategy, result, [str(i) for i in range(batch_size)], None, rng):
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
            groups.extend(_step_groups(strategy, result, [str(i) for i in ids], memory, rng))  # the memory too
            kept = result.kept_pools
            tally += Tally.of(kept)
            rounds.append(result.rounds)
            step_samples = sum(len(pool) for pool in result.pools)
            drawn, trained = drawn + step_samples, trained + num
            samples.append(step_samples / num)
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


# ---------------------------------------------------------------------------------------------------- command line
DEFAULT_ESTIMATE_MEANS = (8, 16)  # Est rows when --estimate is not given; kept only where the user's budget holds them
_BUDGET_FLAGS = "--samples-per-round x --max-rounds"


def check_flags(args: argparse.Namespace) -> None:
    """Raise `ValueError` naming the flag(s) to change when the values cannot run together. The library's own checks
    name config fields (`samples_per_round`), which a command-line user never typed."""
    for flag, value in [
        ("--prompts", args.prompts),
        ("--batch-size", args.batch_size),
        ("--epochs", args.epochs),
        ("--group-size", args.group_size),
    ]:
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}.")
    if any(n < 1 for n in args.grpo):
        raise ValueError(f"--grpo group sizes must be >= 1, got {' '.join(map(str, args.grpo))}.")
    if args.dapo_batches < 0:
        raise ValueError(f"--dapo-batches must be >= 0 (0 leaves DAPO out), got {args.dapo_batches}.")
    for flag, value in [("--min-positives", args.min_positives), ("--min-negatives", args.min_negatives)]:
        if value is not None and value < 0:
            raise ValueError(f"{flag} must be >= 0, got {value}.")
    if args.completion_length is not None:
        if args.model_shape is None:
            raise ValueError("--completion-length is for the step-time projection: give --model-shape too.")
        if args.completion_length < 1:
            raise ValueError(f"--completion-length must be >= 1, got {args.completion_length}.")
    if args.model_shape is not None:
        parse_parameters(args.model_shape)
    if not args.rules and not args.estimate:  # no Ada row and no Est row asked for: the round flags go unused
        return
    group, per_round, rounds = args.group_size, args.samples_per_round, args.max_rounds
    for flag, value in [("--samples-per-round", per_round), ("--max-rounds", rounds)]:
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}.")
    budget = per_round * rounds
    if budget < group:
        raise ValueError(
            f"{_BUDGET_FLAGS} = {per_round} x {rounds} = {budget} is below --group-size {group}: a prompt could never "
            f"fill its group. Raise --max-rounds to {math.ceil(group / per_round)} or "
            f"--samples-per-round to {math.ceil(group / rounds)}, or lower --group-size to {budget}."
        )
    for mean in args.estimate or ():
        if not group <= mean <= budget:
            side = f"below --group-size {group}" if mean < group else f"above {_BUDGET_FLAGS} = {budget}"
            raise ValueError(
                f"--estimate {mean} is {side}: give means in [{group}, {budget}], change those flags, or pass a bare "
                "--estimate to leave Est out."
            )


def estimate_rows(args: argparse.Namespace) -> tuple[list[int], str]:
    """The Est means to simulate and a one-line note naming the default ones left out (empty when none is).

    Means the user gave are used as they are (`check_flags` has checked them). The defaults are kept only where the
    user's round flags hold them, so that `--samples-per-round 4 --max-rounds 2` runs instead of failing on a default
    row the user never asked for."""
    if args.estimate is not None:
        return list(args.estimate), ""
    low, high = args.group_size, args.samples_per_round * args.max_rounds
    kept = [mean for mean in DEFAULT_ESTIMATE_MEANS if low <= mean <= high]
    left_out = [str(mean) for mean in DEFAULT_ESTIMATE_MEANS if mean not in kept]
    if not left_out:
        return kept, ""
    means = f"mean{'s' if len(left_out) > 1 else ''} {' and '.join(left_out)}"
    return kept, (
        f"Est: default {means} left out, outside [--group-size, {_BUDGET_FLAGS}] = [{low}, {high}]; "
        "--estimate MEAN ... chooses the rows."
    )


DEFAULT_COMPLETION_LENGTH = 2048  # the paper's cap, when --model-shape is given without --completion-length


def step_times(strategies: Sequence[Strategy], outcomes: Sequence[Outcome], args: argparse.Namespace) -> list[str]:
    """The step-time section: each configuration's projected step time against GRPO at `--group-size`, from every
    record set of `trl_ada.tools.step_time_model`, with the leave-one-out band and what each projection extrapolates
    in. A step is `--batch-size` prompts; its calls and completions are the simulated means, its trained completions
    the prompts times the final group (GRPO n: n)."""
    parameters = parse_parameters(args.model_shape)
    length = args.completion_length or DEFAULT_COMPLETION_LENGTH
    prompts, group = args.batch_size, args.group_size
    baseline = StepWork(prompts, 1, prompts * group, prompts * group, length, parameters)
    rows = [
        (
            o.strategy,
            StepWork(
                prompts, o.rounds, prompts * o.samples_per_prompt, prompts * s.schedule.group_size, length, parameters
            ),
        )
        for s, o in zip(strategies, outcomes, strict=True)
        if not s.is_sequential_limit  # a floor on samples (one per call), not a schedule to run
    ]
    header = (
        f"Step time: a model of {parameters / 1e9:.3g}B parameters, {prompts} prompts a step (--batch-size), "
        f"completions of {length} tokens; against grpo-{group} (--group-size)"
    )
    sections = [header]
    for record_set in RECORD_SETS.values():
        fitted = fit(record_set)
        projections = [(name, work, project(fitted, work, baseline)) for name, work in rows]
        sections.append(format_step_times(fitted, project(fitted, baseline, baseline), projections, group))
    return sections


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
        "--rules",
        nargs="*",
        default=list(DEFAULT_RULES),
        choices=ADAPTIVE_STRATEGIES,  # every adaptive exit rule the engine's registry holds
        help="Ada rules",
    )
    parser.add_argument(
        "--round-sizing", nargs="*", default=["fixed", "posterior"], choices=["fixed", "posterior"], dest="sizings"
    )
    parser.add_argument(
        "--estimate",
        type=int,
        nargs="*",
        default=None,
        metavar="MEAN",
        help="Reinforce-Ada-Est rows: mean samples per prompt, each within [--group-size, --samples-per-round x "
        "--max-rounds]; a bare --estimate leaves Est out (default: those of 8 16 within that range, with a note "
        "naming any left out)",
    )
    parser.add_argument(
        "--allocation-rule", default="inv_sqrt_p", choices=list(ALLOCATION_RULES), help="Est's allocation rule"
    )
    parser.add_argument("--plot", metavar="PNG", help="also save signal fraction vs samples per prompt")
    parser.add_argument(
        "--model-shape",
        default=None,
        metavar="SIZE",
        help="also project each configuration's step time against GRPO at --group-size, for a model of this size: "
        "0.5b, 1.5b, 7b, a size such as 3b, or a parameter count (docs/gpu-time.md)",
    )
    parser.add_argument(
        "--completion-length",
        type=int,
        default=None,
        metavar="TOKENS",
        help=f"with --model-shape: tokens a completion runs (default: {DEFAULT_COMPLETION_LENGTH})",
    )
    return show_defaults(parser)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_flags(args)
        estimate_means, estimate_note = estimate_rows(args)
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
            estimate_means,
            args.allocation_rule,
        )
        outcomes = simulate(pass_rates, strategies, args.prompts, args.batch_size, args.seed, args.epochs)
        sections = step_times(strategies, outcomes, args) if args.model_shape is not None else []
    except (ValueError, FileNotFoundError) as error:  # every one names a flag's value: usage errors
        print(f"trl-ada simulate: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"{pass_rates.name}: {args.prompts} prompts x {args.epochs} epochs, {args.batch_size} per step, "
        f"seed {args.seed}; "
        f"Ada: group {args.group_size}, budget {args.samples_per_round} x {args.max_rounds}"
    )
    if estimate_note:
        print(estimate_note)
    print(format_table(outcomes))
    for section in sections:
        print()
        print(section)
    if args.plot:
        plot(outcomes, args.plot, title=pass_rates.name)
        print(f"plot saved to {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
