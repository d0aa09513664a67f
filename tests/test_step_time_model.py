"""The step-time model (`trl_ada.tools.step_time_model`): synthetic records with a known answer, its records against
the files they come from, and `trl-ada simulate --model-shape` against a computation of its own."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from trl_ada.tools.measured_steps import STEPS_TO_90
from trl_ada.tools.simulate import main as simulate_main
from trl_ada.tools.simulate import simulate
from trl_ada.tools.simulate_setup import PassRates, default_strategies
from trl_ada.tools.step_time_model import (
    H200_05B,
    MODEL_PARAMETERS,
    PAPER,
    PAPER_SAMPLES,
    RECORD_SETS,
    Record,
    RecordSet,
    StepWork,
    exponent_choices,
    extrapolated,
    fit,
    nonnegative_least_squares,
    parse_parameters,
    project,
)
from trl_ada.tools.step_time_model import main as table_main

ROOT = Path(__file__).resolve().parents[1]
TRUE = {"latency": 0.02, "per_token": 3e-4, "train": 5e-5}
EXPONENTS = {"latency": 1.0, "per_token": 0.0, "train": 1.0}


def true_seconds(work: StepWork, reference: float, exponents: dict[str, float] = EXPONENTS) -> float:
    """The model written out term by term, apart from the module's code."""
    scale = work.parameters / reference
    return work.length * (
        TRUE["latency"] * work.calls * scale ** exponents["latency"]
        + TRUE["per_token"] * work.generated * scale ** exponents["per_token"]
        + TRUE["train"] * work.trained * scale ** exponents["train"]
    )


def synthetic(noise: float = 0.0, seed: int = 0) -> RecordSet:
    """Eight configurations at two sizes, their seconds from `TRUE` times (1 + noise x a standard normal)."""
    rng = np.random.default_rng(seed)
    works = [
        StepWork(prompts, calls, prompts * samples, prompts * group, 256, parameters)
        for parameters in (5e8, 1.5e9)
        for prompts, calls, samples, group in ((16, 1, 4, 4), (16, 2, 5.25, 4), (32, 4, 22.0, 4), (16, 1, 16, 16))
    ]
    records = tuple(
        Record(f"r{i}", w, true_seconds(w, 5e8) * (1 + noise * rng.standard_normal())) for i, w in enumerate(works)
    )
    return RecordSet("synthetic", "test", "synthetic", "test", records, EXPONENTS)


def test_noise_free_records_give_back_the_parameters_and_zero_errors():
    fitted = fit(synthetic())
    assert fitted.parameters == pytest.approx([TRUE[t] for t in ("latency", "per_token", "train")], rel=1e-9)
    assert max(abs(e) for e in fitted.fit_errors) < 1e-9
    assert all(e is not None and abs(e) < 1e-9 for e in fitted.loo_errors)
    ratio_errors = [e for e in fitted.ratio_loo_errors if e is not None]
    assert len(ratio_errors) == 2 and max(abs(e) for e in ratio_errors) < 1e-9  # Ada at 16 prompts, at both sizes


def test_noisy_records_give_the_parameters_back_within_the_noise():
    fitted = fit(synthetic(noise=0.01, seed=3))
    assert fitted.parameters == pytest.approx([TRUE[t] for t in ("latency", "per_token", "train")], rel=0.15)
    assert 0 < fitted.max_loo_error < 0.06


def test_a_record_set_that_cannot_determine_the_parameters_is_refused_and_its_loo_left_out():
    records = synthetic().records
    with pytest.raises(ValueError, match="do not determine"):
        fit(RecordSet("two", "test", "two", "test", records[:2], EXPONENTS))
    three = fit(RecordSet("three", "test", "three", "test", records[:3], EXPONENTS))  # no generation phases
    assert three.loo_errors == (None, None, None)


def test_nonnegative_least_squares_meets_the_optimality_conditions():
    rng = np.random.default_rng(1)
    x = rng.random((6, 3))
    for truth in ([1.0, -0.3, 0.5], [1.0, -2.0, 0.5], [-1.0, -1.0, -1.0]):
        y = x @ np.array(truth) + 0.01 * rng.standard_normal(6)
        assert (np.linalg.lstsq(x, y, rcond=None)[0] < 0).any()  # the unconstrained answer leaves the feasible set
        theta = nonnegative_least_squares(x, y)
        gradient = x.T @ (x @ theta - y)  # Karush-Kuhn-Tucker: zero where theta > 0, non-negative where theta = 0
        assert (theta >= 0).all() and (theta == 0).any()
        assert np.allclose(gradient[theta > 0], 0, atol=1e-9) and (gradient[theta == 0] >= -1e-9).all()
    assert nonnegative_least_squares(x[:, [0, 0, 1]], y) is None  # two equal columns: rank 2


def test_projection_names_what_lies_outside_the_records():
    fitted = fit(synthetic())
    inside = StepWork(16, 2, 16 * 5.5, 64, 256, 1e9)
    assert extrapolated(fitted, inside) == ()
    outside = StepWork(512, 2, 512 * 5, 2048, 2048, 7e9)
    assert extrapolated(fitted, outside) == ("prompts", "length", "parameters", "batch", "trained")
    baseline = StepWork(16, 1, 64, 64, 256, 1e9)
    projection = project(fitted, outside, baseline)
    assert projection.extrapolated == ("prompts", "length", "parameters", "batch", "trained")
    assert projection.ratio == pytest.approx(true_seconds(outside, 5e8) / true_seconds(baseline, 5e8), rel=1e-9)
    assert (projection.low, projection.high) == pytest.approx((projection.ratio, projection.ratio))  # no spread
    assert project(fitted, baseline, baseline).ratio == 1.0


def test_h200_records_are_the_files_numbers():
    """Step 3 of each run in step_time_05b.jsonl, its rounds, completions and generation time."""
    path = ROOT / "benchmarks/results/gpu/h200-2026-11-28/step_time_05b.jsonl"
    runs = {row["run"]: row for row in map(json.loads, path.read_text().splitlines())}
    for record, key in zip(H200_05B.records, ("grpo-4", "ada-pos-4x2", "ada-bal-8x4"), strict=True):
        run, work = runs[key], record.work
        metrics = run["metrics_last"]
        assert record.seconds == pytest.approx(run["step_seconds"][2])
        assert (work.prompts, work.length) == (run["prompts"], run["length"])
        assert work.calls == metrics.get("ada/rounds", 1.0)
        assert work.generated == round(metrics.get("ada/completion_tokens", 64 * run["length"]) / run["length"])
        assert work.trained == run["prompts"] * 4
        assert record.generation_seconds == pytest.approx(metrics.get("ada/generation_seconds"), abs=1e-3)
        assert work.parameters == MODEL_PARAMETERS["0.5b"]


def test_h200_leave_one_out_matches_a_direct_solve():
    """Without Ada-positive, three observations fix the three parameters: GRPO's step, Ada-balanced's step and its
    generation. Solve them directly and predict Ada-positive."""
    grpo, positive, balanced = H200_05B.records
    rows = [
        [grpo.work.calls * 256, grpo.work.generated * 256, grpo.work.trained * 256],
        [balanced.work.calls * 256, balanced.work.generated * 256, balanced.work.trained * 256],
        [balanced.work.calls * 256, balanced.work.generated * 256, 0.0],
    ]
    theta = np.linalg.solve(np.array(rows), [grpo.seconds, balanced.seconds, balanced.generation_seconds])
    predicted = np.array([positive.work.calls, positive.work.generated, positive.work.trained]) * 256 @ theta
    assert fit(H200_05B).loo_errors[1] == pytest.approx(predicted / positive.seconds - 1, abs=1e-9)


def test_paper_samples_are_what_the_simulator_gives_for_the_paper_fit_mix():
    strategies = default_strategies(4, 8, 4, (), 0, ("fixed",), ("positive", "balanced"))
    strategies = [s for s in strategies if not s.is_sequential_limit]
    outcomes = simulate(PassRates.beta(0.3372, 0.2984), strategies, 8192, 512, seed=1)
    by_rule = {o.strategy.split("-")[1]: o for o in outcomes}  # seq-positive-8x4, seq-balanced-8x4
    for rule, samples in PAPER_SAMPLES.items():
        assert by_rule[rule].samples_per_prompt == pytest.approx(samples, abs=0.35)
        assert by_rule[rule].rounds == pytest.approx(4.0, abs=0.01)  # the Seq records' four calls


def test_the_paper_exponents_are_the_ones_with_the_smallest_leave_one_out_error():
    choices = exponent_choices(PAPER)
    assert choices[0][0] == PAPER.exponents and choices[0][1] < choices[1][1]


def test_fit_table_prints_every_record_and_the_errors(capsys):
    assert table_main([]) == 0
    out = capsys.readouterr().out
    for record_set in RECORD_SETS.values():
        fitted = fit(record_set)
        for record, error in zip(record_set.records, fitted.loo_errors, strict=True):
            name, loo = re.escape(record.name), re.escape(format(error, "+.1%"))
            assert re.search(rf"{name}\s+{record.seconds:.2f}\s.*{loo}", out)
        assert f"leave-one-out: max {fitted.max_loo_error:.1%}" in out


@pytest.mark.parametrize(
    ("text", "expected"), [("7b", MODEL_PARAMETERS["7b"]), ("3B", 3e9), ("800m", 8e8), ("2.5e9", 2.5e9)]
)
def test_parse_parameters(text, expected):
    assert parse_parameters(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["3q", "-1b", "b", "nan"])
def test_parse_parameters_refuses_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="model shape"):
        parse_parameters(text)


# ---------------------------------------------------------------------------------------------------- the command
ARGS = ["--pass-rates", "beta:0.5,1", "--prompts", "256", "--batch-size", "32", "--epochs", "1", "--grpo", "4", "8"]
ARGS += ["--dapo-batches", "0", "--round-sizing", "fixed", "--estimate", "8", "--group-size", "4"]


def rows_of(section: str) -> dict[str, list[str]]:
    return {
        cells[0]: cells[1:]
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| -")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }


def test_simulate_prints_step_times_that_match_the_fitted_parameters(capsys):
    shape, length = "1.5b", 512
    assert simulate_main([*ARGS, "--model-shape", shape, "--completion-length", str(length)]) == 0
    out = capsys.readouterr().out
    sections = out.split("projected from ")[1:]
    assert len(sections) == len(RECORD_SETS)
    strategies = default_strategies(4, 8, 4, (4, 8), 0, ("fixed",), estimate_means=(8,))
    outcomes = simulate(PassRates.beta(0.5, 1), strategies, 256, 32, seed=0, epochs=1)
    parameters = MODEL_PARAMETERS[shape]
    for record_set, section in zip(RECORD_SETS.values(), sections, strict=True):
        fitted = fit(record_set)
        assert section.startswith(f"{len(record_set.records)} recorded configurations")
        theta = dict(zip(("latency", "per_token", "train"), fitted.parameters, strict=True))
        reference = min(r.work.parameters for r in record_set.records)
        scale = {t: (parameters / reference) ** e for t, e in record_set.exponents.items()}
        weight = {t: length * theta[t] * scale[t] for t in theta}  # seconds per call, completion, trained completion

        def seconds(calls: float, generated: float, trained: float, w: dict[str, float] = weight) -> float:
            return w["latency"] * calls + w["per_token"] * generated + w["train"] * trained

        grpo = seconds(1, 32 * 4, 32 * 4)
        table = rows_of(section)
        printed = gpu_rows = 0
        for strategy, outcome in zip(strategies, outcomes, strict=True):
            if strategy.is_sequential_limit:
                assert strategy.name not in table
                continue
            cells = table[strategy.name]
            ratio = seconds(outcome.rounds, 32 * outcome.samples_per_prompt, 32 * strategy.schedule.group_size) / grpo
            assert float(cells[4]) == pytest.approx(ratio, abs=0.006)
            spread = 0.0 if strategy.name == "grpo-4" else fitted.max_ratio_loo_error
            low, high = (float(x) for x in cells[5].split("-"))
            assert (low, high) == pytest.approx((ratio * (1 - spread), ratio * (1 + spread)), abs=0.006)
            # GPU time to the same skill: the steps measured on the columns task times this step-time ratio
            measured = STEPS_TO_90.get((strategy.name.split(" ")[0], "grpo-4"))
            if strategy.name == "grpo-4":
                assert cells[8] == "1.00"
            elif measured is None:
                assert cells[8] == "-"
            else:
                steps, steps_low, steps_high = measured[:3]
                value, bracket = cells[8].split(" [")
                assert float(value) == pytest.approx(steps * ratio, abs=0.006)
                bounds = [float(x) for x in bracket.rstrip("]").split(", ")]
                expected = [steps_low * ratio * (1 - spread), steps_high * ratio * (1 + spread)]
                assert bounds == pytest.approx(expected, abs=0.006)
                gpu_rows += 1
            printed += 1
        assert printed == 5  # grpo-4 and grpo-8, seq-positive-8x4 and seq-balanced-8x4, est-8
        assert gpu_rows == 4  # every row but grpo-4's own was measured against grpo-4


def test_simulate_without_model_shape_prints_no_step_times(capsys):
    assert simulate_main(ARGS) == 0
    assert "projected from" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--completion-length", "256"], "give --model-shape too"),
        (["--model-shape", "1.5b", "--completion-length", "0"], "--completion-length must be >= 1"),
        (["--model-shape", "big"], "Cannot read model shape 'big'"),
    ],
)
def test_simulate_step_time_flags_fail_on_one_line(extra, message, capsys):
    assert simulate_main([*ARGS, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trl-ada simulate: error: ") and message in err and err.count("\n") == 1


def test_the_extrapolation_flag_follows_the_records_range(capsys):
    """At the H200 records' setup (0.5B, 16 prompts, 256 tokens) GRPO n=4 is inside their range; at 7B it is not."""
    base = ["--prompts", "64", "--batch-size", "16", "--epochs", "1", "--grpo", "4", "--dapo-batches", "0"]
    base += ["--rules", "--estimate", "--completion-length", "256"]
    assert simulate_main([*base, "--model-shape", "0.5b"]) == 0
    h200 = rows_of(capsys.readouterr().out.split("projected from ")[1])
    assert h200["grpo-4"][7] == "-" and math.isclose(float(h200["grpo-4"][4]), 1.0)
    assert simulate_main([*base, "--model-shape", "7b"]) == 0
    assert rows_of(capsys.readouterr().out.split("projected from ")[1])["grpo-4"][7] == "parameters"


def test_the_doc_s_fit_table_is_the_command_s_output(capsys):
    doc = (ROOT / "docs/gpu-time.md").read_text()
    block = doc.split("`python -m trl_ada.tools.step_time_model` prints")[1].split("```\n")[1]
    assert table_main([]) == 0
    assert block == capsys.readouterr().out
