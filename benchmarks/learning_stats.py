"""The learning benchmark's statistics: accuracy curves against generated tokens, compared with GRPO n=4's.

Pure functions on plain lists and dicts (the runs as `learning_per_token.py` writes them to JSON), read top to
bottom:

1. Curves. A run is a dict with ``seed`` and ``checkpoints``, each checkpoint a dict with ``step``, ``tokens``,
   ``seconds`` and ``accuracy`` (held-out sampled accuracy). A curve is a dict of equally long columns of those
   names. `crossing` (first x at which a curve reaches a value), `value_at`, `mean_curve` (seed-averaged),
   `up_to_budget` (cut at a token budget) and `area_under_curve` (mean accuracy over [0, budget]).
2. One comparison of a method's curve with the baseline's (`compare`), the numbers every other function resamples:

   - the budget B is the tokens at the last checkpoint of the baseline's *seed-averaged* curve (the same budget
     `summarise` cuts token-matched curves at);
   - **auc_delta** (primary): the method's mean accuracy over tokens in [0, B] minus the baseline's, each read off
     its seed-averaged curve (`area_under_curve`);
   - acc_delta_at_25/50/100: the accuracy difference at 25%, 50% and 100% of B;
   - acc_delta_equal_steps: the accuracy difference at the baseline's last step (the method's curve read by steps,
     not cut at B): the paper's "better final performance" frame, the same update group trained as long;
   - tokens_to_50/75/90_ratio and steps_to_50/75/90_ratio: the tokens (optimizer steps) the method needs to reach
     50%, 75% and 90% of GRPO's gain, over GRPO's own, where the gain is the baseline curve's final accuracy minus its
     first (the accuracy before training) and the method's curve is read only up to B;
   - tokens_to_final_ratio: the same for 100% of the gain, i.e. the baseline's final accuracy (the benchmark's first
     headline, kept as a secondary: its target sits on the flat, noisy end of the curve).

   A method whose seed-averaged curve ends before B (it generated fewer tokens than the baseline) keeps its last
   accuracy up to B (`area_under_curve(..., hold=True)`): it is credited with what it had when it stopped, no more.
   ``short_of_budget`` says when that happened. A ratio whose method never reaches its target within B is None
   (infinite in the bootstrap).
3. Intervals. `paired_bootstrap_comparison`: resample seeds with replacement, the same seeds for the method and the
   baseline, and recompute `compare` on each resample's seed-averaged curves (and so its own budget and gain);
   `percentile_interval` gives the central 95%. `late_gain`: how much the baseline still gains after 60% of its
   steps, a check that the runs are long enough. `aa_floor`: the same comparison of the baseline against itself,
   its seeds split at random into two disjoint halves (unpaired), many times: the spread of each metric when nothing
   differs, the floor below which a method's difference is noise. (`paired_bootstrap` is the older interval of the
   tokens and seconds ratios to the final accuracy, and of the final accuracy itself.)
4. Held-out samples beyond accuracy, at one checkpoint (`heldout_at`): pass@k (`trl_ada.tools.heldout.mean_pass_at_k`,
   the unbiased estimator, from each prompt's count of correct samples), accuracy per label (level, rule) and the
   policy's mean token entropy, as the evaluation recorded them (`trl_ada.tools.heldout`, next to that evaluation). And
   the same measures compared with the baseline's in two frames, equal tokens (B) and equal steps (the baseline's
   last step), each seed's measure read off its checkpoints by linear interpolation (`heldout_comparison`, with a
   paired bootstrap interval; `heldout_aa_floor`, the baseline split against itself).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

from trl_ada.tools.heldout import PASS_AT_K, mean_pass_at_k

Curve = dict[str, list[float]]  # columns "step", "tokens", "seconds", "accuracy" (and no others)
Run = dict[str, Any]  # one run as the benchmark's JSON holds it: "seed", "checkpoints", ...

CURVE_COLUMNS = ("step", "tokens", "seconds", "accuracy")
BOOTSTRAP_RESAMPLES = 2000
AA_SPLITS = 2000
GAIN_FRACTIONS = (0.5, 0.75, 0.9)  # of the baseline's gain: tokens and steps to reach each
BUDGET_FRACTIONS = (0.25, 0.5, 1.0)  # of the baseline's token budget: the accuracy difference at each


# --------------------------------------------------------------------------------------------------------------------
# 1. Curves
# --------------------------------------------------------------------------------------------------------------------


def crossing(xs: Sequence[float], accuracies: Sequence[float], target: float) -> float | None:
    """The x at which the piecewise-linear curve (xs, accuracies) first reaches ``target``; None if it never does.

    xs must be non-decreasing (tokens or seconds). A curve that starts at or above the target crosses at xs[0].
    """
    if len(xs) != len(accuracies) or not xs:
        raise ValueError(f"need equally long, non-empty curves; got {len(xs)} xs and {len(accuracies)} accuracies")
    if accuracies[0] >= target:
        return float(xs[0])
    for i in range(1, len(xs)):
        if accuracies[i] >= target:
            fraction = (target - accuracies[i - 1]) / (accuracies[i] - accuracies[i - 1])
            return xs[i - 1] + fraction * (xs[i] - xs[i - 1])
    return None


def value_at(xs: Sequence[float], ys: Sequence[float], x: float, hold: bool = False) -> float:
    """The piecewise-linear curve (xs, ys) at ``x``: ys[0] before xs[0]; past xs[-1], ys[-1] with ``hold``, else an
    error."""
    if x > xs[-1]:
        if not hold:
            raise ValueError(f"the curve ends at x = {xs[-1]}, before {x}")
        return ys[-1]
    if x <= xs[0]:
        return ys[0]
    end = next(i for i, v in enumerate(xs) if v >= x)
    if xs[end] == x:
        return ys[end]
    return ys[end - 1] + (ys[end] - ys[end - 1]) * (x - xs[end - 1]) / (xs[end] - xs[end - 1])


def checkpoint_curve(run: Run) -> Curve:
    """One run's checkpoints as a curve (its other checkpoint fields, e.g. per-prompt counts, left out)."""
    return {key: [c[key] for c in run["checkpoints"]] for key in CURVE_COLUMNS}


def mean_curve(runs: Sequence[Run]) -> Curve:
    """Average the checkpoints of several seeds' runs of one method, step by step (they evaluate at the same steps)."""
    steps = [[c["step"] for c in run["checkpoints"]] for run in runs]
    if any(s != steps[0] for s in steps):
        raise ValueError("runs evaluated at different steps; rerun them with the same --steps and --eval-every")
    curve: Curve = {"step": list(steps[0])}
    for key in ("tokens", "seconds", "accuracy"):
        columns = zip(*[[c[key] for c in run["checkpoints"]] for run in runs], strict=True)
        curve[key] = [sum(column) / len(column) for column in columns]
    return curve


def up_to_budget(curve: Curve, budget: float | None) -> Curve:
    """The curve (columns step, tokens, seconds, accuracy) cut at ``budget`` tokens: the points below it and one
    interpolated at it. A curve that never reaches the budget, or ``budget=None``, comes back whole."""
    tokens = curve["tokens"]
    if budget is None or tokens[-1] <= budget:
        return {key: list(values) for key, values in curve.items()}
    end = next(i for i, x in enumerate(tokens) if x >= budget)
    if end == 0 or tokens[end] == budget:
        return {key: list(values[: end + 1]) for key, values in curve.items()}
    cut = {key: list(values[:end]) for key, values in curve.items()}
    fraction = (budget - tokens[end - 1]) / (tokens[end] - tokens[end - 1])
    for key, values in curve.items():
        cut[key].append(values[end - 1] + fraction * (values[end] - values[end - 1]))
    return cut


def area_under_curve(xs: Sequence[float], accuracies: Sequence[float], budget: float, hold: bool = False) -> float:
    """Mean accuracy over x in [0, budget] of the piecewise-linear curve (xs, accuracies), held at accuracies[0]
    before xs[0] (the accuracy before training, measured at x = 0 when xs[0] = 0).

    A curve that ends before ``budget`` is an error, or, with ``hold``, is held at its last accuracy up to it."""
    if budget <= 0 or (xs[-1] < budget and not hold):
        raise ValueError(f"the curve ends at x = {xs[-1]}, before the budget {budget}")
    area, previous_x, previous_y = 0.0, 0.0, accuracies[0]
    for x, y in zip(xs, accuracies, strict=True):
        if x >= budget:
            y_at_budget = previous_y + (y - previous_y) * (budget - previous_x) / (x - previous_x)
            area += (budget - previous_x) * (previous_y + y_at_budget) / 2
            return area / budget
        area += (x - previous_x) * (previous_y + y) / 2
        previous_x, previous_y = x, y
    area += (budget - previous_x) * previous_y  # only with hold: flat at the last accuracy
    return area / budget


# --------------------------------------------------------------------------------------------------------------------
# Small summaries over seeds
# --------------------------------------------------------------------------------------------------------------------


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base; None when either is missing or base is 0."""
    return None if value is None or not base else value / base


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean and sample standard deviation of the values that exist, and how many do not (a seed that never reached
    the target)."""
    present = [v for v in values if v is not None]
    average = sum(present) / len(present) if present else None
    std = None
    if len(present) > 1:
        std = (sum((v - average) ** 2 for v in present) / (len(present) - 1)) ** 0.5
    return {"mean": average, "std": std, "missing": len(values) - len(present), "values": list(values)}


# --------------------------------------------------------------------------------------------------------------------
# 2. One comparison of a method with the baseline
# --------------------------------------------------------------------------------------------------------------------


def _percent(fraction: float) -> int:
    return round(fraction * 100)


COMPARISON_METRICS: tuple[str, ...] = (
    "auc_delta",
    *(f"acc_delta_at_{_percent(f)}" for f in BUDGET_FRACTIONS),
    "acc_delta_equal_steps",
    *(f"tokens_to_{_percent(f)}_ratio" for f in GAIN_FRACTIONS),
    *(f"steps_to_{_percent(f)}_ratio" for f in GAIN_FRACTIONS),
    "tokens_to_final_ratio",
)
RATIO_METRICS = tuple(name for name in COMPARISON_METRICS if name.endswith("_ratio"))


def compare(base: Curve, curve: Curve) -> dict[str, Any]:
    """Every metric of `COMPARISON_METRICS` for a method's curve against the baseline's (both seed-averaged).

    The budget is the baseline curve's last tokens; see the module's docstring for each definition. Ratios whose
    method never reaches the target within the budget are None; a method that stops short of the budget (of the
    baseline's steps, for ``acc_delta_equal_steps``) is held at its last accuracy (``short_of_budget`` True)."""
    budget = base["tokens"][-1]
    start, final = base["accuracy"][0], base["accuracy"][-1]
    cut = up_to_budget(curve, budget)
    result: dict[str, Any] = {
        "budget": budget,
        "short_of_budget": curve["tokens"][-1] < budget,
        "auc_delta": area_under_curve(cut["tokens"], cut["accuracy"], budget, hold=True)
        - area_under_curve(base["tokens"], base["accuracy"], budget),
    }
    for fraction in BUDGET_FRACTIONS:
        x = fraction * budget
        result[f"acc_delta_at_{_percent(fraction)}"] = value_at(
            cut["tokens"], cut["accuracy"], x, hold=True
        ) - value_at(base["tokens"], base["accuracy"], x)
    result["acc_delta_equal_steps"] = value_at(curve["step"], curve["accuracy"], base["step"][-1], hold=True) - final
    for fraction in GAIN_FRACTIONS:
        target = start + fraction * (final - start)
        for x in ("tokens", "steps"):
            column = "step" if x == "steps" else x
            result[f"{x}_to_{_percent(fraction)}_ratio"] = ratio(
                crossing(cut[column], cut["accuracy"], target), crossing(base[column], base["accuracy"], target)
            )
    result["tokens_to_final_ratio"] = ratio(
        crossing(cut["tokens"], cut["accuracy"], final), crossing(base["tokens"], base["accuracy"], final)
    )
    return result


# --------------------------------------------------------------------------------------------------------------------
# 3. Intervals: paired bootstrap over seeds, and the A/A floor
# --------------------------------------------------------------------------------------------------------------------


def percentile_interval(values: Sequence[float], level: float = 0.95) -> list[float | None]:
    """The central ``level`` interval of ``values`` by the percentile method (the order statistics at the
    (1 - level) / 2 and (1 + level) / 2 quantiles, rounded outwards); inf (a resample that never reached the target)
    is reported as None."""
    ordered = sorted(values)
    low = ordered[math.floor((1 - level) / 2 * (len(ordered) - 1))]
    high = ordered[math.ceil((1 + level) / 2 * (len(ordered) - 1))]
    return [None if v == float("inf") else v for v in (low, high)]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    low, high = ordered[middle - 1], ordered[middle]
    return low if low == high else (low + high) / 2


def paired_by_seed(base_runs: Sequence[Run], method_runs: Sequence[Run]) -> tuple[dict, dict, list[int]]:
    """The baseline's and the method's runs keyed by seed, and the seeds both have, sorted: the pairs every paired
    statistic here and in `grid_stats` is computed over."""
    base = {run["seed"]: run for run in base_runs}
    mine = {run["seed"]: run for run in method_runs}
    seeds = sorted(set(base) & set(mine))
    if not seeds:
        raise ValueError("the baseline and the method share no seed")
    return base, mine, seeds


def _resampled_metrics(comparisons: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """Each metric's values over resamples, a ratio that never reached (None) as inf."""
    return {name: [float("inf") if c[name] is None else c[name] for c in comparisons] for name in COMPARISON_METRICS}


def paired_bootstrap_comparison(
    base_runs: Sequence[Run], method_runs: Sequence[Run], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> dict[str, list[float | None]]:
    """95% intervals (``<metric>_ci``) of every metric of `compare` by a paired bootstrap over seeds: each resample
    draws the seeds the two methods share with replacement, averages the baseline's and the method's runs of those
    same seeds (so that the prompts and sampling a seed shares between methods cancel out) and compares the two
    curves, with that resample's budget and gain. A ratio's upper end is None when more than 2.5% of the resamples
    never reach the target."""
    base, mine, seeds = paired_by_seed(base_runs, method_runs)
    rng = random.Random(seed)
    comparisons = []
    for _ in range(resamples):
        sample = [rng.choice(seeds) for _ in seeds]
        comparisons.append(compare(mean_curve([base[s] for s in sample]), mean_curve([mine[s] for s in sample])))
    return {f"{name}_ci": percentile_interval(values) for name, values in _resampled_metrics(comparisons).items()}


def _halves(count: int, splits: int, rng: random.Random) -> Iterator[tuple[list[int], list[int]]]:
    """``splits`` random splits of the indices 0..count - 1 into two disjoint halves of count // 2 each (an odd one
    out is left out of that split), drawn with ``rng``."""
    half = count // 2
    for _ in range(splits):
        order = list(range(count))
        rng.shuffle(order)
        yield order[:half], order[half : 2 * half]


def _bootstrap_mean_interval(values: Sequence[float], resamples: int, rng: random.Random) -> list[float | None]:
    """The 95% interval (`percentile_interval`) of the mean of ``values`` resampled with replacement, with ``rng``."""
    return percentile_interval([mean([rng.choice(values) for _ in values]) for _ in range(resamples)])


def aa_floor(base_runs: Sequence[Run], splits: int = AA_SPLITS, seed: int = 0) -> dict[str, Any] | None:
    """The A/A floor: the baseline compared with itself. Its seeds are shuffled and split into two disjoint halves of
    len // 2 seeds (an odd one out is left out of that split), one half taken as the method, ``splits`` times; each
    metric of `compare` is computed on the halves' seed-averaged curves. Unpaired (no seed is on both sides), so the
    spread is wider than a paired comparison's: a noise floor, not a test.

    Returns, per metric, the median, the 95% range (`percentile_interval`) and, for ratios, the share of splits that
    never reach the target; None with fewer than 4 seeds (halves of one seed say nothing about seed-to-seed spread).
    """
    runs = sorted(base_runs, key=lambda run: run["seed"])
    if len(runs) < 4:
        return None
    comparisons = [
        compare(mean_curve([runs[i] for i in first]), mean_curve([runs[i] for i in second]))
        for first, second in _halves(len(runs), splits, random.Random(seed))
    ]
    floor: dict[str, Any] = {"seeds": len(runs), "half": len(runs) // 2, "splits": splits}
    for name, values in _resampled_metrics(comparisons).items():
        median = _median(values)
        floor[name] = {
            "median": None if median == float("inf") else median,
            "range": percentile_interval(values),
            "never_reached": sum(v == float("inf") for v in values) / len(values) if name in RATIO_METRICS else None,
        }
    return floor


def late_gain(
    base_runs: Sequence[Run],
    fraction: float = 0.6,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    metric: str = "accuracy",
) -> dict[str, Any]:
    """Whether the baseline is still improving late in its run: each seed's accuracy at its last step minus its
    accuracy at ``fraction`` of that step (linearly interpolated between checkpoints), the mean over seeds and a
    bootstrap 95% interval over seeds. An interval above 0: the baseline was still improving when the runs ended; one
    around 0: it had flattened, and a method's lead at the end is read on a plateau."""
    gains = []
    for run in base_runs:
        steps = [c["step"] for c in run["checkpoints"]]
        accuracies = [c[metric] for c in run["checkpoints"]]
        gains.append(accuracies[-1] - value_at(steps, accuracies, fraction * steps[-1]))
    interval = _bootstrap_mean_interval(gains, resamples, random.Random(seed))
    return {"fraction": fraction, "gain": mean(gains), "gain_ci": interval, "per_seed": gains}


def paired_bootstrap(
    base_runs: Sequence[Run],
    method_runs: Sequence[Run],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    match_tokens: bool = False,
) -> dict[str, list[float | None]]:
    """95% intervals for a method's tokens and seconds ratios to the baseline and for its final accuracy, by a paired
    bootstrap over seeds: each resample draws seeds with replacement and takes the baseline's and the method's runs of
    those same seeds, so that the prompts and sampling a seed shares between methods cancel out. Within a resample
    the ratio is computed as for the point estimate (crossings of the seed-averaged curves at the baseline's
    seed-averaged final accuracy; with ``match_tokens`` the method's curve is cut at the resample's baseline token
    budget, as in `summarise`); a method that never reaches the target counts as an infinite ratio."""
    base, mine, seeds = paired_by_seed(base_runs, method_runs)
    rng = random.Random(seed)
    ratios: dict[str, list[float]] = {"tokens": [], "seconds": []}
    finals = []
    for _ in range(resamples):
        sample = [rng.choice(seeds) for _ in seeds]
        base_curve = mean_curve([base[s] for s in sample])
        curve = up_to_budget(mean_curve([mine[s] for s in sample]), base_curve["tokens"][-1] if match_tokens else None)
        target = base_curve["accuracy"][-1]
        for x, values in ratios.items():
            value = ratio(
                crossing(curve[x], curve["accuracy"], target), crossing(base_curve[x], base_curve["accuracy"], target)
            )
            values.append(float("inf") if value is None else value)
        finals.append(curve["accuracy"][-1])
    return {
        "tokens_ratio_ci": percentile_interval(ratios["tokens"]),
        "seconds_ratio_ci": percentile_interval(ratios["seconds"]),
        "final_accuracy_ci": percentile_interval(finals),
    }


# --------------------------------------------------------------------------------------------------------------------
# 4. Held-out samples beyond accuracy
# --------------------------------------------------------------------------------------------------------------------


def _seed_mean(values: Sequence[float | None]) -> float | None:
    """The mean, or None if any run lacks the value (a report from before it was recorded)."""
    return None if not values or any(v is None for v in values) else mean(values)


def heldout_at(runs: Sequence[Run], step: float, num_samples: int) -> dict[str, Any]:
    """Seed means, at each run's last checkpoint at or before ``step``, of what the held-out evaluation recorded
    besides accuracy: pass@k for k in `PASS_AT_K` from the per-prompt counts of correct samples (``num_samples`` per
    prompt; None for k > num_samples), accuracy per label and the mean token entropy (also before training). A measure
    that some run did not record (reports from before it existed, entropy turned off) is None."""
    at = []
    for run in runs:
        checkpoints = [c for c in run["checkpoints"] if c["step"] <= step]
        at.append(checkpoints[-1] if checkpoints else run["checkpoints"][0])
    measures = [checkpoint_measures(c, num_samples) for c in at]
    pass_at = {str(k): _seed_mean([m.get(f"pass@{k}") for m in measures]) for k in PASS_AT_K}
    prefix = "accuracy:"
    labels = [{name.removeprefix(prefix): v for name, v in m.items() if name.startswith(prefix)} for m in measures]
    by_label = None
    if labels and all(labels) and all(set(label) == set(labels[0]) for label in labels):
        by_label = {name: mean([label[name] for label in labels]) for name in labels[0]}
    return {
        "heldout_step": at[0]["step"] if at else None,
        "pass_at_k": pass_at,
        "accuracy_by_label": by_label,
        "entropy": _seed_mean([m.get("entropy") for m in measures]),
        "entropy_before": _seed_mean([run["checkpoints"][0].get("entropy") for run in runs]),
    }


def checkpoint_measures(checkpoint: dict[str, Any], num_samples: int, chain: bool = False) -> dict[str, float]:
    """What one held-out evaluation recorded besides accuracy, by name: ``pass@k`` for k in `PASS_AT_K` up to
    ``num_samples``, ``entropy`` and ``accuracy:<label>`` for each label; a measure it did not record is absent.
    ``chain``: pass@k and the per-label accuracy count correct chains (``chain_correct``,
    ``chain_accuracy_by_label``), not rewarded samples."""
    counts, labels = ("chain_correct", "chain_accuracy_by_label") if chain else ("correct", "accuracy_by_label")
    measures: dict[str, float] = {}
    if checkpoint.get(counts) is not None:
        for k in PASS_AT_K:
            value = mean_pass_at_k(checkpoint[counts], num_samples, k)
            if value is not None:
                measures[f"pass@{k}"] = value
    if checkpoint.get("entropy") is not None:
        measures["entropy"] = checkpoint["entropy"]
    for label, value in (checkpoint.get(labels) or {}).items():
        measures[f"accuracy:{label}"] = value
    return measures


def measures_at(run: Run, column: str, x: float, num_samples: int, chain: bool = False) -> dict[str, float]:
    """Each of `checkpoint_measures` of one run at ``x`` of ``column`` ("tokens" or "step"), linearly interpolated
    between the checkpoints around it and held at the last one past its end; only measures every checkpoint has."""
    per_checkpoint = [checkpoint_measures(c, num_samples, chain) for c in run["checkpoints"]]
    names = set.intersection(*(set(m) for m in per_checkpoint)) if per_checkpoint else set()
    xs = [c[column] for c in run["checkpoints"]]
    return {name: value_at(xs, [m[name] for m in per_checkpoint], x, hold=True) for name in sorted(names)}


def heldout_frames(base_runs: Sequence[Run]) -> dict[str, tuple[str, float]]:
    """The two frames the held-out measures are compared in, as (column, x): ``equal_tokens``, the baseline's
    seed-averaged token budget (the budget of `compare`); ``equal_steps``, its last step."""
    base = mean_curve(base_runs)
    return {"equal_tokens": ("tokens", base["tokens"][-1]), "equal_steps": ("step", base["step"][-1])}


def _seed_differences(
    base_runs: Sequence[Run],
    method_runs: Sequence[Run],
    frames: dict[str, tuple[str, float]],
    num_samples: int,
    chain: bool = False,
) -> dict[str, dict[str, dict[int, float]]]:
    """frame -> measure -> seed -> the method's measure minus the baseline's, for the seeds both ran and the
    measures both recorded."""
    base, mine, seeds = paired_by_seed(base_runs, method_runs)
    differences: dict[str, dict[str, dict[int, float]]] = {}
    for frame, (column, x) in frames.items():
        per_seed = {
            s: (
                measures_at(base[s], column, x, num_samples, chain),
                measures_at(mine[s], column, x, num_samples, chain),
            )
            for s in seeds
        }
        names = set.intersection(*(set(b) & set(m) for b, m in per_seed.values()))
        differences[frame] = {
            name: {s: per_seed[s][1][name] - per_seed[s][0][name] for s in seeds} for name in sorted(names)
        }
    return differences


def heldout_comparison(
    base_runs: Sequence[Run],
    method_runs: Sequence[Run],
    num_samples: int,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> dict[str, dict[str, dict[str, Any]]]:
    """The held-out measures (pass@k, entropy, accuracy per label) of a method against the baseline's in each of
    `heldout_frames`: frame -> measure -> {"delta": the mean over shared seeds of the method's value minus the
    baseline's, "ci": its paired-bootstrap 95% interval (seeds drawn with replacement, the same for both)}."""
    frames = heldout_frames(base_runs)
    differences = _seed_differences(base_runs, method_runs, frames, num_samples)
    rng = random.Random(seed)
    result: dict[str, dict[str, dict[str, Any]]] = {}
    for frame, by_measure in differences.items():
        result[frame] = {}
        for name, by_seed in by_measure.items():
            values = list(by_seed.values())
            result[frame][name] = {"delta": mean(values), "ci": _bootstrap_mean_interval(values, resamples, rng)}
    return result


def heldout_aa_floor(
    base_runs: Sequence[Run], num_samples: int, splits: int = AA_SPLITS, seed: int = 0
) -> dict[str, dict[str, list[float | None]]] | None:
    """The A/A floor of `heldout_comparison`: the baseline's seeds split at random into two disjoint halves (as in
    `aa_floor`), ``splits`` times; frame -> measure -> the 95% range of one half's mean minus the other's, each read
    in the frames of the whole baseline. None with fewer than 4 seeds."""
    runs = sorted(base_runs, key=lambda run: run["seed"])
    if len(runs) < 4:
        return None
    frames = heldout_frames(runs)
    values = {
        frame: [measures_at(run, column, x, num_samples) for run in runs] for frame, (column, x) in frames.items()
    }
    rng = random.Random(seed)  # one stream across the frames
    floor: dict[str, dict[str, list[float | None]]] = {}
    for frame, per_run in values.items():
        names = set.intersection(*(set(m) for m in per_run))
        differences: dict[str, list[float]] = {name: [] for name in sorted(names)}
        for first, second in _halves(len(runs), splits, rng):
            for name, column in differences.items():
                column.append(mean([per_run[i][name] for i in first]) - mean([per_run[i][name] for i in second]))
        floor[frame] = {name: percentile_interval(column) for name, column in differences.items()}
    return floor
