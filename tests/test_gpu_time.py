"""benchmarks/gpu_time.py against hand computations: a checkpoint's cumulative work worked out by hand, a method twice
as fast per step on the same schedule reading 0.5x, one making twice the calls reading the step-time model's own
seconds ratio where calls cost and 1x where they do not (the paper's fit has no latency term), identical runs reading
0 and 1x, and pooling over warm models."""

import math
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import gpu_time as gt

from trl_ada.tools import step_time_model as stm

SETTINGS = {"prompts_per_step": 16, "eval_every": 10, "steps": 100}
SAMPLES, PROMPTS = 32, 8
STRATA = [list(range(PROMPTS))]


def synthetic_run(seed, speed=1.0, calls_per_step=1, key="grpo-4", steps=100, tokens_per_completion=10):
    """GRPO n=4's schedule (16 prompts x 4 a step, ``calls_per_step`` calls) with a skill rising linearly to 0.8 at
    step ``steps / speed`` (held there), evaluated every step."""
    completions_per_step = 64
    checkpoints = []
    for step in range(steps + 1):
        skill = 0.2 + 0.6 * min(1.0, step * speed / steps)
        correct = [round(skill * SAMPLES)] * PROMPTS
        checkpoints.append(
            {
                "step": step,
                "tokens": step * completions_per_step * tokens_per_completion,
                "skill_accuracy": sum(correct) / (SAMPLES * PROMPTS),
                "chain_correct": correct,
            }
        )
    generated = {
        "calls": steps * calls_per_step,
        "completions": steps * completions_per_step,
        "completion_tokens": steps * completions_per_step * tokens_per_completion,
    }
    return {"key": key, "seed": seed, "checkpoints": checkpoints, "generated": generated}


def test_cumulative_work_worked_by_hand():
    """A GRPO n=4 run: 300 calls, 19,200 completions of 276,000 tokens (14.375 each) over 300 steps of 16 prompts.
    At step 150 with 138,000 tokens, scaled to the throughput-bound setup (512 prompts, 32x): 150 calls, 138,000 /
    14.375 x 32 = 307,200 completions generated, 150 x 16 x 4 x 32 = 307,200 trained, 2,048 tokens each."""
    run = {
        "key": "grpo-4",
        "generated": {"calls": 300, "completions": 19200, "completion_tokens": 276000},
        "checkpoints": [{"step": 0, "tokens": 0}, {"step": 300, "tokens": 276000}],
    }
    work = gt.cumulative_work(run, SETTINGS, {"step": 150, "tokens": 138000}, gt.REGIMES["throughput"], "1.5b")
    assert (work.prompts, work.calls, work.generated, work.trained) == (512, 150, 307200, 307200)
    assert (work.length, work.parameters) == (2048, stm.MODEL_PARAMETERS["1.5b"])
    latency, per_token, train = gt.FITS["throughput"].parameters
    expected = (latency * 150 + per_token * 307200 + train * 307200) * 2048  # 1.5B is the paper's reference shape
    assert gt.FITS["throughput"].seconds(work) == pytest.approx(expected)


def test_twice_as_fast_per_step_on_the_same_schedule_reads_half_the_gpu_time():
    base = [synthetic_run(s) for s in range(4)]
    fast = [synthetic_run(s, speed=2.0, key="dapo-4") for s in range(4)]
    for key, reading in gt.gpu_readings(base, fast, SETTINGS, SAMPLES, STRATA, resamples=50).items():
        assert reading["ratios"]["gpu_to_90"]["ratio"] == pytest.approx(0.5), key
        assert reading["ratios"]["gpu_to_50"]["ratio"] == pytest.approx(0.5), key
        assert reading["model_range_90"] == pytest.approx([0.5, 0.5]), key  # any model: seconds follow steps
        assert reading["skill_area"]["estimate"] > 0


def test_twice_the_calls_costs_what_the_model_says_where_calls_cost():
    """Same skill per step, two calls a step instead of one: in the latency-bound regime the GPU time to any share
    of the gain is the model's seconds for a step with two calls over one; the paper's fit has no latency term
    (generation follows the tokens), so there the two are level."""
    base = [synthetic_run(s) for s in range(3)]
    two_calls = [synthetic_run(s, calls_per_step=2, key="dapo-4") for s in range(3)]
    readings = gt.gpu_readings(base, two_calls, SETTINGS, SAMPLES, STRATA, resamples=50)
    latency, per_token, train = gt.FITS["latency"].parameters
    expected = (2 * latency + 64 * per_token + 64 * train) / (latency + 64 * per_token + 64 * train)
    assert expected > 1.5  # the H200's calls dominate a small step
    for shape in gt.SHAPES:
        assert readings[f"latency:{shape}"]["ratios"]["gpu_to_90"]["ratio"] == pytest.approx(expected)
        assert readings[f"throughput:{shape}"]["ratios"]["gpu_to_90"]["ratio"] == pytest.approx(1.0)
        assert readings[f"throughput:{shape}"]["skill_area"]["estimate"] == pytest.approx(0.0, abs=1e-12)
        assert readings[f"latency:{shape}"]["skill_area"]["estimate"] < 0  # the same skill, later in GPU-seconds


def test_identical_runs_read_level_and_pool_to_themselves():
    base = [synthetic_run(s) for s in range(3)]
    reading = gt.gpu_readings(base, base, SETTINGS, SAMPLES, STRATA, resamples=50)
    for value in reading.values():
        assert value["ratios"]["gpu_to_90"]["ratio"] == pytest.approx(1.0)
        assert value["skill_area"]["estimate"] == pytest.approx(0.0, abs=1e-12)
    fast = gt.gpu_readings(base, [synthetic_run(s, speed=2.0) for s in range(3)], SETTINGS, SAMPLES, STRATA, 50)
    one = gt.pooled([fast])
    assert one["latency:0.5b"]["ratio_90"]["ratio"] == pytest.approx(0.5) and one["latency:0.5b"]["models"] == 1
    two = gt.pooled([fast, fast])
    assert two["latency:0.5b"]["models"] == 2
    assert two["latency:0.5b"]["ratio_90"]["ratio"] == pytest.approx(0.5)
    low, high = two["latency:0.5b"]["ratio_90"]["ci"]
    assert low <= 0.5 <= high and math.isfinite(high)


def test_pooled_ratio_is_the_geometric_mean_of_equally_certain_warm_models():
    """Two warm models at 0.8x and 1.25x with equal log-scale intervals pool to 1.0x (their geometric mean)."""

    def reading(ratio):
        spread = math.exp(0.1)
        ratios = {"gpu_to_90": {"ratio": ratio, "resolved": True, "ci": [ratio / spread, ratio * spread]}}
        area = {"estimate": 0.0, "se": 0.01, "ci": [-0.02, 0.02]}
        return {"latency:0.5b": {"skill_area": area, "ratios": ratios, "model_range_90": None}}

    pooled = gt.pooled([reading(0.8), reading(1.25)])["latency:0.5b"]["ratio_90"]
    assert pooled["ratio"] == pytest.approx(1.0)
    assert pooled["ci"][0] < 0.8 and pooled["ci"][1] > 1.25  # the two disagree beyond their intervals: tau^2 > 0
    unresolved = reading(0.8)
    for never_reached in ([0.7, math.inf], [0.7, None]):  # None: the end as `percentile_interval` writes it
        unresolved["latency:0.5b"]["ratios"]["gpu_to_90"]["ci"] = never_reached
        assert gt.pooled([unresolved, reading(1.0)])["latency:0.5b"]["ratio_90"] is None
        assert gt.pooled([unresolved])["latency:0.5b"]["ratio_90"] is None
    assert np.isfinite(gt.pooled([reading(0.8), reading(1.0)])["latency:0.5b"]["ratio_90"]["ci"]).all()


def test_a_ratio_that_cannot_be_pooled_says_why_in_the_tables():
    """A pooled GPU-time cell with no pooled value says which warm model never reached the target, or, where each
    reached it, each warm model's own ratio with its open end written inf: never "not reached" for a ratio that was."""
    import skill_tables

    def found(*ratios):
        per_warm = {
            str(warm): {"gpu": {"latency:0.5b": {"ratios": {"gpu_to_90": ratio}}}}
            for warm, ratio in enumerate(ratios, 1)
        }
        return {"per_warm": per_warm, "pooled_gpu": {"latency:0.5b": {"ratio_90": None}}}

    open_end = {"ratio": 1.06, "ci": [0.9, None]}
    closed = {"ratio": 1.04, "ci": [0.85, 1.48]}
    never = {"ratio": None, "ci": None}
    assert (
        skill_tables.gpu_ratio_cell(found(open_end, closed), "latency:0.5b")
        == "not pooled, an interval open: 1.06x [0.90, inf] on 1 and 1.04x [0.85, 1.48] on 2"
    )
    assert (
        skill_tables.gpu_ratio_cell(found(never, closed), "latency:0.5b")
        == "not reached on warm model 1 (1.04x [0.85, 1.48] on 2)"
    )
    assert skill_tables.gpu_ratio_cell(found(never, never), "latency:0.5b") == "not reached on warm models 1, 2"
