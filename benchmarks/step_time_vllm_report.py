"""The real-engine step-time benchmark's report (`step_time_vllm.py`): each method's means over the repeats, the
tables and their legends, and the Markdown page written next to the JSON."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from machine import describe
from step_time_emulation import Method


def summarise(per_repeat: dict[str, list[dict[str, Any]]], method_list: Sequence[Method]) -> list[dict[str, Any]]:
    """Per method: the median of its seconds and of its per-repeat ratios to GRPO n=4 and n=16 (same repeat), and the
    mean of its counts over repeats. The aborted share is pooled: aborted tokens over generated tokens, all repeats."""
    rows = []
    for method in method_list:
        runs = per_repeat[method.key]
        row: dict[str, Any] = {"key": method.key, "method": method.name, "rollout": method.rollout}
        row["seconds"] = statistics.median(r["seconds"] for r in runs)
        row["seconds_per_repeat"] = [round(r["seconds"], 3) for r in runs]
        for base in ("grpo4", "grpo16"):
            if base in per_repeat:
                pairs = zip(runs, per_repeat[base], strict=True)
                row[f"x_{base}"] = statistics.median(r["seconds"] / b["seconds"] for r, b in pairs)
            else:
                row[f"x_{base}"] = None
        for name in runs[0]:
            if name not in ("seconds", "aborted_share"):
                row[name] = statistics.fmean(r[name] for r in runs)
        tokens = sum(r["tokens"] for r in runs)
        row["aborted_share"] = sum(r["aborted_tokens"] for r in runs) / tokens if tokens else 0.0
        rows.append(row)
    return rows


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| method | samples/prompt | started/prompt | tokens | aborted | rounds | median s | x GRPO n=4 | "
        "x GRPO n=16 | s per repeat |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        repeats = ", ".join(f"{s:.2f}" for s in r["seconds_per_repeat"])
        lines.append(
            f"| {r['method']} | {r['samples_per_prompt']:.2f} | {r['started_per_prompt']:.2f} | {r['tokens']:,.0f} | "
            f"{r['aborted_share']:.1%} | {r['rounds']:.1f} | {r['seconds']:.2f} | {_ratio(r['x_grpo4'])} | "
            f"{_ratio(r['x_grpo16'])} | {repeats} |"
        )
    return "\n".join(lines)


LEGEND = (
    "samples/prompt: completions that finished (pooled + dropped), mean over repeats; started/prompt: draws sent, "
    "aborted ones included; tokens: tokens the client received per step (aborted draws' included), mean over "
    "repeats; aborted: share of those tokens in aborted or dropped draws (`aborted_tokens / generated_tokens`, all "
    "repeats); rounds: generation rounds (rounds) or the most submission waves of a prompt (streaming); median s: "
    "median wall-clock seconds of the step's generation and scoring; x GRPO: median over repeats of the step's "
    "seconds over GRPO's in the same repeat."
)


DETAILS_LEGEND = (
    "pool/prompt: completions kept in the prompts' pools; unresolved: prompts whose exit rule did not hold when they "
    "stopped; pool pass rate: share of pooled completions that are right; in flight max: most draws in flight at "
    "once; server finished/prompt: requests the server ran to their end (stop or length), from its counters: started "
    "minus finished is the most that aborting can have saved it; server tokens: tokens it generated (and prompt "
    "tokens it counted); ms per started draw: the step's seconds over the draws it sent; retries: requests sent again"
    " after a failed attempt (`VLLMServerBackend.retries`, mean per step); client CPU s: CPU time of the benchmark's "
    "process (scheduler, HTTP client, scoring) during the step; score s: wall time in the reward; load: 1-min load "
    "average at the step's start."
)


def details_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rest of what was measured, per method (means over repeats)."""
    lines = [
        "| method | pool/prompt | unresolved | pool pass rate | completion tokens mean / max | in flight max | "
        "server finished/prompt | server tokens (prompt) | ms per started draw | retries | client CPU s | score s | "
        "load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        server_finished, server_tokens = "-", "-"
        if "server_generation_tokens" in r:
            server_finished = f"{r['server_finished_per_prompt']:.2f}"
            server_tokens = f"{r['server_generation_tokens']:,.0f} ({r['server_prompt_tokens']:,.0f})"
        lines.append(
            f"| {r['method']} | {r['pool_per_prompt']:.2f} | {r['unresolved']:.1%} | {r['pool_pass_rate']:.2f} | "
            f"{r['completion_tokens_mean']:.1f} / {r['completion_tokens_max']:.0f} | {r['in_flight_max']:.0f} | "
            f"{server_finished} | {server_tokens} | {r['ms_per_draw']:.1f} | {r['retries']:.1f} | "
            f"{r['client_cpu_s']:.2f} | {r['score_s']:.2f} | {r['load_1min']:.1f} |"
        )
    return "\n".join(lines)


def report_text(report: dict[str, Any]) -> str:
    machine = report["machine"]
    loads = report["load_1min"]
    return "\n".join(
        [
            f"# Step time on a real engine ({report['name']})",
            "",
            f"Command: `{report['command']}`",
            "",
            f"Machine: {describe(machine)}; vLLM {report['vllm']}."
            + (f" Note: {report['device_note']}" if report["device_note"] else ""),
            f"1-min load average at the start of each timed step: min {loads['min']:.1f}, median "
            f"{loads['median']:.1f}, max {loads['max']:.1f}.",
            f"Server: {report['server']}; model {report['model']}; {report['task']}; max_tokens "
            f"{report['settings']['max_tokens']}, temperature {report['settings']['temperature']}; "
            f"{report['settings']['repeats']} interleaved repeats after {report['settings']['warmup']} warm-up "
            f"step(s); {report['elapsed_seconds']:.0f} s in all.",
            "",
            markdown_table(report["summary"]),
            "",
            LEGEND,
            "",
            "Other measurements (means over repeats):",
            "",
            details_table(report["summary"]),
            "",
            DETAILS_LEGEND,
            "",
        ]
    )
