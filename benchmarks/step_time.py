"""Step time of Reinforce-Ada's sampling, rounds vs streaming, on an emulated continuous-batching engine.

    python benchmarks/step_time.py                      # both regimes, 512 prompts, 3 seeds, paper-fit mix
    python benchmarks/step_time.py --quick              # seconds: 48 prompts, 1 seed (what the test runs)

No model and no real time: a discrete-event engine with a virtual clock (`EmulatedEngine`) implements the engine's
`Backend` protocol (submit / wait / abort), and every method runs through `trl_ada.core.engine.sample`, the scheduler
the trainer uses. Deterministic given a seed.

The engine (the back-of-envelope event model of the project's cost notes, cost.md; not a measurement of vLLM):
- continuous batching: every running sequence gets one token per decode step, and a step with b running sequences
  takes t(b) = t0 + c * b seconds. Between two events (a finish, a submit, an abort) b is constant, so the clock jumps
  from event to event analytically. Optionally at most `max_running` sequences run; the rest wait in a FIFO queue.
- prefill is ignored (0 s): a sequence starts decoding in the step after it is submitted (or admitted from the queue).
- a finished completion reports its length in tokens; an aborted one the tokens it had decoded so far (0 if queued).
The time of a step is therefore exactly t0 * S + c * T, with S the decode steps run and T the tokens decoded (aborted
ones included); the report splits it that way.

Completions: prompt i has a pass rate p_i from a mix (the Beta(0.337, 0.298) fitted to the paper's trained 1.5B model
by default, or uniform); draw k of prompt i (k-th in request order) is right with probability p_i, and its length is
lognormal with median 500 tokens when right and 800 when wrong (cost.md) and log-sd `sigma` (default 0.55, our
assumption, chosen so GRPO n=4 generates cost.md's 1.5M tokens for 512 prompts), capped at 2048 tokens
(max_completion_length in the paper's recipe); a capped completion is truncated and counts as wrong. The (reward,
length) of every (prompt, k) is fixed per seed and shared by all methods (common random numbers), so every method sees
the same prompts and the same request-order stream per prompt.

Methods: GRPO n=4 and n=16 (one round); Ada-balanced (rule 2 right + 2 wrong, group 4, budget 8 x 4 = 32) with fixed
rounds of 8, posterior-sized rounds, streaming with k draws *running* per prompt (`max_in_flight`, default
samples_per_round = 8, and 16; finished draws held behind an unfinished earlier one do not count), streaming with
posterior sizing (each prompt keeps min(8, max(1, ceil(E[remaining draws]))) running, E under the Beta(1, 1) prior
from every outcome it has seen: `trl_ada.core.engine.expected_remaining_draws`); Ada-positive (1 right, group 4, 8 x 4)
rounds and streaming; and each rule's sequential limit (streaming with max_in_flight = 1: one draw at a time, stop as
soon as the rule holds), whose pools are the floor on samples. Extras: streaming with k = 2, 4, 32 running; posterior
sizing with a budget of 16 x 2 (rounds: 2 posterior-sized rounds; streaming: the same expected-need window, capped
at 16 instead of 8, since the cap is samples_per_round); Ada-positive streaming with k = 4. With common random
numbers, request-order streaming's pools equal the sequential limit's exactly; what streaming spends beyond them is
its aborted draws (running when their prompt stopped) and dropped ones (finished beyond the pool).

Physical limit of a run, a lower bound on that run's time given the work it did:
    limit = max(T / peak throughput, longest chain * t(1)),
- T: tokens the run decoded (aborted ones included); peak throughput: max_running / t(max_running) tokens per
  second, or 1 / c without a cap (the supremum of b / t(b)). A step decoding b tokens takes t(b) >= b / peak.
- longest chain: the largest, over prompts, of the tokens along a chain c_1, ..., c_m of that prompt's completions in
  which each c_{j+1} was submitted after c_j had finished (the scheduler could not know it needed c_{j+1} before:
  under rounds, c_{j+1} belongs to a later round; under streaming, to a later top-up). Decoding L tokens takes L steps
  of at least t(1) = t0 + c each and c_{j+1} starts after c_j ends, so the run lasts at least (sum of L_j) * t(1).
  Completions of other prompts are not in the chain, so time a prompt spends waiting at a round barrier for other
  prompts shows up as time above the limit. Only finished completions count (aborted draws end no chain).
Both terms are true lower bounds of the run's time, hence so is their max. Since time = t0 * S + c * T exactly and
S >= chain (a chain's completions decode in disjoint successive steps), t0 * chain + c * T is a tighter true bound,
also reported; time / (t0 * chain + c * T) = 1 means no decode step was spent off the longest chain. Under streaming
with no cap on running sequences it is always 1: a prompt's draws are submitted in the step where one of its own
completions finished and start at once, so the prompt that finishes last has a chain of exactly S steps. The max()
form then falls short of the time by whichever of t0 * S and c * T is smaller: time / max(...) is about
1 + smaller / larger, so it is within 1.15x only when one term is under about 15% of the other.

"Floor" rows (per rule) bound any scheduler that returns the same pools, with no chain at all: it must decode every
pooled token and run at least as many steps as the longest pooled completion: t0 * (longest pooled completion)
+ c * (pooled tokens).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from dataclasses import asdict
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from machine import describe, machine_info
from step_time_emulation import MIXES, REGIMES, SEQUENTIAL, Lengths, Method, Regime, Workload, methods, run

RESULTS = pathlib.Path(__file__).parent / "results"


# --------------------------------------------------------------------------------------------------------------------
# Summary, targets, tables
# --------------------------------------------------------------------------------------------------------------------


def summarise(per_seed: dict[str, list[dict[str, Any]]], method_list: list[Method]) -> list[dict[str, Any]]:
    """Mean over seeds of every metric, plus ratios computed per seed, then averaged: finished completions and tokens
    to the rule's sequential limit (its pools are the floor on samples), seconds to GRPO n=4 and n=16."""
    rows = []
    for method in method_list:
        runs = per_seed[method.key]
        row: dict[str, Any] = {"key": method.key, "method": method.name, "rule": method.rule, "extra": method.extra}
        for name in runs[0]:
            row[name] = float(np.mean([r[name] for r in runs]))
        ratios: dict[str, list[float]] = {"x_seq_samples": [], "x_seq_tokens": [], "x_grpo4": [], "x_grpo16": []}
        for s, r in enumerate(runs):
            if method.rule:
                seq = per_seed[SEQUENTIAL[method.rule]][s]
                ratios["x_seq_samples"].append(r["samples_per_prompt"] / seq["pool_per_prompt"])
                ratios["x_seq_tokens"].append(r["tokens"] / seq["tokens"])
            ratios["x_grpo4"].append(r["seconds"] / per_seed["grpo4"][s]["seconds"])
            ratios["x_grpo16"].append(r["seconds"] / per_seed["grpo16"][s]["seconds"])
        for name, values in ratios.items():
            row[name] = float(np.mean(values)) if values else None
        row["seconds_per_seed"] = [round(r["seconds"], 2) for r in runs]
        rows.append(row)
    return rows


STREAMING = ("bal-stream", "bal-stream-16", "bal-stream-post", "pos-stream")  # the main list's streaming rows
STREAM_VS_ROUNDS = [  # (streaming, its rounds counterpart)
    ("bal-stream", "bal-rounds"),
    ("bal-stream-16", "bal-rounds"),
    ("bal-stream-post", "bal-rounds-post"),
    ("pos-stream", "pos-rounds"),
]


def targets(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The step-time targets, each with its numbers (seed means unless said otherwise): met or not."""
    out = []

    def add(name: str, met: bool, detail: str) -> None:
        out.append({"target": name, "met": bool(met), "detail": detail})

    rows = {regime: {r["key"]: r for r in res["summary"]} for regime, res in results.items()}
    per_seed = {regime: res["per_seed"] for regime, res in results.items()}

    def seconds(regime: str, key: str) -> float:
        return rows[regime][key]["seconds"]

    if "latency" in rows:
        cuts = {
            k: 1 - seconds("latency", k) / seconds("latency", "bal-rounds") for k in ("bal-stream", "bal-stream-16")
        }
        cut_post = 1 - seconds("latency", "bal-stream-post") / seconds("latency", "bal-rounds-post")
        add(
            "latency-bound: streaming (default k=8) cuts Seq-balance's generation time by >= 25% against rounds 8x4",
            cuts["bal-stream"] >= 0.25,
            f"{seconds('latency', 'bal-stream'):.1f} s vs {seconds('latency', 'bal-rounds'):.1f} s: "
            f"{cuts['bal-stream']:.1%} cut (k=16: {cuts['bal-stream-16']:.1%}; posterior streaming vs posterior "
            f"rounds: {cut_post:.1%})",
        )
    for regime in rows:
        ratios = {
            (stream, base): [
                a["seconds"] / b["seconds"]
                for a, b in zip(per_seed[regime][stream], per_seed[regime][base], strict=True)
            ]
            for stream, base in STREAM_VS_ROUNDS
        }
        detail = "; ".join(
            f"{stream} / {base}: {seconds(regime, stream) / seconds(regime, base):.3f} (worst seed {max(v):.3f})"
            for (stream, base), v in ratios.items()
        )
        worst = max(max(v) for v in ratios.values())
        add(f"{regime}: streaming never slower than rounds (every row, every seed)", worst <= 1, detail)
    for regime in rows:
        for key in STREAMING:
            row = rows[regime][key]
            add(
                f"{regime}: {row['method']} within 1.15x of its physical limit",
                row["time_over_limit"] <= 1.15,
                f"{row['seconds']:.1f} s / {row['limit_s']:.1f} s = {row['time_over_limit']:.2f}x; limit = max("
                f"throughput {row['throughput_s']:.1f} s, chain {row['chain_s']:.1f} s); time = t0*S "
                f"{row['t0_steps_s']:.1f} s + c*T {row['c_tokens_s']:.1f} s (smaller / larger "
                f"{min(row['t0_steps_s'], row['c_tokens_s']) / max(row['t0_steps_s'], row['c_tokens_s']):.2f}); "
                f"vs t0*chain + c*T: {row['time_over_tight_limit']:.2f}x",
            )
    for regime in rows:
        for key in STREAMING:
            row = rows[regime][key]
            add(
                f"{regime}: {row['method']} samples within 1.05x of the sequential limit",
                row["x_seq_samples"] <= 1.05,
                f"{row['samples_per_prompt']:.2f} finished completions per prompt = {row['x_seq_samples']:.3f}x; "
                f"{row['started_per_prompt']:.2f} started (aborted included); tokens {row['x_seq_tokens']:.3f}x",
            )
    for regime in rows:
        for key in STREAMING:
            row = rows[regime][key]
            add(
                f"{regime}: {row['method']} aborted tokens under 10% of generated",
                row["aborted_share"] < 0.10,
                f"{row['aborted_share']:.1%} of {row['tokens'] / 1e6:.2f}M tokens: "
                f"{row['abort_running_share']:.1%} in {row['aborted_per_prompt']:.2f} draws per prompt aborted while "
                f"running, {row['dropped_share']:.1%} in {row['dropped_per_prompt']:.2f} finished beyond the pool "
                "(dropped)",
            )
    return out


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| method | samples/prompt | x seq. limit | tokens (x seq. limit) | aborted = running + dropped | seconds | "
        "x GRPO n=4 | x GRPO n=16 | limit s = max(throughput, chain) | time / limit | t0*S + c*T s | "
        "time / (t0*chain + c*T) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        seq = "-" if r["x_seq_samples"] is None else f"{r['x_seq_samples']:.3f}"
        tokens = f"{r['tokens'] / 1e6:.2f}M" + ("" if r["x_seq_tokens"] is None else f" ({r['x_seq_tokens']:.3f})")
        lines.append(
            f"| {r['method']} | {r['samples_per_prompt']:.2f} | {seq} | {tokens} | {r['aborted_share']:.1%} = "
            f"{r['abort_running_share']:.1%} + {r['dropped_share']:.1%} | "
            f"{r['seconds']:.1f} | {r['x_grpo4']:.2f} | {r['x_grpo16']:.2f} | "
            f"{r['limit_s']:.1f} = max({r['throughput_s']:.1f}, {r['chain_s']:.1f}) | {r['time_over_limit']:.2f} | "
            f"{r['t0_steps_s']:.1f} + {r['c_tokens_s']:.1f} | {r['time_over_tight_limit']:.2f} |"
        )
    return "\n".join(lines)


def floor_line(rows: list[dict[str, Any]]) -> str:
    by_key = {r["key"]: r for r in rows}
    parts = []
    for rule, key in SEQUENTIAL.items():
        r = by_key[key]
        parts.append(
            f"{rule}: {r['floor_s']:.1f} s (longest pooled completion {r['longest_pooled']:.0f} tokens, "
            f"{r['pooled_tokens'] / 1e6:.2f}M pooled tokens)"
        )
    text = "Floor for the sequential limit's pools (any scheduler, see the docstring): " + "; ".join(parts) + "."
    return text + (
        f" Prompts that spend their whole budget unresolved: {by_key['bal-seq']['unresolved']:.1%} (balanced), "
        f"{by_key['pos-seq']['unresolved']:.1%} (positive). Pool size of the prompt with the longest chain, mean over "
        f"seeds: rounds 8x4 {by_key['bal-rounds']['chain_prompt_pool']:.1f}, streaming k=8 "
        f"{by_key['bal-stream']['chain_prompt_pool']:.1f}, k=16 {by_key['bal-stream-16']['chain_prompt_pool']:.1f}, "
        f"posterior {by_key['bal-stream-post']['chain_prompt_pool']:.1f} (balanced; budget 32)."
    )


def targets_table(checks: list[dict[str, Any]]) -> str:
    lines = ["| target | met | numbers |", "|---|---|---|"]
    lines += [f"| {c['target']} | {'met' if c['met'] else '**not met**'} | {c['detail']} |" for c in checks]
    return "\n".join(lines)


def parameter_table(args: argparse.Namespace, lengths: Lengths, regimes: list[Regime]) -> str:
    rows = [
        ("decode step time", "t(b) = t0 + c*b, b = running sequences", "cost.md's event model (ours, not measured)"),
        ("t0", f"{regimes[0].t0 * 1e3:g} ms", "cost.md (assumption)"),
        *[(f"c, {r.name} regime", f"{r.c:g} s per running sequence", "cost.md (assumption)") for r in regimes],
        ("max running sequences", str(args.max_running or "no cap"), "cost.md's model has none (assumption)"),
        ("prefill", "ignored (0 s)", "assumption"),
        ("prompts per engine", str(args.prompts), "the paper's 512 prompts per step on one engine"),
        ("pass-rate mix", MIXES[args.mix], "fit to the paper's trained 1.5B model (sampler-efficiency section)"),
        ("length medians", f"{lengths.right:g} right / {lengths.wrong:g} wrong tokens", "cost.md (assumption)"),
        ("length log-sd", f"{lengths.sigma:g}", "assumption, so GRPO n=4 makes cost.md's ~1.5M tokens"),
        ("length cap", f"{lengths.cap} tokens, truncated = wrong", "the paper's recipe (response 2048)"),
        ("group / budget", "4 / 8 x 4 = 32", "the authors' defaults (algorithm.md)"),
        ("seeds", ", ".join(map(str, range(args.seeds))), "same prompts and completions for every method of a seed"),
    ]
    lines = ["| parameter | value | source |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


LEGEND = (
    "samples/prompt: completions that finished (pool + dropped; aborted draws not counted); x seq. limit: over the "
    "sequential limit's pool size (request-order streaming's pools equal it exactly); tokens: every token decoded, "
    "aborted ones included; aborted: share of tokens in draws aborted while running plus draws that finished beyond "
    "the pool (dropped); seconds: virtual, mean of the "
    "seeds; S: decode steps, T: tokens."
)


def regime_text(name: str, regime: Regime, rows: list[dict[str, Any]]) -> str:
    main_rows = [r for r in rows if not r["extra"]]
    extra_rows = [r for r in rows if r["extra"]]
    text = f"### {name} regime (c = {regime.c:g})\n\n{markdown_table(main_rows)}\n\n{LEGEND}\n\n{floor_line(rows)}"
    if extra_rows:
        text += f"\n\nOther settings (measured, beyond the main list):\n\n{markdown_table(extra_rows)}"
    return text


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regime", choices=("throughput", "latency", "both"), default="both")
    parser.add_argument("--prompts", type=int, help="prompts per step on the engine (default 512; --quick 48)")
    parser.add_argument("--seeds", type=int, help="number of seeds, 0..n-1 (default 3; --quick 1)")
    parser.add_argument("--mix", choices=sorted(MIXES), default="paper", help="pass-rate mix (default: paper fit)")
    parser.add_argument("--sigma", type=float, default=Lengths.sigma, help="log-sd of completion lengths")
    parser.add_argument("--max-running", type=int, help="cap on running sequences (default: none, as cost.md)")
    parser.add_argument(
        "--in-flight",
        type=int,
        nargs="*",
        help="more max_in_flight values to measure for Ada-balanced streaming (default: 2 4 32)",
    )
    parser.add_argument("--quick", action="store_true", help="48 prompts, 1 seed, no extra settings: a few seconds")
    parser.add_argument("--output-dir", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--name", help="result file stem (default step_time[_quick])")
    args = parser.parse_args(argv)
    args.prompts = args.prompts or (48 if args.quick else 512)
    args.seeds = args.seeds or (1 if args.quick else 3)
    if args.in_flight is None:
        args.in_flight = [2, 4, 32]
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    lengths = Lengths(sigma=args.sigma)
    names = ["throughput", "latency"] if args.regime == "both" else [args.regime]
    regimes = [Regime(n, REGIMES[n].c, REGIMES[n].t0, args.max_running) for n in names]
    method_list = methods(args.in_flight, extras=not args.quick)
    machine = machine_info()
    print(f"machine: {describe(machine)} (every time below is virtual; this is for the run's own)", flush=True)
    print(
        f"{args.prompts} prompts, {args.seeds} seed(s), mix {MIXES[args.mix]}, lengths {asdict(lengths)}, "
        f"regimes {[asdict(r) for r in regimes]}",
        flush=True,
    )
    start = time.perf_counter()
    workloads = [Workload.draw(args.mix, args.prompts, seed, lengths) for seed in range(args.seeds)]
    results: dict[str, dict[str, Any]] = {}
    for regime in regimes:
        per_seed: dict[str, list[dict[str, Any]]] = {m.key: [] for m in method_list}
        for workload in workloads:
            for method in method_list:
                per_seed[method.key].append(run(method, workload, regime))
        summary = summarise(per_seed, method_list)
        results[regime.name] = {"regime": asdict(regime), "per_seed": per_seed, "summary": summary}
        print(f"\n{regime_text(regime.name, regime, summary)}", flush=True)
    checks = targets(results)
    elapsed = time.perf_counter() - start
    print(f"\n### Targets\n\n{targets_table(checks)}\n\n({elapsed:.0f} s)", flush=True)

    name = args.name or ("step_time_quick" if args.quick else "step_time")
    command = " ".join(["python benchmarks/step_time.py", *(argv if argv is not None else sys.argv[1:])])
    report = {
        "command": command,
        "machine": machine,
        "elapsed_seconds": round(elapsed, 1),
        "settings": {
            "prompts": args.prompts,
            "seeds": list(range(args.seeds)),
            "mix": MIXES[args.mix],
            "lengths": asdict(lengths),
            "prefill_seconds": 0.0,
        },
        "regimes": {k: {"regime": v["regime"], "summary": v["summary"]} for k, v in results.items()},
        "targets": checks,
        "per_seed": {k: v["per_seed"] for k, v in results.items()},
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    parts = [f"`{command}`\n\n{describe(machine)}; {elapsed:.0f} s.", parameter_table(args, lengths, regimes)]
    parts += [regime_text(r.name, r, results[r.name]["summary"]) for r in regimes]
    parts.append(f"### Targets\n\n{targets_table(checks)}")
    (args.output_dir / f"{name}.md").write_text("\n\n".join(parts) + "\n")
    return report


if __name__ == "__main__":
    main()
