"""Threads for the toy model: the demo's pipeline at 1 and 2 torch threads, on an idle CPU and beside a busy loop.

    python benchmarks/threads.py               # `trl-ada demo --steps 20` per setting, idle and busy: about 3 min
    python benchmarks/threads.py --steps 5     # quicker

Each setting runs the demo's code (GRPO then Ada-balanced from the shipped warm model, 20 steps of 16 prompts each)
in a fresh process and records its wall time, GRPO's and Ada's training time (evaluations excluded), and the process
CPU time. "pinned" is `trl-ada demo` itself (1 thread, MKL_CBWR=COMPATIBLE, ATEN_CPU_CAPABILITY=avx2); "1 thread"
and "2 threads" are the same code with torch's defaults otherwise (`OMP_NUM_THREADS=N`). "Busy" starts one
`while True: pass` process first, so another program holds one core, as on a shared CI machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

from machine import describe, machine_info

RESULTS = pathlib.Path(__file__).parent / "results"
PINNED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_CBWR", "ATEN_CPU_CAPABILITY")
SETTINGS = {  # label -> (command after `python`, environment overrides)
    "pinned (trl-ada demo)": (["-m", "trl_ada.tools.cli", "demo"], {}),
    "1 thread": (
        ["-c", "import sys; from trl_ada.tools.demo import main; main(sys.argv[1:])"],
        {"OMP_NUM_THREADS": "1"},
    ),
    "2 threads": (
        ["-c", "import sys; from trl_ada.tools.demo import main; main(sys.argv[1:])"],
        {"OMP_NUM_THREADS": "2"},
    ),
}
TIMES = re.compile(r"Training time: (?:grpo-4|GRPO n=4) (\d+)s, (?:seq-[\w-]+|Ada-\w+) (\d+)s; (\d+)s in all\.")


def run_setting(label: str, steps: int, busy: bool, scratch: str) -> dict[str, Any]:
    args, overrides = SETTINGS[label]
    env = {key: value for key, value in os.environ.items() if key not in PINNED} | overrides
    demo_args = ["--steps", str(steps), "--output-dir", f"{scratch}/out", "--cache-dir", f"{scratch}/cache"]
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        began = time.perf_counter()
        before = os.times()
        result = subprocess.run([sys.executable, *args, *demo_args], env=env, capture_output=True, text=True)
        after = os.times()
        wall = time.perf_counter() - began
    finally:
        if loop is not None:
            loop.kill()
            loop.wait()
    if result.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{result.stderr[-3000:]}")
    match = TIMES.search(result.stdout)
    if match is None:
        raise RuntimeError(f"{label}: no time line in the output:\n{result.stdout[-2000:]}")
    grpo, ada, in_all = map(int, match.groups())
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    summary = result.stdout[result.stdout.index("GRPO vs Reinforce-Ada") :].split("\nTraining time:")[0]
    return {
        "setting": label,
        "busy": busy,
        "wall_seconds": round(wall, 1),
        "demo_seconds": in_all,
        "grpo_train_seconds": grpo,
        "ada_train_seconds": ada,
        "cpu_seconds": round(cpu, 1),
        "summary": summary,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| setting | other load | process wall (s) | GRPO training (s) | Ada training (s) | CPU time (s) |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        load = "busy loop on one core" if row["busy"] else "idle"
        lines.append(
            f"| {row['setting']} | {load} | {row['wall_seconds']:.0f} | {row['grpo_train_seconds']} | "
            f"{row['ada_train_seconds']} | {row['cpu_seconds']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per method")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--output-dir", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--name", default="threads", help="result file stem")
    args = parser.parse_args(argv)

    machine = machine_info()
    began = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="trl_ada_threads_") as scratch:
        for busy in (False, True):
            for label in args.settings:
                rows.append(run_setting(label, args.steps, busy, scratch))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    same = len({row["summary"] for row in rows}) == 1
    report = (
        f"`python benchmarks/threads.py --steps {args.steps}`: {describe(machine)}; "
        f"{time.perf_counter() - began:.0f}s in all, 1-min load average after: {os.getloadavg()[0]:.2f}.\n\n"
        f"{table(rows)}\n\nSummary blocks of all {len(rows)} runs identical: {'yes' if same else 'no'}.\n"
    )
    print("\n" + report)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"{args.name}.md").write_text(report)
    payload = {"command": f"python benchmarks/threads.py --steps {args.steps}", "machine": machine, "runs": rows}
    (args.output_dir / f"{args.name}.json").write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
