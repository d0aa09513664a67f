"""The asynchronous benchmark's measures and report (`async_worker.py`): per-group metrics over a run's window, 95%
intervals over seeds, the summaries and the Markdown tables."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from async_emulation import GroupRecord, Method
from step_time_emulation import REGIMES, Lengths

# Student t quantiles 0.975 for 1..30 degrees of freedom (a 95% two-sided interval); beyond, the normal's 1.96.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
T975 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


# --------------------------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------------------------


def has_signal(rewards: Sequence[float]) -> bool:
    """Whether a trained group's rewards have a non-zero spread (NaN rewards ignored): else every advantage is 0."""
    scored = [r for r in rewards if not math.isnan(r)]
    return len(scored) > 1 and float(np.std(scored)) > 0


def window_metrics(records: Sequence[GroupRecord], warmup: int, count: int, max_staleness: int) -> dict[str, float]:
    """Per trained group, over the `count` groups that arrived after the first `warmup` (in arrival order): mean
    requests started, finished and aborted, tokens and aborted tokens, the share with signal, mean version lag and the
    share staler than `max_staleness`; and seconds per group, the window's duration (from the arrival of group
    `warmup`, or 0 without a warm-up, to the arrival of the window's last) over `count`."""
    if count < 1 or len(records) < warmup + count:
        raise ValueError(f"Need {warmup} + {count} groups, got {len(records)}.")
    window = records[warmup : warmup + count]
    start = records[warmup - 1].done_at if warmup else 0.0
    signal = float(np.mean([has_signal(r.rewards) for r in window]))
    seconds = (window[-1].done_at - start) / count
    return {
        "started": float(np.mean([r.cost.started for r in window])),
        "finished": float(np.mean([r.cost.finished for r in window])),
        "aborted": float(np.mean([r.cost.aborted for r in window])),
        "tokens": float(np.mean([r.cost.tokens for r in window])),
        "aborted_tokens": float(np.mean([r.cost.aborted_tokens for r in window])),
        "seconds": seconds,
        "signal": signal,
        "seconds_per_signal": seconds / signal if signal else math.inf,
        "lag": float(np.mean([r.lag for r in window])),
        "stale": float(np.mean([r.lag > max_staleness for r in window])),
    }


def interval(values: Sequence[float]) -> dict[str, float]:
    """Mean of per-seed values with a 95% Student-t interval over seeds (no width with one seed)."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if len(x) < 2:
        return {"mean": mean, "low": math.nan, "high": math.nan}
    df = len(x) - 1
    half = (T975[df - 1] if df <= len(T975) else 1.96) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return {"mean": mean, "low": mean - half, "high": mean + half}


# --------------------------------------------------------------------------------------------------------------------
# Summary and tables
# --------------------------------------------------------------------------------------------------------------------


SUMMARISED = ("started", "finished", "aborted", "tokens", "aborted_tokens", "seconds", "signal")
SUMMARISED += ("seconds_per_signal", "lag", "stale", "running", "occupancy")


def summarise(per_seed: dict[str, list[dict[str, Any]]], methods: Sequence[Method]) -> list[dict[str, Any]]:
    """Per method: each metric's mean over seeds and 95% interval, and the per-seed ratios of tokens, seconds and
    seconds per group with signal to TRL n=4's (same seed), summarised the same way."""
    rows = []
    base = per_seed.get("trl4")
    for method in methods:
        runs = per_seed[method.key]
        row: dict[str, Any] = {"key": method.key, "method": method.name}
        for name in SUMMARISED:
            row[name] = interval([r[name] for r in runs])
        if base is not None:
            for name in ("tokens", "seconds", "seconds_per_signal"):
                ratios = [r[name] / b[name] for r, b in zip(runs, base, strict=True)]
                row[f"{name}_x_trl4"] = interval(ratios)
        rows.append(row)
    return rows


def fmt(stat: dict[str, float], spec: str = ".2f", scale: float = 1.0, pct: bool = False) -> str:
    """`mean [low, high]` of an `interval`, scaled (or as percentages); the mean alone without an interval."""
    factor = 100.0 if pct else scale
    mean = format(stat["mean"] * factor, spec)
    if math.isnan(stat["low"]):
        return mean + ("%" if pct else "")
    low, high = format(stat["low"] * factor, spec), format(stat["high"] * factor, spec)
    return f"{mean}% [{low}, {high}]" if pct else f"{mean} [{low}, {high}]"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The per-group table of one regime and mix."""
    lines = [
        "| method | requests started / finished / aborted | tokens (aborted) | seconds | x TRL n=4 | with signal | "
        "seconds per group with signal (x TRL n=4) | running | occupancy | version lag (> max_staleness) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "-" if "seconds_x_trl4" not in r else fmt(r["seconds_x_trl4"])
        per_signal = fmt(r["seconds_per_signal"], ".3f")
        if "seconds_per_signal_x_trl4" in r:
            per_signal += f" ({fmt(r['seconds_per_signal_x_trl4'])})"
        lines.append(
            f"| {r['method']} | {r['started']['mean']:.2f} / {r['finished']['mean']:.2f} / {r['aborted']['mean']:.2f} "
            f"| {fmt(r['tokens'], '.0f')} ({r['aborted_tokens']['mean']:.0f}) | {fmt(r['seconds'], '.3f')} | {ratio} "
            f"| {fmt(r['signal'], '.1f', pct=True)} | {per_signal} | {r['running']['mean']:.0f} "
            f"| {fmt(r['occupancy'], '.1f', pct=True)} "
            f"| {r['lag']['mean']:.2f} ({r['stale']['mean']:.1%}) |"
        )
    return "\n".join(lines)


def occupancy_table(summaries: dict[int, list[dict[str, Any]]], methods: Sequence[Method]) -> str:
    """Per method, at each small max_inflight_tasks: mean requests in flight over the window's decode steps, and
    that as a share of max_inflight_tasks [95% t-interval over seeds]."""
    settings = sorted(summaries)
    lines = [
        "| method | per-prompt cap | " + " | ".join(f"max_inflight_tasks = {n}" for n in settings) + " |",
        "|---|---|" + "---|" * len(settings),
    ]
    for i, method in enumerate(methods):
        cap = "-" if method.ada is None else str(method.ada.max_in_flight or method.ada.samples_per_round)
        cells = []
        for n in settings:
            row = summaries[n][i]
            cells.append(f"{row['running']['mean']:.2f} of {n} ({fmt(row['occupancy'], '.1f', pct=True)})")
        lines.append(f"| {method.name} | {cap} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


LEGEND = (
    "Per trained group, mean over seeds [95% t-interval over seeds]. requests: started, finished (pooled, dropped, or "
    "done before its abort), aborted while decoding; tokens: decoded for the group's prompt, aborted ones included "
    "(in brackets: the aborted ones); seconds: virtual seconds of generation per trained group at steady state; "
    "x TRL n=4: ratio to TRL n=4 on the same seed; with signal: share of trained groups whose rewards are not all "
    "equal; running: mean sequences decoding per engine step, which is the mean of the requests in flight over the "
    "decode steps (every request in flight decodes); occupancy: running / max_inflight_tasks; version lag: policy "
    "versions between a group's tag and its arrival (in brackets: share above max_staleness, which the trainer would "
    "drop)."
)


def settings_table(args: argparse.Namespace, lengths: Lengths) -> str:
    rows = [
        ("engine", "step_time.py's EmulatedEngine: t(b) = t0 + c*b per decode step, prefill free", "cost.md (ours)"),
        *[(f"regime {n}", f"t0 = {REGIMES[n].t0:g} s, c = {REGIMES[n].c:g} s", "step_time.py") for n in args.regimes],
        ("max_inflight_tasks", str(args.max_inflight), "TRL's default rule: max_staleness x samples per step"),
        ("occupancy table", ", ".join(map(str, args.small_inflight)) or "none", "max_inflight_tasks of its runs"),
        ("samples per trainer step", str(args.samples_per_step), "version moves on every this many rows"),
        ("max_staleness", str(args.max_staleness), "AsyncGRPOConfig's default"),
        (
            "lengths",
            f"median {lengths.right:g} right / {lengths.wrong:g} wrong, log-sd {lengths.sigma:g}, cap {lengths.cap}",
            "step_time.py",
        ),
        ("groups", f"{args.warmup} warm-up, then {args.groups} measured", "per run"),
        ("seeds", ", ".join(map(str, range(args.seeds))), "same prompts and draws for every method of a seed"),
    ]
    lines = ["| setting | value | source |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)
