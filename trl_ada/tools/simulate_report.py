"""The simulator's output: the table `trl-ada simulate` prints and the signal-per-sample plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .simulate_setup import Outcome

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
