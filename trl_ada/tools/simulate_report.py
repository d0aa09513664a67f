"""The simulator's output: the table `trl-ada simulate` prints and the signal-per-sample plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .measured_steps import STEPS_TO_90
from .simulate_setup import Outcome
from .step_time_model import Fit, Projection, StepWork

# ---------------------------------------------------------------------------------------------------- output
COLUMNS = ("strategy", "samples/prompt", "p95", "rounds/step", "signal", "zero-std", "resolved", "x seq. limit")


def number(x: float, digits: int = 2) -> str:
    """`x` to `digits` decimals; `-` for NaN."""
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def markdown(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table whose columns line up on a terminal: the first left-aligned, the others right-aligned."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    lines = [tuple(columns), tuple("-" * w for w in widths), *rows]
    return "\n".join(
        "| "
        + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
        + " |"
        for line in lines
    )


def format_table(outcomes: Sequence[Outcome]) -> str:
    """A Markdown table, readable on a terminal."""
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
    return markdown(COLUMNS, rows)


STEP_TIME_COLUMNS = (
    "strategy",
    "calls/step",
    "completions/step",
    "trained",
    "s/step",
    "x GRPO",
    "band",
    "latency share",
    "extrapolated in",
    "GPU time to skill",
)


def gpu_time_to_skill(name: str, group: int, projection: Projection) -> str:
    """A row's GPU time to 90% of GRPO's skill gain over GRPO's at the group size: its optimizer steps to that skill,
    measured on the toy columns task against `grpo-{group}` (`measured_steps.STEPS_TO_90`), times its projected
    step-time ratio; in brackets the steps' 95% interval times the band. "-" where not measured against that group."""
    if name == f"grpo-{group}":
        return "1.00"
    measured = STEPS_TO_90.get((name.split(" ")[0], f"grpo-{group}"))
    if measured is None:
        return "-"
    steps, low, high = measured[:3]
    return f"{steps * projection.ratio:.2f} [{low * projection.low:.2f}, {high * projection.high:.2f}]"


def format_step_times(
    fit: Fit, baseline: Projection, rows: Sequence[tuple[str, StepWork, Projection]], group: int
) -> str:
    """One record set's projections: a header naming the records and their errors, then a row per configuration
    against GRPO with groups of ``group``."""
    records = fit.record_set
    rms = math.sqrt(sum(e * e for e in fit.fit_errors) / len(fit.fit_errors))
    lines = [
        f"projected from {len(records.records)} recorded configurations: {records.description} "
        f"({records.regime}); fit error rms {rms:.1%}; leave-one-out error up to {fit.max_loo_error:.1%} on step "
        f"time, {fit.max_ratio_loo_error:.1%} on the ratio to GRPO",
        f"GRPO at the group size: {baseline.seconds:.3g} s a step"
        + (f", extrapolated in {', '.join(baseline.extrapolated)}" if baseline.extrapolated else ""),
    ]
    table = [
        (
            name,
            number(work.calls),
            f"{work.generated:.0f}",
            f"{work.trained:.0f}",
            f"{p.seconds:.3g}",
            number(p.ratio),
            f"{number(p.low)}-{number(p.high)}",
            f"{p.latency_share:.0%}" if not math.isnan(p.latency_share) else "-",
            ", ".join(p.extrapolated) or "-",
            gpu_time_to_skill(name, group, p),
        )
        for name, work, p in rows
    ]
    lines.append(markdown(STEP_TIME_COLUMNS, table))
    lines.append(
        "x GRPO: over GRPO at the group size, under the fit to every record; band: x GRPO times 1 -/+ the largest "
        "leave-one-out error on the ratio; latency share: of generation time, what the calls' latency costs; "
        "extrapolated in: what lies outside the records' range; GPU time to skill: steps to 90% of GRPO's skill gain "
        "measured on the toy columns task against GRPO at the group size (95% interval over seeds and warm models), "
        "times x GRPO, in brackets the interval times the band; -: not measured against that group"
    )
    return "\n".join(lines)


_MARKERS = {"grpo-": "o", "dapo-": "s", "seq-positive": "^", "seq-balanced": "v", "est-": "D", "sequential": "*"}


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
