"""Refill and prompt selection on two processes: disjoint side streams, one memory, the same metrics."""

import pytest
from test_multiprocess import run_two_processes

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_two_processes_draw_disjoint_refills_and_agree(toy_cold_dir, tmp_path):
    ranks = run_two_processes("mp_refill.py", tmp_path, toy_cold_dir)

    # Each process's side stream is its own shard of the epoch's permutation: no row drawn by both (32 rows, so
    # fewer than 16 draws each stay within epoch 0).
    drawn = [rank["drawn"] for rank in ranks]
    assert drawn[0] and drawn[1]
    assert all(len(d) <= 16 for d in drawn)
    assert not set(drawn[0]) & set(drawn[1])
    assert all(len(set(d)) == len(d) for d in drawn)  # and no row twice within the epoch
    # One memory, updated with both processes' pools in the same order; the same global metrics.
    assert ranks[0]["memory"] == ranks[1]["memory"]
    assert ranks[0]["logs"] == ranks[1]["logs"] and len(ranks[0]["logs"]) == 3
    for log in ranks[0]["logs"]:
        assert log["ada/unfilled"] == 0 and log["frac_reward_zero_std"] == 0
    # Every trained group holds a mixed prompt (the stream always had one to offer).
    for rank in ranks:
        for step in rank["trained"]:
            assert all(key[0] == "m" for key in step)
