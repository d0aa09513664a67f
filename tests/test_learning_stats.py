"""The learning benchmark's statistics (benchmarks/learning_stats.py) against hand-worked values."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import learning_stats as stats

# --------------------------------------------------------------------------------------------------------------------
# Curves
# --------------------------------------------------------------------------------------------------------------------


def test_crossing_interpolates_at_the_first_crossing():
    tokens = [0, 100, 200, 300, 400]
    accuracy = [0.40, 0.45, 0.55, 0.45, 0.60]
    # First reaches 0.50 halfway between (100, 0.45) and (200, 0.55); the later dip and recovery do not count.
    assert stats.crossing(tokens, accuracy, 0.50) == pytest.approx(150.0)
    # 0.58 is only reached on the last segment: 300 + (0.58 - 0.45) / (0.60 - 0.45) * 100.
    assert stats.crossing(tokens, accuracy, 0.58) == pytest.approx(300 + 0.13 / 0.15 * 100)
    assert stats.crossing(tokens, accuracy, 0.55) == pytest.approx(200.0)  # reached exactly at a point
    assert stats.crossing(tokens, accuracy, 0.40) == 0.0  # already there at the start
    assert stats.crossing(tokens, accuracy, 0.61) is None  # never reached


def test_crossing_rejects_mismatched_curves():
    with pytest.raises(ValueError, match="equally long"):
        stats.crossing([0, 1], [0.5], 0.5)


def test_value_at_interpolates_and_holds_only_when_asked():
    xs, ys = [0, 100, 300], [0.4, 0.6, 0.5]
    assert stats.value_at(xs, ys, 50) == pytest.approx(0.5)
    assert stats.value_at(xs, ys, 200) == pytest.approx(0.55)
    assert stats.value_at(xs, ys, 100) == 0.6 and stats.value_at(xs, ys, 0) == 0.4
    assert stats.value_at(xs, ys, 400, hold=True) == 0.5
    with pytest.raises(ValueError, match="before 400"):
        stats.value_at(xs, ys, 400)


def test_up_to_budget_cuts_every_column_at_the_budget():
    curve = {"step": [0, 10, 20], "tokens": [0, 1000, 3000], "seconds": [0, 5, 9], "accuracy": [0.4, 0.5, 0.7]}
    # 2000 tokens lie halfway along the second segment: step 15, 7 s, accuracy 0.6.
    cut = stats.up_to_budget(curve, 2000)
    assert cut == {
        "step": [0, 10, pytest.approx(15)],
        "tokens": [0, 1000, pytest.approx(2000)],
        "seconds": [0, 5, pytest.approx(7)],
        "accuracy": [0.4, 0.5, pytest.approx(0.6)],
    }
    assert stats.up_to_budget(curve, 1000)["tokens"] == [0, 1000]  # exactly on a checkpoint
    assert stats.up_to_budget(curve, 5000) == curve  # never reaches the budget: whole
    assert stats.up_to_budget(curve, None) == curve


def test_area_under_curve_hand_worked():
    # Accuracy 0.4 -> 0.6 over [0, 100], flat 0.6 to 200: area to 150 = 100 * 0.5 + 50 * 0.6 = 80, mean 80 / 150.
    assert stats.area_under_curve([0, 100, 200], [0.4, 0.6, 0.6], 150) == pytest.approx(80 / 150)
    # Cut inside a rising segment: to 50, the mean of 0.4 and 0.5.
    assert stats.area_under_curve([0, 100], [0.4, 0.6], 50) == pytest.approx(0.45)
    with pytest.raises(ValueError, match="before the budget"):
        stats.area_under_curve([0, 100], [0.4, 0.6], 150)
    # Held at 0.6 from 100 to 150: (100 * 0.5 + 50 * 0.6) / 150.
    assert stats.area_under_curve([0, 100], [0.4, 0.6], 150, hold=True) == pytest.approx(80 / 150)


def run(seed, tokens, accuracies, steps=None):
    steps = steps or [10 * i for i in range(len(tokens))]
    return {
        "seed": seed,
        "checkpoints": [
            {"step": s, "tokens": t, "seconds": t / 100, "accuracy": a}
            for s, t, a in zip(steps, tokens, accuracies, strict=True)
        ],
    }


def test_mean_curve_averages_seeds_checkpoint_by_checkpoint():
    curve = stats.mean_curve([run(0, [0, 900], [0.4, 0.5]), run(1, [0, 1100], [0.4, 0.6])])
    assert curve == {
        "step": [0, 10],
        "tokens": [0, 1000],
        "seconds": [0, 10],
        "accuracy": [0.4, pytest.approx(0.55)],
    }
    with pytest.raises(ValueError, match="different steps"):
        stats.mean_curve([run(0, [0, 1], [0.4, 0.5]), run(1, [0, 1, 2], [0.4, 0.5, 0.6])])


# --------------------------------------------------------------------------------------------------------------------
# One comparison with the baseline
# --------------------------------------------------------------------------------------------------------------------

# GRPO n=4: 0.40 -> 0.60 over 2000 tokens (its budget), linearly; mean accuracy over [0, 2000] is 0.50; gain 0.20.
BASE = {"step": [0, 10, 20], "tokens": [0, 1000, 2000], "seconds": [0, 10, 20], "accuracy": [0.40, 0.50, 0.60]}


def curve(tokens, accuracies):
    steps = [10 * i for i in range(len(tokens))]
    return {"step": steps, "tokens": tokens, "seconds": [t / 100 for t in tokens], "accuracy": accuracies}


def test_compare_hand_worked():
    # Twice as fast per token, then flat, past the budget: read up to 2000 tokens, [0.40, 0.50, 0.60, 0.60, 0.60]
    # at 0, 500, ..., 2000. Mean accuracy (500 * 0.45 + 500 * 0.55 + 1000 * 0.60) / 2000 = 0.55.
    fast = curve([0, 500, 1000, 1500, 2000, 2500], [0.40, 0.50, 0.60, 0.60, 0.60, 0.70])
    result = stats.compare(BASE, fast)
    assert result["budget"] == 2000 and result["short_of_budget"] is False
    assert result["auc_delta"] == pytest.approx(0.05)
    # At 500 tokens: 0.50 against 0.45; at 1000: 0.60 against 0.50; at 2000: 0.60 against 0.60 (not the 0.70 after).
    assert result["acc_delta_at_25"] == pytest.approx(0.05)
    assert result["acc_delta_at_50"] == pytest.approx(0.10)
    assert result["acc_delta_at_100"] == pytest.approx(0.0)
    # 50%, 75%, 90% and 100% of the gain (0.50, 0.55, 0.58, 0.60): GRPO at 1000, 1500, 1800, 2000 tokens, the method
    # at half of each; both at the same steps (the method's steps are half as many tokens).
    for percent in (50, 75, 90):
        assert result[f"tokens_to_{percent}_ratio"] == pytest.approx(0.5)
        assert result[f"steps_to_{percent}_ratio"] == pytest.approx(1.0)
    assert result["tokens_to_final_ratio"] == pytest.approx(0.5)
    # At GRPO's last step (20) the method had 1000 tokens and 0.60, level with GRPO's 0.60 at that step.
    assert result["acc_delta_equal_steps"] == pytest.approx(0.0)
    assert set(stats.COMPARISON_METRICS) <= set(result)


def test_compare_holds_a_run_that_stops_short_and_leaves_unreached_ratios_empty():
    # Ends at 1000 tokens and 0.60: held there to 2000, mean (1000 * 0.50 + 1000 * 0.60) / 2000 = 0.55.
    short = stats.compare(BASE, curve([0, 1000], [0.40, 0.60]))
    assert short["short_of_budget"] is True
    assert short["auc_delta"] == pytest.approx(0.05)
    assert short["acc_delta_at_100"] == pytest.approx(0.0) and short["acc_delta_at_50"] == pytest.approx(0.10)
    assert short["tokens_to_final_ratio"] == pytest.approx(0.5)
    # Never above 0.50 before the budget (0.70 only after it): no 75%, 90% or 100% ratio, 50% at 2000 tokens.
    slow = stats.compare(BASE, curve([0, 2000, 3000], [0.40, 0.50, 0.70]))
    assert slow["tokens_to_50_ratio"] == pytest.approx(2.0)
    assert slow["tokens_to_75_ratio"] is slow["tokens_to_90_ratio"] is slow["tokens_to_final_ratio"] is None
    assert slow["auc_delta"] == pytest.approx(0.45 - 0.50)
    # Behind per token, ahead per step: at step 20 it has spent 3000 tokens and reads 0.70 against GRPO's 0.60.
    assert slow["acc_delta_equal_steps"] == pytest.approx(0.10)
    # A method that stops at step 10 is held at its last accuracy for the equal-steps frame too.
    assert short["acc_delta_equal_steps"] == pytest.approx(0.60 - 0.60)
    # The baseline against itself.
    same = stats.compare(BASE, BASE)
    assert same["auc_delta"] == 0 and same["tokens_to_final_ratio"] == 1.0 and same["steps_to_75_ratio"] == 1.0


# --------------------------------------------------------------------------------------------------------------------
# Intervals
# --------------------------------------------------------------------------------------------------------------------


def test_percentile_interval_takes_the_outer_order_statistics():
    values = list(range(101))  # 2.5% and 97.5% of the way through 0..100: 2.5 -> 2 and 97.5 -> 98
    assert stats.percentile_interval(values) == [2, 98]
    assert stats.percentile_interval([1.0] * 50 + [float("inf")] * 50) == [1.0, None]


def test_paired_bootstrap_comparison_cancels_what_seeds_share():
    # GRPO's two seeds differ (0.60 and 0.64 at the end); the method is each seed's GRPO curve + 0.01 everywhere, so
    # every resample's difference is 0.01 however the seeds are drawn.
    base = [run(0, [0, 1000, 2000], [0.40, 0.50, 0.60]), run(1, [0, 1000, 2000], [0.40, 0.52, 0.64])]
    shifted = [run(r["seed"], [0, 1000, 2000], [c["accuracy"] + 0.01 for c in r["checkpoints"]]) for r in base]
    intervals = stats.paired_bootstrap_comparison(base, shifted, resamples=200)
    assert intervals["auc_delta_ci"] == [pytest.approx(0.01), pytest.approx(0.01)]
    assert intervals["acc_delta_at_50_ci"] == [pytest.approx(0.01), pytest.approx(0.01)]
    # Seed 0's method is GRPO's curve, seed 1's is 0.02 above it: a resample's mean difference is 0, 0.01 or 0.02,
    # the ends each with probability 1/4, so the 95% interval is [0, 0.02].
    mixed = [base[0], run(1, [0, 1000, 2000], [0.42, 0.54, 0.66])]
    assert stats.paired_bootstrap_comparison(base, mixed, resamples=400)["auc_delta_ci"] == [
        pytest.approx(0.0),
        pytest.approx(0.02),
    ]
    # A method that never reaches 90% of the gain in any resample: no finite end.
    flat = [run(s, [0, 1000, 2000], [0.40, 0.41, 0.42]) for s in (0, 1)]
    assert stats.paired_bootstrap_comparison(base, flat, resamples=50)["tokens_to_90_ratio_ci"] == [None, None]
    with pytest.raises(ValueError, match="no seed"):
        stats.paired_bootstrap_comparison(base, [run(7, [0, 10], [0.4, 0.5])])


def test_aa_floor_splits_the_baseline_against_itself():
    # Four seeds, two 0.02 above the other two at every checkpoint. Of the 6 ways to split them 2 against 2, one
    # puts both high seeds on the method's side (+0.02), one on the baseline's (-0.02), four mix them (0): the 95%
    # range is [-0.02, +0.02], the median 0.
    runs = [run(s, [0, 1000, 2000], [a + 0.40, a + 0.50, a + 0.60]) for s, a in enumerate([0, 0, 0.02, 0.02])]
    floor = stats.aa_floor(runs, splits=500)
    assert (floor["seeds"], floor["half"], floor["splits"]) == (4, 2, 500)
    assert floor["auc_delta"]["range"] == [pytest.approx(-0.02), pytest.approx(0.02)]
    assert floor["auc_delta"]["median"] == pytest.approx(0.0)
    assert floor["auc_delta"]["never_reached"] is None
    # With both low seeds on the method's side (1 split in 6) it never reaches the high half's final 0.62.
    assert 0.1 < floor["tokens_to_final_ratio"]["never_reached"] < 0.25
    assert floor["tokens_to_final_ratio"]["range"][1] is None
    assert stats.aa_floor(runs, splits=500) == floor  # seeded
    assert stats.aa_floor(runs[:3]) is None  # too few seeds to split
    assert stats.aa_floor([*runs, run(4, [0, 1000, 2000], [0.4, 0.5, 0.6])], splits=10)["half"] == 2


# --------------------------------------------------------------------------------------------------------------------
# Held-out samples
# --------------------------------------------------------------------------------------------------------------------


def checkpoint(step, correct=None, by_label=None, entropy=None):
    point = {"step": step, "tokens": 100 * step, "seconds": step, "accuracy": 0.5}
    extras = {"correct": correct, "accuracy_by_label": by_label, "entropy": entropy}
    return point | {key: value for key, value in extras.items() if value is not None}


def test_heldout_at_reads_the_last_checkpoint_within_the_step():
    # Two seeds, 4 samples per prompt, two prompts. At step 10 (the last at or before 15): seed 0 has 1 and 3 right
    # (pass@1 0.5), seed 1 has 4 and 0 (pass@1 0.5); pass@8 and pass@32 need more samples than 4.
    runs = [
        {"checkpoints": [checkpoint(0, [0, 0], {"2": 0.0}, 1.5), checkpoint(10, [1, 3], {"2": 0.5}, 1.0)]},
        {"checkpoints": [checkpoint(0, [0, 0], {"2": 0.0}, 1.3), checkpoint(10, [4, 0], {"2": 0.25}, 0.8)]},
    ]
    runs[0]["checkpoints"].append(checkpoint(20, [4, 4], {"2": 1.0}, 0.1))
    runs[1]["checkpoints"].append(checkpoint(20, [4, 4], {"2": 1.0}, 0.1))
    at = stats.heldout_at(runs, 15, num_samples=4)
    assert at["heldout_step"] == 10
    assert at["pass_at_k"] == {"1": pytest.approx(0.5), "8": None, "32": None}
    assert at["accuracy_by_label"] == {"2": pytest.approx(0.375)}
    assert at["entropy"] == pytest.approx(0.9) and at["entropy_before"] == pytest.approx(1.4)
    # Seed 0 at step 10, pass@2: 1 of 4 right gives 0.5, 3 of 4 gives 1; seed 1: 4 right 1, none 0. Mean 0.625.
    assert stats.mean_pass_at_k([1, 3, 4, 0], 4, 2) == pytest.approx(0.625)
    # Runs recorded before these measurements existed: every measure is None, nothing fails.
    old = [{"checkpoints": [{"step": 0, "tokens": 0, "seconds": 0, "accuracy": 0.4}]}]
    assert stats.heldout_at(old, 200, 8) == {
        "heldout_step": 0,
        "pass_at_k": {"1": None, "8": None, "32": None},
        "accuracy_by_label": None,
        "entropy": None,
        "entropy_before": None,
    }


def measured(seed, points):
    """A run whose checkpoints are (step, tokens, correct counts of 4 samples, entropy, accuracy of label "%")."""
    checkpoints = [
        {
            "step": step,
            "tokens": tokens,
            "seconds": step,
            "accuracy": sum(correct) / (4 * len(correct)),
            "correct": correct,
            "entropy": entropy,
            "accuracy_by_label": {"%": hard},
        }
        for step, tokens, correct, entropy, hard in points
    ]
    return {"seed": seed, "checkpoints": checkpoints}


# GRPO n=4: 1000 tokens a step-10 interval, pass@1 0 -> 0.25 -> 0.5 (two prompts, 4 samples), entropy 1.0 -> 0.6.
GRPO_POINTS = [(0, 0, [0, 0], 1.0, 0.0), (10, 1000, [2, 0], 0.8, 0.0), (20, 2000, [4, 0], 0.6, 0.5)]
# A method spending half the tokens a step: at GRPO's 2000 tokens (its step 40) pass@1 1.0 and entropy 0.7; at
# GRPO's last step (20) pass@1 0.75 and entropy 0.8.
METHOD_POINTS = [
    (0, 0, [0, 0], 1.0, 0.0),
    (10, 500, [2, 2], 0.9, 0.25),
    (20, 1000, [4, 2], 0.8, 0.5),
    (30, 1500, [4, 4], 0.7, 1.0),
    (40, 2000, [4, 4], 0.7, 1.0),
]


def test_measures_at_interpolates_between_checkpoints():
    grpo = measured(0, GRPO_POINTS)
    # 1500 tokens: halfway between the step-10 and step-20 evaluations.
    at = stats.measures_at(grpo, "tokens", 1500, num_samples=4)
    assert at == {"pass@1": pytest.approx(0.375), "entropy": pytest.approx(0.7), "accuracy:%": pytest.approx(0.25)}
    assert stats.measures_at(grpo, "step", 30, 4)["pass@1"] == pytest.approx(0.5)  # held past the end
    # pass@8 needs 8 samples a prompt; with them, a prompt with any right answer among 8 counts whole.
    assert stats.checkpoint_measures({"correct": [0, 1]}, 8) == {"pass@1": 1 / 16, "pass@8": 0.5}
    # A measure one checkpoint lacks (entropy off there) is left out rather than read as zero.
    grpo["checkpoints"][1].pop("entropy")
    assert "entropy" not in stats.measures_at(grpo, "tokens", 500, 4)


def test_heldout_comparison_in_both_frames_with_a_paired_interval():
    base = [measured(0, GRPO_POINTS), measured(1, GRPO_POINTS)]
    # Seed 1's method has 0.1 more entropy everywhere than seed 0's.
    shifted = [(s, t, c, e + 0.1, h) for s, t, c, e, h in METHOD_POINTS]
    method = [measured(0, METHOD_POINTS), measured(1, shifted)]
    result = stats.heldout_comparison(base, method, num_samples=4, resamples=400)
    tokens, steps = result["equal_tokens"], result["equal_steps"]
    assert tokens["pass@1"] == {"delta": pytest.approx(0.5), "ci": [pytest.approx(0.5), pytest.approx(0.5)]}
    assert steps["pass@1"]["delta"] == pytest.approx(0.25)
    assert tokens["accuracy:%"]["delta"] == pytest.approx(0.5) and steps["accuracy:%"]["delta"] == pytest.approx(0.0)
    # Entropy at equal tokens: 0.7 - 0.6 on seed 0 and 0.8 - 0.6 on seed 1, mean 0.15; a resample of the two seeds
    # averages 0.1, 0.15 or 0.2 (the ends with probability 1/4 each), so the 95% interval is [0.1, 0.2].
    assert tokens["entropy"]["delta"] == pytest.approx(0.15)
    assert tokens["entropy"]["ci"] == [pytest.approx(0.1), pytest.approx(0.2)]
    assert steps["entropy"]["delta"] == pytest.approx(0.25)  # 0.8 - 0.6 and 0.9 - 0.6


def test_heldout_aa_floor_splits_the_baseline_against_itself():
    # Four GRPO seeds, two with 0.5 more entropy at every checkpoint: of the 6 splits 2 against 2, one gives +0.5,
    # one -0.5, four 0, so the 95% range is [-0.5, +0.5]; pass@1 is the same on every seed, its range [0, 0].
    high = [(s, t, c, e + 0.5, h) for s, t, c, e, h in GRPO_POINTS]
    runs = [measured(0, GRPO_POINTS), measured(1, GRPO_POINTS), measured(2, high), measured(3, high)]
    floor = stats.heldout_aa_floor(runs, num_samples=4, splits=500)
    for frame in ("equal_tokens", "equal_steps"):
        assert floor[frame]["entropy"] == [pytest.approx(-0.5), pytest.approx(0.5)]
        assert floor[frame]["pass@1"] == [pytest.approx(0.0), pytest.approx(0.0)]
    assert stats.heldout_aa_floor(runs[:3], num_samples=4) is None


def test_late_gain_reads_each_seed_after_sixty_percent_of_its_steps():
    # Steps 0, 10, 20: 60% of 20 is step 12, a fifth of the way from 0.50 (step 10) to 0.60 (step 20): 0.52, so the
    # gain after it is 0.08 on seed 0; seed 1 is flat from step 10 (gain 0). Mean 0.04; resamples average 0, 0.04
    # or 0.08, the ends each with probability 1/4: the interval is [0, 0.08].
    runs = [run(0, [0, 1000, 2000], [0.40, 0.50, 0.60]), run(1, [0, 1000, 2000], [0.40, 0.50, 0.50])]
    late = stats.late_gain(runs, resamples=400)
    assert late["gain"] == pytest.approx(0.04) and late["per_seed"] == [pytest.approx(0.08), pytest.approx(0.0)]
    assert late["gain_ci"] == [pytest.approx(0.0), pytest.approx(0.08)]
