"""Two processes running Reinforce-Ada-Est agree on the pass-rate memory, and it holds what both of them scored."""

from collections import Counter

import pytest
from test_multiprocess import run_two_processes

from trl_ada.core.memory import prompt_key

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_two_processes_share_one_memory(toy_cold_dir, tmp_path):
    ranks = run_two_processes("mp_est.py", tmp_path, toy_cold_dir)

    assert ranks[0]["memory"] == ranks[1]["memory"]
    # decay = 1: each prompt's counts are the sums of what the reward functions of both processes scored.
    scored = Counter(ranks[0]["scored"]) + Counter(ranks[1]["scored"])
    positives = Counter(ranks[0]["positives"]) + Counter(ranks[1]["positives"])
    memory = {key: (n_pos, n_total) for key, n_pos, n_total in ranks[0]["memory"]["records"]}
    assert memory == {prompt_key(k): (float(positives[k]), float(scored[k])) for k in "abcd"}
    # Each step draws its budget, 8 x 4 prompts, exactly, in one generation call per step of the same size on both
    # processes (2 prompts x 8 on average).
    assert sum(scored.values()) == 2 * 8 * 4
    assert ranks[0]["rows_per_call"] == ranks[1]["rows_per_call"] == [16, 16]
    assert ranks[0]["logs"] == ranks[1]["logs"]
    step1, step2 = ranks[0]["logs"]
    assert (step1["ada/alloc_min"], step1["ada/alloc_max"], step1["ada/memory_size"]) == (8, 8, 4)
    # Step 2: right prompts have p_hat 9/25, wrong ones 1/25; a process holding one of each splits 16 as
    # 1/sqrt(9/25) : 1/sqrt(1/25) = 5/3 : 5, i.e. 4 and 12; one holding two of a kind splits evenly.
    assert step2["ada/p_hat_mean"] == pytest.approx((2 * 9 / 25 + 2 * 1 / 25) / 4)
    assert (step2["ada/alloc_min"], step2["ada/alloc_max"]) in {(4, 12), (8, 8)}
