"""GPU time to the same skill, projected: each toy run's measured schedule through the step-time model.

The toy runs are timed on a CPU, where a step's cost says nothing about a GPU's. What they do measure is each step's
schedule: generation calls, completions generated, completions trained. `trl_ada.tools.step_time_model` turns a
schedule into GPU seconds, fitted to the step times on record in two regimes (`REGIMES`):

- **latency-bound**: the H200 records (one GPU, transformers `model.generate`, 16 prompts, completions of 256);
- **throughput-bound**: the paper's records (8 GPUs, verl with vLLM, 512 prompts, completions of 2,048).

A run's schedule is scaled to the regime's setup: its prompts per step times regime prompts / the report's
``prompts_per_step`` (a method whose steps hold twice GRPO n=4's prompts keeps twice the regime's), every completion
the regime's length long (the step-time model's own assumption), the model at each of `SHAPES`. At a checkpoint the
run has made `step` steps, generated ``tokens / (its completion_tokens / completions)`` completions (its mean
completion length converts the checkpoint's token count), made ``step x calls / steps`` generation calls (calls are
recorded per run, not per step: spread evenly) and trained ``step x prompts x group`` completions. The model is linear
in these counts, so the cumulative counts give the cumulative seconds (`with_gpu_seconds`).

On that axis a comparison reads, per regime and shape (`gpu_readings`):
- **skill per GPU-second**: the paired difference of the areas under the skill curves over GPU-seconds [0, S], S the
  fewest seconds any run of either method reached (the whole runs, no curve extrapolated), with the two-way interval
  over seeds and held-out prompts of `paired_stats`;
- **GPU time to 50/75/90% of the partner's gain**: the method's GPU-seconds over the partner's
  (`skill_frames.whole_run_ratio_intervals`, a paired bootstrap over seeds), and the range of the 90% ratio over the
  step-time model's leave-one-out refits (the model's own uncertainty, beside the seeds').

Every number here is a projection from the records `step_time_model` names, not a GPU measurement. In the
latency-bound regime every term of the H200 fit grows with the model's parameters alike, so its ratios are the same
at every shape (the records have one shape: nothing tests that).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import paired_stats as ps
import skill_frames as sf
from learning_catalog import CATALOG
from learning_runs import method_shape

from trl_ada.tools import step_time_model as stm

Run = dict[str, Any]


@dataclass(frozen=True)
class Regime:
    """A record set of the step-time model and the setup its records were made at."""

    record_set: str  # a key of `step_time_model.RECORD_SETS`
    prompts: int  # prompts a step
    length: int  # tokens a completion


REGIMES = {"latency": Regime("h200", 16, 256), "throughput": Regime("paper", 512, 2048)}
SHAPES = ("0.5b", "1.5b")
FITS = {name: stm.fit(stm.RECORD_SETS[regime.record_set]) for name, regime in REGIMES.items()}


def column(regime: str, shape: str) -> str:
    """The checkpoint field `with_gpu_seconds` writes for one regime and shape."""
    return f"gpu_seconds:{regime}:{shape}"


def cumulative_work(
    run: Run, settings: dict[str, Any], checkpoint: dict[str, Any], regime: Regime, shape: str
) -> stm.StepWork:
    """The run's work from its start to ``checkpoint``, at the regime's setup, as one `StepWork` (cumulative
    counts: the model is linear in them)."""
    prompts = method_shape(settings, run["key"])[1]
    last_step = run["checkpoints"][-1]["step"]
    generated = run["generated"]
    scale = regime.prompts / settings["prompts_per_step"]
    tokens_per_completion = generated["completion_tokens"] / generated["completions"]
    group = CATALOG[run["key"]][0].num_generations
    return stm.StepWork(
        prompts=prompts * scale,
        calls=checkpoint["step"] * generated["calls"] / last_step,
        generated=checkpoint["tokens"] / tokens_per_completion * scale,
        trained=checkpoint["step"] * prompts * group * scale,
        length=regime.length,
        parameters=stm.MODEL_PARAMETERS[shape],
    )


def with_gpu_seconds(
    runs: Sequence[Run],
    settings: dict[str, Any],
    columns: dict[str, tuple[str, str, Sequence[float] | None]] | None = None,
) -> list[Run]:
    """The runs with every checkpoint given its projected cumulative GPU-seconds: in each regime and shape's `column`,
    or in each field of ``columns`` (field -> regime, shape and the step-time model's parameters, None for the fit's
    own)."""
    wanted = columns or {column(regime, shape): (regime, shape, None) for regime in REGIMES for shape in SHAPES}
    out = []
    for run in runs:
        checkpoints = [
            checkpoint
            | {
                field: FITS[regime].seconds(
                    cumulative_work(run, settings, checkpoint, REGIMES[regime], shape), parameters
                )
                for field, (regime, shape, parameters) in wanted.items()
            }
            for checkpoint in run["checkpoints"]
        ]
        out.append(run | {"checkpoints": checkpoints})
    return out


def area_difference(
    base_runs: Sequence[Run], method_runs: Sequence[Run], x: str, samples: int, strata: Sequence[Sequence[int]]
) -> dict[str, Any]:
    """The method's area under the skill curve over ``x`` in [0, S] minus the partner's, S the fewest ``x`` any run
    reached (`skill_frames`' whole frame on that axis): `paired_stats.two_way_estimate` over seeds and the prompts in
    ``strata``."""
    end = sf.frame_end(base_runs, method_runs, "whole", {}, x)
    _, rows = sf.prompt_differences(base_runs, method_runs, "whole", end, samples, 0, x)
    return ps.two_way_estimate(*sf.restrict(rows, strata)) | {"end": end}


def model_range(
    base_runs: Sequence[Run], method_runs: Sequence[Run], settings: dict[str, Any], regime: str, shape: str
) -> list[float] | None:
    """The 90% GPU-time ratio's lowest and highest value over the regime's leave-one-out refits of the step-time
    model (None where no refit determines the parameters or the ratio is unresolved under one of them)."""
    values = []
    for parameters in FITS[regime].loo_parameters:
        if parameters is None:
            continue
        wanted = {"x": (regime, shape, parameters)}
        base, mine = with_gpu_seconds(base_runs, settings, wanted), with_gpu_seconds(method_runs, settings, wanted)
        value = sf.whole_run_ratios(base, mine, sf.COLUMNS["skill"], frames=(("x", "x"),))["x_to_90"][0]
        if value is None:
            return None
        values.append(value)
    return [min(values), max(values)] if values else None


def gpu_readings(
    base_runs: Sequence[Run],
    method_runs: Sequence[Run],
    settings: dict[str, Any],
    samples: int,
    strata: Sequence[Sequence[int]],
    resamples: int,
) -> dict[str, dict[str, Any]]:
    """Per regime and shape: the skill-per-GPU-second difference, the GPU-time ratios to 50/75/90% of the partner's
    gain with their bootstrap intervals over seeds, and the 90% ratio's range over the step-time model's refits."""
    base_runs, method_runs = with_gpu_seconds(base_runs, settings), with_gpu_seconds(method_runs, settings)
    readings = {}
    for regime in REGIMES:
        for shape in SHAPES:
            x = column(regime, shape)
            ratios = sf.whole_run_ratio_intervals(
                base_runs, method_runs, sf.COLUMNS["skill"], resamples=resamples, frames=(("gpu", x),)
            )
            readings[f"{regime}:{shape}"] = {
                "skill_area": area_difference(base_runs, method_runs, x, samples, strata),
                "ratios": ratios,
                "model_range_90": model_range(base_runs, method_runs, settings, regime, shape),
            }
    return readings


def pooled_ratio(ratios: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Ratios of several warm models ({"ratio", "ci"} each, a bootstrap interval) pooled on the log scale
    (`paired_stats.random_effects`, each standard error read off its interval: its width / 3.92); one warm model's
    own as it is; None where any ratio or interval is unresolved (never reached: a ratio or an interval's end None,
    as `learning_stats.percentile_interval` writes it, or infinite)."""
    if not all(r["ratio"] is not None and r["ci"] is not None and None not in r["ci"] for r in ratios):
        return None
    if not all(math.isfinite(end) for r in ratios for end in r["ci"]):
        return None
    if len(ratios) == 1:
        return {"ratio": ratios[0]["ratio"], "ci": list(ratios[0]["ci"])}
    logs = ps.random_effects(
        [math.log(r["ratio"]) for r in ratios],
        [max((math.log(r["ci"][1]) - math.log(r["ci"][0])) / 3.92, 1e-12) for r in ratios],
    )
    return {"ratio": math.exp(logs["estimate"]), "ci": [math.exp(v) for v in logs["ci"]]}


def pooled(per_warm: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """`gpu_readings` of one or more warm models, per regime and shape: the skill area difference pooled over two or
    more (`paired_stats.random_effects`), one warm model's own otherwise; the 90% GPU-time ratio (`pooled_ratio`)."""
    result = {}
    for key in per_warm[0]:
        areas = [w[key]["skill_area"] for w in per_warm]
        ratio = pooled_ratio([w[key]["ratios"]["gpu_to_90"] for w in per_warm])
        if len(per_warm) == 1:
            area = areas[0]
        else:
            area = ps.random_effects([a["estimate"] for a in areas], [max(a["se"], 1e-12) for a in areas])
        result[key] = {"skill_area": area, "ratio_90": ratio, "models": len(per_warm)}
    return result
