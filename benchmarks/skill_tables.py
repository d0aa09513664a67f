"""The tables users read, made from `skill_report`'s result (benchmarks/results/columns/skill_verdicts.json): the
claims table of benchmarks/README.md and README.md's "When it pays", each written between markers by
``python benchmarks/skill_report.py --write-docs`` and checked against the JSON by tests/test_docs.py.

Each cell is a comparison on the skill (or retention) in one frame: pooled over the warm models that ran it
(random effects) where there are two or more, else the one warm model's estimate; every interval is the two-way t
interval of `paired_stats`. The claims table's verdicts are after Holm's correction over its rows (one test per row,
on the skill; retention has its own family).
"""

from __future__ import annotations

from typing import Any

import paired_stats as ps
from learning_catalog import BASELINE
from learning_report import interval_text

# (claim, method, partner, task, frame): one row each, in the order the table shows them.
CLAIMS: tuple[tuple[str, str, str, str, str], ...] = (
    ("up to 2x faster at the same inference: the paper's pairing", "seq-positive-8x4", "grpo-16", "columns", "whole"),
    ("the same", "seq-balanced-8x4", "grpo-26", "columns", "whole"),
    ("the same, at equal samples per prompt", "seq-positive-8x4", "grpo-11", "columns", "whole"),
    ("the same, at equal samples per prompt", "seq-balanced-8x4", "grpo-20", "columns", "whole"),
    ("the same, at equal samples per prompt", "est-8", "grpo-8", "columns-epochs", "whole"),
    ("better final performance", "seq-positive-4x2", BASELINE, "columns", "equal_steps"),
    ("the same", "seq-positive-8x4", "grpo-16", "columns", "equal_steps"),
    ("the same", "seq-balanced-8x4", "grpo-26", "columns", "equal_steps"),
    ("the same", "est-8", "grpo-8", "columns-epochs", "equal_steps"),
    ("(ours) more skill per generated token than GRPO n=4", "seq-positive-4x2", BASELINE, "columns", "budget"),
    ("the same, where prompts recur", "memory-2", BASELINE, "columns-epochs", "budget"),
    ("the same", "est-8", BASELINE, "columns-epochs", "budget"),
    ("the same", "seq-positive-8x4", BASELINE, "columns", "budget"),
    ("the same", "seq-balanced-8x4", BASELINE, "columns", "budget"),
    ("the same", "dapo-4", BASELINE, "columns-epochs", "budget"),
    ("the same", "grpo-4-select", BASELINE, "columns-epochs", "budget"),
    ("the same", "grpo-4-pilot", BASELINE, "columns-epochs", "budget"),
    ("the same (larger groups)", "grpo-8", BASELINE, "columns-epochs", "budget"),
    ("the same (larger groups)", "grpo-16", BASELINE, "columns", "budget"),
    ("the same (larger groups)", "grpo-26", BASELINE, "columns", "budget"),
    ("the memory baseline's controls", "memory-2", "grpo-2-wide", "columns-epochs", "budget"),
    ("the same", "memory-4", BASELINE, "columns-epochs", "budget"),
    ("the same", "grpo-2-wide", BASELINE, "columns-epochs", "budget"),
    ("the theory's 1/sqrt(p) weights, on against off", "est-8", "est-8-noweight", "columns-epochs", "whole"),
    ("the same", "seq-positive-8x4-weight", "seq-positive-8x4", "columns", "whole"),
    ("the same", "seq-balanced-8x4-weight", "seq-balanced-8x4", "columns", "whole"),
    ("Est's budgets by 1/sqrt(p) against the authors' 1/p", "est-8", "est-8-invp", "columns-epochs", "whole"),
)
FRAME_WORDS = {
    "budget": "per token, [0, B]",
    "whole": "per token, whole runs",
    "equal_steps": "at equal steps",
}


def _find(result: dict[str, Any], method: str, partner: str, task: str) -> dict[str, Any] | None:
    return next(
        (r for r in result["comparisons"] if (r["method"], r["partner"], r["task"]) == (method, partner, task)),
        None,
    )


def reading(row: dict[str, Any], measure: str, frame: str) -> dict[str, Any]:
    """A comparison's estimate on ``measure`` in ``frame``: the pooled one over two or more warm models, else the one
    warm model's (with ``warm_models``)."""
    pooled = row["pooled"][measure][frame]
    if pooled.get("pooled"):
        return pooled | {"warm_models": row["warm_models"]}
    (only,) = row["per_warm"].values()
    return only["measures"][measure][frame] | {"warm_models": row["warm_models"]}


def cell(result: dict[str, Any] | None, fmt: str = "{:+.3f}") -> str:
    if result is None:
        return "not run yet"
    low, high = result["ci"]
    return f"{fmt.format(result['estimate'])} [{fmt.format(low)}, {fmt.format(high)}]"


def claims_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each claim row with its skill, retention and mix readings, the skill's and retention's p values and their Holm
    adjustment over the rows that ran (two families), and the verdicts."""
    rows = []
    for claim, method, partner, task, frame in CLAIMS:
        found = _find(result, method, partner, task)
        row: dict[str, Any] = {"claim": claim, "method": method, "partner": partner, "task": task, "frame": frame}
        if found is not None:
            row |= {m: reading(found, m, frame) for m in ("skill", "retention", "mix")}
            per_warm = found["per_warm"]
            row["per_warm_skill"] = {w: r["measures"]["skill"][frame]["estimate"] for w, r in per_warm.items()}
            row["sign_flip_p"] = {w: r["measures"]["skill"][frame]["sign_flip_p"] for w, r in per_warm.items()}
            row["floor"] = {w: r["measures"]["skill"][frame]["aa_floor"] for w, r in per_warm.items()}
        rows.append(row)
    for measure in ("skill", "retention"):
        tested = {}
        for i, r in enumerate(rows):
            found = _find(result, r["method"], r["partner"], r["task"])
            if found is not None:
                per_warm = [w["measures"][measure][r["frame"]] for w in found["per_warm"].values()]
                r[f"{measure}_p"] = ps.every_model_p([w["estimate"] for w in per_warm], [w["p"] for w in per_warm])
                tested[i] = r[f"{measure}_p"]
        for i, adjusted in ps.holm(tested).items():
            rows[i][f"{measure}_holm_p"] = adjusted
            models = len(rows[i][measure]["warm_models"])
            rows[i][f"{measure}_verdict"] = ps.verdict(rows[i][measure]["estimate"], adjusted, models)
    return rows


def _p(value: float) -> str:
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def claims_table(result: dict[str, Any]) -> str:
    lines = [
        "| claim | method vs partner (task) | frame | warm models | **skill** Δ [95%] | p, Holm p | verdict | "
        "retention Δ [95%] | verdict | mix Δ [95%] | GPU time to 90% of the partner's skill gain, projected: "
        "latency-bound · throughput-bound 1.5B |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in claims_rows(result):
        head = f"| {r['claim']} | `{r['method']}` vs `{r['partner']}` (`{r['task']}`) | {FRAME_WORDS[r['frame']]} "
        if "skill" not in r:
            lines.append(head + "| not run yet | | | | | | | |")
            continue
        warm = ", ".join(str(w) for w in r["skill"]["warm_models"])
        lines.append(
            head + f"| {warm} | {cell(r['skill'])} | {_p(r['skill']['p'])} / {_p(r['skill_holm_p'])} "
            f"| {r['skill_verdict']} | {cell(r['retention'])} | {r['retention_verdict']} | {cell(r['mix'])} "
            f"| {gpu_pair_cell(_find(result, r['method'], r['partner'], r['task']))} |"
        )
    return "\n".join(lines)


# README's "When it pays": (the group a user runs today, the configuration, task, frame of the per-token column), each
# named by its catalog key. The per-token frame is GRPO n=4's budget against GRPO n=4, else the whole runs.
WHEN_IT_PAYS: tuple[tuple[str, str, str, str], ...] = (
    (BASELINE, "seq-positive-4x2", "columns", "budget"),
    (BASELINE, "memory-4", "columns-epochs", "budget"),
    (BASELINE, "memory-2", "columns-epochs", "budget"),
    (BASELINE, "est-8", "columns-epochs", "budget"),
    (BASELINE, "seq-positive-8x4", "columns", "budget"),
    (BASELINE, "seq-balanced-8x4", "columns", "budget"),
    ("grpo-8", "est-8", "columns-epochs", "whole"),
    ("grpo-16", "seq-positive-8x4", "columns", "whole"),
    ("grpo-16", "seq-balanced-8x4", "columns", "whole"),
)
# What each configuration is, after its name (its catalog key, docs/names.md) where it first appears.
CONFIGURATIONS = {
    "seq-positive-4x2": "Seq in rounds of 4, at most 2, exit rule positive (a prompt stops at its first right answer)",
    "memory-4": (
        "your batch, each completion's advantage its reward minus its prompt's pass rate remembered from earlier "
        'visits instead of the group mean (`advantage_baseline="memory"`, `pass_rate_decay=0.7`); measured where '
        "prompts recur (`columns-epochs`: each prompt visited 4 times)"
    ),
    "memory-2": "the same baseline in groups of 2 over twice the prompts a step (each prompt visited 8 times)",
    "est-8": (
        "Reinforce-Ada-Est: one generation call, 8 samples per prompt on average split by 1/sqrt(p) of each prompt's "
        "remembered pass rate p, advantages weighted by 1/sqrt(p); measured over four passes (`columns-epochs`)"
    ),
    "seq-positive-8x4": "Seq in rounds of 8, at most 4, exit rule positive (a prompt stops at its first right answer)",
    "seq-balanced-8x4": (
        "the paper's defaults: Seq in rounds of 8, at most 4, exit rule balanced (a prompt stops once it has 2 right "
        "and 2 wrong answers)"
    ),
}


# The GPU time columns (`gpu_time`): the latency-bound regime (the H200's records; the same at every shape) and the
# throughput-bound one at Qwen2.5-1.5B's shape (the paper's setup); the full table has the 0.5B too.
GPU_HEADLINE = ("latency:0.5b", "throughput:1.5b")


def gpu_ratio_cell(found: dict[str, Any] | None, key: str) -> str:
    """The method's projected GPU time to 90% of the partner's whole-run skill gain over the partner's, pooled over
    the warm models, with its interval."""
    gpu = (found or {}).get("pooled_gpu", {}).get(key)
    if gpu is None:
        return "not run yet"
    if gpu["ratio_90"] is None:
        return unpooled_ratio_text(found, key)
    ratio = gpu["ratio_90"]
    return f"{ratio['ratio']:.2f}x [{ratio['ci'][0]:.2f}, {ratio['ci'][1]:.2f}]"


def unpooled_ratio_text(found: dict[str, Any], key: str) -> str:
    """Why the 90% GPU-time ratio has no pooled value (`gpu_time.pooled_ratio`), in words a reader cannot take for
    another: the warm models where the method never reached the target, or, where every warm model reached it but an
    interval has no upper end (its resamples did not all reach it), each warm model's own ratio and interval."""
    per_warm = {warm: w["gpu"][key]["ratios"]["gpu_to_90"] for warm, w in found["per_warm"].items()}
    never = [warm for warm, ratio in per_warm.items() if ratio["ratio"] is None]
    reached = {warm: ratio for warm, ratio in per_warm.items() if ratio["ratio"] is not None}

    readings = " and ".join(
        f"{ratio['ratio']:.2f}x{interval_text(ratio['ci'], '{:.2f}') or ' [unresolved]'} on {warm}"
        for warm, ratio in reached.items()
    )
    if never:
        label = "warm models" if len(never) > 1 else "warm model"
        return f"not reached on {label} {', '.join(never)}" + (f" ({readings})" if readings else "")
    return f"not pooled, an interval open: {readings}"


def gpu_pair_cell(found: dict[str, Any] | None) -> str:
    """`gpu_ratio_cell` in the two headline regimes (`GPU_HEADLINE`)."""
    return " · ".join(gpu_ratio_cell(found, key) for key in GPU_HEADLINE)


def model_range_cell(found: dict[str, Any], key: str) -> str:
    """The 90% ratio's range over the step-time model's leave-one-out refits, widest over the warm models."""
    ranges = [w["gpu"][key]["model_range_90"] for w in found["per_warm"].values()]
    if any(r is None for r in ranges):
        return "-"
    return f"{min(r[0] for r in ranges):.2f}-{max(r[1] for r in ranges):.2f}"


def gpu_table(result: dict[str, Any]) -> str:
    """Every claims comparison (method, partner, task) once: per regime and shape, the projected GPU time to 90% of
    the partner's skill gain (pooled [95%], then its range over the model's refits) and the skill per GPU-second
    (the area difference over the GPU-seconds both ran, pooled [95%])."""
    keys = [f"{regime}:{shape}" for regime in ("latency", "throughput") for shape in ("0.5b", "1.5b")]
    keys.remove("latency:1.5b")  # every H200 term scales with the parameters alike: the same as at 0.5B
    words = {
        "latency:0.5b": "latency-bound, any shape",
        "throughput:0.5b": "throughput-bound, 0.5B",
        "throughput:1.5b": "throughput-bound, 1.5B",
    }
    lines = [
        "| method vs partner (task) | warm models | "
        + " | ".join(
            f"{words[k]}: GPU time to 90% [95%]; model range | {words[k]}: skill per GPU-second Δ [95%]" for k in keys
        )
        + " |",
        "|---|---|" + "---|---|" * len(keys),
    ]
    seen = set()
    for _, method, partner, task, _ in CLAIMS:
        if (method, partner, task) in seen:
            continue
        seen.add((method, partner, task))
        found = _find(result, method, partner, task)
        head = f"| `{method}` vs `{partner}` (`{task}`) "
        if found is None or "pooled_gpu" not in found:
            lines.append(head + "| not run yet |" + " |" * (2 * len(keys)))
            continue
        cells = []
        for key in keys:
            cells.append(f"{gpu_ratio_cell(found, key)}; {model_range_cell(found, key)}")
            cells.append(cell(found["pooled_gpu"][key]["skill_area"]))
        warm = ", ".join(str(w) for w in found["warm_models"])
        lines.append(head + f"| {warm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def counted_cell(found: dict[str, Any], measure: str, frame: str) -> str:
    """`cell` of the reading, and on how many of the warm models that ran it its own test (two-way t, p < 0.05)
    shows the reading's direction: "behind on 2/2" reads "the pooled estimate is below 0, and each of the two warm
    models' own intervals lies below 0"."""
    estimate = reading(found, measure, frame)
    per_warm = [w["measures"][measure][frame] for w in found["per_warm"].values()]
    direction = "ahead" if estimate["estimate"] > 0 else "behind"
    shown = sum(w["p"] < 0.05 and (w["estimate"] > 0) == (estimate["estimate"] > 0) for w in per_warm)
    return f"{cell(estimate)}; " + (f"{direction} on {shown}/{len(per_warm)}" if shown else f"0/{len(per_warm)}")


def when_it_pays_rows(result: dict[str, Any]) -> list[list[str]]:
    """README's "When it pays" rows: a configuration is named and defined where it first appears."""
    rows, defined = [], set()
    for partner, method, task, frame in WHEN_IT_PAYS:
        label = f"**`{method}`**" if method in defined else f"**`{method}`**: {CONFIGURATIONS[method]}"
        defined.add(method)
        found = _find(result, method, partner, task)
        if found is None:
            rows.append([f"`{partner}`", label, "not run yet", "", "", "", "", ""])
            continue
        rows.append(
            [
                f"`{partner}`",
                label,
                " / ".join(f"{mean_of(found, key):.1f}" for key in (partner, method)),
                counted_cell(found, "skill", frame),
                counted_cell(found, "skill", "equal_steps"),
                counted_cell(found, "retention", frame),
                gpu_pair_cell(found),
                ", ".join(str(w) for w in found["warm_models"]),
            ]
        )
    return rows


def mean_of(found: dict[str, Any], key: str) -> float:
    """A method's samples per prompt, the mean over the warm models that ran the comparison."""
    values = [w["samples_per_prompt"][key] for w in found["per_warm"].values()]
    return sum(values) / len(values)


def when_it_pays_table(result: dict[str, Any]) -> str:
    lines = [
        "| if you run | switching to | samples per prompt, yours / its | **skill per generated token**: Δ [95%] "
        "| skill per step: Δ at equal steps | retention per generated token: Δ "
        "| GPU time to 90% of your skill gain, projected: latency-bound · throughput-bound 1.5B | warm models |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in when_it_pays_rows(result)]
    return "\n".join(lines)


def replace_block(text: str, marker: str, block: str) -> str:
    """``text`` with what lies between ``<!-- marker -->`` and ``<!-- /marker -->`` replaced by ``block``."""
    start, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    if start not in text or end not in text:
        raise ValueError(f"no {start} ... {end} block")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}\n{end}{tail}"


def block(text: str, marker: str) -> str:
    """What lies between the markers (`replace_block`), without the newlines around it."""
    return text.split(f"<!-- {marker} -->", 1)[1].split(f"<!-- /{marker} -->", 1)[0].strip("\n")


MEASURED_STEPS_HEADER = '''"""Steps to 90% of GRPO's skill gain, measured on the toy columns task: what
`trl-ada simulate --model-shape` multiplies by a configuration's projected step-time ratio to give its GPU time to the
same skill.

Written by `python benchmarks/skill_report.py --write-docs` from benchmarks/results/columns/skill_verdicts.json: the
configuration's optimizer steps to 90% of GRPO's whole-run skill gain over GRPO's own, pooled over the warm models on
the log scale, with its 95% interval (`benchmarks/gpu_time.py pooled_ratio`). tests/test_docs.py checks it against
the JSON; not edited by hand.
"""

# (configuration, GRPO it was measured against) -> (steps ratio, 95% interval low, high, task, warm models)
'''


def measured_steps(result: dict[str, Any]) -> dict[tuple[str, str], tuple]:
    """Every comparison against a GRPO group whose steps to 90% of the skill gain resolved on every warm model that
    ran it: (method, partner) -> (pooled ratio, low, high, task, warm models); the first task in `SKILL_TASKS`
    order where a pair ran on both."""
    from gpu_time import pooled_ratio

    entries: dict[tuple[str, str], tuple] = {}
    for row in sorted(result["comparisons"], key=lambda r: r["task"] != "columns"):
        key = (row["method"], row["partner"])
        if not row["partner"].startswith("grpo-") or key in entries:
            continue
        ratios = [w.get("whole_run_ratios", {}).get("steps_to_90") for w in row["per_warm"].values()]
        if any(r is None or not r["resolved"] for r in ratios):
            continue
        steps = pooled_ratio(ratios)
        if steps is not None:
            low, high = steps["ci"]
            ratio, low, high = (round(float(v), 4) for v in (steps["ratio"], low, high))
            entries[key] = (ratio, low, high, row["task"], tuple(row["warm_models"]))
    return entries


def measured_steps_module(result: dict[str, Any]) -> str:
    """The text of trl_ada/tools/measured_steps.py (`measured_steps`)."""
    lines = [MEASURED_STEPS_HEADER + "STEPS_TO_90: dict[tuple[str, str], tuple[float, float, float, str, tuple]] = {"]
    for (method, partner), (ratio, low, high, task, warm) in sorted(measured_steps(result).items()):
        models = "(" + ", ".join(map(str, warm)) + ("," if len(warm) == 1 else "") + ")"
        lines.append(f'    ("{method}", "{partner}"): ({ratio!r}, {low!r}, {high!r}, "{task}", {models}),')
    return "\n".join(lines) + "\n}\n"
