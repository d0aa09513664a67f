"""The columns task's measures split by what they measure, and read per seed and per held-out prompt, so that
`paired_stats` can give each comparison an interval over both seeds and prompts.

- **skill** (`skill_accuracy`, the primary metric): held-out correct-chain accuracy on the hard rules, the rules the
  training prompts are about (7/8 of them);
- **retention** (`retention_accuracy`): the same on the easy rules, which RL barely samples and which fall during
  training;
- **mix** (`chain_accuracy`, the metric before): the four rules' mean, which is the mean of the two above.

A run's held-out evaluation records, per checkpoint, each prompt's count of correct chains out of the samples drawn
(``chain_correct``; the prompts come rule by rule, `columns_heldout`). Every measure here is linear in those counts:
the accuracy at a checkpoint is a weighted mean over prompts, and a curve's area is a weighted sum over checkpoints
(`trapezoid_weights`). So a comparison's paired difference splits exactly into one value per seed and prompt
(`prompt_differences`), whose seeds-by-prompts array `paired_stats.two_way_estimate` reads.

Frames (`FRAMES`): ``budget``, the area over generated tokens [0, B] on the shared grid's checkpoints (B the token
grid's last point, GRPO n=4's budget); ``whole``, the area over tokens [0, T] on every checkpoint, T the fewest tokens
any run of either method had generated at its last checkpoint (the paper's frame: the whole runs, neither curve
extrapolated); ``equal_steps``, the value at the partner's last grid step (in GRPO n=4's steps).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
from grid_stats import BOOTSTRAP_RESAMPLES, GAIN_FRACTIONS, frame_points, resolved_crossing
from learning_stats import mean, paired_by_seed, percentile_interval

Run = dict[str, Any]
MEASURES = ("skill", "retention", "mix")
COLUMNS = {"skill": "skill_accuracy", "retention": "retention_accuracy", "mix": "chain_accuracy"}
FRAMES = ("budget", "whole", "equal_steps")


def heldout_strata(report: dict[str, Any]) -> dict[str, list[int]]:
    """Rule -> the held-out prompts' indices, as `columns_heldout` lays them out (rule by rule, the same number each),
    checked against the per-rule accuracy the report's first checkpoint recorded."""
    from testbeds.columns.problems import RULES

    first = report["runs"][0]["checkpoints"][0]
    counts, samples = first["chain_correct"], report["settings"]["heldout_samples"]
    per_rule = len(counts) // len(RULES)
    strata = {rule: list(range(i * per_rule, (i + 1) * per_rule)) for i, rule in enumerate(RULES)}
    for rule, indices in strata.items():
        found = sum(counts[i] for i in indices) / (len(indices) * samples)
        if not math.isclose(found, first["chain_accuracy_by_label"][rule], abs_tol=1e-9):
            raise ValueError(f"held-out prompts of rule {rule!r} are not where columns_heldout puts them")
    return strata


def measure_strata(strata: dict[str, list[int]]) -> dict[str, list[list[int]]]:
    """Measure -> its rules' prompt lists (one stratum per rule, each weighed equally)."""
    from testbeds.columns.problems import EASY_RULES, HARD_RULES

    return {
        "skill": [strata[r] for r in HARD_RULES],
        "retention": [strata[r] for r in EASY_RULES],
        "mix": [strata[r] for r in strata],
    }


def with_skill_and_retention(runs: Sequence[Run]) -> list[Run]:
    """The runs with ``skill_accuracy`` and ``retention_accuracy`` on every checkpoint: the mean of the hard (easy)
    rules' ``chain_accuracy_by_label``."""
    from testbeds.columns.problems import EASY_RULES, HARD_RULES

    def split(checkpoint: dict[str, Any]) -> dict[str, Any]:
        by_rule = checkpoint["chain_accuracy_by_label"]
        return checkpoint | {
            "skill_accuracy": mean([by_rule[r] for r in HARD_RULES]),
            "retention_accuracy": mean([by_rule[r] for r in EASY_RULES]),
        }

    return [run | {"checkpoints": [split(c) for c in run["checkpoints"]]} for run in runs]


def retention_drop(runs: Sequence[Run]) -> dict[str, Any]:
    """How far the easy rules fall during training: per seed, retention before training minus its lowest value at
    any checkpoint; the mean over seeds with its t interval, and the step of the seeds' mean lowest point."""
    from paired_stats import t_test

    drops, lowest_steps = [], []
    for run in runs:
        values = [c["retention_accuracy"] for c in run["checkpoints"]]
        low = min(range(len(values)), key=values.__getitem__)
        drops.append(values[0] - values[low])
        lowest_steps.append(run["checkpoints"][low]["step"])
    return {
        "before": mean([run["checkpoints"][0]["retention_accuracy"] for run in runs]),
        "drop": t_test(drops) if len(drops) > 1 else {"estimate": drops[0]},
        "lowest_step_mean": mean(lowest_steps),
        "per_seed": drops,
    }


def trapezoid_weights(xs: Sequence[float], end: float, hold: bool = False) -> np.ndarray:
    """w such that w @ ys is the mean over x in [0, end] of the piecewise-linear curve through (xs, ys), held at ys[0]
    before xs[0] and, with ``hold``, at ys[-1] past xs[-1] (`learning_stats.area_under_curve`, as a linear map)."""
    x = np.asarray(xs, dtype=float)
    if end <= 0 or (x[-1] < end and not hold) or np.any(np.diff(x) < 0):
        raise ValueError(f"need non-decreasing xs reaching end = {end} (or hold); got {x[0]} .. {x[-1]}")
    w = np.zeros(len(x))
    w[0] += min(x[0], end)  # flat at ys[0] from 0 to xs[0]
    for i in range(1, len(x)):
        left, right = x[i - 1], x[i]
        if left >= end:
            break
        if right <= end:
            w[i - 1] += (right - left) / 2
            w[i] += (right - left) / 2
            continue
        # the segment crosses end: y(end) = (1 - f) y_left + f y_right over a width of end - left
        width, f = end - left, (end - left) / (right - left)
        w[i - 1] += width * (2 - f) / 2
        w[i] += width * f / 2
    if x[-1] < end:
        w[-1] += end - x[-1]
    return w / end


def _curve_points(run: Run, frame: str, grid_size: int, x: str = "tokens") -> list[dict[str, Any]]:
    """The checkpoints a frame reads: the shared grid's token frame for ``budget``; every checkpoint, by ``x``
    (tokens, or another cumulative field such as `gpu_time`'s GPU-seconds), for ``whole``."""
    if frame == "budget":
        return frame_points(run, "tokens", grid_size)
    if frame == "whole":
        return sorted(run["checkpoints"], key=lambda c: (c[x], c["step"]))
    raise ValueError(f"frame {frame!r}: expected budget or whole")


def prompt_values(run: Run, frame: str, end: float, samples: int, grid_size: int, x: str = "tokens") -> np.ndarray:
    """One run's per-prompt value in ``frame``: the area of its correct-chain rate over tokens [0, ``end``] (budget,
    whole; over ``x`` for whole), or its correct-chain rate at step ``end`` in GRPO n=4's steps (equal_steps, held
    past its last step)."""
    if frame == "equal_steps":
        points = frame_points(run, "steps")
        xs = [p["step"] / run.get("step_scale", 1) for p in points]
        w = _value_weights(xs, end)
    else:
        axis = x if frame == "whole" else "tokens"  # the budget frame is read on the shared token grid
        points = _curve_points(run, frame, grid_size, axis)
        w = trapezoid_weights([p[axis] for p in points], end, hold=True)
    counts = np.array([p["chain_correct"] for p in points], dtype=float) / samples
    return w @ counts


def _value_weights(xs: Sequence[float], x: float) -> np.ndarray:
    """w such that w @ ys is the piecewise-linear curve's value at x (held at the ends)."""
    w = np.zeros(len(xs))
    if x <= xs[0]:
        w[0] = 1.0
    elif x >= xs[-1]:
        w[-1] = 1.0
    else:
        i = next(k for k, v in enumerate(xs) if v >= x)
        f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        w[i - 1], w[i] = 1 - f, f
    return w


def frame_end(
    base_runs: Sequence[Run], method_runs: Sequence[Run], frame: str, grid: dict[str, list[float]], x: str = "tokens"
) -> float:
    """B (budget), T (whole: the fewest tokens, or ``x``, any run of either method reached at its last checkpoint)
    or the partner's last grid step (equal_steps)."""
    if frame == "budget":
        return float(grid["tokens"][-1])
    if frame == "whole":
        return float(min(run["checkpoints"][-1][x] for run in (*base_runs, *method_runs)))
    return float(grid["steps"][-1])


def prompt_differences(
    base_runs: Sequence[Run],
    method_runs: Sequence[Run],
    frame: str,
    end: float,
    samples: int,
    grid_size: int,
    x: str = "tokens",
) -> tuple[list[int], np.ndarray]:
    """The seeds both ran, and per seed (row) and held-out prompt (column) the method's value minus the partner's
    (`prompt_values`; ``x`` the whole frame's axis)."""
    base, mine, seeds = paired_by_seed(base_runs, method_runs)
    rows = [
        prompt_values(mine[s], frame, end, samples, grid_size, x)
        - prompt_values(base[s], frame, end, samples, grid_size, x)
        for s in seeds
    ]
    return seeds, np.array(rows)


def restrict(values: np.ndarray, strata: Sequence[Sequence[int]]) -> tuple[np.ndarray, list[list[int]]]:
    """The columns (prompts) of ``values`` that ``strata`` name, and the strata renumbered over those columns."""
    columns = [i for stratum in strata for i in stratum]
    renumbered, start = [], 0
    for stratum in strata:
        renumbered.append(list(range(start, start + len(stratum))))
        start += len(stratum)
    return values[:, columns], renumbered


def aa_floor(
    base_runs: Sequence[Run], frame: str, end: float, samples: int, grid_size: int, strata: Sequence[Sequence[int]]
) -> list[float | None]:
    """The partner against itself: its seeds split into two halves in every way (5 vs 5 for ten seeds, unpaired),
    the 95% range of one half's mean minus the other's (a description of seed-to-seed range, not the test)."""
    from grid_stats import every_split
    from paired_stats import stratum_weights

    runs = sorted(base_runs, key=lambda run: run["seed"])
    if len(runs) < 4:
        return [None, None]
    values, renumbered = restrict(
        np.array([prompt_values(run, frame, end, samples, grid_size) for run in runs]), strata
    )
    per_seed = values @ stratum_weights(renumbered, values.shape[1])
    return percentile_interval(
        [per_seed[list(a)].mean() - per_seed[list(b)].mean() for a, b in every_split(len(runs))]
    )


# --------------------------------------------------------------------------------------------------------------------
# The paper's frame: tokens and steps to a share of the partner's whole-run gain
# --------------------------------------------------------------------------------------------------------------------


def _whole_curve(runs: Sequence[Run], column: str, metric: str, axis: np.ndarray) -> np.ndarray:
    """The seeds' mean of ``metric`` on ``axis`` (tokens, or GRPO n=4's steps), each run interpolated over all its
    checkpoints."""
    curves = []
    for run in runs:
        points = sorted(run["checkpoints"], key=lambda c: (c["tokens"], c["step"]))
        scale = run.get("step_scale", 1) if column == "step" else 1
        curves.append(np.interp(axis, [p[column] / scale for p in points], [p[metric] for p in points]))
    return np.mean(curves, axis=0)


def _axis(runs: Sequence[Run], column: str) -> np.ndarray:
    """Every x at which any of the runs was evaluated, up to the shortest run's end (no run is extrapolated)."""
    scale = {id(run): run.get("step_scale", 1) if column == "step" else 1 for run in runs}
    end = min(run["checkpoints"][-1][column] / scale[id(run)] for run in runs)
    xs = {c[column] / scale[id(run)] for run in runs for c in run["checkpoints"]}
    return np.array(sorted(x for x in xs if x <= end))


RATIO_FRAMES = (("tokens", "tokens"), ("steps", "step"))  # (frame, checkpoint field of its x axis)


def whole_run_ratios(
    base_runs: Sequence[Run], method_runs: Sequence[Run], metric: str, frames: Sequence[tuple[str, str]] = RATIO_FRAMES
) -> dict[str, Any]:
    """Tokens and steps (or the x of each of ``frames``) for the method to reach 50/75/90% of the partner's whole-run
    gain in ``metric`` (its mean curve's last value minus its first), over the partner's own: (ratio, resolved) per
    share and frame, a ratio None when the method never reaches the target within its run."""
    result: dict[str, Any] = {}
    for frame, column in frames:
        base_axis, method_axis = _axis(base_runs, column), _axis(method_runs, column)
        base_curve = _whole_curve(base_runs, column, metric, base_axis)
        method_curve = _whole_curve(method_runs, column, metric, method_axis)
        start, final = base_curve[0], base_curve[-1]
        for fraction in GAIN_FRACTIONS:
            target = start + fraction * (final - start)
            b, b_ok = resolved_crossing(base_axis.tolist(), base_curve.tolist(), target)
            m, m_ok = resolved_crossing(method_axis.tolist(), method_curve.tolist(), target)
            name = f"{frame}_to_{round(fraction * 100)}"
            if final <= start or b is None:
                result[name] = (None, False)
            else:
                result[name] = (None if m is None else m / b, b_ok and m_ok)
    return result


def whole_run_ratio_intervals(
    base_runs: Sequence[Run],
    method_runs: Sequence[Run],
    metric: str,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    frames: Sequence[tuple[str, str]] = RATIO_FRAMES,
) -> dict[str, dict[str, Any]]:
    """`whole_run_ratios` with a paired percentile bootstrap over seeds (an effect size's interval, not a test): per
    ratio its point, whether resolved, and its 95% interval (None where more than 2.5% of resamples are unresolved;
    an end None: never reached)."""
    base, mine, seeds = paired_by_seed(base_runs, method_runs)
    point = whole_run_ratios([base[s] for s in seeds], [mine[s] for s in seeds], metric, frames)
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        sample = [rng.choice(seeds) for _ in seeds]
        draws.append(whole_run_ratios([base[s] for s in sample], [mine[s] for s in sample], metric, frames))
    result = {}
    for name, (value, resolved) in point.items():
        unresolved = sum(not d[name][1] for d in draws) / resamples
        values = [math.inf if d[name][0] is None else d[name][0] for d in draws]
        result[name] = {
            "ratio": value,
            "resolved": resolved,
            "ci": percentile_interval(values) if unresolved <= 0.025 else None,
            "unresolved_share": unresolved,
        }
    return result
