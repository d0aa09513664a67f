"""Statistics of learning curves measured on one shared grid: every method evaluated at the same generated-token
counts (and at the same optimizer steps), so that no comparison depends on how often a method was looked at.

Why a grid (benchmarks/results/rules/README.md, the audit of the rules task): checkpoints every 60 *steps*, joined by
straight lines, read a method that spends more tokens per step low, because its first checkpoint falls after most of
a concave curve's gain; the baseline's own curve read on such a method's checkpoints scored -0.011 to -0.023 against
itself. Here every run is evaluated at the end of the first optimizer step whose cumulative completion tokens reach
each point of ``grid["tokens"]`` (its checkpoint lists the points it serves in ``token_points``), and at each step of
``grid["steps"]`` (``step_point``). The points are geometric (`geometric_grid`), dense early, where the curves bend.

A run is a dict with ``seed`` and ``checkpoints``; a checkpoint has ``step``, ``tokens``, ``seconds``, the measured
metrics (``chain_accuracy``, the primary one; ``accuracy``, the reward's) and its grid tags. Read top to bottom:

1. Curves on the grid: `frame_curve` (one run, in the token frame or the step frame), `mean_frame_curve` (the seeds'
   mean point by point: every seed is evaluated at the same grid points).
2. One comparison of a method with the baseline (`grid_compare`): Δ AUC over tokens [0, B] (B the token grid's last
   point), Δ accuracy at 25/50/100% of B and at the baseline's last step, and tokens and steps to 50/75/90% of the
   baseline's gain as ratios, each reported only where the grid resolves it (`resolved_crossing`).
3. Intervals: a paired bootstrap over seeds (`grid_bootstrap`) and the A/A floor from every split of the baseline's
   seeds into two halves (`grid_aa_floor`, enumerated, not sampled).
4. The testbed during training: the flawed share of rewarded held-out samples at every checkpoint (`flawed_shares`),
   each hard rule's chain-accuracy gain (`label_gain`), and whether the baseline's runs kept the testbed's bounds
   (`testbed_during_training`).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

from learning_stats import area_under_curve, crossing, mean, paired_by_seed, percentile_interval, value_at

Run = dict[str, Any]
Curve = dict[str, list[float]]  # "x" (tokens or steps), "y" (the metric), "tokens", "step"

PRIMARY = "chain_accuracy"
FRAMES = ("tokens", "steps")
GAIN_FRACTIONS = (0.5, 0.75, 0.9)
BUDGET_FRACTIONS = (0.25, 0.5, 1.0)
BOOTSTRAP_RESAMPLES = 2000
# A crossing is resolved when it falls between two evaluated points whose x differ by at most this factor: on a
# geometric grid of ratio sqrt(2), every interval but the first (from 0, where the curve's shape is unknown).
RESOLUTION = 1.5
MAX_ENUMERATED_SPLITS = 20_000


def geometric_grid(end: float, first_fraction: float, ratio: float, integer: bool = True) -> list[float]:
    """Points ``end * first_fraction * ratio**k`` below ``end``, then ``end`` itself: dense early, where learning
    curves bend. ``integer`` rounds them (steps, tokens) and drops repeats."""
    if not 0 < first_fraction <= 1 or ratio <= 1 or end <= 0:
        raise ValueError(f"need 0 < first_fraction <= 1, ratio > 1, end > 0; got {first_fraction}, {ratio}, {end}")
    points, value = [], end * first_fraction
    while value < end * (1 - 1e-9):
        points.append(value)
        value *= ratio
    points.append(end)
    if integer:
        points = sorted({max(1, round(p)) for p in points})
    return points


# --------------------------------------------------------------------------------------------------------------------
# 1. Curves on the grid
# --------------------------------------------------------------------------------------------------------------------


def frame_points(run: Run, frame: str, grid_size: int | None = None) -> list[dict[str, Any]]:
    """The checkpoints of one run that make its curve in ``frame``: the first one (before training), then in the
    token frame the checkpoint that served each of the ``grid_size`` token points (a point the run never reached takes
    its last checkpoint: held), in the step frame each checkpoint at a grid step."""
    checkpoints = run["checkpoints"]
    first = checkpoints[0]
    if frame == "steps":
        return [first, *(c for c in checkpoints[1:] if c.get("step_point"))]
    if frame != "tokens":
        raise ValueError(f"frame {frame!r}: expected one of {FRAMES}")
    served = {index: c for c in checkpoints for index in c.get("token_points", ())}
    if grid_size is None:
        grid_size = max(served) + 1 if served else 0
    return [first, *(served.get(index, checkpoints[-1]) for index in range(grid_size))]


def frame_curve(run: Run, frame: str, metric: str = PRIMARY, grid_size: int | None = None) -> Curve:
    """One run's curve in ``frame`` ("tokens" or "steps"): x the tokens (steps, in GRPO n=4's steps for a run with a
    ``step_scale``) of each point of `frame_points`, y its ``metric``."""
    points = frame_points(run, frame, grid_size)
    scale = run.get("step_scale", 1)  # a method whose steps hold another number of prompts: GRPO n=4's steps
    return {
        "x": [float(p["tokens"] if frame == "tokens" else p["step"] / scale) for p in points],
        "y": [float(p[metric]) for p in points],
        "tokens": [float(p["tokens"]) for p in points],
        "step": [float(p["step"]) for p in points],
    }


def mean_frame_curve(runs: Sequence[Run], frame: str, metric: str = PRIMARY, grid_size: int | None = None) -> Curve:
    """The seeds' mean curve, point by point: each grid point's x and y averaged over the runs (which share the grid,
    so their i-th points are the same grid point)."""
    curves = [frame_curve(run, frame, metric, grid_size) for run in runs]
    if len({len(c["x"]) for c in curves}) != 1:
        raise ValueError(f"runs hold different numbers of {frame} grid points: rerun them on one grid")
    return {key: [mean(column) for column in zip(*(c[key] for c in curves), strict=True)] for key in curves[0]}


# --------------------------------------------------------------------------------------------------------------------
# 2. One comparison
# --------------------------------------------------------------------------------------------------------------------


def resolved_crossing(xs: Sequence[float], ys: Sequence[float], target: float) -> tuple[float | None, bool]:
    """(x, resolved): the first x at which the piecewise-linear curve reaches ``target`` (`learning_stats.crossing`;
    None if never), and whether the two points around it are close enough to place it: both past 0 and at most
    `RESOLUTION` apart as a ratio. A curve already at the target at its first point is not resolved either."""
    x = crossing(xs, ys, target)
    if x is None:
        return None, True  # "never reached within the budget" is a resolved answer
    high = next(i for i, y in enumerate(ys) if y >= target)
    if high == 0 or xs[high - 1] <= 0:
        return x, False
    return x, xs[high] / xs[high - 1] <= RESOLUTION


def _ratio(method: tuple[float | None, bool], base: tuple[float | None, bool]) -> tuple[float | None, bool]:
    """(ratio, resolved) of two crossings; None: the method never reaches (an infinite ratio)."""
    (x, x_ok), (b, b_ok) = method, base
    if not b:
        return None, False  # the baseline never reached, or at its start (no gain): no ratio
    return (None if x is None else x / b), x_ok and b_ok


def grid_compare(base: dict[str, Curve], method: dict[str, Curve], budget: float, last_step: float) -> dict[str, Any]:
    """Every metric of `GRID_METRICS` for a method's mean curves against the baseline's, both given per frame
    (``{"tokens": curve, "steps": curve}``, `mean_frame_curve`). ``budget`` is B, the token grid's last point;
    ``last_step`` the baseline's last step (the equal-steps frame).

    Ratios come with ``<name>_resolved``; a ratio whose method never reaches its target is None (infinite)."""
    bt, mt, bs, ms = base["tokens"], method["tokens"], base["steps"], method["steps"]
    start = bt["y"][0]
    base_final = value_at(bt["x"], bt["y"], budget)
    result: dict[str, Any] = {
        "budget": budget,
        "short_of_budget": mt["x"][-1] < budget,
        "auc_delta": area_under_curve(mt["x"], mt["y"], budget, hold=True)
        - area_under_curve(bt["x"], bt["y"], budget),
    }
    for fraction in BUDGET_FRACTIONS:
        x = fraction * budget
        result[f"acc_delta_at_{round(fraction * 100)}"] = value_at(mt["x"], mt["y"], x, hold=True) - value_at(
            bt["x"], bt["y"], x
        )
    result["acc_delta_equal_steps"] = value_at(ms["x"], ms["y"], last_step, hold=True) - value_at(
        bs["x"], bs["y"], last_step
    )
    step_final = value_at(bs["x"], bs["y"], last_step)
    for fraction in GAIN_FRACTIONS:
        percent = round(fraction * 100)
        target = start + fraction * (base_final - start)
        value, ok = _ratio(
            resolved_crossing(*_until(mt, budget), target), resolved_crossing(*_until(bt, budget), target)
        )
        result[f"tokens_to_{percent}_ratio"], result[f"tokens_to_{percent}_ratio_resolved"] = value, ok
        target = bs["y"][0] + fraction * (step_final - bs["y"][0])
        value, ok = _ratio(
            resolved_crossing(*_until(ms, last_step), target), resolved_crossing(*_until(bs, last_step), target)
        )
        result[f"steps_to_{percent}_ratio"], result[f"steps_to_{percent}_ratio_resolved"] = value, ok
    return result


def _until(curve: Curve, end: float) -> tuple[list[float], list[float]]:
    """The curve's points up to the first at or past ``end`` (a crossing past the budget does not count)."""
    stop = next((i for i, x in enumerate(curve["x"]) if x >= end), len(curve["x"]) - 1)
    return curve["x"][: stop + 1], curve["y"][: stop + 1]


GRID_METRICS: tuple[str, ...] = (
    "auc_delta",
    *(f"acc_delta_at_{round(f * 100)}" for f in BUDGET_FRACTIONS),
    "acc_delta_equal_steps",
    *(f"tokens_to_{round(f * 100)}_ratio" for f in GAIN_FRACTIONS),
    *(f"steps_to_{round(f * 100)}_ratio" for f in GAIN_FRACTIONS),
)
RATIO_METRICS = tuple(name for name in GRID_METRICS if name.endswith("_ratio"))


def compare_runs(
    base_runs: Sequence[Run], method_runs: Sequence[Run], grid: dict[str, list[float]], metric: str = PRIMARY
) -> dict[str, Any]:
    """`grid_compare` of two sets of runs' mean curves on ``grid`` (``{"tokens": [...], "steps": [...]}``): B is
    the last token point, the equal-steps frame the baseline's last grid step."""
    size = len(grid["tokens"])
    base = {f: mean_frame_curve(base_runs, f, metric, size) for f in FRAMES}
    method = {f: mean_frame_curve(method_runs, f, metric, size) for f in FRAMES}
    return grid_compare(base, method, grid["tokens"][-1], grid["steps"][-1])


# --------------------------------------------------------------------------------------------------------------------
# 3. Intervals
# --------------------------------------------------------------------------------------------------------------------


def _interval(comparisons: Sequence[dict[str, Any]], name: str) -> dict[str, Any]:
    """The 95% interval of metric ``name`` over comparisons (resamples or splits). A ratio that never reached counts
    as infinite (its end None); a ratio interval is None when more than 2.5% of them were unresolved."""
    if name not in RATIO_METRICS:
        return {"ci": percentile_interval([c[name] for c in comparisons])}
    unresolved = sum(not c[f"{name}_resolved"] for c in comparisons) / len(comparisons)
    values = [math.inf if c[name] is None else c[name] for c in comparisons]
    return {"ci": percentile_interval(values) if unresolved <= 0.025 else None, "unresolved_share": unresolved}


def grid_bootstrap(
    base_runs: Sequence[Run],
    method_runs: Sequence[Run],
    grid: dict[str, list[float]],
    metric: str = PRIMARY,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """A paired bootstrap over seeds: each resample draws the seeds both ran, with replacement, and compares the
    baseline's and the method's mean curves over those same seeds. Per metric its 95% interval (`_interval`)."""
    base, mine, seeds = paired_by_seed(base_runs, method_runs)
    rng = random.Random(seed)
    comparisons = []
    for _ in range(resamples):
        sample = [rng.choice(seeds) for _ in seeds]
        comparisons.append(compare_runs([base[s] for s in sample], [mine[s] for s in sample], grid, metric))
    return {name: _interval(comparisons, name) for name in GRID_METRICS}


def every_split(count: int, limit: int = MAX_ENUMERATED_SPLITS) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every ordered pair of disjoint halves of ``count // 2`` indices out of ``count`` (with an odd count, each
    split leaves one out): C(10, 5) = 252 pairs for ten seeds. Refuses more than ``limit``."""
    half = count // 2
    total = math.comb(count, half) * math.comb(count - half, half)
    if total > limit:
        raise ValueError(f"{total} splits of {count} seeds exceed {limit}")
    for first in itertools.combinations(range(count), half):
        rest = [i for i in range(count) if i not in first]
        for second in itertools.combinations(rest, half):
            yield first, second


def grid_aa_floor(
    base_runs: Sequence[Run], grid: dict[str, list[float]], metric: str = PRIMARY
) -> dict[str, Any] | None:
    """The A/A floor: the baseline against itself over every split of its seeds into two disjoint halves
    (`every_split`, enumerated), one half as the method (unpaired). Per metric the median and the 95% range of the
    splits' values, and for ratios the shares never reached and unresolved. None with fewer than 4 seeds."""
    runs = sorted(base_runs, key=lambda run: run["seed"])
    if len(runs) < 4:
        return None
    comparisons = [
        compare_runs([runs[i] for i in first], [runs[i] for i in second], grid, metric)
        for first, second in every_split(len(runs))
    ]
    floor: dict[str, Any] = {"seeds": len(runs), "half": len(runs) // 2, "splits": len(comparisons)}
    for name in GRID_METRICS:
        values = [math.inf if c[name] is None else c[name] for c in comparisons]
        median = sorted(values)[len(values) // 2]
        floor[name] = {
            "median": None if median == math.inf else median,
            "range": percentile_interval(values),
        }
        if name in RATIO_METRICS:
            floor[name]["never_reached"] = sum(v == math.inf for v in values) / len(values)
            floor[name]["unresolved"] = sum(not c[f"{name}_resolved"] for c in comparisons) / len(comparisons)
    return floor


def comparison_with(
    base_runs: Sequence[Run], method_runs: Sequence[Run], grid: dict[str, list[float]], metric: str = PRIMARY
) -> dict[str, Any]:
    """Each metric of `compare_runs` with its paired interval (``<name>_ci``) and, for ratios, whether the point
    estimate is resolved (``<name>_resolved``; an unresolved one is reported as such, not as a number)."""
    point = compare_runs(base_runs, method_runs, grid, metric)
    intervals = grid_bootstrap(base_runs, method_runs, grid, metric)
    row: dict[str, Any] = {"comparison_token_budget": point["budget"], "short_of_budget": point["short_of_budget"]}
    for name in GRID_METRICS:
        row[name] = point[name]
        row[f"{name}_ci"] = intervals[name]["ci"]
        if name in RATIO_METRICS:
            row[f"{name}_resolved"] = point[f"{name}_resolved"]
            row[f"{name}_unresolved_share"] = intervals[name]["unresolved_share"]
    return row


# --------------------------------------------------------------------------------------------------------------------
# 4. The testbed during training
# --------------------------------------------------------------------------------------------------------------------


# The testbed's bounds during the baseline's runs (benchmarks/results/columns/README.md): a rewarded held-out sample is
# a real positive while at most this share of them has a flawed chain at every checkpoint, and the baseline teaches
# every hard rule at least this much held-out correct-chain accuracy by the end of its run.
FLAWED_SHARE_BOUND = 0.15
HARD_GAIN_BOUND = 0.05


def flawed_shares(runs: Sequence[Run]) -> dict[str, Any]:
    """The share of rewarded held-out samples whose chain is flawed, at every checkpoint of every run: the largest
    over checkpoints and seeds, the seeds' mean at the first and last checkpoint, per run its largest, and per label
    (rule) the largest where the checkpoints recorded it."""
    per_run = {
        run["seed"]: [
            c["flawed_rewarded_share"] for c in run["checkpoints"] if c.get("flawed_rewarded_share") is not None
        ]
        for run in runs
    }
    if not any(per_run.values()):
        return {"max": None}
    by_label: dict[str, float] = {}
    for run in runs:
        for c in run["checkpoints"]:
            for label, share in (c.get("flawed_rewarded_share_by_label") or {}).items():
                if share is not None:
                    by_label[label] = max(share, by_label.get(label, 0.0))
    return {
        "max": max(max(shares) for shares in per_run.values() if shares),
        "first": mean([shares[0] for shares in per_run.values() if shares]),
        "last": mean([shares[-1] for shares in per_run.values() if shares]),
        "max_per_seed": {str(seed): max(shares) for seed, shares in per_run.items() if shares},
        "max_by_label": dict(sorted(by_label.items())),
    }


def label_gain(
    runs: Sequence[Run], labels: Sequence[str], key: str = "chain_accuracy_by_label", seed: int = 0
) -> dict[str, dict[str, Any]]:
    """Per label (a hard rule): each run's ``key`` value at its last checkpoint minus before training, the mean over
    seeds with a bootstrap 95% interval, and per seed."""
    rng = random.Random(seed)
    result = {}
    for label in labels:
        gains = [run["checkpoints"][-1][key][label] - run["checkpoints"][0][key][label] for run in runs]
        resampled = [mean([rng.choice(gains) for _ in gains]) for _ in range(BOOTSTRAP_RESAMPLES)]
        result[label] = {"gain": mean(gains), "ci": percentile_interval(resampled), "per_seed": gains}
    return result


def testbed_during_training(flawed: dict[str, Any], hard_gain: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Whether the baseline's runs kept the testbed's bounds, from `flawed_shares` and `label_gain` of its runs: the
    seeds whose flawed share passed `FLAWED_SHARE_BOUND` at some checkpoint (in those runs the reward stopped
    measuring the skill), the hard rules whose mean gain fell short of `HARD_GAIN_BOUND`, and whether both bounds held
    (None where no flawed share was measured)."""
    seeds_over = sorted(
        int(seed) for seed, share in (flawed.get("max_per_seed") or {}).items() if share > FLAWED_SHARE_BOUND
    )
    rules_short = [label for label, gain in hard_gain.items() if gain["gain"] < HARD_GAIN_BOUND]
    return {
        "flawed_share_bound": FLAWED_SHARE_BOUND,
        "flawed_share_max": flawed.get("max"),
        "seeds_over_flawed_bound": seeds_over,
        "hard_gain_bound": HARD_GAIN_BOUND,
        "rules_under_gain_bound": rules_short,
        # None: nothing failed, but no checkpoint had a rewarded sample whose chain could be judged
        "holds": False if seeds_over or rules_short else (None if flawed.get("max") is None else True),
    }
