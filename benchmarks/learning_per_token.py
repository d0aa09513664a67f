"""Learning per generated token on the toy tasks, on CPU: GRPO at 4 to 26 samples, DAPO (refill), pass-rate prompt
selection, the pilot, the memory baseline, and Reinforce-Ada (Seq positive/balanced in rounds or streaming, Est).

    python benchmarks/learning_per_token.py --task columns --methods grpo-4 seq-positive-4x2  # the current instrument
    python benchmarks/learning_per_token.py --task columns --warm-seed 1 --testbed-only  # another warm model's testbed
    python benchmarks/learning_per_token.py --combine a.json b.json --name all  # one table over reports' seeds
    python benchmarks/learning_per_token.py --combine a.json --drop-seeds 7 8 --name some  # rests on two seeds?
    python benchmarks/learning_per_token.py --verify a.json --seeds 0 --methods grpo-4  # does a run reproduce here?
    python benchmarks/learning_per_token.py --plot a.json.gz            # a report's plot drawn again, as a.png
    python benchmarks/learning_per_token.py --quick                     # 30 steps, 128 held-out prompts x 4 samples

Every run starts from the same warmed-up toy model (`trl_ada.toy.toy_model_dir(task=...)`; ``--task`` picks the task,
`learning_catalog.py` holds the methods and each task's settings), sees the same prompts in the same order for a given
seed (16 per step; selection and refill replace some from their side stream) with the same learning rate, loss and
reward scaling; only the sampling differs. Tokens are counted at GRPOTrainer's generation call, identically for every
method (every round, refill and replaced prompt counts). Runs go to two one-thread worker processes (faster than one
two-thread process on 2 cores); wall times are therefore single-thread times.

On the columns tasks (the current instrument, `benchmarks/results/columns/README.md`) every method is evaluated on one
shared grid of generated-token counts and steps, on held-out correct-chain accuracy, and trains until both grids are
covered (`grid_stats.py` and `learning_grid_report.py`: Δ AUC over tokens 0 to B, Δ at fixed budgets and at equal
steps, tokens and steps to 50/75/90% of GRPO n=4's gain where the grid resolves them, the A/A floor over every split
of GRPO n=4's seeds, the flawed share of rewarded samples at every checkpoint, GRPO n=4's gain per hard rule). The
earlier tasks (arithmetic, reasoning, rules) evaluate every few steps and are summarised as their reports were
(`learning_report.py`, `learning_stats.py`). `--baseline-from` takes GRPO n=4's runs from an earlier report made
with the same settings after checking that its first seed trains the same numbers here (`learning_reproduce.py`).
Before the runs, the start model's own samples on the training prompts measure the testbed: the pass-rate mix,
completion lengths, visits per prompt, and, for a task built as an instrument, its properties. Writes JSON, a Markdown
table and a PNG plot to ``--output-dir``; the committed results keep the JSON gzipped (``gzip -n``) and a plot only
where its study shows it (``--plot`` draws any report's again).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any

from grid_stats import grid_aa_floor
from learning_catalog import (
    BASELINE,
    FULL,
    LEARNING_RATE,
    MATCH_TOKENS,
    METHODS,
    ORACLE_SUBSETS,
    QUICK,
    RESULTS,
    TASK_FULL,
    grid_settings,
    resolve_method,
)
from learning_grid_report import (
    grid_heldout_aa_floor,
    grid_markdown,
    grid_of,
    grid_paired_comparisons,
    grid_plot,
    summarise_grid,
)
from learning_report import (
    interval_text,
    markdown_table,
    paired_comparisons,
    pairings_section,
    plot,
    read_report,
    summarise,
    testbed_line,
)
from learning_reproduce import check_reproduces, verify
from learning_runs import completions_per_trained_prompt, measure_testbed, oracle_subsets, run_all
from learning_stats import aa_floor, heldout_aa_floor, late_gain
from machine import describe, machine_info
from skill_frames import retention_drop, with_skill_and_retention
from skill_report import SKILL_TASKS, prepared, read_all, skill_section
from testbeds import TASKS

from trl_ada.toy.registry import toy_task


def combine_reports(
    reports: Sequence[dict[str, Any]], methods: Sequence[str] | None, drop_seeds: Sequence[int] = ()
) -> list[dict[str, Any]]:
    """The runs of several reports made with the same settings (seeds run in chunks, or on several machines), for one
    summary over all their seeds: only ``methods`` (default: every method found), every method's runs of
    ``drop_seeds`` left out (a sensitivity check: does a verdict rest on a few seeds?). A run found again unchanged
    (the copy of GRPO n=4's runs a ``--baseline-from`` report carries) counts once. Refuses reports whose settings
    differ, a (seed, method) run found twice with different measurements, and a method whose seeds are not the
    baseline's (the bootstrap pairs them)."""
    if not reports:
        raise SystemExit("--combine needs at least one report")
    first = reports[0]["settings"]
    for report in reports[1:]:
        differ = settings_differences(first, report["settings"])
        if differ:
            raise SystemExit(f"--combine: the reports' settings differ in {differ}; their runs are not comparable")
    runs: dict[tuple[str, int], dict[str, Any]] = {}  # in the reports' order
    for report in reports:
        for run in report["runs"]:
            if (methods is not None and run["key"] not in methods) or run["seed"] in drop_seeds:
                continue
            if runs.get((run["key"], run["seed"]), run) != run:
                raise SystemExit(
                    f"--combine: {run['key']} seed {run['seed']} is in more than one report, measured differently"
                )
            runs[run["key"], run["seed"]] = run
    seeds: dict[str, set[int]] = {}
    for key, seed in runs:
        seeds.setdefault(key, set()).add(seed)
    if BASELINE not in seeds:
        raise SystemExit(f"--combine: no {BASELINE} runs: the ratios are relative to it")
    for key, found in seeds.items():
        if found != seeds[BASELINE]:
            raise SystemExit(f"--combine: {key} ran seeds {sorted(found)}, {BASELINE} {sorted(seeds[BASELINE])}")
    order = {key: i for i, key in enumerate(dict.fromkeys([BASELINE, *seeds]))}
    return sorted(runs.values(), key=lambda run: (order[run["key"]], run["seed"]))


# Settings that change what is measured, not what is trained: `--combine` pools reports that differ in them.
MEASURED_ONLY = {"heldout_entropy"}
# The options `--combine` uses; every other option shapes a training run, and `--combine` refuses it.
COMBINE_OPTIONS = {"combine", "methods", "drop_seeds", "output_dir", "name"}


def settings_differences(first: dict[str, Any], second: dict[str, Any]) -> list[str]:
    """The settings two reports' runs differ in, beyond what only changes the measuring (`MEASURED_ONLY`). The start
    model's folder is compared only when either report named it with --model-dir: a task's warm model of one
    ``warm_seed`` lives in a different folder on every machine (the clone, the cache) but is the same model."""
    ignored = set(MEASURED_ONLY)
    if first.get("warm_seed") is not None and first.get("warm_seed") == second.get("warm_seed"):
        ignored.add("model_dir")
    keys = (set(first) | set(second)) - ignored
    return sorted(k for k in keys if first.get(k) != second.get(k))


def baseline_runs_from(report: dict[str, Any], settings: dict[str, Any], seeds: Sequence[int]) -> list[dict]:
    """``--baseline-from``: GRPO n=4's runs of ``seeds`` from an earlier report made with the same settings, so that a
    job comparing more methods against it need not train it again. Refuses a report whose settings differ and one
    that lacks a seed."""
    differ = settings_differences(report["settings"], settings)
    if differ:
        raise SystemExit(f"--baseline-from: the report's settings differ in {differ}; its runs are not comparable")
    found = {run["seed"]: run for run in report["runs"] if run["key"] == BASELINE}
    missing = sorted(set(seeds) - set(found))
    if missing:
        raise SystemExit(f"--baseline-from: the report has no {BASELINE} run of seeds {missing}")
    return [found[seed] for seed in seeds]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"a few minutes: {QUICK}")
    parser.add_argument("--task", default="arithmetic", choices=TASKS, help="the toy task (--list-tasks)")
    parser.add_argument("--list-tasks", action="store_true", help="print the toy tasks, one a line, and exit")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--methods",
        nargs="+",
        type=resolve_method,
        choices=METHODS,
        help="methods to run (default: all but the oracle subsets, bounds; with --combine, every method in the "
        "reports); a retired name (learning_catalog.RENAMED) runs its configuration under its current name",
    )
    parser.add_argument("--steps", type=int, help=f"optimizer steps per run (default {FULL['steps']})")
    parser.add_argument("--eval-every", type=int, help="steps between held-out evaluations")
    parser.add_argument("--heldout", type=int, help="held-out prompts")
    parser.add_argument("--heldout-samples", type=int, help="sampled completions per held-out prompt")
    parser.add_argument("--prompts-per-step", type=int, default=16)
    parser.add_argument(
        "--no-heldout-entropy",
        action="store_true",
        help="skip the policy's mean token entropy at each held-out evaluation (one forward pass over the samples)",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        help=f"constant learning rate (default per task: {LEARNING_RATE}); the *-lr* methods keep their own",
    )
    parser.add_argument(
        "--match-tokens",
        type=float,
        help="train every method but GRPO n=4 up to this many times its steps and read every curve up to GRPO n=4's "
        f"tokens; 0: equal steps, curves read to their end (default per task: {MATCH_TOKENS})",
    )
    parser.add_argument(
        "--testbed-only", action="store_true", help="measure the start model's testbed, write it, and train nothing"
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each")
    parser.add_argument(
        "--output-dir", type=pathlib.Path, help=f"where results go (default {RESULTS}; --plot: by each report)"
    )
    parser.add_argument("--name", help="result file stem (default learning_per_token[_quick])")
    parser.add_argument(
        "--combine",
        nargs="+",
        type=pathlib.Path,
        metavar="REPORT",
        help="train nothing: summarise the runs of these JSON reports (same settings, e.g. seeds run in chunks) as "
        "one run over all their seeds; the testbed is the first report's",
    )
    parser.add_argument(
        "--drop-seeds",
        type=int,
        nargs="+",
        metavar="SEED",
        help="with --combine: leave these seeds out of every method, to see whether a verdict rests on them",
    )
    parser.add_argument(
        "--baseline-from",
        type=pathlib.Path,
        metavar="REPORT",
        help=f"take {BASELINE}'s runs of --seeds from this JSON report (made with the same settings) instead of "
        f"training them again; leave {BASELINE} out of --methods",
    )
    parser.add_argument(
        "--verify",
        type=pathlib.Path,
        metavar="REPORT",
        help="train nothing new: train this JSON report's runs of --seeds and --methods again, with its settings, and "
        "say for each whether its checkpoints reproduce exactly or where they first differ",
    )
    parser.add_argument(
        "--plot",
        nargs="+",
        type=pathlib.Path,
        metavar="REPORT",
        help="train nothing: draw these reports' plots again from their runs and summary, each as its name with .png, "
        "next to it (or in --output-dir)",
    )
    parser.add_argument("--model-dir", type=pathlib.Path, help="start from this model (default: the warm toy model)")
    parser.add_argument(
        "--warm-seed",
        type=int,
        default=0,
        help="start from the task's warm model built with this seed (toy_model_dir(seed=...); 0: the shipped one)",
    )
    args = parser.parse_args(argv)
    for flag, allowed in (("combine", COMBINE_OPTIONS), ("plot", {"plot", "output_dir"})):
        if getattr(args, flag) is None:
            continue
        # The reports carry their own settings: a training flag here would be silently ignored.
        ignored = [
            f"--{dest.replace('_', '-')}"
            for dest, value in vars(args).items()
            if dest not in allowed and value != parser.get_default(dest)
        ]
        if ignored:
            parser.error(f"--{flag} trains nothing; the reports carry their settings, so drop {', '.join(ignored)}")
    if args.combine is None and args.drop_seeds is not None:
        parser.error("--drop-seeds leaves seeds out of a --combine; to train fewer seeds, give --seeds")
    if args.plot is None and args.output_dir is None:
        args.output_dir = RESULTS
    if args.methods is None and args.combine is None:
        args.methods = [m for m in METHODS if m not in ORACLE_SUBSETS]
        if args.baseline_from is not None:
            args.methods.remove(BASELINE)
    return args


def _command(argv: list[str] | None) -> str:
    return " ".join(["python benchmarks/learning_per_token.py", *(argv if argv is not None else sys.argv[1:])])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.list_tasks:
        print("\n".join(TASKS))
        return {"tasks": list(TASKS)}
    if args.plot:
        return {"plots": [str(replot(path, args.output_dir)) for path in args.plot]}
    if args.combine:
        return combine_main(args, argv)
    if args.verify:
        return verify_main(args, argv)
    if BASELINE not in args.methods and args.baseline_from is None:
        raise SystemExit(
            f"--methods must include {BASELINE} (or --baseline-from a report of it): the ratios are relative to it"
        )
    if BASELINE in args.methods and args.baseline_from is not None:
        raise SystemExit(f"--baseline-from supplies {BASELINE}'s runs: drop it from --methods")
    settings = dict(QUICK if args.quick else FULL | TASK_FULL.get(args.task, {}))
    for name in ("steps", "eval_every", "heldout", "heldout_samples"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    learning_rate = args.learning_rate if args.learning_rate is not None else LEARNING_RATE[args.task]
    match_tokens = args.match_tokens if args.match_tokens is not None else MATCH_TOKENS[args.task]
    if match_tokens is not None and match_tokens != 0 and match_tokens < 1:
        raise SystemExit(f"--match-tokens must be 0 (off) or at least 1, got {match_tokens}")
    settings |= {
        "task": args.task,
        "prompts_per_step": args.prompts_per_step,
        "learning_rate": learning_rate,
        "match_tokens": match_tokens or None,
        "heldout_entropy": not args.no_heldout_entropy,
    }
    settings |= grid_settings(args.task, settings["steps"], args.prompts_per_step)
    name = args.name or ("learning_per_token_quick" if args.quick else "learning_per_token")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    print(f"machine: {describe(machine)}\nsettings: {settings}, seeds {args.seeds}", flush=True)

    from trl_ada.toy import toy_model_dir

    # Build the warm start once, before the workers race for it.
    if args.model_dir is not None and args.warm_seed != 0:
        raise SystemExit("--model-dir and --warm-seed both name the start model: give one")
    settings["model_dir"] = str(args.model_dir or toy_model_dir(seed=args.warm_seed, task=args.task))
    settings["warm_seed"] = None if args.model_dir is not None else args.warm_seed
    oracle = any(key in ORACLE_SUBSETS for key in args.methods)
    earlier = None if args.baseline_from is None else read_report(args.baseline_from)
    baseline = [] if earlier is None else baseline_runs_from(earlier, settings, args.seeds)
    if earlier is not None:  # the same settings are not enough: the same code and kernels must give the same numbers
        check_reproduces(earlier, settings, BASELINE, args.seeds)
    if earlier is not None and earlier["seeds"][0] == args.seeds[0] and not oracle:
        # The same start model, settings and first seed: the same measurement, already made.
        testbed = {**earlier["testbed"], "from": str(args.baseline_from)}
    else:
        testbed = timed_testbed(settings, args.seeds[0])
    per_prompt = testbed.pop("per_prompt", None)
    if oracle:
        subsets = oracle_subsets(
            testbed.pop("contents"), per_prompt["right"], per_prompt["mean_len"], testbed["samples_per_prompt"]
        )
        settings["oracle_subsets"] = subsets
        testbed["oracle_subsets"] = {
            name: {"prompts": len(subset["prompts"]), **{k: v for k, v in subset.items() if k != "prompts"}}
            for name, subset in subsets.items()
        }
        print(f"oracle subsets: {testbed['oracle_subsets']}", flush=True)
    testbed.pop("contents", None)
    print(f"testbed: {testbed_line(testbed)}", flush=True)
    if args.testbed_only:
        report = {"command": _command(argv), "settings": settings, "machine": machine, "testbed": testbed}
        (args.output_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
        return report
    start = time.perf_counter()
    runs = baseline + run_all(args.seeds, args.methods, settings, args.jobs)
    elapsed = time.perf_counter() - start
    report = {
        "command": _command(argv),
        "settings": settings,
        "seeds": args.seeds,
        "machine": machine,
        "load_average_1min_after": machine_info()["load_average_1min"],
        "elapsed_seconds": round(elapsed, 1),
        "testbed": testbed,
    }
    if args.baseline_from is not None:  # its time is not in elapsed_seconds
        report["baseline_from"] = str(args.baseline_from)
    return write_results(report, runs, args.output_dir, name)


def verify_main(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    """``--verify``: train a report's chosen runs again and record whether each reproduces (`learning_reproduce`)."""
    report = read_report(args.verify)
    methods = args.methods or sorted({run["key"] for run in report["runs"]})
    results = verify(report, args.seeds, methods)
    if not results:
        raise SystemExit(f"--verify: {args.verify} holds no run of seeds {args.seeds} and methods {methods}")
    out = {"command": _command(argv), "report": str(args.verify), "machine": machine_info(), "verified": results}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    name = args.name or f"{args.verify.stem}_verify"
    (args.output_dir / f"{name}.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def timed_testbed(settings: dict[str, Any], seed: int) -> dict[str, Any]:
    """`measure_testbed`, with the seconds it took."""
    began = time.perf_counter()
    testbed = measure_testbed(settings, seed)
    testbed["seconds"] = round(time.perf_counter() - began, 1)
    return testbed


# What reports from before these settings existed were made with: the arithmetic task, each curve read to its end.
EARLIEST_SETTINGS = {"task": "arithmetic", "match_tokens": None}


def combine_main(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    """``--combine``: one summary over the runs of several reports (`combine_reports`), written like a run's."""
    reports = [read_report(path) for path in args.combine]
    for report in reports:
        report["settings"] = EARLIEST_SETTINGS | report["settings"]
    runs = combine_reports(reports, args.methods, args.drop_seeds or ())
    check_same_numbers(reports, args.combine)
    seeds = sorted({run["seed"] for run in runs})
    report = {
        "command": _command(argv),
        # A --baseline-from report's GRPO n=4 runs were trained by the report it names: keep saying which.
        "combined": [
            {"command": r["command"], "seeds": r["seeds"], "machine": r.get("machine"), "testbed": r.get("testbed")}
            | ({"baseline_from": r["baseline_from"]} if "baseline_from" in r else {})
            for r in reports
        ],
        "settings": reports[0]["settings"],
        "seeds": seeds,
        "machine": reports[0]["machine"],
        "load_average_1min_after": reports[-1]["load_average_1min_after"],
        "elapsed_seconds": round(sum(r["elapsed_seconds"] for r in reports), 1),
        "testbed": reports[0].get("testbed"),  # None: a report from before the testbed was measured
    }
    if args.drop_seeds:
        report["dropped_seeds"] = sorted(args.drop_seeds)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    return write_results(report, runs, args.output_dir, args.name or "learning_per_token_combined")


def check_same_numbers(reports: Sequence[dict[str, Any]], paths: Sequence[pathlib.Path]) -> None:
    """Reports made at different commits pool only if the code between them trains the same numbers: each report
    made at another commit than the first's has its first run trained again here to its first checkpoint
    (`check_reproduces`); one that does not reproduce is refused. Reports made at one commit are not retrained."""
    first = (reports[0].get("machine") or {}).get("code")
    for report, path in zip(reports[1:], paths[1:], strict=True):
        if (report.get("machine") or {}).get("code") == first or not report.get("runs"):
            continue
        run = report["runs"][0]
        print(f"--combine: {path.name} was made at another commit; training {run['key']} seed {run['seed']} again")
        check_reproduces(report, report["settings"], run["key"], [run["seed"]], flag=f"--combine ({path.name})")


def write_results(report: dict[str, Any], runs: list[dict], output_dir: pathlib.Path, name: str) -> dict[str, Any]:
    """Summarise ``runs`` into ``report`` and write it as ``name``.json, .md and .png in ``output_dir``: on the shared
    grid for a report made on one (`write_grid_results`), else as reports before the grid were."""
    if "token_grid" in report["settings"]:
        return write_grid_results(report, runs, output_dir, name)
    settings = report["settings"]
    rows = summarise(runs, match_tokens=bool(settings["match_tokens"]), heldout_samples=settings["heldout_samples"])
    base_runs = [run for run in runs if run["key"] == BASELINE]
    floor = aa_floor(base_runs)
    samples = settings["heldout_samples"]
    heldout_floor = None if samples is None else heldout_aa_floor(base_runs, samples)
    table = markdown_table(rows, floor, heldout_floor)
    pairs, pair_floors = paired_comparisons(runs, samples)
    section = pairings_section(pairs, pair_floors)
    if section is not None:
        table += "\n\n" + section
    title = plot_title(report, runs)
    plot(runs, rows, output_dir / f"{name}.png", title)
    late = late_gain(base_runs)
    report |= {
        "summary": rows,
        "aa_floor": floor,
        "heldout_aa_floor": heldout_floor,
        "baseline_late_gain": late,
        "pairings": pairs,
        "pairing_floors": pair_floors,
        "runs": runs,
    }
    (output_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    target = rows[0]["target_accuracy"]
    budget = ""
    if settings["match_tokens"]:
        budget = f" Final accuracies are read at GRPO n=4's {rows[0]['token_budget']:,.0f} tokens."
    combined = ""
    if "combined" in report:
        count = len(report["combined"])
        combined = f" Summarised from {count} report{'s' if count > 1 else ''}"
        combined += "; the testbed is the first's." if count > 1 else "."
    testbed = "" if report["testbed"] is None else f"Testbed at the start: {testbed_line(report['testbed'])}.\n"
    text = (
        f"{title}; target = GRPO n=4's final accuracy on the seed-averaged curve, {target:.3f}.{budget}\n"
        f"Machine: {describe(report['machine'])}; load average after: {report['load_average_1min_after']}. "
        f"{report['elapsed_seconds'] / 60:.1f} min.{combined}\n"
        f"{testbed}"
        f"GRPO n=4 after {late['fraction']:.0%} of its steps: {late['gain']:+.3f} "
        f"{interval_text(late['gain_ci'], '{:+.3f}').strip()} accuracy more by its last step (mean over seeds, "
        f"bootstrap 95% CI; above 0: still improving).\n\n{table}\n"
    )
    (output_dir / f"{name}.md").write_text(text)
    print("\n" + text, flush=True)
    return report


def plot_title(report: dict[str, Any], runs: list[dict]) -> str:
    """The title of a report's plot (and of its table): the task, the run's shape, the seeds and the held-out set."""
    settings = report["settings"]
    held = f"held-out {settings['heldout']} x {settings['heldout_samples']}"
    steps = f"{settings['steps']} steps x {settings['prompts_per_step']} prompts"
    if "token_grid" in settings:
        grid = "on one grid of tokens and steps"
        return f"Toy task ({settings['task']}), GRPO n=4 {steps}, seeds {report['seeds']}, {held}, {grid}"
    longest = max(run["checkpoints"][-1]["step"] for run in runs)  # the runs', not what the settings would allow
    if longest > settings["steps"]:
        steps += f" (others up to {longest} steps)"
    if settings.get("match_tokens"):
        steps += ", read at GRPO n=4's tokens"
    return f"Toy task ({settings['task']}), {steps}, seeds {report['seeds']}, {held}"


def replot(path: pathlib.Path, output_dir: pathlib.Path | None) -> pathlib.Path:
    """``--plot``: a report's plot drawn again from its runs and summary, as `write_results` drew it."""
    report = read_report(path)
    report["settings"] = EARLIEST_SETTINGS | report["settings"]
    name = path.name.removesuffix(".gz").removesuffix(".json")
    target = (output_dir or path.parent) / f"{name}.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    runs, rows, title = report["runs"], report["summary"], plot_title(report, report["runs"])
    if "token_grid" in report["settings"]:
        grid_plot(runs, rows, grid_of(report["settings"]), target, title)
    else:
        plot(runs, rows, target, title)
    return target


def _header(report: dict[str, Any], title: str) -> str:
    """The lines every report opens with under its title: the machine, the time and where the runs came from."""
    combined = ""
    if "combined" in report:
        count = len(report["combined"])
        combined = f" Summarised from {count} report{'s' if count > 1 else ''}"
        combined += "; the testbed is the first's." if count > 1 else "."
    return (
        f"{title}.\nMachine: {describe(report['machine'])}; load average after: "
        f"{report['load_average_1min_after']}. {report['elapsed_seconds'] / 60:.1f} min.{combined}\n"
    )


def write_grid_results(
    report: dict[str, Any], runs: list[dict], output_dir: pathlib.Path, name: str
) -> dict[str, Any]:
    """`write_results` for a report made on the shared grid (`learning_grid_report.py`)."""
    settings = report["settings"]
    grid = grid_of(settings)
    samples = settings["heldout_samples"]
    task = toy_task(settings["task"])
    hard = sorted({label for label, hard in zip(*_labels(task, settings["heldout"]), strict=True) if hard})
    runs = [run | {"completions_per_trained_prompt": completions_per_trained_prompt(run, settings)} for run in runs]
    skill = settings["task"] in SKILL_TASKS
    if skill:
        runs = with_skill_and_retention(runs)
    rows = summarise_grid(runs, grid, samples, hard)
    base_runs = [run for run in runs if run["key"] == BASELINE]
    floor = grid_aa_floor(base_runs, grid)
    heldout_floor = grid_heldout_aa_floor(base_runs, grid, samples)
    pairs, pair_floors = grid_paired_comparisons(runs, grid, samples)
    table = grid_markdown(rows, floor, heldout_floor, grid, pairs, pair_floors)
    if skill:  # every comparison again on skill, retention and mix, with the two-way statistics (skill_report)
        report["skill"] = read_all([prepared(report | {"runs": runs}, f"{name}.json")])
        report["retention_drop"] = retention_drop(base_runs)
        table = skill_section(report["skill"], report["retention_drop"]) + "\n\n" + table
    title = plot_title(report, runs)
    grid_plot(runs, rows, grid, output_dir / f"{name}.png", title)
    late = late_gain(base_runs, metric="chain_accuracy")
    report |= {
        "summary": rows,
        "aa_floor": floor,
        "heldout_aa_floor": heldout_floor,
        "baseline_late_gain": late,
        "pairings": pairs,
        "pairing_floors": pair_floors,
        "runs": runs,
    }
    (output_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    testbed = "" if report["testbed"] is None else f"Testbed at the start: {testbed_line(report['testbed'])}.\n"
    text = (
        _header(report, title) + testbed + f"GRPO n=4 after {late['fraction']:.0%} of its steps: {late['gain']:+.3f} "
        f"{interval_text(late['gain_ci'], '{:+.3f}').strip()} correct-chain accuracy more by its last step (mean "
        f"over seeds, bootstrap 95% CI; above 0: still improving).\n\n{table}\n"
    )
    (output_dir / f"{name}.md").write_text(text)
    print("\n" + text, flush=True)
    return report


def _labels(task: Any, heldout: int) -> tuple[list[str], list[bool]]:
    """The held-out set's rule labels and whether each is a hard rule's."""
    dataset = task.heldout(heldout)
    if "rule" not in dataset.column_names:
        return [], []
    return list(dataset["rule"]), list(dataset["hard"])


if __name__ == "__main__":
    main()
