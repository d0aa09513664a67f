"""The step-time benchmark (`benchmarks/step_time.py`): its emulated engine against hand-computed clocks, and a
`--quick` run checked for internal consistency against independent recounts."""

import json
import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import step_time
import step_time_emulation
from step_time_emulation import BALANCED, BALANCED_POSTERIOR, EmulatedEngine, Lengths, Method, Regime, Workload, run

from trl_ada.core.engine import Draw, Schedule

T0, C = 0.012, 2e-5
REGIME = Regime("test", c=C, t0=T0)


def one_prompt(rewards, lengths, pad_length=1) -> Workload:
    """One prompt whose first draws are scripted; later draws are wrong and `pad_length` tokens long."""
    pad = step_time_emulation.BUDGET - len(rewards)
    return Workload([0.5], [list(rewards) + [0.0] * pad], [list(lengths) + [pad_length] * pad])


def test_grpo_time_by_hand():
    """GRPO n=4, one prompt, lengths 10, 20, 30, 40: 4 sequences decode for 10 steps, then 3, 2 and 1.
    time = 40 steps * t0 + c * (10 * (4 + 3 + 2 + 1)) = 0.48 + 0.002 s; 100 tokens; the chain is the longest, 40."""
    workload = one_prompt([1, 0, 1, 0], [10, 20, 30, 40])
    out = run(Method("g", "GRPO n=4", Schedule.from_strategy("uniform", 4)), workload, REGIME)
    assert out["seconds"] == pytest.approx(40 * T0 + C * 100)
    assert out["tokens"] == 100 == out["pooled_tokens"]
    assert out["decode_steps"] == 40 and out["longest_chain_tokens"] == 40
    assert out["limit_s"] == pytest.approx(max(100 * C, 40 * (T0 + C)))
    assert out["aborted_share"] == 0 and out["samples_per_prompt"] == 4


def test_streaming_abort_and_rounds_by_hand():
    """Balanced rule for n = 4, 8 x 4. Rewards 1, 0, 1, 0, then 1s and 0s; lengths 10, 20, ..., 80, then 100.

    Streaming (k = 8): draws 0-7 start at step 0. Draw 0 finishes at step 10 and draw 8 replaces it; likewise draws
    9 and 10 start at steps 20 and 30, so 8 run throughout. At step 40 draw 3 completes the pool [1, 0, 1, 0]: draws
    4-7 are aborted with 40 tokens each, draws 8-10 with 30, 20 and 10. time = 40 t0 + c * 40 * 8; tokens
    100 + 160 + 60 = 320, 220 of them aborted.
    Rounds: the round of 8 runs to step 80: time = 80 t0 + c * 10 * (8 + 7 + ... + 1); tokens 360."""
    workload = one_prompt([1, 0, 1, 0, 1, 1, 1, 1], [10, 20, 30, 40, 50, 60, 70, 80], pad_length=100)
    streaming = run(Method("s", "streaming", BALANCED, "streaming", rule="balanced"), workload, REGIME)
    assert streaming["seconds"] == pytest.approx(40 * T0 + C * 40 * 8)
    assert streaming["tokens"] == 320 and streaming["aborted_tokens"] == 220
    assert streaming["pool_per_prompt"] == 4 and streaming["started_per_prompt"] == 11
    assert streaming["peak_running"] == 8 and streaming["longest_chain_tokens"] == 40
    rounds = run(Method("r", "rounds", BALANCED, rule="balanced"), workload, REGIME)
    assert rounds["seconds"] == pytest.approx(80 * T0 + C * 10 * sum(range(1, 9)))
    assert rounds["tokens"] == 360 and rounds["pool_per_prompt"] == 8 and rounds["aborted_share"] == 0


def test_a_slow_head_does_not_block_top_ups_and_posterior_sizing_stops_them_by_hand():
    """Balanced rule for n = 4, 8 x 4. Rewards 1, 0, 1, 0, 1, 1, 1, 1, then 0s; lengths 100, then 10 (draws 1-7),
    then 100.

    Streaming k=8 (running): draws 0-7 start at step 0; draws 1-7 finish at step 10 but wait behind draw 0 (the pool
    is a request-order prefix). Only draw 0 runs, so 7 more start, draws 8-14 (finishing at 110). At step 100 draw 0
    completes the pool [1, 0, 1, 0]: draws 4-7 (finished, 10 tokens each) are dropped, draws 8-14 (90 tokens each)
    aborted. 8 sequences run for 100 steps: time = 100 t0 + c * 800; tokens 100 + 70 + 630 = 800, 670 of them wasted.
    Posterior: the first window is min(8, ceil(E)) = 8 (E = 11.9 for a fresh prompt). At step 10 the prompt has seen
    5 right and 2 wrong in 7 draws, which already satisfies the rule: E[remaining] = 0, it keeps 1 running (draw 0)
    and starts nothing. time = 100 t0 + c * (8 * 10 + 1 * 90); tokens 170, the 40 of draws 4-7 dropped."""
    workload = one_prompt([1, 0, 1, 0, 1, 1, 1, 1], [100] + [10] * 7, pad_length=100)
    fixed = run(Method("s", "streaming", BALANCED, "streaming", rule="balanced"), workload, REGIME)
    assert fixed["seconds"] == pytest.approx(100 * T0 + C * 800)
    assert fixed["tokens"] == 800 and fixed["aborted_tokens"] == 670
    assert fixed["abort_running_share"] == pytest.approx(630 / 800) and fixed["dropped_share"] == pytest.approx(
        40 / 800
    )
    assert (fixed["pool_per_prompt"], fixed["samples_per_prompt"], fixed["started_per_prompt"]) == (4, 8, 15)
    assert (fixed["aborted_per_prompt"], fixed["dropped_per_prompt"]) == (7, 4)
    assert fixed["longest_chain_tokens"] == 100 and fixed["peak_running"] == 8

    posterior = run(Method("p", "posterior", BALANCED_POSTERIOR, "streaming", rule="balanced"), workload, REGIME)
    assert posterior["seconds"] == pytest.approx(100 * T0 + C * 170)
    assert posterior["tokens"] == 170 and posterior["aborted_tokens"] == 40
    assert (posterior["aborted_per_prompt"], posterior["dropped_per_prompt"]) == (0, 4)
    assert posterior["pool_per_prompt"] == 4 and posterior["started_per_prompt"] == 8


def test_running_cap_queues_and_the_limit_stays_below_the_time():
    """At most 2 running: draws 0 and 1 start at step 0; draw 2 at step 10 (ends 40), draw 3 at step 20 (ends 60).
    time = 60 t0 + c * (2 * 40 + 1 * 20); peak throughput 2 / t(2)."""
    workload = one_prompt([1, 0, 1, 0], [10, 20, 30, 40])
    capped = Regime("cap", c=C, t0=T0, max_running=2)
    out = run(Method("g", "GRPO n=4", Schedule.from_strategy("uniform", 4)), workload, capped)
    assert out["seconds"] == pytest.approx(60 * T0 + C * 100)
    assert out["peak_running"] == 2
    assert out["throughput_s"] == pytest.approx(100 * (T0 + 2 * C) / 2)
    assert out["limit_s"] <= out["seconds"]


def test_abort_of_a_queued_draw_returns_no_tokens():
    workload = one_prompt([1, 0, 1, 0], [10, 20, 30, 40])
    engine = EmulatedEngine(workload, Regime("cap", c=C, t0=T0, max_running=1))
    engine.submit([Draw(0, 0), Draw(0, 1)])
    assert engine.abort([1]) == 0  # still queued
    finished = engine.wait()
    assert [(f.ticket, f.num_tokens) for f in finished] == [(0, 10)]
    assert engine.wait() == [] and engine.tokens == 10


def test_workload_lengths_and_truncation():
    lengths = Lengths()
    w = Workload.draw("paper", 2000, seed=3, lengths=lengths)
    flat = [(r, n) for rs, ns in zip(w.rewards, w.lengths, strict=True) for r, n in zip(rs, ns, strict=True)]
    assert all(1 <= n <= lengths.cap for _, n in flat)
    right = sorted(n for r, n in flat if r == 1.0)
    assert abs(right[len(right) // 2] / lengths.right - 1) < 0.03  # median of right answers
    capped = [r for r, n in flat if n == lengths.cap]
    assert capped and sum(capped) <= 0.01 * len(capped)  # capped ones are (nearly all) truncated, hence wrong
    # the same seed gives the same workload; another seed another
    assert Workload.draw("paper", 50, seed=3).rewards == Workload.draw("paper", 50, seed=3).rewards
    assert Workload.draw("paper", 50, seed=3).lengths != Workload.draw("paper", 50, seed=4).lengths


def test_quick_run_is_internally_consistent(tmp_path):
    report = step_time.main(["--quick", "--output-dir", str(tmp_path)])
    assert (tmp_path / "step_time_quick.json").is_file()
    assert "### Targets" in (tmp_path / "step_time_quick.md").read_text()
    assert json.loads((tmp_path / "step_time_quick.json").read_text())["targets"] == report["targets"]
    workload = Workload.draw("paper", 48, seed=0)
    for name, regime in report["regimes"].items():
        c, t0 = regime["regime"]["c"], regime["regime"]["t0"]
        runs = {key: runs[0] for key, runs in report["per_seed"][name].items()}
        for key, r in runs.items():
            # the clock is exactly t0 per decode step plus c per decoded token, and no bound exceeds it
            assert r["seconds"] == pytest.approx(t0 * r["decode_steps"] + c * r["tokens"], rel=1e-9), key
            assert r["seconds"] >= r["limit_s"] * (1 - 1e-9) and r["seconds"] >= r["tight_limit_s"] * (1 - 1e-9)
            assert r["seconds"] >= r["floor_s"] * (1 - 1e-9) or key.startswith("grpo")
            assert r["tokens"] >= r["pooled_tokens"]
            # the waste splits into draws aborted while running and completions dropped beyond the pool
            assert r["aborted_share"] == pytest.approx(r["abort_running_share"] + r["dropped_share"], abs=1e-12), key
            if not r["aborted_per_prompt"]:
                assert r["abort_running_share"] == 0, key
            if "rounds" in key or key.startswith("grpo") or key.endswith("seq"):
                assert r["aborted_share"] == 0, key  # barriers, or one draw at a time: nothing wasted
        # GRPO n=4 decodes exactly the first 4 completions of every prompt
        assert runs["grpo4"]["tokens"] == sum(sum(lengths[:4]) for lengths in workload.lengths)
        assert runs["grpo16"]["tokens"] == sum(sum(lengths[:16]) for lengths in workload.lengths)
        # request-order streaming keeps exactly the sequential limit's pools (same request-order streams)
        for key in ("bal-stream", "bal-stream-16", "bal-stream-post"):
            assert runs[key]["pool_per_prompt"] == runs["bal-seq"]["pool_per_prompt"]
            assert runs[key]["pooled_tokens"] == runs["bal-seq"]["pooled_tokens"]
        assert runs["pos-stream"]["pooled_tokens"] == runs["pos-seq"]["pooled_tokens"]
        assert runs["bal-rounds"]["pool_per_prompt"] * 48 % 8 == 0 and runs["bal-rounds"]["aborted_share"] == 0
        assert runs["bal-seq"]["aborted_share"] == 0  # one draw at a time: nothing to abort
    # both regimes see the same work; only the clock differs
    tp, lat = (report["per_seed"][n] for n in ("throughput", "latency"))
    assert all(tp[k][0]["tokens"] == lat[k][0]["tokens"] for k in tp)  # events fall on decode steps, not seconds
    assert math.isclose(report["regimes"]["latency"]["summary"][0]["seconds"], runs["grpo4"]["seconds"], rel_tol=1e-12)
