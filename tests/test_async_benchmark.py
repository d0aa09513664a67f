"""The asynchronous-worker benchmark (`benchmarks/async_worker.py`): its arguments, its metrics and intervals on
hand-made records, its table, and both workers' loops on the virtual clock against schedules worked out by hand."""

import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import async_emulation
import async_worker
from async_emulation import GroupRecord, Method, PromptCost
from async_report import interval, markdown_table, window_metrics
from async_worker import parse_args
from step_time_emulation import Regime, Workload

from trl_ada.adapter.async_worker import AdaRolloutConfig

# --------------------------------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------------------------------


def test_defaults_and_quick():
    args = parse_args([])
    assert args.mix == ["paper", "uniform"] and args.regimes == ["throughput", "latency"]
    assert (args.seeds, args.warmup, args.groups, args.max_inflight) == (5, 256, 512, 256)
    assert (args.samples_per_step, args.max_staleness) == (64, 4)
    assert args.methods == ["trl4", "trl16", "ada-bal", "ada-pos", "ada-pos-4x2"]
    quick = parse_args(["--quick"])
    assert quick.mix == ["paper"] and quick.regimes == ["throughput"]
    assert (quick.seeds, quick.warmup, quick.groups, quick.max_inflight) == (1, 16, 48, 64)
    # Explicit values win over --quick's, a warm-up of 0 included.
    mine = parse_args(["--quick", "--seeds", "3", "--warmup", "0", "--regime", "both", "--methods", "trl4"])
    assert (mine.seeds, mine.warmup, mine.methods, mine.regimes) == (3, 0, ["trl4"], ["throughput", "latency"])
    assert parse_args(["--regime", "latency"]).regimes == ["latency"]


@pytest.mark.parametrize(
    "argv", [["--groups", "0"], ["--seeds", "0"], ["--warmup", "-1"], ["--mix", "hard"], ["--methods", "grpo"]]
)
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        parse_args(argv)


# --------------------------------------------------------------------------------------------------------------------
# Metrics, intervals, table
# --------------------------------------------------------------------------------------------------------------------


def record(group_id, done_at, rewards, lag=0, started=4, finished=4, aborted=0, tokens=100, aborted_tokens=0):
    return GroupRecord(group_id, done_at, rewards, lag, PromptCost(started, finished, aborted, tokens, aborted_tokens))


def test_window_metrics_by_hand():
    """Five groups arrive at 1, 3, 4, 8, 10; a warm-up of 2 leaves the last three, whose window runs from the second's
    arrival (3) to 10: 7 s for 3 groups. Their costs average to 6 started, 5 finished, 1 aborted, 300 tokens, 20 of
    them aborted; only [0, 1, 0, 0] has a spread ([NaN, 1, 1, 1] has none once the NaN is left out), so 1/3 has signal
    and a group with signal takes 7 s; lags 1, 5, 6 average 4, and two of three exceed a max_staleness of 4."""
    records = [
        record(0, 1.0, [0.0, 1.0, 0.0, 1.0], lag=9),
        record(1, 3.0, [1.0, 0.0, 1.0, 0.0], lag=9),
        record(2, 4.0, [1.0, 1.0, 1.0, 1.0], lag=1, started=4, finished=4, aborted=0, tokens=100),
        record(3, 8.0, [0.0, 1.0, 0.0, 0.0], lag=5, started=6, finished=5, aborted=1, tokens=200, aborted_tokens=10),
        record(
            4, 10.0, [math.nan, 1.0, 1.0, 1.0], lag=6, started=8, finished=6, aborted=2, tokens=600, aborted_tokens=50
        ),
    ]
    m = window_metrics(records, warmup=2, count=3, max_staleness=4)
    assert m["seconds"] == pytest.approx(7 / 3)
    assert (m["started"], m["finished"], m["aborted"]) == (6, 5, 1)
    assert (m["tokens"], m["aborted_tokens"]) == (300, 20)
    assert m["signal"] == pytest.approx(1 / 3) and m["seconds_per_signal"] == pytest.approx(7)
    assert m["lag"] == 4 and m["stale"] == pytest.approx(2 / 3)
    # No warm-up: the window starts at time 0; the first two groups both have signal.
    first = window_metrics(records, warmup=0, count=2, max_staleness=4)
    assert first["seconds"] == pytest.approx(3 / 2) and first["signal"] == 1 and first["stale"] == 1
    with pytest.raises(ValueError, match="Need 4"):
        window_metrics(records, warmup=4, count=2, max_staleness=4)


def test_interval_by_hand():
    """1, 2, 3: mean 2, sample sd 1, t(0.975, 2 df) = 4.303, half-width 4.303 / sqrt(3) = 2.4843."""
    assert interval([1.0, 2.0, 3.0]) == pytest.approx({"mean": 2.0, "low": 2 - 2.48434, "high": 2 + 2.48434}, abs=1e-4)
    single = interval([5.0])
    assert single["mean"] == 5.0 and math.isnan(single["low"]) and math.isnan(single["high"])


def stat(mean, low=math.nan, high=math.nan):
    return {"mean": mean, "low": low, "high": high}


def test_table_rendering():
    base = {
        "method": "TRL n=4",
        "started": stat(4.0),
        "finished": stat(4.0),
        "aborted": stat(0.0),
        "tokens": stat(2996.4, 2900.0, 3100.26),
        "aborted_tokens": stat(0.0),
        "seconds": stat(0.5964, 0.55, 0.65),
        "signal": stat(0.229, 0.2, 0.25),
        "seconds_per_signal": stat(2.6031),
        "running": stat(63.8),
        "occupancy": stat(0.997, 0.99, 1.0),
        "lag": stat(1.404),
        "stale": stat(0.0),
    }
    ada = {
        **base,
        "method": "Ada",
        "started": stat(28.42),
        "aborted": stat(2.734),
        "seconds_x_trl4": stat(7.7, 7.0, 8.25),
        "seconds_per_signal_x_trl4": stat(2.65),
        "stale": stat(0.125),
    }
    lines = markdown_table([base, ada]).splitlines()
    assert len(lines) == 4 and lines[0].startswith("| method | requests started / finished / aborted |")
    assert lines[2] == (
        "| TRL n=4 | 4.00 / 4.00 / 0.00 | 2996 [2900, 3100] (0) | 0.596 [0.550, 0.650] | - | 22.9% [20.0, 25.0] "
        "| 2.603 | 64 | 99.7% [99.0, 100.0] | 1.40 (0.0%) |"
    )
    assert lines[3] == (
        "| Ada | 28.42 / 4.00 / 2.73 | 2996 [2900, 3100] (0) | 0.596 [0.550, 0.650] | 7.70 [7.00, 8.25] "
        "| 22.9% [20.0, 25.0] | 2.603 (2.65) | 64 | 99.7% [99.0, 100.0] | 1.40 (12.5%) |"
    )


# --------------------------------------------------------------------------------------------------------------------
# The loops on the virtual clock, by hand
# --------------------------------------------------------------------------------------------------------------------

# t0 = 1 s per decode step whatever runs (c = 0): a completion of L tokens takes L seconds.
SECONDS_PER_TOKEN = Regime("hand", c=0.0, t0=1.0)


def dataset(prompts):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": [{"role": "user", "content": str(i)}]} for i in range(prompts)])


def simulate(method, rewards, lengths, *, max_inflight, groups, samples_per_step=1000):
    workload = Workload([0.5] * len(rewards), rewards, lengths)
    return async_emulation.simulate(
        method,
        workload,
        SECONDS_PER_TOKEN,
        dataset(len(rewards)),
        max_inflight=max_inflight,
        samples_per_step=samples_per_step,
        warmup=0,
        groups=groups,
    )


def test_trl_loop_on_the_virtual_clock_by_hand():
    """TRL's loop, n = 2, two requests in flight. t=0: prompt 0's two (10 and 20 tokens). t=10: a slot frees, prompt
    1's first starts (5); t=15 its second (5). t=20: prompt 0's second and prompt 1's second finish: groups 0 and 1
    arrive; prompt 2's two start (4, 30). t=24: prompt 3's first starts; t=50: group 2 arrives. With a version step
    every 2 rows, groups 0 and 1 move the version to 2 before group 2 (tagged 0 at t=20) arrives: lag 2."""
    rewards = [[1, 0], [1, 1], [0, 1], [1, 1], [1, 1]]
    lengths = [[10, 20], [5, 5], [4, 30], [100, 100], [100, 100]]
    sim = simulate(Method("t", "TRL n=2", 2), rewards, lengths, max_inflight=2, groups=3, samples_per_step=2)
    records = sorted(sim.trainer.records, key=lambda r: r.group_id)
    assert [r.group_id for r in records] == [0, 1, 2]
    assert [r.done_at for r in records] == pytest.approx([20.0, 20.0, 50.0])
    assert [sorted(r.rewards) for r in records] == [[0.0, 1.0], [1.0, 1.0], [0.0, 1.0]]
    assert [(r.cost.started, r.cost.finished, r.cost.aborted, r.cost.tokens) for r in records] == [
        (2, 2, 0, 30),
        (2, 2, 0, 10),
        (2, 2, 0, 34),
    ]
    assert records[2].lag == 2
    # Stopped at t=50: prompt 3's first (started at 24) was cancelled after 26 tokens; its second started at 50.
    assert sim.client.cost[3].aborted == 2 and sim.client.cost[3].tokens == 26
    assert sim.client.off_event_submits == 0


def test_ada_loop_on_the_virtual_clock_by_hand():
    """The Ada loop, positive rule, n = 2, rounds of 2, at most 2 (budget 4), two requests in flight: one prompt at a
    time. Prompt 0 (rewards 0 0 1 1, lengths 3 5 4 10): draws 0 and 1 start at 0; at 3 draw 0 (wrong) is pooled and
    draw 2 starts (ends at 7); at 5 draw 1 (wrong), draw 3 starts; at 7 draw 2 (right) makes the pool [0, 0, 1]: the
    rule holds, draw 3 is aborted after 2 tokens. Group 0 arrives at 7: 4 started, 3 finished, 1 aborted, 3 + 5 + 4 + 2
    = 14 tokens. Prompt 1 (rewards 1 0 1 1, lengths 2 6 1 1) starts at 7: draw 0 (right) at 9, draw 2 starts and ends
    at 10 behind the unfinished draw 1, draw 3 starts at 10 and ends at 11, draw 1 (wrong) at 13 makes the pool
    [1, 0]: the rule holds; draws 2 and 3 finished beyond the pool. Group 1 arrives at 13: 4 started and finished, 10
    tokens. Both kept groups are one right and one wrong."""
    rewards = [[0, 0, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]
    lengths = [[3, 5, 4, 10], [2, 6, 1, 1], [100] * 4, [100] * 4]
    ada = AdaRolloutConfig(sampling_strategy="positive", samples_per_round=2, max_rounds=2)
    sim = simulate(Method("a", "Ada", 2, ada), rewards, lengths, max_inflight=2, groups=2)
    records = sim.trainer.records
    assert [r.group_id for r in records] == [0, 1]
    assert [r.done_at for r in records] == pytest.approx([7.0, 13.0])
    assert [sorted(r.rewards) for r in records] == [[0.0, 1.0], [0.0, 1.0]]
    costs = [(r.cost.started, r.cost.finished, r.cost.aborted, r.cost.tokens, r.cost.aborted_tokens) for r in records]
    assert costs == [(4, 3, 1, 14, 2), (4, 4, 0, 10, 0)]
    assert sim.client.off_event_submits == 0


def test_one_run_gives_every_regime():
    """The engine's events fall on decode steps, whose order t0 and c do not change: a run's seconds converted to
    another regime (`in_regime`: t0 * steps + c * tokens over the window) equal a run simulated in that regime, and
    every count is the same."""
    from step_time import REGIMES

    workload = Workload.draw("paper", 40, seed=3)
    method = next(m for m in async_worker.METHODS if m.key == "ada-bal")
    kwargs = dict(max_inflight=16, samples_per_step=8, max_staleness=4, warmup=4, groups=12)
    ran = {name: async_worker.run(method, workload, REGIMES[name], dataset(40), **kwargs) for name in REGIMES}
    converted = async_worker.in_regime(ran["throughput"], REGIMES["latency"], groups=12)
    assert ran["latency"]["seconds"] != pytest.approx(ran["throughput"]["seconds"])
    assert converted["seconds"] == pytest.approx(ran["latency"]["seconds"], rel=1e-9)
    for name in ("started", "finished", "aborted", "tokens", "signal", "lag", "window_steps", "window_tokens"):
        assert ran["latency"][name] == ran["throughput"][name], name
