"""Faults with two processes (accelerate, CPU, gloo), each run under a timeout: uneven activity, one failing rank."""

import subprocess

import pytest
from test_multiprocess import launch_two_processes, rank_outputs

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

TIMEOUT = 180  # seconds; a hang in a collective call would otherwise block until the gloo timeout (30 minutes)


def launch(tmp_path, model_dir, mode: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    result = launch_two_processes("mp_faults.py", tmp_path, model_dir, mode, timeout=TIMEOUT)
    return result, rank_outputs(tmp_path)


def test_ranks_with_different_numbers_of_active_prompts_and_one_with_none(toy_cold_dir, tmp_path):
    result, ranks = launch(tmp_path, toy_cold_dir, "uneven")
    assert result.returncode == 0, result.stderr[-4000:]
    # Active prompts per round, rank 0 / rank 1: 2/2, 1/2, 1/2, 0/2. Samples: rank 0's prompts 4 and 12, rank 1's
    # 16 each (positive rule, 4 per round, budget 16).
    expected = {
        "ada/rounds": 4,
        "ada/samples_per_prompt": (4 + 12 + 16 + 16) / 4,
        "ada/samples_per_prompt_max": 16,
        "ada/frac_resolved": 0.5,
    }
    for rank in ranks:
        (log,) = rank["logs"]
        assert {k: log[k] for k in expected} == pytest.approx(expected)
    assert ranks[0]["logs"] == ranks[1]["logs"]


def test_reward_failing_on_one_rank_stops_every_rank_with_the_same_error(toy_cold_dir, tmp_path):
    result, ranks = launch(tmp_path, toy_cold_dir, "fail_on_rank1")  # returns within TIMEOUT: nobody hangs
    assert result.returncode != 0
    # Each rank raised the error itself (not killed by the launcher), naming the rank, function, prompt and cause.
    assert ranks[0]["error"] == ranks[1]["error"]
    assert ranks[0]["error"].startswith("RewardFunctionError: On process 1: Reward function 'fail_on_rank1' failed")
    assert "ZeroDivisionError: grader crashed" in ranks[0]["error"]
