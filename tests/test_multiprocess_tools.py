"""Tools on two processes: per-round tool state on each, `tools/*` gathered once per step."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_multiprocess import free_port

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_tool_counts_are_gathered_over_processes_and_rounds(tool_model_dir, tmp_path):
    script = Path(__file__).with_name("mp_tools.py")
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        str(script), str(tmp_path), str(tool_model_dir),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    # Each rank: 2 prompts x 4 rows per round. Rank 1 never resolves (3 rounds), so rank 0 resolves in round 1 and
    # pads rounds 2 and 3 with copies of its first prompt, which the scripted policy also answers with a tool call.
    assert [rank["first_turns"] for rank in ranks] == [24, 24]
    assert [rank["calls"] for rank in ranks] == [24, 0]
    for rank in ranks:
        (log,) = rank["logs"]
        assert log["tools/call_frequency"] == pytest.approx(24 / 48)  # every rollout generated, padding included
        assert log["tools/failure_frequency"] == 0.0
        assert log["ada/rounds"] == 3
        assert log["ada/samples_per_prompt"] == pytest.approx((4 * 2 + 12 * 2) / 4)  # padding excluded here
    shared = [
        {k: v for k, v in rank["logs"][0].items() if k.startswith(("ada/", "tools/", "completions/", "reward"))}
        for rank in ranks
    ]
    assert shared[0] == shared[1]  # global metrics, the same on both ranks (timings aside)
