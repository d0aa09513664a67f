"""The shared-grid statistics (benchmarks/grid_stats.py) on synthetic curves whose answers are known: a method with
the baseline's per-token curve reads level whatever tokens it spends per step, a method exactly twice as fast reads
0.5x wherever the grid resolves it, the A/A floor enumerates every split, and hand-worked crossings."""

import itertools
import math
import pathlib
import random
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import grid_stats as gs
import learning_stats

STEPS = 300
TOKENS_PER_STEP = 960  # GRPO n=4 on the columns task: 64 completions of 15 tokens
BUDGET = 0.97 * STEPS * TOKENS_PER_STEP
GRID = {
    "tokens": gs.geometric_grid(BUDGET, 0.025, 2**0.5),
    "steps": gs.geometric_grid(STEPS, 0.025, 2**0.5),
}


def per_token(tokens: float) -> float:
    """A concave learning curve: most of its gain early, as GRPO n=4's on the toy tasks."""
    return 0.10 + 0.30 * (1 - math.exp(-tokens / 40_000))


def simulate(seed, tokens_per_step, accuracy_at, steps=STEPS, grid=GRID, noise=0.004):
    """One run evaluated as `trl_ada.tools.heldout_curve.HeldoutCurve` evaluates on a grid: before training, at the end
    of the first step at or past each token point, at each grid step and at the last step.
    ``accuracy_at(step, tokens)`` is the true curve; a per-seed offset and per-evaluation noise are added."""
    rng = random.Random(seed)
    offset = rng.gauss(0, noise)

    def checkpoint(step, tokens, token_points, step_point):
        value = accuracy_at(step, tokens) + offset + rng.gauss(0, noise / 2)
        return {
            "step": step,
            "tokens": tokens,
            "seconds": 0.0,
            "chain_accuracy": value,
            "accuracy": value,
            "token_points": list(token_points),
            "step_point": step_point,
        }

    checkpoints = [checkpoint(0, 0, (), True)]
    next_point, tokens = 0, 0
    for step in range(1, steps + 1):
        tokens += tokens_per_step
        served = []
        while next_point < len(grid["tokens"]) and tokens >= grid["tokens"][next_point]:
            served.append(next_point)
            next_point += 1
        on_grid = step in grid["steps"]
        if served or on_grid or step == steps:
            checkpoints.append(checkpoint(step, tokens, served, on_grid))
    return {"seed": seed, "checkpoints": checkpoints}


def baseline_runs(seeds=range(10)):
    return [simulate(s, TOKENS_PER_STEP, lambda step, tokens: per_token(tokens)) for s in seeds]


def test_geometric_grid_is_dense_early_and_ends_at_the_budget():
    tokens = GRID["tokens"]
    assert tokens[0] <= 0.05 * BUDGET  # the bound on the first point
    assert len(tokens) >= 8 and tokens[-1] == round(BUDGET)
    ratios = [b / a for a, b in itertools.pairwise(tokens[:-1])]
    assert all(abs(r - 2**0.5) < 0.01 for r in ratios)
    assert GRID["steps"] == [8, 11, 15, 21, 30, 42, 60, 85, 120, 170, 240, 300]


def test_resolved_crossing_places_only_between_close_points():
    # 0.5 is reached between x = 100 and 141 (ratio 1.41): resolved, at 100 + 0.5 * 41.
    assert gs.resolved_crossing([0, 100, 141], [0.0, 0.4, 0.6], 0.5) == (120.5, True)
    # Reached in the first interval, from 0: the grid says nothing about where.
    x, ok = gs.resolved_crossing([0, 100, 141], [0.0, 0.6, 0.7], 0.5)
    assert x == pytest.approx(83.333, abs=1e-3) and not ok
    # Between points 3x apart: unresolved.
    assert gs.resolved_crossing([0, 100, 300], [0.0, 0.4, 0.6], 0.5)[1] is False
    # Never reached within the curve: a resolved "no".
    assert gs.resolved_crossing([0, 100, 141], [0.0, 0.2, 0.3], 0.5) == (None, True)


def test_frame_points_hold_a_point_the_run_never_reached():
    run = {
        "seed": 0,
        "checkpoints": [
            {"step": 0, "tokens": 0, "token_points": [], "step_point": True},
            {"step": 5, "tokens": 60, "token_points": [0, 1], "step_point": False},
            {"step": 9, "tokens": 110, "token_points": [], "step_point": True},
        ],
    }
    tokens = gs.frame_points(run, "tokens", grid_size=3)
    assert [c["step"] for c in tokens] == [0, 5, 5, 9]  # point 2 never served: the last checkpoint holds it
    assert [c["step"] for c in gs.frame_points(run, "steps")] == [0, 9]


@pytest.mark.parametrize("k", [2, 4, 6.5])
def test_same_per_token_curve_at_k_times_the_tokens_per_step_reads_level(k):
    """The audit's null test: GRPO n=4's own per-token curve, spent k times faster per step, must read inside the
    A/A floor on the shared grid. On a grid of steps (every 60, the rules task's) the same runs read far below it."""
    base = baseline_runs()
    method = [simulate(100 + s, k * TOKENS_PER_STEP, lambda step, tokens: per_token(tokens)) for s in range(10)]
    for run, base_run in zip(method, base, strict=True):
        run["seed"] = base_run["seed"]
    floor = gs.grid_aa_floor(base, GRID)
    point = gs.compare_runs(base, method, GRID)
    low, high = floor["auc_delta"]["range"]
    assert low <= point["auc_delta"] <= high, (point["auc_delta"], floor["auc_delta"]["range"])
    assert abs(point["auc_delta"]) < 0.004

    # Teeth: the same curves read the old way (checkpoints every 60 steps, straight lines between them).
    def every_60(run, tokens_per_step):
        return [
            {"step": s, "tokens": s * tokens_per_step, "seconds": 0.0, "accuracy": per_token(s * tokens_per_step)}
            for s in range(0, STEPS + 1, 60)
        ]

    old_base = {"step": [], "tokens": [], "seconds": [], "accuracy": []}
    for c in every_60(None, TOKENS_PER_STEP):
        for key in old_base:
            old_base[key].append(c[key])
    old_method = {key: [] for key in old_base}
    for c in every_60(None, k * TOKENS_PER_STEP):
        for key in old_method:
            old_method[key].append(c[key])
    old = learning_stats.compare(old_base, old_method)["auc_delta"]
    assert old < low - 0.005, f"the step grid should read this method low, got {old:+.4f}"


def test_twice_as_fast_in_steps_reads_half_wherever_the_grid_resolves_it():
    base = baseline_runs()

    def fast(step, tokens):  # the baseline's curve in steps, at twice the speed (the same tokens per step)
        return per_token(2 * tokens)

    method = [simulate(s, TOKENS_PER_STEP, fast, noise=0.0) for s in range(10)]
    base = [simulate(s, TOKENS_PER_STEP, lambda step, tokens: per_token(tokens), noise=0.0) for s in range(10)]
    point = gs.compare_runs(base, method, GRID)
    resolved = [name for name in gs.RATIO_METRICS if point[f"{name}_resolved"]]
    assert {"steps_to_75_ratio", "steps_to_90_ratio", "tokens_to_75_ratio", "tokens_to_90_ratio"} <= set(resolved)
    for name in resolved:
        assert point[name] == pytest.approx(0.5, abs=0.05), name


def test_every_split_enumerates_each_pair_of_disjoint_halves():
    splits = list(gs.every_split(10))
    assert len(splits) == math.comb(10, 5) == 252
    assert all(not set(a) & set(b) and len(a) == len(b) == 5 for a, b in splits)
    assert len(set(splits)) == 252
    assert len(list(gs.every_split(9))) == math.comb(9, 4) * 5  # one seed left out of each split
    floor = gs.grid_aa_floor(baseline_runs(), GRID)
    assert floor["splits"] == 252 and floor["half"] == 5
    # The baseline against itself: every split's mirror is in the set, so the range is symmetric about 0.
    low, high = floor["auc_delta"]["range"]
    assert low == pytest.approx(-high)


def test_bootstrap_interval_covers_a_known_shift():
    base = baseline_runs()
    better = [simulate(s, TOKENS_PER_STEP, lambda step, tokens: per_token(tokens) + 0.02) for s in range(10)]
    row = gs.comparison_with(base, better, GRID)
    low, high = row["auc_delta_ci"]
    assert low < 0.02 < high and low > 0


def with_chain_counts(run, prompts=1000):
    """``run`` with each checkpoint's held-out chain counts (one sample a prompt) spelling its chain accuracy, which is
    rounded to what the counts can spell: pass@1 of the counts is then the same number as the accuracy."""
    checkpoints = []
    for checkpoint in run["checkpoints"]:
        correct = round(checkpoint["chain_accuracy"] * prompts)
        counts = [1] * correct + [0] * (prompts - correct)
        checkpoints.append(checkpoint | {"chain_accuracy": correct / prompts, "chain_correct": counts})
    return run | {"checkpoints": checkpoints}


def test_heldout_table_reads_equal_steps_accuracy_as_the_main_table_does():
    """The held-out table's pass@1 at equal steps and the main table's Δ at equal steps are one quantity (correct
    chains at the step grid's last step): one delta, one interval, not two bootstraps of it."""
    import learning_grid_report

    base = [with_chain_counts(run) for run in baseline_runs()]
    # Noise of its own (another generator) under the baseline's seed labels, so that the paired differences vary.
    better = [
        with_chain_counts(
            simulate(100 + s, TOKENS_PER_STEP, lambda step, tokens: per_token(tokens) + 0.01) | {"seed": s}
        )
        for s in range(10)
    ]
    main = gs.comparison_with(base, better, GRID)
    heldout = learning_grid_report.grid_heldout_comparison(base, better, GRID, num_samples=1)
    pass_at_1 = heldout["equal_steps"]["pass@1"]
    assert pass_at_1["delta"] == pytest.approx(main["acc_delta_equal_steps"], abs=1e-12)
    assert pass_at_1["ci"] == pytest.approx(main["acc_delta_equal_steps_ci"], abs=1e-12)
    low, high = pass_at_1["ci"]
    assert high - low > 0.002 and low < 0.01 < high  # a real interval, around the shift that was put in


def test_flawed_shares_and_label_gain():
    runs = [
        {
            "seed": s,
            "checkpoints": [
                {"flawed_rewarded_share": 0.01, "chain_accuracy_by_label": {"&": 0.1, "~": 0.2}},
                {"flawed_rewarded_share": None, "chain_accuracy_by_label": {"&": 0.15, "~": 0.2}},
                {
                    "flawed_rewarded_share": 0.05 + s / 100,
                    "flawed_rewarded_share_by_label": {"&": 0.1 * s, "~": None},
                    "chain_accuracy_by_label": {"&": 0.3 + s / 10, "~": 0.2},
                },
            ],
        }
        for s in range(3)
    ]
    shares = gs.flawed_shares(runs)
    assert shares["max"] == pytest.approx(0.07) and shares["first"] == pytest.approx(0.01)
    assert shares["last"] == pytest.approx(0.06)
    assert shares["max_by_label"] == {"&": pytest.approx(0.2)}  # a label with nothing rewarded has no share
    gain = gs.label_gain(runs, ["&", "~"])
    assert gain["&"]["gain"] == pytest.approx(0.3) and gain["&"]["per_seed"] == pytest.approx([0.2, 0.3, 0.4])
    assert gain["~"]["gain"] == 0 and gain["~"]["ci"] == [0, 0]


def test_testbed_during_training_names_the_seeds_and_rules_past_its_bounds():
    runs = [
        {
            "seed": s,
            "checkpoints": [
                {"flawed_rewarded_share": 0.01, "chain_accuracy_by_label": {"&": 0.1, "~": 0.2}},
                # seed 2 ends with 0.16 of its rewarded samples flawed: past the 0.15 bound; 0.15 itself is within
                {
                    "flawed_rewarded_share": [0.02, 0.15, 0.16][s],
                    "chain_accuracy_by_label": {"&": 0.5, "~": 0.2 + 0.02 * s},
                },
            ],
        }
        for s in range(3)
    ]
    check = gs.testbed_during_training(gs.flawed_shares(runs), gs.label_gain(runs, ["&", "~"]))
    # `~` gains 0, 0.02, 0.04: a mean of 0.02, short of 0.05; `&` gains 0.4
    assert check["seeds_over_flawed_bound"] == [2] and check["rules_under_gain_bound"] == ["~"]
    assert check["flawed_share_max"] == pytest.approx(0.16) and check["holds"] is False

    import learning_grid_report

    line = learning_grid_report.testbed_line({"testbed_during_training": check})
    assert "did not hold" in line and "seed 2" in line and "`~`" in line
    clean = [run | {"checkpoints": run["checkpoints"][:1]} for run in runs]
    assert gs.testbed_during_training(gs.flawed_shares(clean), {})["holds"] is True
    # No rewarded sample anywhere (a short run): nothing to judge, which is not a pass
    unjudged = [{"seed": 0, "checkpoints": [{"flawed_rewarded_share": None}]}]
    check = gs.testbed_during_training(gs.flawed_shares(unjudged), {})
    assert check["holds"] is None
    assert "was not fully measured" in learning_grid_report.testbed_line({"testbed_during_training": check})
