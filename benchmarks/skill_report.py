"""The verdicts on the skill: every comparison of the columns reports read on skill, retention and their mix
(`skill_frames`), per warm model and pooled over warm models (`paired_stats`), with the pre-registered family's
verdicts (benchmarks/results/columns/preregistration.md) after Holm's correction.

    python benchmarks/skill_report.py          # reads REPORTS, writes benchmarks/results/columns/skill_verdicts.*

Per comparison, warm model and measure, in each frame (budget [0, B], whole runs [0, T], equal steps): the mean
paired difference over seeds, its two-way (seeds and held-out prompts) standard error and t interval, the t and exact
sign-flip p values, and the partner's A/A floor; for every comparison, tokens and steps to 50/75/90% of the partner's
whole-run skill gain (paired bootstrap). Pooled: the random-effects mean over the warm models that ran it.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import gpu_time as gt
import paired_stats as ps
import skill_frames as sf
import skill_tables
from learning_catalog import BASELINE, PAIRINGS, RESULTS
from learning_report import read_report, runs_by_method

COLUMNS_RESULTS = RESULTS / "columns"
# The combined reports read, one per (task, warm model, set of methods), named as written (the results keep them
# gzipped: `read_report` reads NAME.json.gz for NAME.json). A report whose runs another report also
# holds (GRPO n=4 copied by --baseline-from) is fine: a comparison is read from the report that holds both methods.
REPORTS = (
    "learning_per_token_columns_recommended.json",
    "learning_per_token_columns_warm1_recommended.json",
    "learning_per_token_columns_warm1_all.json",
    "learning_per_token_columns_warm2_recommended.json",
    "learning_per_token_columns_warm2_all.json",
    "learning_per_token_columns_epochs_est.json",
    "learning_per_token_columns_epochs_warm1_memory.json",
    "learning_per_token_columns_epochs_warm1_est.json",
    "learning_per_token_columns_epochs_warm2_memory.json",
)
# The pre-registered family: (id, method, partner, task, frame of its test). Measure: the skill.
PRIMARY = (
    ("P1", "seq-positive-4x2", BASELINE, "columns", "budget"),
    ("P2", "seq-positive-8x4", "grpo-16", "columns", "whole"),
    ("P3", "seq-balanced-8x4", "grpo-26", "columns", "whole"),
    ("P4", "memory-2", BASELINE, "columns-epochs", "budget"),
)
# Comparisons read besides every method against GRPO n=4 and the catalog's pairings: the memory baseline's controls.
CONTROLS = (("memory-2", "grpo-2-wide"), ("grpo-2-wide", BASELINE), ("memory-4", BASELINE))
FAMILY_ALPHA = 0.05
RATIO_RESAMPLES = 2000  # the whole-run ratios' paired bootstrap
ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = {
    "claims-table": ROOT / "benchmarks" / "README.md",
    "gpu-time-table": ROOT / "benchmarks" / "README.md",
    "when-it-pays": ROOT / "README.md",
}
MEASURED_STEPS = ROOT / "trl_ada" / "tools" / "measured_steps.py"  # what `trl-ada simulate` reads
SKILL_TASKS = ("columns", "columns-epochs")  # the tasks whose held-out rules split into skill and retention


def prepared(report: dict[str, Any], name: str) -> dict[str, Any]:
    """A report as this module reads it: named, its runs given skill and retention columns, its held-out strata."""
    strata = sf.measure_strata(sf.heldout_strata(report))
    return report | {"path": name, "strata": strata, "runs": sf.with_skill_and_retention(report["runs"])}


def load(paths: Sequence[pathlib.Path]) -> list[dict[str, Any]]:
    """The reports at ``paths``, `prepared`."""
    return [prepared(read_report(path), path.name) for path in paths]


def comparisons_in(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(method, partner) pairs a report can read: each method against GRPO n=4, the pairings and the controls."""
    keys = set(runs_by_method(report["runs"]))
    pairs = [(key, BASELINE) for key in sorted(keys) if key != BASELINE and BASELINE in keys]
    pairs += [(m, p) for m, p in (*PAIRINGS, *CONTROLS) if m in keys and p in keys and (m, p) not in pairs]
    return pairs


def read_comparison(report: dict[str, Any], method: str, partner: str, ratios: bool = True) -> dict[str, Any]:
    """One comparison in one report: per measure and frame the two-way estimate, its tests and the partner's floor;
    the whole-run ratios on the skill."""
    by_method = runs_by_method(report["runs"])
    base_runs, method_runs = by_method[partner], by_method[method]
    grid = {"tokens": report["settings"]["token_grid"], "steps": report["settings"]["step_grid"]}
    samples, size = report["settings"]["heldout_samples"], len(grid["tokens"])
    measures: dict[str, dict[str, Any]] = {m: {} for m in sf.MEASURES}
    for frame in sf.FRAMES:
        end = sf.frame_end(base_runs, method_runs, frame, grid)
        seeds, differences = sf.prompt_differences(base_runs, method_runs, frame, end, samples, size)
        for measure in sf.MEASURES:
            strata = report["strata"][measure]
            estimate = ps.two_way_estimate(*sf.restrict(differences, strata))
            measures[measure][frame] = estimate | {
                "end": end,
                "sign_flip_p": ps.sign_flip_test(estimate["per_seed"]),
                "seed_t_p": ps.t_test(estimate["per_seed"])["p"],
                "aa_floor": sf.aa_floor(base_runs, frame, end, samples, size, strata),
            }
    row: dict[str, Any] = {
        "report": report["path"],
        "seeds": seeds,
        "samples_per_prompt": {
            key: sum(run["samples_per_prompt"] for run in runs) / len(runs)
            for key, runs in ((method, method_runs), (partner, base_runs))
        },
        "measures": measures,
    }
    if ratios:
        row["whole_run_ratios"] = sf.whole_run_ratio_intervals(
            base_runs, method_runs, sf.COLUMNS["skill"], resamples=RATIO_RESAMPLES
        )
    if ratios and all("generated" in run for run in (*base_runs, *method_runs)):  # the runs' schedules recorded
        row["gpu"] = gt.gpu_readings(
            base_runs, method_runs, report["settings"], samples, report["strata"]["skill"], RATIO_RESAMPLES
        )
    return row


def read_all(reports: Sequence[dict[str, Any]], ratios: bool = True) -> list[dict[str, Any]]:
    """Every comparison, grouped by (method, partner, task): per warm model its reading, and the pooled estimate per
    measure and frame over the warm models that ran it."""
    grouped: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = {}
    for report in reports:
        task, warm = report["settings"]["task"], report["settings"]["warm_seed"]
        for method, partner in comparisons_in(report):
            per_warm = grouped.setdefault((method, partner, task), {})
            if warm not in per_warm:  # the first report holding the pair is read; REPORTS is in order
                per_warm[warm] = read_comparison(report, method, partner, ratios)
    rows = []
    for (method, partner, task), per_warm in grouped.items():
        pooled = {
            measure: {
                frame: ps.random_effects(
                    [w["measures"][measure][frame]["estimate"] for w in per_warm.values()],
                    [max(w["measures"][measure][frame]["se"], 1e-12) for w in per_warm.values()],
                )
                for frame in sf.FRAMES
            }
            for measure in sf.MEASURES
        }
        row = {
            "method": method,
            "partner": partner,
            "task": task,
            "warm_models": sorted(per_warm),
            "per_warm": {str(w): per_warm[w] for w in sorted(per_warm)},
            "pooled": pooled,
        }
        if all("gpu" in w for w in per_warm.values()):
            row["pooled_gpu"] = gt.pooled([w["gpu"] for w in per_warm.values()])
        rows.append(row)
    return rows


def family(rows: Sequence[dict[str, Any]], measure: str = "skill") -> list[dict[str, Any]]:
    """The pre-registered family on ``measure``: each comparison's pooled estimate in its frame, its p value, Holm's
    adjusted p over the family and the verdict; a comparison not yet run is listed as such."""
    found = {(r["method"], r["partner"], r["task"]): r for r in rows}
    entries = []
    for ident, method, partner, task, frame in PRIMARY:
        row = found.get((method, partner, task))
        entry: dict[str, Any] = {"id": ident, "method": method, "partner": partner, "task": task, "frame": frame}
        if row is not None:
            pooled = row["pooled"][measure][frame]
            per_warm = {w: r["measures"][measure][frame] for w, r in row["per_warm"].items()}
            entry |= {"warm_models": row["warm_models"], "pooled": pooled, "per_warm": per_warm}
        entries.append(entry)
    for e in entries:
        if "per_warm" in e:
            estimates = [w["estimate"] for w in e["per_warm"].values()]
            e["every_model_p"] = ps.every_model_p(estimates, [w["p"] for w in e["per_warm"].values()])
    adjusted = ps.holm({e["id"]: e["every_model_p"] for e in entries if "every_model_p" in e})
    pooled = ps.holm({e["id"]: e["pooled"]["p"] for e in entries if e.get("pooled", {}).get("pooled")})
    for e in entries:  # the target's test: the pooled interval above 0 after Holm
        if e["id"] in pooled:
            e["pooled_holm_p"] = pooled[e["id"]]
            e["pooled_above_zero"] = pooled[e["id"]] < FAMILY_ALPHA and e["pooled"]["estimate"] > 0
    for e in entries:
        if e["id"] in adjusted:
            e["holm_p"] = adjusted[e["id"]]
            e["verdict"] = ps.verdict(e["pooled"]["estimate"], e["holm_p"], len(e["per_warm"]), FAMILY_ALPHA)
        else:
            e["verdict"] = "not run"
    return entries


# --------------------------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------------------------


def _ci(result: dict[str, Any], fmt: str = "{:+.3f}") -> str:
    low, high = result["ci"]
    return f"{fmt.format(result['estimate'])} [{fmt.format(low)}, {fmt.format(high)}]"


def _p(value: float | None) -> str:
    return "" if value is None else ("<0.001" if value < 0.001 else f"{value:.3f}")


def _pair(p: float | None, adjusted: float | None) -> str:
    return "" if p is None or adjusted is None else f"{_p(p)}, {_p(adjusted)}"


def family_table(entries: Sequence[dict[str, Any]], measure: str) -> str:
    lines = [
        f"| id | {measure}: method vs partner (task, frame) | warm 0 | warm 1 | warm 2 | pooled [95%] "
        "| pooled p, Holm | p on every warm model, Holm | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        cells = [e.get("per_warm", {}).get(w) for w in ("0", "1", "2")]
        warm = [_ci(c) if c else "not run" for c in cells]
        pooled = e.get("pooled")
        lines.append(
            f"| {e['id']} | {e['method']} vs {e['partner']} ({e['task']}, {e['frame']}) | "
            + " | ".join(warm)
            + f" | {_ci(pooled) if pooled and pooled.get('pooled') else ''} "
            f"| {_pair(pooled and pooled.get('p'), e.get('pooled_holm_p'))} "
            f"| {_pair(e.get('every_model_p'), e.get('holm_p'))} | {e['verdict']} |"
        )
    return "\n".join(lines)


def _ratio_cell(cell: dict[str, Any] | None) -> str:
    if not cell:
        return ""
    if not cell["resolved"]:
        return "unresolved"
    return "never" if cell["ratio"] is None else f"{cell['ratio']:.2f}x"


def comparisons_table(rows: Sequence[dict[str, Any]]) -> str:
    """Every comparison per warm model: skill, retention and mix over [0, B]; skill over whole runs and at equal
    steps; tokens to 50/75/90% of the partner's whole-run skill gain."""
    lines = [
        "| task | warm | method vs partner | samples/prompt | skill, [0, B] | retention, [0, B] | mix, [0, B] "
        "| skill, whole runs | skill, equal steps | tokens to 50/75/90% of the partner's skill gain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for warm, r in row["per_warm"].items():
            m = r["measures"]
            spp = r["samples_per_prompt"]
            ratios = r.get("whole_run_ratios", {})
            lines.append(
                f"| {row['task']} | {warm} | {row['method']} vs {row['partner']} "
                f"| {spp[row['method']]:.1f} / {spp[row['partner']]:.1f} "
                f"| {_ci(m['skill']['budget'])} | {_ci(m['retention']['budget'])} | {_ci(m['mix']['budget'])} "
                f"| {_ci(m['skill']['whole'])} | {_ci(m['skill']['equal_steps'])} "
                f"| {' / '.join(_ratio_cell(ratios.get(f'tokens_to_{s}')) for s in (50, 75, 90))} |"
            )
    return "\n".join(lines)


NOTE = (
    "Skill: held-out correct-chain accuracy on the hard rules (`&`, `~`); retention: on the easy rules (`+`, `-`); "
    "mix: the four rules' mean (the metric before). Each cell: the mean over seeds of the paired difference (method "
    "minus partner) of the area under the accuracy curve over generated tokens [0, B] (B: GRPO n=4's budget), over "
    "the whole runs [0, T] (T: the fewest tokens any run of the two reached), or at the partner's last step, with "
    "its 95% t interval from seeds and held-out prompts together (`benchmarks/paired_stats.py`). Pooled: a "
    "random-effects mean over the warm models (Hartung-Knapp, K - 1 degrees of freedom). Holm: over the "
    "pre-registered family P1-P4 (`preregistration.md`). Tokens to X%: the method's generated tokens to reach X% of "
    "the partner's whole-run skill gain over the partner's own (paired bootstrap in the JSON)."
)


def retention_table(drops: dict[str, dict[str, Any]]) -> str:
    lines = ["| report | before | drop [95%] | lowest at step (mean) |", "|---|---|---|---|"]
    for path, drop in drops.items():
        lines.append(
            f"| {path} | {drop['before']:.3f} | {_ci(drop['drop'], '{:.3f}')} | {drop['lowest_step_mean']:.0f} |"
        )
    return "\n".join(lines)


def skill_section(rows: Sequence[dict[str, Any]], drop: dict[str, Any]) -> str:
    """A report's opening section: its comparisons on skill, retention and mix, and GRPO n=4's retention drop."""
    estimate = drop["drop"]
    interval = f" [{estimate['ci'][0]:.3f}, {estimate['ci'][1]:.3f}]" if "ci" in estimate else ""
    return (
        "**On the skill (hard rules), retention (easy rules) and their mix**, each comparison per seed and held-out "
        "prompt (`benchmarks/skill_report.py`):\n\n"
        + comparisons_table(rows)
        + f"\n\nGRPO n=4's retention drop: from {drop['before']:.3f} before training, down by "
        f"{estimate['estimate']:.3f}{interval} at its lowest checkpoint (mean over seeds, step "
        f"{drop['lowest_step_mean']:.0f} on average).\n\n" + NOTE
    )


def markdown(result: dict[str, Any]) -> str:
    parts = [
        "**The pre-registered family, on the skill:**",
        family_table(result["family"]["skill"], "skill"),
        "**The same comparisons on retention and on the mix (their own Holm over the four):**",
        family_table(result["family"]["retention"], "retention"),
        family_table(result["family"]["mix"], "mix"),
        "**Every comparison, per warm model:**",
        comparisons_table(result["comparisons"]),
        "**The claims table** (benchmarks/README.md; Holm over its rows, skill and retention separately):",
        skill_tables.claims_table(result),
        "**GPU time to the same skill, projected** (benchmarks/README.md; `benchmarks/gpu_time.py`):",
        skill_tables.gpu_table(result),
        "**When it pays** (README.md), by the group size a user runs today:",
        skill_tables.when_it_pays_table(result),
        "**GRPO n=4's retention drop** (the easy rules before training, minus their lowest checkpoint; mean over "
        "seeds, t interval):\n\n" + retention_table(result["retention_drop"]),
        NOTE,
    ]
    return "\n\n".join(parts) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", nargs="*", type=pathlib.Path, help="report JSONs (default: REPORTS)")
    parser.add_argument("--output", type=pathlib.Path, default=COLUMNS_RESULTS / "skill_verdicts")
    parser.add_argument(
        "--write-docs", action="store_true", help="also write the claims table and When it pays into the READMEs"
    )
    args = parser.parse_args(argv)
    paths = args.reports or [COLUMNS_RESULTS / name for name in REPORTS]
    reports = load(paths)
    rows = read_all(reports)
    result = {
        "command": "python benchmarks/skill_report.py",
        "reports": [r["path"] for r in reports],
        "preregistration": "benchmarks/results/columns/preregistration.md",
        "family": {measure: family(rows, measure) for measure in sf.MEASURES},
        "comparisons": rows,
        "retention_drop": {
            r["path"]: sf.retention_drop([run for run in r["runs"] if run["key"] == BASELINE]) for r in reports
        },
    }
    args.output.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.output.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    if args.write_docs:
        for path, marker, table in (
            (DOCS["claims-table"], "claims-table", skill_tables.claims_table(result)),
            (DOCS["gpu-time-table"], "gpu-time-table", skill_tables.gpu_table(result)),
            (DOCS["when-it-pays"], "when-it-pays", skill_tables.when_it_pays_table(result)),
        ):
            path.write_text(skill_tables.replace_block(path.read_text(), marker, table))
        MEASURED_STEPS.write_text(skill_tables.measured_steps_module(result))


if __name__ == "__main__":
    main()
