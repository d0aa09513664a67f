"""Refill and prompt selection in the budget simulator: signal per sample of the same variants as
`learning_per_token.py`, and the selection threshold / floor sweep behind the defaults.

Every row runs through the trainer's engine and the trainer's side stream (`trl_ada.tools.simulate`, see its
docstring): the same prompts visited `--epochs` times, `--batch-size` per step, 0/1 rewards from fixed per-prompt pass
rates. "Samples/prompt" counts every completion drawn (replaced pools included) per trained prompt; "signal" is the
share of trained groups holding both a positive and a negative. Pass rates do not move here, so selection's rows are
the most it can save; a learning policy drifts away from its memory.

    python benchmarks/refill_selection.py --prompts 4096 --epochs 4 --seed 0
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

from sampler_efficiency import fit_beta

from trl_ada.core.engine import Schedule
from trl_ada.tools.simulate import simulate
from trl_ada.tools.simulate_report import format_table
from trl_ada.tools.simulate_setup import PassRates, Strategy, parse_pass_rates

THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
FLOORS = (0.05, 0.1, 0.2)


def variants(threshold: float, floor: float) -> list[Strategy]:
    grpo = Schedule.from_strategy("uniform", 4)
    positive = Schedule.from_strategy("positive", 4, 8, 4)
    positive_4x2 = Schedule.from_strategy("positive", 4, 4, 2)
    balanced = Schedule.from_strategy("balanced", 4, 8, 4)
    balanced_posterior = Schedule.from_strategy("balanced", 4, 8, 4, round_sizing="posterior")
    select = (threshold, floor)
    return [
        Strategy("GRPO n=4", grpo),
        Strategy("GRPO n=8", Schedule.from_strategy("uniform", 8)),
        Strategy("GRPO n=16", Schedule.from_strategy("uniform", 16)),
        Strategy("DAPO n=4 (batch-level, 10 batches)", grpo, refill_batches=10),
        Strategy("DAPO n=4, per slot (refill)", grpo, refill=True),
        Strategy("GRPO n=4 + selection", grpo, selection=select),
        Strategy("DAPO n=4 + selection", grpo, refill=True, selection=select),
        Strategy("Ada positive 8x4", positive),
        Strategy("Ada positive 8x4 + refill", positive, refill=True),
        Strategy("Ada positive 8x4 + selection", positive, selection=select),
        Strategy("Ada positive 4x2", positive_4x2),
        Strategy("Ada positive 4x2 + selection", positive_4x2, selection=select),
        Strategy("Ada balanced 8x4", balanced),
        Strategy("Ada balanced posterior", balanced_posterior),
        Strategy("Ada balanced posterior + selection", balanced_posterior, selection=select),
    ]


def sweep(rates: PassRates, args: argparse.Namespace) -> str:
    """Signal per sample of GRPO n=4 + selection at each (threshold, floor), against GRPO n=4."""
    grpo = Schedule.from_strategy("uniform", 4)
    strategies = [Strategy("GRPO n=4", grpo)] + [
        Strategy(f"threshold {t}, floor {f}", grpo, selection=(t, f)) for t in THRESHOLDS for f in FLOORS
    ]
    outcomes = simulate(rates, strategies, args.prompts, args.batch_size, args.seed, args.epochs)
    base = outcomes[0].signal / outcomes[0].samples_per_prompt
    lines = ["| GRPO n=4 + selection | signal | signal per sample vs GRPO n=4 |", "|---|---|---|"]
    for o in outcomes:
        lines.append(f"| {o.strategy} | {o.signal:.3f} | {o.signal / o.samples_per_prompt / base:.3f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4096)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=0.5, help="selection_threshold of the variants table")
    parser.add_argument("--floor", type=float, default=0.1, help="selection_floor of the variants table")
    args = parser.parse_args(argv)
    a, b = fit_beta()
    mixes = [
        ("uniform(0,1)", parse_pass_rates("uniform")),
        ("hard: Beta(0.5,4)", PassRates.beta(0.5, 4)),
        ("trained: Beta(1.2,0.6)", PassRates.beta(1.2, 0.6)),
        (f"paper fit: Beta({a:.3f},{b:.3f})", PassRates.beta(a, b)),
    ]
    print(
        f"{args.prompts} prompts x {args.epochs} epochs, {args.batch_size} per step, seed {args.seed}; group 4; "
        f"selection threshold {args.threshold}, floor {args.floor}; {platform.machine()}, "
        f"Python {platform.python_version()}"
    )
    start = time.perf_counter()
    for title, rates in mixes:
        outcomes = simulate(
            rates, variants(args.threshold, args.floor), args.prompts, args.batch_size, args.seed, args.epochs
        )
        print(f"\n### {title}\n")
        print(format_table(outcomes))
        base = outcomes[0].signal / outcomes[0].samples_per_prompt
        print(
            "\nsignal per sample vs GRPO n=4: "
            + ", ".join(f"{o.strategy}: {o.signal / o.samples_per_prompt / base:.2f}x" for o in outcomes[1:])
        )
    for title, rates in mixes:
        print(f"\n### selection sweep, {title}\n")
        print(sweep(rates, args))
    print(f"\n({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
