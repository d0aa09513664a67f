"""Tools on two processes: per-round tool state on each, `tools/*` gathered once per step."""

import pytest
from test_multiprocess import run_two_processes

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_tool_counts_are_gathered_over_processes_and_rounds(tool_model_dir, tmp_path):
    ranks = run_two_processes("mp_tools.py", tmp_path, tool_model_dir)
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
