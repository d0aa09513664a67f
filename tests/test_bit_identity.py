"""The package's layout changes, its numbers do not: four short training runs (rounds, streaming, estimate with the
pass-rate memory, refill with prompt selection; `tests/bit_identity_runs.py`) give, bit for bit, the outputs recorded
in `tests/data/bit_identity.json` before the modules moved: every batch handed to the loss (prompts, completions,
advantages), every logged value but wall times, and a checksum of the final weights.

The numbers are torch's and transformers' as installed (`torch==2.13.0`, the transformers this repository was
tested with); after upgrading either, re-record with `python tests/bit_identity_runs.py OUTPUT_DIR --record` on code
known to be right, and say so in the commit."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "bit_identity_runs.py"
GOLDEN = HERE / "data" / "bit_identity.json"
RUNS = ["estimate_with_memory", "refill_with_selection", "rounds", "streaming"]
# What `trl-ada demo` pins (trl_ada.reproducible): one thread, MKL's compatible branch, torch's AVX2 kernels.
PINNED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2"}


def first_difference(got: Any, want: Any, path: str = "") -> str | None:
    """Where two JSON values first differ (NaN equals NaN), or None."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(got) | set(want)):
            if key not in got or key not in want:
                return f"{path}/{key}: {'missing' if key not in got else 'not recorded'}"
            found = first_difference(got[key], want[key], f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return f"{path}: {len(got)} items, recorded {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = first_difference(g, w, f"{path}/{i}")
            if found:
                return found
        return None
    same = json.dumps(got) == json.dumps(want) and type(got) is type(want)
    return None if same else f"{path}: {got!r}, recorded {want!r}"


def test_first_difference_finds_the_first_changed_bit():
    recorded = {"rounds": {"logs": [{"loss": 0.25, "reward": float("nan")}], "weights_sha256": "ab"}}
    assert first_difference(json.loads(json.dumps(recorded)), recorded) is None
    changed = json.loads(json.dumps(recorded))
    changed["rounds"]["logs"][0]["loss"] = 0.25000000000000006  # one bit of the last place
    assert first_difference(changed, recorded) == "/rounds/logs/0/loss: 0.25000000000000006, recorded 0.25"
    assert first_difference({"rounds": {"logs": []}}, recorded) == "/rounds/logs: 0 items, recorded 1"
    assert first_difference({}, recorded) == "/rounds: missing"


def test_the_recorded_runs_exercise_what_they_are_named_for():
    golden = json.loads(GOLDEN.read_text())
    assert sorted(golden) == RUNS
    steps = {name: [row for row in run["logs"] if "ada/rounds" in row] for name, run in golden.items()}
    assert all(len(rows) == 4 and len(golden[name]["batches"]) == 4 for name, rows in steps.items())
    assert all(any(row["grad_norm"] > 0 for row in rows) for rows in steps.values())  # the weights move
    assert len({run["weights_sha256"] for run in golden.values()}) == 4
    assert max(row["ada/rounds"] for row in steps["rounds"]) > 1  # more than one round
    assert sum(row["ada/aborted_tokens"] for row in steps["streaming"]) > 0  # draws aborted mid-stream
    assert all("ada/alloc_max" in row for row in steps["estimate_with_memory"])  # the budget split by the memory
    estimate = steps["estimate_with_memory"]
    assert estimate[0]["ada/alloc_min"] == estimate[0]["ada/alloc_max"]  # nothing seen: an even split
    assert any(row["ada/alloc_min"] < row["ada/alloc_max"] for row in estimate[2:])  # seen prompts: uneven
    refill = steps["refill_with_selection"]
    assert sum(row["ada/refills"] for row in refill) > 0 and sum(row["ada/skipped"] for row in refill) > 0


@pytest.mark.slow
@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
    reason="the recorded numbers are those of torch's AVX2 kernels, which this CPU cannot run",
)
def test_four_configurations_reproduce_the_recorded_outputs(tmp_path):
    env = {**os.environ, **PINNED, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, str(RUNNER), str(tmp_path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    outputs = json.loads((tmp_path / "outputs.json").read_text())
    golden = json.loads(GOLDEN.read_text())
    assert sorted(outputs) == sorted(golden) == RUNS
    for name in RUNS:
        assert first_difference(outputs[name], golden[name]) is None, first_difference(outputs[name], golden[name])
