"""Two processes whose prompts resolve at different rounds: no hang, same rounds, same rows per generation call."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_two_processes(script: str, *args: object, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `tests/<script> args...` on two processes, one thread each, and return the finished launcher."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        # accelerate's --cpu launcher starts one process without MPI; --multi_gpu goes through torch.distributed.run,
        # and use_cpu=True in the config then trains on CPU over gloo.
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        str(Path(__file__).with_name(script)), *map(str, args),
    ]  # fmt: skip
    # PYTHONFAULTHANDLER: a rank that crashes (SIGABRT, SIGSEGV) prints its Python stacks to the launcher's stderr.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def rank_outputs(out_dir: Path) -> list[dict]:
    """What each rank's script wrote to `rank<r>.json` in `out_dir`."""
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(2)]


def run_two_processes(script: str, out_dir: Path, *args: object) -> list[dict]:
    """`launch_two_processes` for a script whose first argument is `out_dir`; it must succeed on both ranks."""
    result = launch_two_processes(script, out_dir, *args)
    assert result.returncode == 0, result.stderr[-4000:]
    return rank_outputs(out_dir)


@pytest.fixture(scope="module")
def fixed_rounds(toy_cold_dir, tmp_path_factory) -> list[dict]:
    """What each rank of `mp_rounds.py` under fixed rounds wrote (one run for the tests that read it)."""
    return run_two_processes("mp_rounds.py", tmp_path_factory.mktemp("fixed_rounds"), toy_cold_dir, "fixed")


def test_two_processes_resolving_at_different_rounds(fixed_rounds):
    ranks = fixed_rounds

    # 2 steps x 4 rounds, each call with 2 prompts x 8 samples: rank 0 (done after round 1) pads to match rank 1.
    assert ranks[0]["rows_per_call"] == ranks[1]["rows_per_call"] == [16] * 8
    for rank in ranks:
        assert len(rank["logs"]) == 2
        for log in rank["logs"]:
            # Global over both ranks: rank 0's prompts drew 8 samples and resolved, rank 1's drew 32 and did not.
            assert log["ada/rounds"] == 4
            assert log["ada/samples_per_prompt"] == pytest.approx(20.0)
            assert log["ada/samples_per_prompt_max"] == 32
            assert log["ada/frac_resolved"] == pytest.approx(0.5)
    assert ranks[0]["logs"] == ranks[1]["logs"]


def test_log_metric_counts_each_real_completion_once_and_no_padding_row(fixed_rounds):
    # Per step, rank 0 scores 16 real completions, all right, in round 1, then pads rounds 2-4 with 16 scored copies
    # of its first prompt (right too); rank 1 scores 4 rounds of 16 real completions, all wrong. The reward logs its
    # call's mean: 1.0 on every call of rank 0, 0.0 on rank 1. Over the real completions: 16 right of 16 + 64 = 0.2.
    # Counting the padding would give (4 x 16 x 1.0) / (8 x 16) = 0.5.
    for rank in fixed_rounds:
        assert rank["right"] == pytest.approx([16 / 80] * 2)


def test_two_processes_with_posterior_sized_rounds(toy_cold_dir, tmp_path):
    from trl_ada.core.engine import Schedule, posterior_round_size

    ranks = run_two_processes("mp_rounds.py", tmp_path, toy_cold_dir, "posterior")
    # Rank 1's prompts are never right: replay the sizing rule on all-negative counts (rank 0 resolves in round 1).
    schedule = Schedule.from_strategy("positive", 4, 8, 4, round_sizing="posterior")
    sizes, drawn = [], 0
    for round_index in range(4):
        sizes.append(posterior_round_size(0, drawn, drawn, 4 - round_index, schedule))
        drawn += sizes[-1]
    assert drawn == 32 and len(set(sizes)) > 1
    # Both ranks make the same calls with the same rows: 2 prompts x that round's size, rank 0 padding after round 1.
    assert ranks[0]["rows_per_call"] == ranks[1]["rows_per_call"] == [2 * s for s in sizes] * 2
    for rank in ranks:
        for log in rank["logs"]:
            assert log["ada/rounds"] == 4
            assert log["ada/samples_per_prompt"] == pytest.approx((sizes[0] + 32) / 2)
            assert log["ada/frac_resolved"] == pytest.approx(0.5)
    assert ranks[0]["logs"] == ranks[1]["logs"]
