"""A step-time model: a training step's seconds from what the step does, fitted to recorded GPU step times.

A step makes `calls` generation calls (rounds), generates `generated` completions and trains on `trained` of them,
every completion `length` tokens long, with a model of `parameters` parameters. Its seconds are

    seconds = latency   * calls     * length * s(latency)     a call lasts `length` decode steps, whatever its batch
            + per_token * generated * length * s(per_token)   each generated token's share of a decode step
            + train     * trained   * length * s(train)       forward and backward over what reaches the loss

with s(term) = (parameters / the record set's smallest parameters) ** the set's exponent for that term. Three
parameters, each with a physical reading: `latency` is seconds per decode step of one call, what a call costs however
few completions it holds (the latency-bound part); `per_token` is seconds per generated token, what each further
completion adds (the throughput-bound part); `train` is seconds per trained token. A decode step thus takes
latency + per_token x batch, and a call is latency-bound while its batch is well below latency / per_token.

The parameters are fitted by non-negative least squares on relative errors, separately for each `RECORD_SETS` entry
(one hardware and engine each: their parameters are not comparable), to every recorded step time and, where a record
carries it, its generation time. `fit` also refits without each record in turn (leave-one-out) and predicts the one
left out. `project` applies a fit to a step the user describes and names each quantity outside the range of the
records it was fitted on (an extrapolation). `python -m trl_ada.tools.step_time_model` prints the fit table.

Pure numpy; no torch, no model.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TERMS = ("latency", "per_token", "train")
UNITS = {"latency": "s per decode step per call", "per_token": "s per generated token", "train": "s per trained token"}


@dataclass(frozen=True)
class StepWork:
    """What one training step does. Counts are per step (means over steps are fine: the model is linear)."""

    prompts: float  # prompts a step
    calls: float  # generation calls (rounds) a step
    generated: float  # completions generated a step
    trained: float  # completions that reach the loss
    length: float  # tokens a completion runs (every completion taken as this long)
    parameters: float  # the model's parameter count

    @property
    def batch(self) -> float:
        """Completions a generation call holds, on average."""
        return self.generated / self.calls

    def features(self, reference: float, exponents: dict[str, float]) -> np.ndarray:
        """The step's value of each term in `TERMS` (seconds = features @ parameters)."""
        scale = self.parameters / reference
        counts = {"latency": self.calls, "per_token": self.generated, "train": self.trained}
        return np.array([counts[t] * self.length * scale ** exponents[t] for t in TERMS])


@dataclass(frozen=True)
class Record:
    """One recorded configuration: its step's work and seconds, and its generation seconds where recorded."""

    name: str
    work: StepWork
    seconds: float
    generation_seconds: float | None = None
    note: str = ""


@dataclass(frozen=True)
class RecordSet:
    """Records made on one hardware and engine, fitted together."""

    key: str
    regime: str
    description: str
    source: str
    records: tuple[Record, ...]
    exponents: dict[str, float]  # how each term grows with the parameter count (see `fit`)
    caveats: tuple[str, ...] = ()


# Parameter counts: Qwen2.5-0.5B and 1.5B from trl_ada.tools.sized_model.SHAPES (tied embeddings), Qwen2.5(-Math)-7B
# (28 layers, hidden 3584, 28 heads, 4 key-value heads, MLP 18944, vocabulary 152,064, untied) by the same formula.
MODEL_PARAMETERS = {"0.5b": 494_032_768, "1.5b": 1_543_714_304, "7b": 7_615_616_512}

# How each term grows with the parameter count. Where a record set has one shape, every term is taken to grow with
# the parameters (compute and weight reads do), an assumption no record tests: a projection to another shape is
# flagged. Training grows with them everywhere. The paper's records have two shapes (1.5B and 7B): their generation
# exponents are the pair in {0, 1} x {0, 1} with the smallest leave-one-out error (`python -m
# trl_ada.tools.step_time_model` prints all four): a call's latency grows with the model, the per-token term does not.
PROPORTIONAL = {"latency": 1.0, "per_token": 1.0, "train": 1.0}
PAPER_EXPONENTS = {"latency": 1.0, "per_token": 0.0, "train": 1.0}

# The H200 records: benchmarks/results/gpu/h200-2026-11-28/step_time_05b.jsonl, model.generate, step 3 of each run
# (the one step whose counts the record carries, in `metrics_last`; steps 2 and 3 are the run's timed steps, step 1
# pays CUDA's start-up). 16 prompts of 64 tokens, completions to the limit of 256 (a random model), Qwen2.5-0.5B's
# shape. Generated and trained counts from `ada/completion_tokens` / 256, `ada/rounds` and the final group of 4.
_H200 = dict(prompts=16, length=256, parameters=MODEL_PARAMETERS["0.5b"])
H200_05B = RecordSet(
    key="h200",
    regime="latency-bound",
    description="1 H200, transformers model.generate, Qwen2.5-0.5B's shape, 16 prompts, 256 tokens",
    source="benchmarks/results/gpu/h200-2026-11-28/step_time_05b.jsonl (step 3 of each run)",
    exponents=PROPORTIONAL,
    records=(
        Record("grpo-4", StepWork(calls=1, generated=64, trained=64, **_H200), 9.48, None, "step 2: 9.94 s"),
        Record(
            "seq-positive-4x2", StepWork(calls=2, generated=84, trained=64, **_H200), 15.128, 14.845, "step 2: 15.87 s"
        ),
        Record(
            "seq-balanced-8x4",
            StepWork(calls=4, generated=400, trained=64, **_H200),
            44.264,
            43.962,
            "step 2: 59.15 s",
        ),
    ),
    caveats=(
        "one shape, one length, one prompt count: any other is extrapolated",
        "step 2's counts are not recorded; its times (notes) are 5%, 5% and 34% above step 3's",
        "GRPO n=4 through continuous batching (24.6 s) is the only record of its engine: not fitted",
    ),
)

# The paper's average step times (Xiong et al. 2025, arXiv 2510.04996): 8 GPUs, verl with vLLM, 512 prompts a step,
# completions up to 2,048 tokens, final group 4, rounds of 8 up to 4. The completions' lengths are not published:
# every completion is read as running to 2,048, so `per_token` and `train` are per token at that cap. Samples per
# prompt are not published either: the Seq rows' are what `trl-ada simulate` gives for the paper-fit pass-rate mix,
# Beta(0.3372, 0.2984) (fitted to the 1.5B model), at 512 prompts a step (tests/test_step_time_model.py checks them);
# that mix is taken for the 7B too. Est spends 8 a prompt (`round_repeat` x prompts) in one call.
PAPER_SAMPLES = {"positive": 12.74, "balanced": 22.10}
_PAPER_ROWS = (("grpo-4", 1, 4.0), ("seq-positive-8x4", 4, PAPER_SAMPLES["positive"]))
_PAPER_ROWS += (("seq-balanced-8x4", 4, PAPER_SAMPLES["balanced"]), ("est-8", 1, 8.0))
_PAPER_SECONDS = {"1.5b": (102.0, 228.0, 290.0, 128.0), "7b": (236.0, 333.0, 375.0, 382.0)}
PAPER = RecordSet(
    key="paper",
    regime="throughput-bound",
    description="8 GPUs, verl + vLLM, Qwen2.5-Math-1.5B and 7B, 512 prompts, up to 2,048 tokens",
    source="the Reinforce-Ada paper's published average step times (arXiv 2510.04996)",
    exponents=PAPER_EXPONENTS,
    records=tuple(
        Record(
            f"{name} ({shape.upper()})",
            StepWork(512, calls, 512 * samples, 512 * 4, 2048, MODEL_PARAMETERS[shape]),
            seconds,
        )
        for shape, times in _PAPER_SECONDS.items()
        for (name, calls, samples), seconds in zip(_PAPER_ROWS, times, strict=True)
    ),
    caveats=(
        "completion lengths and the Seq rows' samples per prompt are not published: simulated from the paper-fit mix",
        "two shapes only; other hardware, engines and parallelism than one GPU with TRL",
    ),
)
RECORD_SETS = {s.key: s for s in (H200_05B, PAPER)}


# ---------------------------------------------------------------------------------------------------- fitting
def baseline_index(record_set: RecordSet, index: int) -> int | None:
    """The record a record's step time is compared with: GRPO at the same size, prompts, length and trained count
    (one call that trains on every completion it generates), other than the record itself; None when there is none."""
    work = record_set.records[index].work
    for i, other in enumerate(record_set.records):
        w = other.work
        same = (w.parameters, w.prompts, w.length, w.trained) == (
            work.parameters,
            work.prompts,
            work.length,
            work.trained,
        )
        if i != index and same and w.calls == 1 and w.generated == w.trained:
            return i
    return None


@dataclass(frozen=True)
class Fit:
    """A record set's fitted parameters, each record's fit error and leave-one-out error (relative: predicted /
    recorded - 1; None where the other records cannot determine the parameters), the leave-one-out refits, and each
    record's ratio leave-one-out error: its step time over its GRPO record's (`baseline_index`), both predicted by
    the fit without it, against that ratio recorded (None for a record without a GRPO record beside it)."""

    record_set: RecordSet
    exponents: dict[str, float]
    parameters: tuple[float, ...]
    fit_errors: tuple[float, ...]
    loo_errors: tuple[float | None, ...]
    loo_parameters: tuple[tuple[float, ...] | None, ...]
    ratio_loo_errors: tuple[float | None, ...]

    @property
    def reference(self) -> float:
        return min(r.work.parameters for r in self.record_set.records)

    def seconds(self, work: StepWork, parameters: Sequence[float] | None = None) -> float:
        """The step's projected seconds under these (or the given) parameters."""
        theta = np.asarray(self.parameters if parameters is None else parameters)
        return float(work.features(self.reference, self.exponents) @ theta)

    @property
    def max_loo_error(self) -> float:
        """The largest leave-one-out error in magnitude (NaN when none could be computed)."""
        known = [abs(e) for e in self.loo_errors if e is not None]
        return max(known) if known else math.nan

    @property
    def max_ratio_loo_error(self) -> float:
        """The largest ratio leave-one-out error in magnitude (NaN when none could be computed): the band
        `project` puts around a projected ratio."""
        known = [abs(e) for e in self.ratio_loo_errors if e is not None]
        return max(known) if known else math.nan


def _observations(records: Sequence[Record], reference: float, exponents: dict[str, float]) -> tuple:
    """Rows of the least-squares problem: every step time, then every recorded generation time (its training
    feature zeroed), each weighted by 1 / the recorded seconds so that every row counts as a relative error."""
    rows, targets = [], []
    for record in records:
        x = record.work.features(reference, exponents)
        rows.append(x / record.seconds)
        targets.append(1.0)
        if record.generation_seconds is not None:
            g = x * np.array([t != "train" for t in TERMS], dtype=float)
            rows.append(g / record.generation_seconds)
            targets.append(1.0)
    return np.array(rows), np.array(targets)


def nonnegative_least_squares(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """argmin |x theta - y| over theta >= 0, by trying every support (three parameters: eight subsets): the optimum
    is the least-squares solution on its own support, so it is the best of those that come out non-negative. None
    when x does not determine theta (rank below its columns)."""
    if np.linalg.matrix_rank(x) < x.shape[1]:
        return None
    best, best_residual = None, math.inf
    for support in itertools.product((False, True), repeat=x.shape[1]):  # the empty one included: theta = 0
        columns = [i for i, used in enumerate(support) if used]
        theta = np.zeros(x.shape[1])
        if columns:
            theta[columns] = np.linalg.lstsq(x[:, columns], y, rcond=None)[0]
        residual = float(np.sum((x @ theta - y) ** 2))
        if (theta >= 0).all() and residual < best_residual - 1e-15:
            best, best_residual = theta, residual
    return best


def fit(record_set: RecordSet, exponents: dict[str, float] | None = None) -> Fit:
    """Fit `record_set` (all its records), then refit without each record in turn and predict it. `exponents`
    replaces the set's own (`RecordSet.exponents`)."""
    exponents = dict(record_set.exponents if exponents is None else exponents)
    records = record_set.records
    reference = min(r.work.parameters for r in records)
    theta = nonnegative_least_squares(*_observations(records, reference, exponents))
    if theta is None:
        raise ValueError(f"The records of {record_set.key!r} do not determine the model's {len(TERMS)} parameters.")

    def error(parameters: np.ndarray, record: Record) -> float:
        return float(record.work.features(reference, exponents) @ parameters) / record.seconds - 1.0

    def seconds(parameters: np.ndarray, record: Record) -> float:
        return float(record.work.features(reference, exponents) @ parameters)

    loo_errors, loo_parameters, ratio_errors = [], [], []
    for i, record in enumerate(records):
        theta_i = nonnegative_least_squares(*_observations(records[:i] + records[i + 1 :], reference, exponents))
        loo_errors.append(None if theta_i is None else error(theta_i, record))
        loo_parameters.append(None if theta_i is None else tuple(float(v) for v in theta_i))
        b = baseline_index(record_set, i)
        if theta_i is None or b is None:
            ratio_errors.append(None)
        else:
            predicted = seconds(theta_i, record) / seconds(theta_i, records[b])
            ratio_errors.append(predicted / (record.seconds / records[b].seconds) - 1.0)
    return Fit(
        record_set,
        exponents,
        tuple(float(v) for v in theta),
        tuple(error(theta, r) for r in records),
        tuple(loo_errors),
        tuple(loo_parameters),
        tuple(ratio_errors),
    )


# ---------------------------------------------------------------------------------------------------- projecting
RANGE_FIELDS = ("prompts", "length", "parameters", "batch", "calls", "trained")


def extrapolated(fit_: Fit, work: StepWork) -> tuple[str, ...]:
    """The quantities of `work` outside the range the fit's records span (1% tolerance), in `RANGE_FIELDS` order."""
    outside = []
    for name in RANGE_FIELDS:
        values = [getattr(r.work, name) for r in fit_.record_set.records]
        value = getattr(work, name)
        if value < min(values) * 0.99 or value > max(values) * 1.01:
            outside.append(name)
    return tuple(outside)


@dataclass(frozen=True)
class Projection:
    """One configuration's projected step time against a baseline's: the ratio under the fit to every record, a band
    of that ratio times 1 -/+ the fit's largest ratio leave-one-out error, and what the projection extrapolates in."""

    seconds: float
    ratio: float
    low: float
    high: float
    extrapolated: tuple[str, ...]
    latency_share: float  # of the projected generation time, the share that the calls' latency makes


def project(fit_: Fit, work: StepWork, baseline: StepWork) -> Projection:
    """`work`'s projected seconds and its ratio to `baseline`'s, with the band from the ratio leave-one-out errors."""
    seconds = fit_.seconds(work)
    ratio = seconds / fit_.seconds(baseline)
    spread = 0.0 if work == baseline else fit_.max_ratio_loo_error  # the baseline against itself is exactly 1
    features = work.features(fit_.reference, fit_.exponents) * np.asarray(fit_.parameters)
    generation = features[0] + features[1]
    names = sorted(set(extrapolated(fit_, work)) | set(extrapolated(fit_, baseline)), key=RANGE_FIELDS.index)
    return Projection(
        seconds=seconds,
        ratio=ratio,
        low=ratio * (1 - spread),
        high=ratio * (1 + spread),
        extrapolated=tuple(names),
        latency_share=float(features[0] / generation) if generation > 0 else math.nan,
    )


def parse_parameters(text: str) -> float:
    """A model size: a `MODEL_PARAMETERS` key (`0.5b`, `1.5b`, `7b`), a count with a unit (`3b`, `800m`) or a plain
    number of parameters (`3e9`)."""
    key = text.strip().lower()
    if key in MODEL_PARAMETERS:
        return float(MODEL_PARAMETERS[key])
    units = {"b": 1e9, "m": 1e6}
    try:
        value = float(key[:-1]) * units[key[-1]] if key and key[-1] in units else float(key)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"Cannot read model shape {text!r}: give {', '.join(MODEL_PARAMETERS)}, a size such as 3b or 800m, or a "
            "parameter count such as 3e9."
        )
    return value


# ---------------------------------------------------------------------------------------------------- fit table
def fit_table(record_set: RecordSet, exponents: dict[str, float] | None = None) -> list[str]:
    """The printed fit of one record set: its parameters, and each record's recorded, fitted and leave-one-out
    seconds and errors."""
    f = fit(record_set, exponents)
    lines = [
        f"{record_set.key}: {record_set.description} ({record_set.regime})",
        f"  source: {record_set.source}",
        f"  {len(record_set.records)} records, {len(TERMS)} parameters, exponents on parameters "
        + ", ".join(f"{t} {f.exponents[t]:g}" for t in TERMS),
    ]
    lines += [f"  {t:<9} = {v:.4g} {UNITS[t]}" for t, v in zip(TERMS, f.parameters, strict=True)]
    if f.parameters[0] > 0 and f.parameters[1] > 0:
        lines.append(f"  latency-bound below about {f.parameters[0] / f.parameters[1]:.0f} completions a call")
    elif f.parameters[0] == 0:
        lines.append("  no latency term fitted: generation time follows the tokens generated")
    lines.append(
        f"  {'record':<26} {'recorded':>9} {'fitted':>9} {'fit err':>8} {'LOO':>9} {'LOO err':>8} "
        f"{'x GRPO':>7} {'LOO':>6} {'err':>7}  note"
    )

    def signed(value: float | None) -> str:
        return "-" if value is None else f"{value:+.1%}"

    for i, record in enumerate(record_set.records):
        fit_error, loo_error, ratio_error = f.fit_errors[i], f.loo_errors[i], f.ratio_loo_errors[i]
        loo = "-" if loo_error is None else f"{record.seconds * (1 + loo_error):.2f}"
        b = baseline_index(record_set, i)
        recorded_ratio = "-" if b is None else f"{record.seconds / record_set.records[b].seconds:.2f}"
        loo_ratio = (
            "-" if ratio_error is None else f"{record.seconds / record_set.records[b].seconds * (1 + ratio_error):.2f}"
        )
        lines.append(
            f"  {record.name:<26} {record.seconds:>9.2f} {record.seconds * (1 + fit_error):>9.2f} "
            f"{fit_error:>+8.1%} {loo:>9} {signed(loo_error):>8} {recorded_ratio:>7} {loo_ratio:>6} "
            f"{signed(ratio_error):>7}  {record.note}"
        )
    fit_rms = math.sqrt(sum(e * e for e in f.fit_errors) / len(f.fit_errors))
    lines.append(
        f"  fit error: rms {fit_rms:.1%}; leave-one-out: max {f.max_loo_error:.1%} on step time, "
        f"{f.max_ratio_loo_error:.1%} on the ratio to GRPO (x GRPO: recorded, then predicted without the record)"
    )
    lines += [f"  caveat: {c}" for c in record_set.caveats]
    return lines


def exponent_choices(record_set: RecordSet) -> list[tuple[dict[str, float], float]]:
    """Every generation exponent pair in {0, 1} x {0, 1} (training's fixed at 1) with its largest leave-one-out
    error on `record_set`, smallest first."""
    choices = []
    for latency, per_token in itertools.product((0.0, 1.0), repeat=2):
        exponents = {"latency": latency, "per_token": per_token, "train": 1.0}
        choices.append((exponents, fit(record_set, exponents).max_loo_error))
    return sorted(choices, key=lambda c: c[1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trl_ada.tools.step_time_model",
        description="The step-time model's fit to the recorded GPU step times, with leave-one-out errors.",
    )
    parser.add_argument("--sets", nargs="*", default=list(RECORD_SETS), choices=list(RECORD_SETS))
    args = parser.parse_args(argv)
    for key in args.sets:
        print("\n".join(fit_table(RECORD_SETS[key])))
        print()
    if "paper" in args.sets:
        print(
            "generation exponents on parameters (latency, per_token), by leave-one-out error on the paper's records:"
        )
        for exponents, error in exponent_choices(PAPER):
            chosen = " (used)" if exponents == PAPER.exponents else ""
            print(f"  {exponents['latency']:g}, {exponents['per_token']:g}: max {error:.1%}{chosen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
