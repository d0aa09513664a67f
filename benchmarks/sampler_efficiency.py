"""Sampler efficiency: samples, rounds and signal of each strategy on four pass-rate mixes, by the budget simulator.

Mixes: uniform(0,1); "hard" Beta(0.5, 4); "trained" Beta(1.2, 0.6); and the Beta fitted to the paper's trained
Qwen2.5-Math-1.5B (35.3% all-correct groups at n = 4, 10.2% at n = 256), i.e. E[p^4] = 0.353 and E[p^256] = 0.102 with
E[p^n] = B(a + n, b) / B(a, b).

Besides the simulator's default rows, "posterior, oracle prior" sizes rounds with the mix itself as the prior: it is
the fewest samples any 4-round schedule can spend while resolving the same prompts (the sizing is Bayes-optimal for
its prior), and "posterior, 8 rounds" shows what more generation calls buy.

A second table per mix puts Reinforce-Ada-Est next to GRPO and Seq over several epochs of the same prompts (Est's
pass-rate memory learns from earlier visits; the first epoch, at the prior, is included): Est draws one round per
step, `mean` samples per prompt on average, split by an allocation rule within [4, 32].

    python benchmarks/sampler_efficiency.py --prompts 8192 --seed 0 --plot sampler_efficiency.png
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from dataclasses import replace

from trl_ada.core.engine import Schedule
from trl_ada.tools.simulate import simulate
from trl_ada.tools.simulate_report import draw, format_table
from trl_ada.tools.simulate_setup import Estimate, PassRates, Strategy, default_strategies, parse_pass_rates


def log_moment(a: float, b: float, n: int) -> float:
    """log E[p^n] for p ~ Beta(a, b)."""
    return math.lgamma(a + n) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(a + b + n)


def fit_beta(m4: float = 0.353, m256: float = 0.102) -> tuple[float, float]:
    """The Beta(a, b) with E[p^4] = m4 and E[p^256] = m256, by nested bisection on log scales: for a given a, E[p^4]
    falls as b grows; along that curve, E[p^256] falls as a grows."""

    def bisect(f, lo: float, hi: float) -> float:  # f decreasing, root in [lo, hi]
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
        return math.sqrt(lo * hi)

    def b_for(a: float) -> float:
        return bisect(lambda b: log_moment(a, b, 4) - math.log(m4), 1e-6, 1e3)

    a = bisect(lambda a: log_moment(a, b_for(a), 256) - math.log(m256), 1e-3, 1e2)
    return a, b_for(a)


def strategies_for(prior: tuple[float, float]) -> list[Strategy]:
    strategies = default_strategies()
    extra = []
    for strategy in strategies:
        schedule = strategy.schedule
        if schedule.round_sizing != "posterior":
            continue
        extra.append(Strategy(f"{strategy.name}, oracle prior", replace(schedule, prior=prior)))
        more_rounds = replace(schedule, samples_per_round=schedule.samples_per_round // 2, max_rounds=8)
        shape = f"{schedule.samples_per_round}x{schedule.max_rounds}"  # the names of docs/names.md
        extra.append(Strategy(strategy.name.replace(shape, f"{more_rounds.samples_per_round}x8"), more_rounds))
    # Keep each rule's rows together, the sequential limit last.
    ordered = []
    for strategy in strategies:
        if strategy.is_sequential_limit:
            rule = strategy.schedule.exit_rule
            ordered.extend(s for s in extra if s.schedule.exit_rule == rule)
        ordered.append(strategy)
    return ordered


def est_strategies() -> list[Strategy]:
    """GRPO and Seq references, then Est at two means and each allocation rule (group 4, per-prompt [4, 32])."""
    seq = [
        Strategy("grpo-8", Schedule.from_strategy("uniform", 8)),
        Strategy("grpo-16", Schedule.from_strategy("uniform", 16)),
        Strategy("seq-balanced-8x4", Schedule.from_strategy("balanced", 4, 8, 4)),
        Strategy("seq-balanced-8x4-posterior", Schedule.from_strategy("balanced", 4, 8, 4, round_sizing="posterior")),
    ]
    est = [Strategy.est(4, Estimate(mean, 4, 32, "inv_sqrt_p")) for mean in (8, 16)]
    est += [Strategy.est(4, Estimate(16, 4, 32, rule)) for rule in ("inv_p", "variance_optimal")]
    return seq + est


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8192, help="trained prompts per strategy (default: 8192)")
    parser.add_argument("--batch-size", type=int, default=256, help="prompts per step (default: 256)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=4, help="passes over the prompts for the Est table (default: 4)")
    parser.add_argument("--plot", metavar="PNG", help="save signal fraction vs samples per prompt, one panel per mix")
    args = parser.parse_args(argv)

    a, b = fit_beta()
    mixes = [
        ("uniform(0,1)", parse_pass_rates("uniform"), (1.0, 1.0)),  # the default prior: oracle rows repeat it
        ("hard: Beta(0.5,4)", PassRates.beta(0.5, 4), (0.5, 4.0)),
        ("trained: Beta(1.2,0.6)", PassRates.beta(1.2, 0.6), (1.2, 0.6)),
        (f"paper fit: Beta({a:.3f},{b:.3f})", PassRates.beta(a, b), (a, b)),
    ]
    print(
        f"{args.prompts} prompts per strategy, {args.batch_size} per step, seed {args.seed}; group 4, budget 8 x 4; "
        f"{platform.machine()}, Python {platform.python_version()}"
    )
    print(
        f"paper fit: a = {a:.4f}, b = {b:.4f}: E[p^4] = {math.exp(log_moment(a, b, 4)):.3f}, "
        f"E[p^256] = {math.exp(log_moment(a, b, 256)):.3f}"
    )
    start = time.perf_counter()
    results = []
    for title, rates, prior in mixes:
        outcomes = simulate(rates, strategies_for(prior), args.prompts, args.batch_size, args.seed)
        results.append((title, outcomes))
        print(f"\n### {title}\n")
        print(format_table(outcomes))
    print("\nSamples per prompt / sequential limit (same prompts resolved), at most 4 generation calls:\n")
    rows = [
        "seq-positive-8x4",
        "seq-positive-8x4-posterior",
        "seq-balanced-8x4",
        "seq-balanced-8x4-posterior",
    ]
    print("| mix | " + " | ".join(rows) + " |")
    print("|---" * (len(rows) + 1) + "|")
    for title, outcomes in results:
        ratio = {o.strategy: o.sequential_ratio for o in outcomes}
        print(f"| {title} | " + " | ".join(f"{ratio[r]:.3f}" for r in rows) + " |")
    print(
        f"\nReinforce-Ada-Est next to GRPO and Seq: {args.prompts} prompts x {args.epochs} epochs, memory across them"
    )
    for title, rates, _ in mixes:
        outcomes = simulate(rates, est_strategies(), args.prompts, args.batch_size, args.seed, args.epochs)
        print(f"\n### {title}, {args.epochs} epochs\n")
        print(format_table(outcomes))
    print(f"\n({time.perf_counter() - start:.0f} s)")
    if args.plot:
        plot(results, args.plot)
        print(f"plot saved to {args.plot}")
    return 0


def plot(results, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 8), sharey=True)
    for ax, (title, outcomes) in zip(axes.flat, results, strict=True):
        draw(ax, outcomes, title)
    handles, labels = axes.flat[-1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="center right")
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(path, dpi=150)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
