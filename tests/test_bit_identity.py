"""The package's layout changes, its numbers do not: four short training runs (rounds, streaming, estimate with the
pass-rate memory, refill with prompt selection; `tests/bit_identity_runs.py`) give the outputs recorded in
`tests/data/bit_identity.json` before the modules moved: every batch handed to the loss (prompts, completions,
advantages), every logged value but wall times, and a checksum of the final weights.

What is exact is compared exactly: token ids, prompt keys, counts, the weights' checksum (equal on every x86-64 CPU
the runs were tried on, AMD and Intel). A float is compared within `FLOAT_TOLERANCE`: a statistic computed from the
same tensors can round differently in its last float32 place on another CPU (an Intel Xeon logs
`ada/kept_reward_std` 0.5345224738121033 where the recording, on an AMD EPYC, has 0.534522533416748: one float32
unit in the last place), while a real change of the code moves a logged value by far more.

The numbers are torch's and transformers' as installed (`torch==2.13.0`, the transformers this repository was
tested with); after upgrading either, re-record with `python tests/bit_identity_runs.py OUTPUT_DIR --record` on code
known to be right, and say so in the commit (CONTRIBUTING.md, "Recorded reference numbers")."""

import json
import math
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


# Floats (advantages, logged statistics, losses) agree within this, relative or absolute: 2^7 float32 units in the
# last place, room for a reduction over a few hundred float32 terms summed in another order. A change of 1e-4 of a
# value is past it (test_a_planted_change_beyond_the_tolerance_fails); the tokens and the weights' checksum, exact,
# catch a change that moves the training at all.
FLOAT_TOLERANCE = 2.0**-16


def first_difference(got: Any, want: Any, path: str = "", tolerance: float = FLOAT_TOLERANCE) -> str | None:
    """Where two JSON values first differ, or None. Strings, booleans and integers must be equal; floats within
    ``tolerance`` (relative to the recorded value, or absolute below 1), NaN equal to NaN; 0 exact floats."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(got) | set(want)):
            if key not in got or key not in want:
                return f"{path}/{key}: {'missing' if key not in got else 'not recorded'}"
            found = first_difference(got[key], want[key], f"{path}/{key}", tolerance)
            if found:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return f"{path}: {len(got)} items, recorded {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = first_difference(g, w, f"{path}/{i}", tolerance)
            if found:
                return found
        return None
    if type(got) is float and type(want) is float:
        same = (math.isnan(got) and math.isnan(want)) or math.isclose(got, want, rel_tol=tolerance, abs_tol=tolerance)
    else:
        same = json.dumps(got) == json.dumps(want) and type(got) is type(want)
    return None if same else f"{path}: {got!r}, recorded {want!r}"


def float32_neighbour(value: float, direction: float) -> float:
    """The next float32 after ``value`` towards ``direction``: one unit in the last place of float32."""
    import numpy as np

    return float(np.nextafter(np.float32(value), np.float32(direction)))


def moved(value: Any, change: Any) -> Any:
    """``value`` (JSON) with every float replaced by ``change(float)``; everything else as it is."""
    if isinstance(value, dict):
        return {key: moved(item, change) for key, item in value.items()}
    if isinstance(value, list):
        return [moved(item, change) for item in value]
    return change(value) if type(value) is float else value


def test_first_difference_finds_the_first_real_change():
    recorded = {"rounds": {"logs": [{"loss": 0.25, "reward": float("nan"), "step": 1}], "weights_sha256": "ab"}}
    assert first_difference(json.loads(json.dumps(recorded)), recorded) is None
    changed = json.loads(json.dumps(recorded))
    changed["rounds"]["logs"][0]["loss"] = 0.2501  # a change of 4e-4, past the tolerance
    assert first_difference(changed, recorded) == "/rounds/logs/0/loss: 0.2501, recorded 0.25"
    assert first_difference({"rounds": {"logs": []}}, recorded) == "/rounds/logs: 0 items, recorded 1"
    assert first_difference({}, recorded) == "/rounds: missing"
    exact = json.loads(json.dumps(recorded))
    exact["rounds"]["logs"][0]["step"] = 2  # an integer is exact
    assert first_difference(exact, recorded) == "/rounds/logs/0/step: 2, recorded 1"
    exact["rounds"]["logs"][0]["step"] = 1.0  # and stays an integer
    assert first_difference(exact, recorded) == "/rounds/logs/0/step: 1.0, recorded 1"
    checksum = json.loads(json.dumps(recorded)) | {"rounds": {**recorded["rounds"], "weights_sha256": "ac"}}
    assert first_difference(checksum, recorded) == "/rounds/weights_sha256: 'ac', recorded 'ab'"


def test_the_tolerance_admits_the_last_float32_place_on_every_recorded_float():
    """Every float of the recording moved by one float32 unit in the last place, up and down, still matches: the
    difference an Intel CPU makes (the example above: 0.534522533416748 logged as 0.5345224738121033)."""
    golden = json.loads(GOLDEN.read_text())
    assert float32_neighbour(0.534522533416748, 0.0) == 0.5345224738121033
    for direction in (math.inf, -math.inf):
        nudged = moved(golden, lambda v, d=direction: v if math.isnan(v) else float32_neighbour(v, d))
        assert nudged != golden
        assert first_difference(nudged, golden) is None


def _first_nonzero(values: list[float]) -> int:
    return next(i for i, v in enumerate(values) if v != 0)


def test_a_planted_change_beyond_the_tolerance_fails():
    """A logged float moved by 1e-4 of its value, an advantage's sign, one token or the weights' checksum is caught
    where it was planted."""
    golden = json.loads(GOLDEN.read_text())

    def log_row(run: dict[str, Any]) -> dict[str, Any]:
        return next(row for row in run["streaming"]["logs"] if "ada/kept_reward_std" in row)

    def scale_logged(run: dict[str, Any]) -> str:
        log_row(run)["ada/kept_reward_std"] *= 1 + 1e-4
        return f"/streaming/logs/{run['streaming']['logs'].index(log_row(run))}/ada/kept_reward_std"

    def flip_advantage(run: dict[str, Any]) -> str:
        batch = next(i for i, b in enumerate(run["rounds"]["batches"]) if any(b["advantages"]))
        advantages = run["rounds"]["batches"][batch]["advantages"]
        index = _first_nonzero(advantages)
        advantages[index] = -advantages[index]
        return f"/rounds/batches/{batch}/advantages/{index}"

    def change_token(run: dict[str, Any]) -> str:
        run["refill_with_selection"]["batches"][0]["completion_ids"][0][0] += 1
        return "/refill_with_selection/batches/0/completion_ids/0/0"

    def change_weights(run: dict[str, Any]) -> str:
        run["estimate_with_memory"]["weights_sha256"] = "0" * 64
        return "/estimate_with_memory/weights_sha256"

    for plant in (scale_logged, flip_advantage, change_token, change_weights):
        run = json.loads(json.dumps(golden))
        where = plant(run)
        found = first_difference(run, golden)
        assert found is not None and found.startswith(where + ":"), (plant.__name__, found)


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
