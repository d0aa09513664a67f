"""The learning benchmark's report for runs measured on a shared grid (`grid_stats.py`): one row per method against
GRPO n=4 on the primary metric (held-out correct-chain accuracy), the reward's accuracy and the flawed share beside
it, the paper's pairings, the held-out measures at equal tokens and equal steps, and the Markdown tables.

Reports made before the grid existed (no ``token_grid`` in their settings) are summarised by `learning_report.py`.
"""

from __future__ import annotations

import pathlib
import random
import textwrap
from collections.abc import Sequence
from typing import Any

from grid_stats import (
    BOOTSTRAP_RESAMPLES,
    BUDGET_FRACTIONS,
    GAIN_FRACTIONS,
    PRIMARY,
    RATIO_METRICS,
    RESOLUTION,
    comparison_with,
    every_split,
    flawed_shares,
    grid_aa_floor,
    label_gain,
    mean_frame_curve,
    testbed_during_training,
)
from learning_catalog import BASELINE, PAIRINGS
from learning_report import runs_by_method
from learning_stats import (
    _bootstrap_mean_interval,
    _seed_differences,
    mean,
    measures_at,
    percentile_interval,
    value_at,
)

from trl_ada.tools.heldout import PASS_AT_K

Run = dict[str, Any]
SECONDARY = "accuracy"  # the reward's accuracy, beside the primary metric


def grid_of(settings: dict[str, Any]) -> dict[str, list[float]]:
    """The report's grid: ``{"tokens": [...], "steps": [...]}`` from its settings."""
    return {"tokens": settings["token_grid"], "steps": settings["step_grid"]}


def _at(curve: dict[str, list[float]], x: float) -> float:
    return value_at(curve["x"], curve["y"], x, hold=True)


def in_baseline_steps(runs: Sequence[Run]) -> list[Run]:
    """The runs with each checkpoint's step in GRPO n=4's steps (divided by the run's ``step_scale``: a method whose
    steps hold other numbers of prompts), so that "equal steps" reads every method at the same number of prompts."""
    scaled = []
    for run in runs:
        scale = run.get("step_scale", 1)
        checkpoints = (
            run["checkpoints"] if scale == 1 else [c | {"step": c["step"] / scale} for c in run["checkpoints"]]
        )
        scaled.append(run | {"checkpoints": checkpoints})
    return scaled


def summarise_grid(
    runs: Sequence[Run], grid: dict[str, list[float]], heldout_samples: int, hard_labels: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """One row per method: the comparison with GRPO n=4 on the primary metric (`grid_stats.comparison_with`) and on
    the reward's accuracy (``reward_*``), the curves' start, budget and last-step values of both, the flawed share
    through the runs (`grid_stats.flawed_shares`), the sampling measures, and the held-out measures against GRPO n=4's
    at equal tokens and equal steps (``heldout_vs_baseline``). GRPO n=4's row carries ``hard_chain_gain`` for
    ``hard_labels``."""
    by_method = runs_by_method(runs)
    if BASELINE not in by_method:
        raise ValueError(f"the comparison is with {BASELINE}, which was not run")
    base_runs = by_method[BASELINE]
    budget, last_step = grid["tokens"][-1], grid["steps"][-1]
    rows = []
    for key, method_runs in by_method.items():
        tokens = mean_frame_curve(method_runs, "tokens", PRIMARY, len(grid["tokens"]))
        steps = mean_frame_curve(method_runs, "steps", PRIMARY)
        reward_tokens = mean_frame_curve(method_runs, "tokens", SECONDARY, len(grid["tokens"]))
        reward_steps = mean_frame_curve(method_runs, "steps", SECONDARY)
        row: dict[str, Any] = {
            "key": key,
            "method": method_runs[0]["method"],
            "seeds": [run["seed"] for run in method_runs],
            "steps": max(run["checkpoints"][-1]["step"] for run in method_runs),
            "chain_accuracy_before": tokens["y"][0],
            "chain_accuracy_at_budget": _at(tokens, budget),
            "chain_accuracy_at_last_step": _at(steps, last_step),
            "accuracy_before": reward_tokens["y"][0],
            "accuracy_at_budget": _at(reward_tokens, budget),
            "accuracy_at_last_step": _at(reward_steps, last_step),
            "tokens_total": mean([run["checkpoints"][-1]["tokens"] for run in method_runs]),
            "flawed_rewarded_share": flawed_shares(method_runs),
            "samples_per_prompt": mean([run["samples_per_prompt"] for run in method_runs]),
            "completions_per_trained_prompt": mean([run["completions_per_trained_prompt"] for run in method_runs]),
            "frac_zero_std": mean([run["frac_zero_std"] for run in method_runs]),
            "frac_zero_std_first_round": mean([run["frac_zero_std_first_round"] for run in method_runs]),
            "refills_per_step": mean([run["refills_per_step"] for run in method_runs]),
            "skipped_per_step": mean([run["skipped_per_step"] for run in method_runs]),
            "train_seconds": mean([run["train_seconds"] for run in method_runs]),
        }
        if key == BASELINE:
            if hard_labels:
                row["hard_chain_gain"] = label_gain(method_runs, hard_labels)
                row["testbed_during_training"] = testbed_during_training(
                    row["flawed_rewarded_share"], row["hard_chain_gain"]
                )
        else:
            row |= comparison_with(base_runs, method_runs, grid, PRIMARY)
            reward = comparison_with(base_runs, method_runs, grid, SECONDARY)
            row |= {f"reward_{name}": reward[name] for name in ("auc_delta", "auc_delta_ci")}
            row["heldout_vs_baseline"] = grid_heldout_comparison(base_runs, method_runs, grid, heldout_samples)
        rows.append(row)
    return rows


def grid_frames(grid: dict[str, list[float]]) -> dict[str, tuple[str, float]]:
    """The two frames the held-out measures are compared in: B tokens (the token grid's last point) and the step
    grid's last step."""
    return {"equal_tokens": ("tokens", grid["tokens"][-1]), "equal_steps": ("step", grid["steps"][-1])}


def grid_heldout_comparison(
    base_runs: Sequence[Run], method_runs: Sequence[Run], grid: dict[str, list[float]], num_samples: int, seed: int = 0
) -> dict[str, dict[str, dict[str, Any]]]:
    """pass@k (of correct chains), entropy and chain accuracy per rule of a method against GRPO n=4's in each of
    `grid_frames`: frame -> measure -> the mean over shared seeds of the difference and its paired-bootstrap 95%
    interval (`learning_stats.heldout_comparison`, on the grid's frames)."""
    base_runs, method_runs = in_baseline_steps(base_runs), in_baseline_steps(method_runs)
    differences = _seed_differences(base_runs, method_runs, grid_frames(grid), num_samples, chain=True)

    def compared(values: list[float]) -> dict[str, Any]:
        # Each measure is resampled with a generator of its own over the seeds in order (`_seed_differences` lists
        # them sorted), as `grid_bootstrap` resamples them: the same quantity (chain accuracy at the last grid step)
        # then reads the same interval here and in the main table.
        return {
            "delta": mean(values),
            "ci": _bootstrap_mean_interval(values, BOOTSTRAP_RESAMPLES, random.Random(seed)),
        }

    return {
        frame: {name: compared(list(by_seed.values())) for name, by_seed in by_measure.items()}
        for frame, by_measure in differences.items()
    }


def grid_heldout_aa_floor(
    base_runs: Sequence[Run], grid: dict[str, list[float]], num_samples: int
) -> dict[str, dict[str, list[float | None]]] | None:
    """The A/A floor of `grid_heldout_comparison`: GRPO n=4's seeds split into two halves every way
    (`grid_stats.every_split`); frame -> measure -> the 95% range of one half's mean minus the other's."""
    runs = sorted(base_runs, key=lambda run: run["seed"])
    if len(runs) < 4:
        return None
    floor: dict[str, dict[str, list[float | None]]] = {}
    for frame, (column, x) in grid_frames(grid).items():
        per_run = [measures_at(run, column, x, num_samples, chain=True) for run in runs]
        names = sorted(set.intersection(*(set(m) for m in per_run)))
        splits = list(every_split(len(runs)))
        floor[frame] = {
            name: percentile_interval(
                [mean([per_run[i][name] for i in a]) - mean([per_run[i][name] for i in b]) for a, b in splits]
            )
            for name in names
        }
    return floor


def grid_paired_comparisons(
    runs: Sequence[Run], grid: dict[str, list[float]], heldout_samples: int
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each of `PAIRINGS` whose method and reference both ran, compared as `summarise_grid` compares a method with
    GRPO n=4, the reference in its place (its curves, its gain); per reference its own A/A floors."""
    by_method = runs_by_method(runs)
    rows, floors = [], {}
    for key, reference in PAIRINGS:
        if key not in by_method or reference not in by_method:
            continue
        base_runs, method_runs = by_method[reference], by_method[key]
        rows.append(
            {
                "key": key,
                "method": method_runs[0]["method"],
                "reference": reference,
                "reference_method": base_runs[0]["method"],
                "seeds": sorted({run["seed"] for run in method_runs} & {run["seed"] for run in base_runs}),
                **comparison_with(base_runs, method_runs, grid, PRIMARY),
                "heldout_vs_baseline": grid_heldout_comparison(base_runs, method_runs, grid, heldout_samples),
            }
        )
        if reference not in floors:
            floors[reference] = {
                "aa_floor": grid_aa_floor(base_runs, grid, PRIMARY),
                "heldout_aa_floor": grid_heldout_aa_floor(base_runs, grid, heldout_samples),
            }
    return rows, floors


# --------------------------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------------------------


def _interval(ci: Sequence[float | None] | None, fmt: str) -> str:
    if ci is None:
        return " [unresolved]"
    return " [" + ", ".join("inf" if v is None else fmt.format(v) for v in ci) + "]"


def _delta(row: dict[str, Any], name: str) -> str:
    value = row.get(name)
    return "" if value is None else f"{value:+.3f}{_interval(row.get(f'{name}_ci'), '{:+.3f}')}"


def _ratio(row: dict[str, Any], name: str) -> str:
    if name not in row:
        return ""
    if not row[f"{name}_resolved"]:
        return "unresolved"
    text = "not reached" if row[name] is None else f"{row[name]:.2f}x"
    return text + _interval(row.get(f"{name}_ci"), "{:.2f}")


_PERCENT = {f: round(f * 100) for f in (*BUDGET_FRACTIONS, *GAIN_FRACTIONS)}
DELTAS = (*(f"acc_delta_at_{_PERCENT[f]}" for f in BUDGET_FRACTIONS), "acc_delta_equal_steps")


def _floor_cell(cell: dict[str, Any], fmt: str) -> str:
    text = _interval(cell["range"], fmt).strip()
    notes = []
    if cell.get("never_reached"):
        notes.append(f"{cell['never_reached']:.0%} never")
    if cell.get("unresolved"):
        notes.append(f"{cell['unresolved']:.0%} unresolved")
    return text + (f" ({', '.join(notes)})" if notes else "")


def grid_comparison_table(
    rows: Sequence[dict[str, Any]], floor: dict[str, Any] | None, reference: str = "GRPO n=4"
) -> str:
    """Each method against GRPO n=4 (or ``reference``), paired over seeds, on correct-chain accuracy: Δ AUC over
    tokens [0, B], Δ at 25/50/100% of B and at equal steps, tokens and steps to 50/75/90% of the reference's gain;
    then the reward's Δ AUC and the largest flawed share of any checkpoint of any seed; the A/A floor last."""
    header = (
        "| method | seeds | **Δ AUC, correct chains** [95% CI] "
        + "".join(f"| Δ at {_PERCENT[f]}% of B " for f in BUDGET_FRACTIONS)
        + "| Δ at equal steps "
        + "".join(f"| tokens to {_PERCENT[f]}% " for f in GAIN_FRACTIONS)
        + "".join(f"| steps to {_PERCENT[f]}% " for f in GAIN_FRACTIONS)
        + "| Δ AUC, reward | flawed share, max |"
    )
    lines = [header, "|---" * (5 + len(DELTAS) + 2 * len(GAIN_FRACTIONS)) + "|"]
    for r in rows:
        flawed = (r.get("flawed_rewarded_share") or {}).get("max")
        flawed_cell = "" if flawed is None else f"{flawed:.3f}"
        name = r["method"] + (" †" if r.get("short_of_budget") else "")
        if "auc_delta" not in r:
            blanks = " |" * (len(DELTAS) + 2 * len(GAIN_FRACTIONS) + 1)
            lines.append(f"| {name} | {len(r['seeds'])} | reference |{blanks} {flawed_cell} |")
            continue
        cells = [_delta(r, "auc_delta"), *(_delta(r, m) for m in DELTAS), *(_ratio(r, m) for m in RATIO_METRICS)]
        cells += [_delta(r, "reward_auc_delta"), flawed_cell]
        lines.append(f"| {name} | {len(r['seeds'])} | " + " | ".join(cells) + " |")
    if floor is not None:
        cells = [_floor_cell(floor[m], "{:+.3f}") for m in ("auc_delta", *DELTAS)]
        cells += [_floor_cell(floor[m], "{:.2f}") for m in RATIO_METRICS]
        lines.append(
            f"| *A/A floor: {reference} against itself, all {floor['splits']} splits, 95% range* "
            f"| {floor['half']} vs {floor['half']} | " + " | ".join(cells) + " | | |"
        )
    return "\n".join(lines)


def grid_note(grid: dict[str, list[float]]) -> str:
    """What the grid table's columns mean."""
    steps = ", ".join(map(str, grid["steps"]))
    return (
        "Correct-chain accuracy: the share of held-out samples whose whole worked chain is right (the primary "
        f"metric). Every run is evaluated at the same {len(grid['tokens'])} generated-token counts "
        f"({grid['tokens'][0]:,.0f} to B = {grid['tokens'][-1]:,.0f}, geometric: dense early) and at steps {steps}. "
        "Δ: the method minus the reference on the seeds' mean curves; Δ AUC: mean accuracy over tokens 0 to B. "
        "Ratios: the method's tokens (steps) to reach that share of the reference's gain over the reference's own; "
        f"unresolved: the crossing falls in the first interval or between points more than {RESOLUTION}x apart, so "
        "the grid cannot place it (an interval is unresolved when more than 2.5% of its resamples are). [95% CI]: "
        f"paired bootstrap over seeds, {BOOTSTRAP_RESAMPLES} resamples. A/A floor: the reference's seeds split into "
        "two halves in every possible way, one half as the method (unpaired). Flawed share: rewarded held-out samples "
        "whose chain is wrong, the largest at any checkpoint of any seed. †: the run ends before B; its last value is "
        "held."
    )


def hard_gain_line(row: dict[str, Any]) -> str:
    """GRPO n=4's correct-chain gain on each hard rule, start to end, with its interval."""
    gains = row.get("hard_chain_gain") or {}
    cells = [f"`{label}` {g['gain']:+.3f}{_interval(g['ci'], '{:+.3f}')}" for label, g in gains.items()]
    return f"GRPO n=4's held-out correct-chain gain per hard rule, start to end: {', '.join(cells)}." if cells else ""


def grid_heldout_table(
    rows: Sequence[dict[str, Any]], floor: dict[str, Any] | None, reference: str = "GRPO n=4"
) -> str | None:
    """pass@k of correct chains, entropy and chain accuracy per rule against the reference's, at B tokens and at its
    last step, each Δ with its paired interval; the A/A floor's ranges last."""
    compared = [r for r in rows if r.get("heldout_vs_baseline")]
    if not compared:
        return None
    names = sorted(
        set.union(*(set(r["heldout_vs_baseline"][f]) for r in compared for f in ("equal_tokens", "equal_steps"))),
        key=lambda n: (0, int(n[5:]), "") if n.startswith("pass@") else ((1, 0, "") if n == "entropy" else (2, 0, n)),
    )
    lines = ["| method | frame | " + " | ".join(f"Δ {n}" for n in names) + " |", "|---" * (2 + len(names)) + "|"]
    for r in compared:
        for frame, words in (("equal_tokens", "at B tokens"), ("equal_steps", "at equal steps")):
            cells = [r["heldout_vs_baseline"][frame].get(n) for n in names]
            text = ["" if c is None else f"{c['delta']:+.3f}{_interval(c['ci'], '{:+.3f}')}" for c in cells]
            lines.append(f"| {r['method']} | {words} | " + " | ".join(text) + " |")
    if floor is not None:
        for frame, words in (("equal_tokens", "at B tokens"), ("equal_steps", "at equal steps")):
            text = [_interval(floor[frame].get(n), "{:+.3f}").strip() if n in floor[frame] else "" for n in names]
            lines.append(f"| *A/A floor vs {reference}, 95% range* | {words} | " + " | ".join(text) + " |")
    return "\n".join(lines)


def grid_details_table(rows: Sequence[dict[str, Any]]) -> str:
    """Each method's curves at the start, at B tokens and at the last grid step (correct chains / reward), tokens,
    sampling and the flawed share at the first and last checkpoint."""
    lines = [
        "| method | steps | chain acc. before → at B → at equal steps | reward acc. before → at B → at equal steps "
        "| tokens (mean) | samples / prompt | zero-std groups (first round) | flawed share first → last "
        "| flawed share by rule, max | train s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        flawed = r["flawed_rewarded_share"]
        flawed_cell = "" if flawed.get("max") is None else f"{flawed['first']:.3f} → {flawed['last']:.3f}"
        by_rule = ", ".join(f"`{label}` {share:.3f}" for label, share in (flawed.get("max_by_label") or {}).items())
        lines.append(
            f"| {r['method']} | {r['steps']} "
            f"| {r['chain_accuracy_before']:.3f} → {r['chain_accuracy_at_budget']:.3f} → "
            f"{r['chain_accuracy_at_last_step']:.3f} "
            f"| {r['accuracy_before']:.3f} → {r['accuracy_at_budget']:.3f} → {r['accuracy_at_last_step']:.3f} "
            f"| {r['tokens_total']:,.0f} | {r['samples_per_prompt']:.2f} "
            f"| {r['frac_zero_std']:.2f} ({r['frac_zero_std_first_round']:.2f}) | {flawed_cell} | {by_rule} "
            f"| {r['train_seconds']:.0f} |"
        )
    return "\n".join(lines)


def testbed_line(row: dict[str, Any]) -> str:
    """Whether GRPO n=4's runs kept the testbed's bounds during training (`grid_stats.testbed_during_training`), said
    first where they did not: a seed past the flawed-share bound had its reward rise on flawed chains."""
    check = row.get("testbed_during_training")
    if not check:
        return ""
    over, short = check["seeds_over_flawed_bound"], check["rules_under_gain_bound"]
    if over:
        flawed = (
            f"**past the bound {check['flawed_share_bound']:.2f} in seed{'s' if len(over) > 1 else ''} "
            f"{', '.join(map(str, over))}** (at most {check['flawed_share_max']:.3f}): there the reward rose on "
            "flawed chains and stopped measuring the skill; every comparison here reads correct chains"
        )
    elif check["flawed_share_max"] is None:  # no checkpoint had a rewarded sample to judge
        flawed = "not measured (no rewarded held-out sample at any checkpoint)"
    else:
        flawed = f"at most {check['flawed_share_max']:.3f}, within the bound {check['flawed_share_bound']:.2f}"
    gain = (
        f"**below {check['hard_gain_bound']:.2f} on {', '.join(f'`{label}`' for label in short)}**"
        if short
        else f"at least {check['hard_gain_bound']:.2f} on every hard rule"
    )
    verdict = {True: "held", False: "did not hold", None: "was not fully measured"}[check["holds"]]
    return (
        f"The testbed during GRPO n=4's runs {verdict}: the flawed share of its rewarded held-out samples, at any "
        f"checkpoint of any seed, {flawed}; its correct-chain gain {gain}."
    )


def grid_markdown(
    rows: Sequence[dict[str, Any]],
    floor: dict[str, Any] | None,
    heldout_floor: dict[str, Any] | None,
    grid: dict[str, list[float]],
    pairs: Sequence[dict[str, Any]] = (),
    pair_floors: dict[str, dict[str, Any]] | None = None,
) -> str:
    """The grid report's tables: the comparison with GRPO n=4 and its note, GRPO n=4's gain per hard rule, the
    details, the held-out measures, then the paper's pairings, each with its reference's own floors."""
    parts = [grid_comparison_table(rows, floor), grid_note(grid)]
    baseline_row = next((r for r in rows if r["key"] == BASELINE), {})
    for line in (hard_gain_line(baseline_row), testbed_line(baseline_row)):
        if line:
            parts.append(line)
    parts.append(grid_details_table(rows))
    heldout = grid_heldout_table(rows, heldout_floor)
    if heldout is not None:
        parts.append(
            heldout + "\n\nHeld-out measures of correct chains against GRPO n=4's, each seed read off its checkpoints "
            f"at B tokens or at the last grid step; pass@k: the unbiased estimator (k up to {max(PASS_AT_K)})."
        )
    for reference in dict.fromkeys(r["reference"] for r in pairs):
        group = [r for r in pairs if r["reference"] == reference]
        name = group[0]["reference_method"]
        floors = (pair_floors or {}).get(reference, {})
        parts.append(
            f"**Against {name} (`{reference}`)**, a pairing of the claims table, with the reference's own A/A floor:"
        )
        parts.append(grid_comparison_table(group, floors.get("aa_floor"), reference=name))
        table = grid_heldout_table(group, floors.get("heldout_aa_floor"), reference=name)
        if table is not None:
            parts.append(table)
    return "\n\n".join(parts)


def grid_plot(
    runs: Sequence[Run], rows: Sequence[dict[str, Any]], grid: dict[str, list[float]], path: pathlib.Path, title: str
) -> None:
    """Correct-chain accuracy against tokens (up to B, the shared grid) and against steps: each method's seeds thin,
    their mean thick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for index, row in enumerate(rows):
        method_runs = [run for run in runs if run["key"] == row["key"]]
        color = plt.get_cmap("tab20")(index % 20)
        style = ("-", "--", ":")[index // 7 % 3]
        for axis, frame in zip(axes, ("tokens", "steps"), strict=True):
            size = len(grid["tokens"]) if frame == "tokens" else None
            for run in method_runs:
                curve = mean_frame_curve([run], frame, PRIMARY, size)
                axis.plot(curve["x"], curve["y"], color=color, alpha=0.25, linewidth=0.8)
            curve = mean_frame_curve(method_runs, frame, PRIMARY, size)
            axis.plot(
                curve["x"], curve["y"], color=color, linestyle=style, linewidth=2, marker=".", label=row["method"]
            )
    axes[0].axvline(grid["tokens"][-1], color="grey", linestyle="--", linewidth=1)
    axes[0].set_xlabel("completion tokens generated (the shared grid up to B)")
    axes[1].set_xlabel("optimizer steps (GRPO n=4's)")
    axes[0].set_ylabel("held-out correct-chain accuracy")
    for axis in axes:
        axis.grid(alpha=0.3)
    axes[0].legend(title="mean of seeds (thin: each seed)", fontsize=7)
    fig.suptitle(textwrap.fill(title, 110), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
