"""TRL's asynchronous rollout worker against the Reinforce-Ada worker, on the step-time benchmark's emulated engine.

    python benchmarks/async_worker.py            # paper-fit and uniform mixes, both regimes, 5 seeds: minutes
    python benchmarks/async_worker.py --quick    # seconds: 1 seed, 48 groups, 64 requests in flight

What runs: the workers' own asyncio loops. `trl.experimental.async_grpo`'s `_AsyncRolloutLoop` (requests exactly
`num_generations` completions per prompt) and `trl_ada.adapter.async_worker.AdaRolloutLoop` (one `streaming_session`
per prompt: the engine's stopping rule, its aborts, the pool's downsampling and advantages), each with its generate
loop and its score loop, on an asyncio event loop whose clock is virtual (`VirtualClockLoop`: when nothing is ready it
jumps to the next timer instead of sleeping). One method is replaced, `_generate_one` (a whole conversation over HTTP
in the real loops): here it submits one request to `benchmarks/step_time.py`'s `EmulatedEngine` and awaits its finish;
cancelling it (the Ada loop's abort) aborts the request in the engine, which reports the tokens it had decoded. The
reward function is asynchronous (the loops await it; a synchronous one would run in a thread, outside the virtual
clock).

The engine, the pass-rate mixes and the completions are step_time.py's (its module docstring has the event model):
continuous batching, a decode step with b running sequences takes t(b) = t0 + c * b virtual seconds, no cap on
running sequences other than the loops' own (`max_inflight_tasks` requests in flight; in the Ada loop each prompt
has up to `max_in_flight` of them, and another prompt starts in the slots the open ones leave); prefill is free.
Completion k of prompt i (k-th in request order) has a fixed reward and length per seed, shared by every method
(common random numbers); prompts arrive as a stream, prompt i being the loop's group i.

The trainer is a stand-in that consumes every row at once (generation is the bottleneck), and moves the policy
version on by one every `--samples-per-step` rows, as `AsyncGRPOTrainer` does after each optimizer step; the loops
read it when they dispatch a request. A group's version lag is the trainer's version when the group arrives minus
the version the group is tagged with; the trainer drops a row whose lag exceeds `max_staleness` (the share reported;
those rows are not removed from the other numbers).

Reported per trained group (a prompt whose rows reached the trainer), over the groups that arrive after `--warmup`
groups, `--groups` of them: requests started, finished (pooled, dropped beyond the pool, and finished after an abort
was decided) and aborted while decoding; tokens decoded for the prompt, aborted ones included, and the aborted ones
alone; virtual seconds per trained group (the time between the arrival of the warm-up's last group and the window's
last, divided by the groups in the window); the share of trained groups whose rewards are not all equal (non-zero
std: the group has a gradient); seconds per group with signal (the two divided); the engine's mean running sequences
over the window's decode steps and, since every request in flight decodes, the occupancy: that mean over
`max_inflight_tasks`. Each is a per-seed value; the tables give the mean over seeds with a 95% Student-t interval
over seeds, and the ratios to TRL n=4 are computed per seed (same prompts and draws) before the same summary.

The occupancy table runs every method again at a few small `max_inflight_tasks` (`--small-inflight`, default 7, 8
and 12: below, at and above the default per-prompt cap of 8), on the first mix's first seed, with a sixteenth of
the warm-up and an eighth of the window.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time
from dataclasses import asdict
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from async_emulation import Method, simulate
from async_report import LEGEND, markdown_table, occupancy_table, settings_table, summarise, window_metrics
from machine import describe, machine_info
from step_time_emulation import MIXES, REGIMES, Lengths, Regime, Workload

from trl_ada.adapter.async_worker import AdaRolloutConfig

RESULTS = pathlib.Path(__file__).parent / "results"


METHODS = (
    Method("trl4", "TRL n=4", 4),
    Method("trl16", "TRL n=16", 16),
    # AdaRolloutConfig's defaults: balanced, rounds of 8, at most 4 (budget 32), 8 requests in flight per prompt.
    Method("ada-bal", "Ada-balanced 8x4 (n=4)", 4, AdaRolloutConfig(sampling_strategy="balanced")),
    Method("ada-pos", "Ada-positive 8x4 (n=4)", 4, AdaRolloutConfig(sampling_strategy="positive")),
    # The sampling fields of the recipes' `efficient` setting (positive, 4 x 2), without its prompt selection: every
    # prompt here is new, so the memory would have nothing to act on.
    Method(
        "ada-pos-4x2",
        "Ada-positive 4x2 (n=4)",
        4,
        AdaRolloutConfig(sampling_strategy="positive", samples_per_round=4, max_rounds=2),
    ),
)


# --------------------------------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------------------------------


def run(
    method: Method,
    workload: Workload,
    regime: Regime,
    dataset: Any,
    *,
    max_inflight: int,
    samples_per_step: int,
    max_staleness: int,
    warmup: int,
    groups: int,
) -> dict[str, Any]:
    """One method on one seed's prompt stream: the window's metrics per trained group, and the run's counters."""
    sim = simulate(
        method,
        workload,
        regime,
        dataset,
        max_inflight=max_inflight,
        samples_per_step=samples_per_step,
        warmup=warmup,
        groups=groups,
    )
    trainer = sim.trainer
    out = window_metrics(trainer.records, warmup, groups, max_staleness)
    (steps0, tokens0), (steps1, tokens1) = trainer.window_start or (0, 0), trainer.window_end
    out["window_steps"], out["window_tokens"] = steps1 - steps0, tokens1 - tokens0
    # The engine's time is exactly t0 * steps + c * tokens (step_time.py); the virtual clock must agree with it.
    expected = (regime.t0 * out["window_steps"] + regime.c * out["window_tokens"]) / groups
    if not math.isclose(out["seconds"], expected, rel_tol=1e-9, abs_tol=1e-12):
        raise RuntimeError(f"Virtual clock {out['seconds']} s per group, engine arithmetic {expected} s.")
    out["running"] = out["window_tokens"] / max(1, out["window_steps"])  # mean sequences decoding per step
    # Every request in flight decodes (the engine has no cap of its own and prefill is free), so `running` is the mean
    # of the requests in flight over the window's decode steps; occupancy is its share of max_inflight_tasks.
    out["occupancy"] = out["running"] / max_inflight
    out["engine_tokens_per_group"] = out["window_tokens"] / groups  # every prompt's tokens in the window, per group
    out["off_event_submits"] = sim.client.off_event_submits
    out["virtual_seconds"] = sim.end_time
    return out


def in_regime(out: dict[str, Any], regime: Regime, groups: int) -> dict[str, Any]:
    """A run's metrics with its seconds in `regime`. The engine's events happen at decode steps, whose order neither
    t0 nor c changes, and the loops submit only at those events (`off_event_submits` is 0), so one run serves every
    regime: its window lasts t0 * steps + c * tokens."""
    if out["off_event_submits"]:
        raise RuntimeError("A submit fell between the engine's events: the run's seconds hold for its regime only.")
    seconds = (regime.t0 * out["window_steps"] + regime.c * out["window_tokens"]) / groups
    signal = out["signal"]
    return {**out, "seconds": seconds, "seconds_per_signal": seconds / signal if signal else math.inf}


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mix", nargs="+", choices=sorted(MIXES), help="pass-rate mixes (default: paper uniform)")
    parser.add_argument(
        "--regime",
        choices=("throughput", "latency", "both"),
        help="engine regime(s) (default both; --quick throughput)",
    )
    parser.add_argument("--seeds", type=int, help="seeds 0..n-1 (default 5; --quick 1)")
    parser.add_argument("--warmup", type=int, help="groups before the measured window (default 256; --quick 16)")
    parser.add_argument("--groups", type=int, help="measured groups per run (default 512; --quick 48)")
    parser.add_argument("--max-inflight", type=int, help="TRL's max_inflight_tasks (default 256; --quick 64)")
    parser.add_argument(
        "--small-inflight",
        type=int,
        nargs="*",
        default=[7, 8, 12],
        help="max_inflight_tasks of the occupancy table (default 7 8 12; none for no table)",
    )
    parser.add_argument("--samples-per-step", type=int, default=64, help="rows per trainer step (default 64)")
    parser.add_argument("--max-staleness", type=int, default=4, help="AsyncGRPOConfig.max_staleness (default 4)")
    parser.add_argument("--methods", nargs="+", choices=[m.key for m in METHODS], help="default: all")
    parser.add_argument("--quick", action="store_true", help="1 seed, paper mix, throughput regime, a short window")
    parser.add_argument("--output-dir", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--name", help="result file stem (default async_worker[_quick])")
    args = parser.parse_args(argv)
    quick = args.quick
    args.mix = args.mix or (["paper"] if quick else ["paper", "uniform"])
    regime = args.regime or ("throughput" if quick else "both")
    args.regimes = ["throughput", "latency"] if regime == "both" else [regime]
    defaults = {"seeds": (1, 5), "warmup": (16, 256), "groups": (48, 512), "max_inflight": (64, 256)}
    for name, (short, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, short if quick else full)
    args.methods = args.methods or [m.key for m in METHODS]
    for name in ("seeds", "groups", "max_inflight", "samples_per_step"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if any(n < 1 for n in args.small_inflight):
        parser.error("--small-inflight values must be >= 1")
    args.small_inflight = sorted(set(args.small_inflight))
    if args.warmup < 0 or args.max_staleness < 0:
        parser.error("--warmup and --max-staleness must be >= 0")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    from datasets import Dataset

    lengths = Lengths()
    methods = [m for m in METHODS if m.key in args.methods]
    machine = machine_info()
    print(f"machine: {describe(machine)} (every time below is virtual)", flush=True)
    start = time.perf_counter()
    # Prompts enough for the warm-up, the window and whatever is in flight when the run stops (under one per request).
    small_warmup, small_groups, small_seeds = args.warmup // 16, max(1, args.groups // 8), 1
    prompts = max(
        args.warmup + args.groups + args.max_inflight + 1,
        small_warmup + small_groups + max(args.small_inflight, default=0) + 1,
    )
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": str(i)}]} for i in range(prompts)])
    results: dict[str, Any] = {}
    text = []
    simulated = REGIMES[args.regimes[0]]  # the clock runs in this one; the others follow from the same events
    # The occupancy table: every method at a few small max_inflight_tasks, on the first mix's first seed, with a
    # shorter window (at a few requests in flight a group takes many virtual seconds, which the loops' polls fill).
    small: dict[int, dict[str, list[dict[str, Any]]]] = {n: {m.key: [] for m in methods} for n in args.small_inflight}
    for mix in args.mix:
        runs: dict[str, list[dict[str, Any]]] = {m.key: [] for m in methods}
        for seed in range(args.seeds):
            workload = Workload.draw(mix, prompts, seed, lengths)
            for method in methods:
                for slots in args.small_inflight if mix == args.mix[0] and seed < small_seeds else ():
                    small[slots][method.key].append(
                        run(
                            method,
                            workload,
                            simulated,
                            dataset,
                            max_inflight=slots,
                            samples_per_step=args.samples_per_step,
                            max_staleness=args.max_staleness,
                            warmup=small_warmup,
                            groups=small_groups,
                        )
                    )
                runs[method.key].append(
                    run(
                        method,
                        workload,
                        simulated,
                        dataset,
                        max_inflight=args.max_inflight,
                        samples_per_step=args.samples_per_step,
                        max_staleness=args.max_staleness,
                        warmup=args.warmup,
                        groups=args.groups,
                    )
                )
        for regime_name in args.regimes:
            regime = REGIMES[regime_name]
            per_seed = {key: [in_regime(r, regime, args.groups) for r in v] for key, v in runs.items()}
            rows = summarise(per_seed, methods)
            results[f"{regime_name}/{mix}"] = {
                "regime": asdict(regime),
                "mix": MIXES[mix],
                "summary": rows,
                "per_seed": per_seed,
            }
            block = f"### {regime_name} regime (c = {regime.c:g}), {MIXES[mix]}\n\n{markdown_table(rows)}"
            text.append(block)
            print(f"\n{block}  ({time.perf_counter() - start:.0f} s)", flush=True)
    if args.small_inflight:
        summaries = {n: summarise(per_seed, methods) for n, per_seed in small.items()}
        results["occupancy"] = {
            "mix": MIXES[args.mix[0]],
            "seeds": list(range(small_seeds)),
            "warmup_groups": small_warmup,
            "measured_groups": small_groups,
            "summary": {str(n): rows for n, rows in summaries.items()},
            "per_seed": {str(n): per_seed for n, per_seed in small.items()},
        }
        block = (
            f"### Occupancy at small max_inflight_tasks, {MIXES[args.mix[0]]}\n\n"
            f"Seed 0; groups: {small_warmup} warm-up, then {small_groups} "
            f"measured. Occupancy is the same in both regimes.\n\n{occupancy_table(summaries, methods)}"
        )
        text.append(block)
        print(f"\n{block}  ({time.perf_counter() - start:.0f} s)", flush=True)
    elapsed = time.perf_counter() - start
    main_runs = [r for key, res in results.items() if key != "occupancy" for v in res["per_seed"].values() for r in v]
    off_event = sum(r["off_event_submits"] for r in main_runs) // len(args.regimes)  # each run once per regime
    off_event += sum(r["off_event_submits"] for per_seed in small.values() for v in per_seed.values() for r in v)
    print(f"\n{LEGEND}\n\nsubmits off the engine's event times: {off_event}; {elapsed:.0f} s", flush=True)

    name = args.name or ("async_worker_quick" if args.quick else "async_worker")
    command = " ".join(["python benchmarks/async_worker.py", *(argv if argv is not None else sys.argv[1:])])
    report = {
        "command": command,
        "machine": machine,
        "elapsed_seconds": round(elapsed, 1),
        "settings": {
            "regimes": args.regimes,
            "mixes": args.mix,
            "seeds": list(range(args.seeds)),
            "warmup_groups": args.warmup,
            "measured_groups": args.groups,
            "max_inflight_tasks": args.max_inflight,
            "occupancy_max_inflight_tasks": args.small_inflight,
            "samples_per_step": args.samples_per_step,
            "max_staleness": args.max_staleness,
            "lengths": asdict(lengths),
            "methods": {
                m.key: {
                    "name": m.name,
                    "num_generations": m.num_generations,
                    "ada": None if m.ada is None else asdict(m.ada),
                }
                for m in methods
            },
        },
        "off_event_submits": off_event,
        "results": results,
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"{name}.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    parts = [f"`{command}`\n\n{describe(machine)}; {elapsed:.0f} s.", settings_table(args, lengths), *text, LEGEND]
    (args.output_dir / f"{name}.md").write_text("\n\n".join(parts) + "\n")
    return report


if __name__ == "__main__":
    main()
