"""The learning benchmark's report: one row per method against GRPO n=4 (`summarise`), the paper's pairings
(`paired_comparisons`), the Markdown tables and the plot."""

from __future__ import annotations

import gzip
import json
import pathlib
import textwrap
from collections.abc import Sequence
from typing import Any

from learning_catalog import BASELINE, PAIRINGS, rename_report
from learning_stats import (
    BOOTSTRAP_RESAMPLES,
    BUDGET_FRACTIONS,
    COMPARISON_METRICS,
    GAIN_FRACTIONS,
    aa_floor,
    area_under_curve,
    checkpoint_curve,
    compare,
    crossing,
    heldout_aa_floor,
    heldout_at,
    heldout_comparison,
    mean,
    mean_curve,
    paired_bootstrap,
    paired_bootstrap_comparison,
    ratio,
    spread,
    up_to_budget,
)

from trl_ada.tools.heldout import PASS_AT_K


def read_report(path: pathlib.Path) -> dict[str, Any]:
    """A report's JSON, plain or gzipped (``.json.gz``), with every configuration under its current name
    (`learning_catalog.rename_report`): the files stay as written. The results keep a learning report's raw runs
    gzipped: a path ``X.json`` that is not there reads ``X.json.gz``, so a command that names a report as it was
    written still runs."""
    path = pathlib.Path(path)
    gzipped = path.with_name(path.name + ".gz")
    if path.suffix == ".json" and not path.exists() and gzipped.exists():
        path = gzipped
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as file:
        return rename_report(json.load(file))


def runs_by_method(runs: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Method key -> its runs, in the order the runs come."""
    by_method: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_method.setdefault(run["key"], []).append(run)
    return by_method


def summarise(
    runs: Sequence[dict[str, Any]], match_tokens: bool = False, heldout_samples: int | None = None
) -> list[dict[str, Any]]:
    """One row per method, leading with the comparison against GRPO n=4 (`learning_stats.compare`: the primary
    ``auc_delta``, then the accuracy differences at fixed budgets and the tokens and steps to fractions of GRPO's gain,
    each with its paired-bootstrap ``*_ci``); then final accuracy, tokens and seconds to reach GRPO n=4's final
    accuracy, zero-std shares; then, with ``heldout_samples`` (per held-out prompt), pass@k, accuracy per label and
    entropy where the runs recorded them (`learning_stats.heldout_at`), and those measures against GRPO n=4's at
    equal tokens and at equal steps with their paired intervals (``heldout_vs_baseline``,
    `learning_stats.heldout_comparison`).

    ``match_tokens``: every curve, and each seed's, is read only up to the tokens GRPO n=4's seed-averaged curve ends
    at (`up_to_budget`), so a method's final accuracy is its accuracy at the baseline's token budget. The comparison
    reads every curve up to that budget either way."""
    by_method = runs_by_method(runs)
    if BASELINE not in by_method:
        raise ValueError(f"the ratios are relative to {BASELINE}, which was not run")
    base_curve = mean_curve(by_method[BASELINE])
    budget = base_curve["tokens"][-1] if match_tokens else None
    curves = {key: up_to_budget(mean_curve(method_runs), budget) for key, method_runs in by_method.items()}
    target = curves[BASELINE]["accuracy"][-1]
    base_tokens = crossing(curves[BASELINE]["tokens"], curves[BASELINE]["accuracy"], target)
    base_seconds = crossing(curves[BASELINE]["seconds"], curves[BASELINE]["accuracy"], target)
    # The area is taken up to the fewest tokens (seconds) any run of any method reached, so every curve covers it.
    token_budget = min(run["checkpoints"][-1]["tokens"] for run in runs)
    second_budget = min(run["checkpoints"][-1]["seconds"] for run in runs)
    rows = []
    for key, method_runs in by_method.items():
        curve = curves[key]
        seed_curves = [up_to_budget(checkpoint_curve(run), budget) for run in method_runs]
        tokens = crossing(curve["tokens"], curve["accuracy"], target)
        seconds = crossing(curve["seconds"], curve["accuracy"], target)

        def per_seed(x: str, seed_curves: list[dict[str, list[float]]] = seed_curves) -> list[float | None]:
            return [crossing(c[x], c["accuracy"], target) for c in seed_curves]

        def areas(x: str, area_budget: float, method_runs: list[dict[str, Any]] = method_runs) -> list[float]:
            return [
                area_under_curve(
                    [c[x] for c in run["checkpoints"]], [c["accuracy"] for c in run["checkpoints"]], area_budget
                )
                for run in method_runs
            ]

        rows.append(
            {
                "key": key,
                "method": method_runs[0]["method"],
                "seeds": [run["seed"] for run in method_runs],
                **comparison_with(by_method[BASELINE], method_runs),
                "target_accuracy": target,
                "token_budget": budget,
                "steps": method_runs[0]["checkpoints"][-1]["step"],
                "steps_at_budget": curve["step"][-1],
                "accuracy_before": curve["accuracy"][0],
                "final_accuracy": curve["accuracy"][-1],
                "final_accuracy_per_seed": [c["accuracy"][-1] for c in seed_curves],
                "tokens_to_target": tokens,
                "tokens_ratio": ratio(tokens, base_tokens),
                "seconds_to_target": seconds,
                "seconds_ratio": ratio(seconds, base_seconds),
                "tokens_total": curve["tokens"][-1],
                "seconds_total": curve["seconds"][-1],
                "tokens_to_target_per_seed": spread(per_seed("tokens")),
                "seconds_to_target_per_seed": spread(per_seed("seconds")),
                "auc_tokens": spread(areas("tokens", token_budget)),
                "auc_seconds": spread(areas("seconds", second_budget)),
                "auc_token_budget": token_budget,
                "auc_second_budget": second_budget,
                "samples_per_prompt": mean([run["samples_per_prompt"] for run in method_runs]),
                "completions_per_trained_prompt": mean([run["completions_per_trained_prompt"] for run in method_runs]),
                "refills_per_step": mean([run["refills_per_step"] for run in method_runs]),
                "skipped_per_step": mean([run["skipped_per_step"] for run in method_runs]),
                "frac_zero_std": mean([run["frac_zero_std"] for run in method_runs]),
                "frac_zero_std_first_round": mean([run["frac_zero_std_first_round"] for run in method_runs]),
                **paired_bootstrap(by_method[BASELINE], method_runs, match_tokens=match_tokens),
                **({} if heldout_samples is None else heldout_at(method_runs, curve["step"][-1], heldout_samples)),
            }
        )
        if heldout_samples is not None and key != BASELINE:
            rows[-1]["heldout_vs_baseline"] = heldout_comparison(by_method[BASELINE], method_runs, heldout_samples)
    return rows


def comparison_with(base_runs: Sequence[dict[str, Any]], method_runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every metric of `learning_stats.compare` for ``method_runs`` against ``base_runs`` (seed-averaged curves) with
    its paired-bootstrap ``<metric>_ci``, and the budget it was read at."""
    comparison = compare(mean_curve(base_runs), mean_curve(method_runs))
    intervals = paired_bootstrap_comparison(base_runs, method_runs)
    lead: dict[str, Any] = {}
    for name in COMPARISON_METRICS:
        lead |= {name: comparison[name], f"{name}_ci": intervals[f"{name}_ci"]}
    return lead | {
        "comparison_token_budget": comparison["budget"],
        "short_of_budget": comparison["short_of_budget"],
        "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
    }


def paired_comparisons(
    runs: Sequence[dict[str, Any]], heldout_samples: int | None = None
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each of `PAIRINGS` whose method and reference both ran, compared as `summarise` compares a method with GRPO n=4
    (`comparison_with`; the held-out measures at equal tokens and equal steps, ``heldout_vs_baseline``) with the
    reference's runs in the baseline's place: the reference's token budget, gain and last step. One row per pairing,
    ``reference`` and ``reference_method`` naming the reference, ``seeds`` the seeds both ran; and per reference its
    A/A floors, its own seeds split against themselves (``aa_floor``, ``heldout_aa_floor``)."""
    by_method = runs_by_method(runs)
    rows, floors = [], {}
    for key, reference in PAIRINGS:
        if key not in by_method or reference not in by_method:
            continue
        base_runs, method_runs = by_method[reference], by_method[key]
        row = {
            "key": key,
            "method": method_runs[0]["method"],
            "reference": reference,
            "reference_method": base_runs[0]["method"],
            "seeds": sorted({run["seed"] for run in method_runs} & {run["seed"] for run in base_runs}),
            **comparison_with(base_runs, method_runs),
        }
        if heldout_samples is not None:
            row["heldout_vs_baseline"] = heldout_comparison(base_runs, method_runs, heldout_samples)
        rows.append(row)
        if reference not in floors:
            floors[reference] = {
                "aa_floor": aa_floor(base_runs),
                "heldout_aa_floor": None if heldout_samples is None else heldout_aa_floor(base_runs, heldout_samples),
            }
    return rows, floors


def markdown_table(
    rows: Sequence[dict[str, Any]],
    floor: dict[str, Any] | None = None,
    heldout_floor: dict[str, Any] | None = None,
) -> str:
    """The report's tables: the comparison with GRPO n=4 (`comparison_table`, the primary metric first) with the A/A
    floor (`aa_floor`) and what the columns mean under it; the details (`details_table`); and the held-out measures
    besides accuracy where the runs recorded them (`heldout_table`), compared with GRPO n=4's at equal tokens and
    equal steps (`heldout_comparison_table`, with their A/A floor `heldout_floor`)."""
    parts = [comparison_table(rows, floor), comparison_note(rows, floor), details_table(rows)]
    for table in (heldout_table(rows), heldout_comparison_table(rows, heldout_floor)):
        if table is not None:
            parts.append(table)
    return "\n\n".join(parts)


def pairings_section(rows: Sequence[dict[str, Any]], floors: dict[str, dict[str, Any]]) -> str | None:
    """The `paired_comparisons`, one group per reference: its comparison table and held-out comparison table, each
    with the reference's own A/A floor; None when no pairing ran."""
    if not rows:
        return None
    parts = [
        "**Against the paper's pairings.** Each method against the method the paper pairs it with (for an ablation: "
        "its variant without the part under test), in the statistics above with that reference in GRPO n=4's place "
        "(its token budget, its gain, its last step); the A/A floor is the reference's own seeds split against "
        "themselves."
    ]
    for reference in dict.fromkeys(row["reference"] for row in rows):
        group = [row for row in rows if row["reference"] == reference]
        name = group[0]["reference_method"]
        parts.append(f"Against {name} (`{reference}`):")
        parts.append(comparison_table(group, floors[reference]["aa_floor"], reference=name))
        floor = floors[reference]["heldout_aa_floor"]
        heldout = heldout_comparison_table(group, floor, reference=name, with_note=False)
        if heldout is not None:
            parts.append(heldout)
    return "\n\n".join(parts)


def interval_text(ci: list[float | None] | None, fmt: str) -> str:
    if ci is None:
        return ""
    return " [" + ", ".join("inf" if v is None else fmt.format(v) for v in ci) + "]"


def _delta_cell(value: float | None, ci: list[float | None] | None) -> str:
    return "" if value is None else f"{value:+.3f}{interval_text(ci, '{:+.3f}')}"


def _ratio_cell(value: float | None, ci: list[float | None] | None) -> str:
    return ("not reached" if value is None else f"{value:.2f}x") + interval_text(ci, "{:.2f}")


def _floor_cell(cell: dict[str, Any], fmt: str) -> str:
    text = interval_text(cell["range"], fmt).strip()
    never = cell.get("never_reached")
    return text + (f" ({never:.0%} never)" if never else "")


_PERCENT = {fraction: round(fraction * 100) for fraction in (*BUDGET_FRACTIONS, *GAIN_FRACTIONS)}
DELTA_METRICS = (*(f"acc_delta_at_{_PERCENT[f]}" for f in BUDGET_FRACTIONS), "acc_delta_equal_steps")
TIMES_METRICS = (
    *(f"tokens_to_{_PERCENT[f]}_ratio" for f in GAIN_FRACTIONS),
    *(f"steps_to_{_PERCENT[f]}_ratio" for f in GAIN_FRACTIONS),
    "tokens_to_final_ratio",
)


def comparison_table(
    rows: Sequence[dict[str, Any]], floor: dict[str, Any] | None = None, reference: str = "GRPO n=4"
) -> str:
    """Each method against GRPO n=4 (or the ``reference`` its rows were compared with), paired over seeds: the primary
    Δ AUC, then the secondaries, each with its 95% interval; the A/A floor's 95% ranges as the last row. Cells of
    metrics a row lacks are blank."""
    lines = [
        "| method | seeds | **Δ AUC** vs tokens [95% CI] "
        + "".join(f"| Δ acc. at {_PERCENT[f]}% of budget " for f in BUDGET_FRACTIONS)
        + "| Δ acc. at equal steps "
        + "".join(f"| tokens to {_PERCENT[f]}% of gain " for f in GAIN_FRACTIONS)
        + "".join(f"| steps to {_PERCENT[f]}% of gain " for f in GAIN_FRACTIONS)
        + "| tokens to final acc. (secondary) |",
        "|---" * (3 + len(DELTA_METRICS) + len(TIMES_METRICS)) + "|",
    ]
    for r in rows:
        name = r["method"] + (" †" if r.get("short_of_budget") else "")
        if r["key"] == BASELINE:
            blank = " |" * (len(DELTA_METRICS) + len(TIMES_METRICS))
            lines.append(f"| {name} | {len(r['seeds'])} | baseline |{blank}")
            continue
        cells = [_delta_cell(r.get("auc_delta"), r.get("auc_delta_ci"))]
        cells += [_delta_cell(r.get(m), r.get(f"{m}_ci")) for m in DELTA_METRICS]
        cells += ["" if m not in r else _ratio_cell(r[m], r.get(f"{m}_ci")) for m in TIMES_METRICS]
        lines.append(f"| {name} | {len(r['seeds'])} | " + " | ".join(cells) + " |")
    if floor is not None:
        cells = [_floor_cell(floor[m], "{:+.3f}") for m in ("auc_delta", *DELTA_METRICS)]
        cells += [_floor_cell(floor[m], "{:.2f}") for m in TIMES_METRICS]
        lines.append(
            f"| *A/A floor: {reference} against itself, 95% range* | {floor['half']} vs {floor['half']} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def comparison_note(rows: Sequence[dict[str, Any]], floor: dict[str, Any] | None = None) -> str:
    """What the comparison table's columns mean, and the A/A floor's settings (or why there is none)."""
    base = rows[0]
    budget = base.get("comparison_token_budget", float("nan"))
    text = (
        "Δ: the method minus GRPO n=4, in accuracy (+0.010 is one point), each read off its seed-averaged curve up to "
        f"the budget: GRPO n=4's seed-averaged tokens at its last checkpoint, {budget:,.0f}. Δ AUC, the primary "
        "metric: the difference in mean accuracy over tokens 0 to that budget. Δ acc. at equal steps: at GRPO n=4's "
        "last step, whatever tokens each spent by then. Ratios: the method's tokens (steps) "
        "to reach the given share of GRPO n=4's gain (its final minus its start accuracy) over GRPO n=4's own; not "
        "reached: not within the budget. [95% CI]: paired bootstrap over seeds, "
        f"{base.get('bootstrap_resamples', BOOTSTRAP_RESAMPLES)} resamples, each with its own budget and gain."
    )
    if any(r.get("short_of_budget") for r in rows):
        text += " †: its curve ends before the budget; its last accuracy is held up to it."
    if floor is not None:
        text += (
            f"\n\nA/A floor: GRPO n=4's {floor['seeds']} seeds split at random into two halves of {floor['half']}, "
            f"{floor['splits']} times, one half taken as the method (unpaired): a difference inside its range is no "
            "larger than GRPO n=4's seeds produce against each other; never: the share of splits that never reach."
        )
    elif len(base["seeds"]) < 4:
        text += f"\n\nA/A floor: cannot be computed from {len(base['seeds'])} GRPO n=4 seeds (needs at least 4)."
    return text


def heldout_table(rows: Sequence[dict[str, Any]]) -> str | None:
    """pass@k, the policy's mean token entropy and accuracy per label at each method's last checkpoint within the
    budget (seed means); None when no run recorded any of them (reports from before they were measured)."""

    def number(value: float | None, fmt: str = "{:.3f}") -> str:
        return "" if value is None else fmt.format(value)

    recorded = [
        r
        for r in rows
        if any(v is not None for v in (r.get("pass_at_k") or {}).values())
        or r.get("entropy") is not None
        or r.get("accuracy_by_label")
    ]
    if not recorded:
        return None
    ks = [str(k) for k in PASS_AT_K]
    lines = [
        "| method | at step | " + " | ".join(f"pass@{k}" for k in ks) + " | mean token entropy (before → at step) "
        "| accuracy per label |",
        "|---" * (4 + len(ks)) + "|",
    ]
    for r in rows:
        passes = [number((r.get("pass_at_k") or {}).get(k)) for k in ks]
        entropy = ""
        if r.get("entropy") is not None:
            entropy = f"{number(r.get('entropy_before'))} → {r['entropy']:.3f}"
        labels = ", ".join(f"{label}: {value:.3f}" for label, value in (r.get("accuracy_by_label") or {}).items())
        step = "" if r.get("heldout_step") is None else str(r["heldout_step"])
        lines.append(f"| {r['method']} | {step} | " + " | ".join(passes) + f" | {entropy} | {labels} |")
    return "\n".join(lines)


HELDOUT_FRAMES = {"equal_tokens": "equal tokens", "equal_steps": "equal steps"}


def _measure_order(name: str) -> tuple[int, int, str]:
    """pass@k by k, then entropy, then accuracy per label by label."""
    if name.startswith("pass@"):
        return (0, int(name.removeprefix("pass@")), "")
    return (1, 0, "") if name == "entropy" else (2, 0, name)


def heldout_comparison_table(
    rows: Sequence[dict[str, Any]],
    heldout_floor: dict[str, Any] | None = None,
    reference: str = "GRPO n=4",
    with_note: bool = True,
) -> str | None:
    """pass@k, entropy and accuracy per label against GRPO n=4's (or the ``reference`` its rows were compared with),
    at equal tokens and at equal steps: each Δ with its paired 95% interval, the A/A floor's ranges last; under it,
    unless ``with_note`` is False, what the cells mean. None when no row carries the comparison."""
    compared = [r for r in rows if any((r.get("heldout_vs_baseline") or {}).values())]
    if not compared:
        return None
    measured = set.union(*(set(r["heldout_vs_baseline"][frame]) for r in compared for frame in HELDOUT_FRAMES))
    names = sorted(measured, key=_measure_order)
    if not names:  # runs from before the evaluation recorded these measures
        return None
    lines = [
        "| method | frame | " + " | ".join(f"Δ {name}" for name in names) + " |",
        "|---" * (2 + len(names)) + "|",
    ]
    for r in compared:
        for frame, words in HELDOUT_FRAMES.items():
            cells = [r["heldout_vs_baseline"][frame].get(name) for name in names]
            text = ["" if c is None else _delta_cell(c["delta"], c["ci"]) for c in cells]
            lines.append(f"| {r['method']} | {words} | " + " | ".join(text) + " |")
    if heldout_floor is not None:
        for frame, words in HELDOUT_FRAMES.items():
            ranges = [heldout_floor[frame].get(name) for name in names]
            text = ["" if c is None else interval_text(c, "{:+.3f}").strip() for c in ranges]
            lines.append(f"| *A/A floor, 95% range* | {words} | " + " | ".join(text) + " |")
    if not with_note:
        return "\n".join(lines)
    note = (
        "Held-out measures against GRPO n=4's: the mean over seeds of the method's value minus GRPO n=4's on the same "
        "seed, each read off its checkpoints by linear interpolation at GRPO n=4's seed-averaged token budget (equal "
        "tokens) or at its last step (equal steps); [95% CI]: paired bootstrap over seeds. pass@k: the unbiased "
        "estimator over the held-out samples; entropy: the policy's mean token entropy on held-out samples (nats); "
        "accuracy:<rule>: held-out accuracy on that rule's prompts."
    )
    return "\n".join(lines) + "\n\n" + note


def details_table(rows: Sequence[dict[str, Any]]) -> str:
    """Final accuracy, tokens and seconds to GRPO n=4's final accuracy (the benchmark's first headline), areas,
    completions per trained prompt and zero-std groups."""

    def reach(value: float | None, ratio: float | None, fmt: str, ci: list[float | None] | None = None) -> str:
        if value is None:
            return "not reached"
        if ratio is None:
            return fmt.format(value)
        return fmt.format(value) + f" ({ratio:.2f}x{interval(ci, '{:.2f}')})"

    def interval(ci: list[float | None] | None, fmt: str) -> str:
        if ci is None:
            return ""
        return " [" + ", ".join("inf" if v is None else fmt.format(v) for v in ci) + "]"

    def seeds_cell(cell: dict[str, Any], fmt: str) -> str:
        if cell["mean"] is None:
            return "none reached"
        text = fmt.format(cell["mean"]) + ("" if cell["std"] is None else " ± " + fmt.format(cell["std"]))
        return text + (f" ({cell['missing']} not)" if cell["missing"] else "")

    lines = [
        "| method | steps | final accuracy [95% CI] (per seed) | tokens to reach target (ratio [95% CI]) "
        "| per seed: mean ± sd | seconds to reach target (ratio [95% CI]) | AUC vs tokens | AUC vs seconds "
        "| completions / trained prompt | zero-std groups (first round) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per_seed = ", ".join(f"{a:.3f}" for a in r["final_accuracy_per_seed"])
        final = f"{r['final_accuracy']:.3f}{interval(r.get('final_accuracy_ci'), '{:.3f}')}"
        steps = f"{r['steps_at_budget']:.0f}" + (f" of {r['steps']}" if r["steps_at_budget"] < r["steps"] else "")
        lines.append(
            f"| {r['method']} | {steps} | {final} ({per_seed}) "
            f"| {reach(r['tokens_to_target'], r['tokens_ratio'], '{:,.0f}', r.get('tokens_ratio_ci'))} "
            f"| {seeds_cell(r['tokens_to_target_per_seed'], '{:,.0f}')} "
            f"| {reach(r['seconds_to_target'], r['seconds_ratio'], '{:.1f}', r.get('seconds_ratio_ci'))} "
            f"| {seeds_cell(r['auc_tokens'], '{:.3f}')} | {seeds_cell(r['auc_seconds'], '{:.3f}')} "
            f"| {r['completions_per_trained_prompt']:.2f} "
            f"| {r['frac_zero_std']:.2f} ({r['frac_zero_std_first_round']:.2f}) |"
        )
    return "\n".join(lines)


def testbed_line(testbed: dict[str, Any]) -> str:
    def length(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    return (
        f"{testbed['prompts']} training prompts x {testbed['samples_per_prompt']} samples, accuracy "
        f"{testbed['accuracy']:.3f}; all right at n=4 {testbed['frac_all_correct_n4']:.2f}, all wrong at n=4 "
        f"{testbed['frac_all_wrong_n4']:.2f}; mean length right {length(testbed['mean_len_right'])}, wrong "
        f"{length(testbed['mean_len_wrong'])} tokens, p90/p10 of per-prompt mean length "
        f"{testbed['len_p90_over_p10']:.2f}, truncated {testbed['frac_truncated']:.3f}; prompts whose samples all "
        f"agree hold {testbed.get('frac_tokens_prompts_always_agree', float('nan')):.2f} of the tokens; "
        f"{testbed['visits_per_prompt']:.2f} visits per prompt (min {testbed['visits_per_prompt_min']})"
        + (instrument_line(testbed) if "frac_hard_low_p" in testbed else "")
    )


def instrument_line(testbed: dict[str, Any]) -> str:
    """The instrument's properties (the rules task's, docs/moved.md; `testbeds.columns.instrument`) in
    one clause."""
    flawed = testbed["flawed_rewarded_share_low_p"]
    low, high = testbed.get("hard_band", (0.01, 0.1))  # the rules task's reports predate the field
    rules = ", ".join(
        f"{rule} {cell['correct_chain_accuracy']:.2f}/{cell['median_correct_p']:.3f}/{cell['frac_zero']:.2f}"
        for rule, cell in testbed["by_rule"].items()
    )
    data = ""
    if "answer_prior_max" in testbed:
        data = (
            f"; the largest reward share of one constant answer on any rule {testbed['answer_prior_max']:.3f}, "
            f"held-out hard items also in training {testbed['heldout_fact_overlap']:.3f}"
        )
    return (
        f"; from {testbed['instrument_samples_per_prompt']} samples a prompt: flawed share of rewarded samples at "
        f"p <= 0.1 {'-' if flawed is None else f'{flawed:.3f}'} (of {testbed['rewarded_low_p']}), hard prompts at a "
        f"correct-chain p in ({low:.3g}, {high:.3g}] {testbed['frac_hard_low_p']:.2f} of all "
        f"(hard {testbed['frac_hard']:.2f}, hard at 0 {testbed['frac_hard_zero']:.2f}); "
        f"{testbed['distinct_prompts']} distinct prompts; per rule, correct-chain accuracy/median p/share at 0: "
        f"{rules}{data}"
    )


def plot(runs: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]], path: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    target = rows[0]["target_accuracy"]
    for index, row in enumerate(rows):
        method_runs = [run for run in runs if run["key"] == row["key"]]
        curve = mean_curve(method_runs)
        color = plt.get_cmap("tab20")(index % 20)
        for axis, x in zip(axes, ("tokens", "seconds"), strict=True):
            for run in method_runs:
                xs = [c[x] for c in run["checkpoints"]]
                axis.plot(xs, [c["accuracy"] for c in run["checkpoints"]], color=color, alpha=0.25, linewidth=0.8)
            style = ("-", "--", ":")[index // 7 % 3]  # colours alone do not tell 14 methods apart
            axis.plot(curve[x], curve["accuracy"], color=color, linestyle=style, linewidth=2, label=row["method"])
    for axis, label in zip(
        axes, ("completion tokens generated", "training wall time (s), evaluation excluded"), strict=True
    ):
        axis.axhline(target, color="grey", linestyle="--", linewidth=1)
        axis.set_xlabel(label)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("held-out sampled accuracy")
    axes[0].legend(title="mean of seeds (thin: each seed)", fontsize=7)
    fig.suptitle(textwrap.fill(title, 110), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
