"""The learning benchmark's runs: one method trained from the warm start with one seed (`run_one`), many in worker
processes (`run_all`), the start model's measured testbed (`measure_testbed`) and the oracle subsets."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import testbeds  # noqa: F401  (registers the columns tasks, in this process and in every worker that imports this)
from learning_catalog import BASELINE, CATALOG, EQUAL_STEPS, GRID_LOG_EVERY, GRID_TASKS, ORACLE_SUBSETS, PROMPTS_FACTOR


def group_signal_probability(right: int, num_samples: int, group: int = 4) -> float:
    """The chance that `group` of a prompt's `num_samples` samples, `right` of them right, drawn without replacement,
    are not all equal: an unbiased estimate of 1 - p^group - (1 - p)^group."""
    total = math.comb(num_samples, group)
    return 1.0 - (math.comb(right, group) + math.comb(num_samples - right, group)) / total


def oracle_subsets(
    contents: Sequence[str], right: Sequence[int], mean_len: Sequence[float], num_samples: int, group: int = 4
) -> dict[str, dict[str, Any]]:
    """Two subsets of the training prompts, chosen with their measured pass rates and lengths (see `ORACLE_SUBSETS`):
    "agree", every prompt whose samples do not all agree; "signal_per_token", every prompt whose chance of a group
    with signal per sampled token, P / L, is at least the set's sum(P) / sum(L). Each with its prompts, its share of
    the set's sampling tokens and its share of the set's expected groups with signal."""
    signal = [group_signal_probability(int(c), num_samples, group) for c in right]
    total_signal, total_tokens = sum(signal), sum(mean_len)
    average = total_signal / total_tokens
    chosen = {
        "agree": [i for i, c in enumerate(right) if 0 < c < num_samples],
        "signal_per_token": [i for i, (s, n) in enumerate(zip(signal, mean_len, strict=True)) if s / n >= average],
    }
    return {
        name: {
            "prompts": [contents[i] for i in members],
            "token_share": sum(mean_len[i] for i in members) / total_tokens,
            "signal_share": sum(signal[i] for i in members) / total_signal if total_signal else None,
        }
        for name, members in chosen.items()
    }


def training_rows(task: Any, rows: int, seed: int, keep: Sequence[str] | None = None) -> Any:
    """The task's `rows` training rows for `seed`, or, with `keep`, the first `rows` of its seeded epochs whose prompt
    is in `keep` (whole epochs over that subset, each in the seed's order)."""
    if keep is None:
        return task.train_rows(rows, seed)
    wanted = set(keep)
    epochs = 1
    while True:
        candidates = task.train_rows(rows * epochs, seed)
        picked = [i for i, prompt in enumerate(candidates["prompt"]) if prompt[-1]["content"] in wanted]
        if len(picked) >= rows:
            return candidates.select(picked[:rows])
        if not picked:
            raise ValueError("no training prompt is in the subset")
        epochs *= 2


def run_one(
    seed: int, key: str, settings: dict[str, Any], output_dir: str, stop_after: int | None = None
) -> dict[str, Any]:
    """Train one method from the warm start with one seed, in this process; return its measurements. ``stop_after``
    ends training after that step (a check that a run reproduces: everything before it is as in the full run)."""
    from transformers import TrainerCallback

    from trl_ada.demo import train_toy

    class StopAfter(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if stop_after is not None and state.global_step >= stop_after:
                control.should_training_stop = True

    from trl_ada.toy import toy_task

    task = toy_task(settings["task"])
    steps, prompts_per_step, eval_every = method_shape(settings, key)
    # Training rows (arithmetic: fresh draws; reasoning: epochs of a fixed set) vary with the seed; the held-out set is
    # the same for every seed. Token-matched runs train on the rows in their order, so a longer run's first steps see
    # the baseline's prompts in the baseline's order.
    grids = grid_for(settings, key)
    subset = settings.get("oracle_subsets", {}).get(ORACLE_SUBSETS.get(key, ""))
    train = training_rows(task, steps * prompts_per_step, seed, None if subset is None else subset["prompts"])
    heldout = task.heldout(settings["heldout"])
    run = train_toy(
        CATALOG[key][0],
        settings["model_dir"],
        train,
        heldout,
        steps=steps,
        prompts_per_step=prompts_per_step,
        seed=seed,
        learning_rate=settings["learning_rate"],
        eval_every=eval_every,
        heldout_samples=settings["heldout_samples"],
        output_dir=f"{output_dir}/seed{seed}-{key}",
        log_every=GRID_LOG_EVERY if grids else eval_every,
        verbose=False,
        task=settings["task"],
        shuffle=not settings.get("match_tokens"),
        heldout_entropy=settings.get("heldout_entropy", False),
        callbacks=() if stop_after is None else (StopAfter(),),
        stop_when_covered=bool(grids),  # the steps are a cap: stop once both frames are covered
        **grids,
    )
    print(
        f"seed {seed} {run.method:>13}: accuracy {run.accuracy_before:.3f} -> {run.accuracy_after:.3f}, "
        f"{run.generated.completion_tokens:,} tokens, {run.train_seconds:.0f}s",
        flush=True,
    )

    def per_step(name: str) -> float:  # each log row is TRL's mean over the steps since the last one
        return sum(row.get(name, 0.0) for row in run.logs) / max(len(run.logs), 1)

    measured = {"key": key, **run.as_dict(), **({"step_scale": step_scale(settings, key)} if grids else {})}
    return measured | {
        "completions_per_trained_prompt": completions_per_trained_prompt(measured, settings),
        "refills_per_step": per_step("ada/refills"),
        "skipped_per_step": per_step("ada/skipped"),
    }


def completions_per_trained_prompt(run: dict[str, Any], settings: dict[str, Any]) -> float:
    """Completions generated per prompt trained on: over the steps the run trained (its last checkpoint's), not the
    step cap a run that stops once the grid is covered never reaches."""
    prompts = method_shape(settings, run["key"])[1]
    return run["generated"]["completions"] / (run["checkpoints"][-1]["step"] * prompts)


def step_scale(settings: dict[str, Any], key: str) -> int:
    """How many of a method's optimizer steps make one of GRPO n=4's (`method_shape`): 1 but for the methods whose
    steps hold other numbers of prompts (`PROMPTS_FACTOR`)."""
    return method_shape(settings, key)[2] // settings["eval_every"]


def grid_for(settings: dict[str, Any], key: str) -> dict[str, list[int]]:
    """A grid run's ``token_grid`` and ``step_grid`` (the step grid in the method's own steps, `step_scale`), or
    nothing for a report without a grid."""
    if "token_grid" not in settings:
        return {}
    scale = step_scale(settings, key)
    return {"token_grid": settings["token_grid"], "step_grid": [step * scale for step in settings["step_grid"]]}


def method_steps(settings: dict[str, Any], key: str) -> int:
    """Optimizer steps for a method's runs: ``steps``, or, token-matched, ``match_tokens`` times as many for every
    method but the baseline and those in `EQUAL_STEPS`, rounded up to whole evaluation intervals."""
    factor = settings.get("match_tokens")
    if not factor or key == BASELINE or key in EQUAL_STEPS:
        return settings["steps"]
    return math.ceil(settings["steps"] * factor / settings["eval_every"]) * settings["eval_every"]


def method_shape(settings: dict[str, Any], key: str) -> tuple[int, int, int]:
    """A method's optimizer steps, prompts per step and steps between evaluations: ``method_steps`` and the
    settings', or, for a method in ``PROMPTS_FACTOR``, its prompts per step with steps and interval scaled so that it
    generates the baseline's completions per run and is evaluated at the same completion counts."""
    steps, prompts, every = method_steps(settings, key), settings["prompts_per_step"], settings["eval_every"]
    if key not in PROMPTS_FACTOR:
        return steps, prompts, every
    wide = prompts * PROMPTS_FACTOR[key]
    scale = prompts * CATALOG[BASELINE][0].num_generations / (wide * CATALOG[key][0].num_generations)
    if wide != int(wide) or scale != int(scale):
        raise SystemExit(f"{key}: --prompts-per-step {prompts} gives {wide} prompts a step, or a fractional scale")
    return steps * int(scale), int(wide), every * int(scale)


# A task built as an instrument (`ToyTask.instrument`) is measured on at most this many of its distinct training
# prompts, 64 samples each: enough for a pass rate in (0.01, 0.1] to be told from 0 and from 0.2.
INSTRUMENT_PROMPTS = 512
INSTRUMENT_SAMPLES = 64


def measure_testbed(settings: dict[str, Any], seed: int, num_samples: int = 16) -> dict[str, Any]:
    """The start model's pass-rate mix and completion lengths on the distinct prompts of ``seed``'s training rows
    (`trl_ada.toy.sample_properties`), and how many times a run visits each of them. For a task built as an
    instrument, both are measured on the first `INSTRUMENT_PROMPTS` distinct prompts, and the task's own properties
    (`ToyTask.instrument`: real positives, hard prompts at low pass rates) from `INSTRUMENT_SAMPLES` samples each."""
    from collections import Counter

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.toy import sample_properties, toy_task, toy_threads

    task = toy_task(settings["task"])
    rows = task.train_rows(settings["steps"] * settings["prompts_per_step"], seed)
    contents = [prompt[-1]["content"] for prompt in rows["prompt"]]
    visits = Counter(contents)
    first = {content: index for index, content in reversed(list(enumerate(contents)))}
    distinct = rows.select(sorted(first.values()))
    measured = distinct
    if task.instrument is not None and len(distinct) > INSTRUMENT_PROMPTS:
        measured = distinct.select(range(INSTRUMENT_PROMPTS))
    model = AutoModelForCausalLM.from_pretrained(settings["model_dir"])
    tokenizer = AutoTokenizer.from_pretrained(settings["model_dir"])
    with toy_threads():
        properties = sample_properties(
            model, tokenizer, measured, task.reward, task.max_completion_length, num_samples=num_samples
        )
        instrument = {}
        if task.instrument is not None:
            samples = GRID_TASKS.get(settings["task"], {}).get("instrument_samples", INSTRUMENT_SAMPLES)
            instrument = task.instrument(model, tokenizer, measured, num_samples=samples)
    return {
        "task": settings["task"],
        "measured_on": f"the {len(measured)} first distinct prompts of seed {seed}'s {len(rows)} training rows",
        **properties,
        **instrument,
        "contents": [prompt[-1]["content"] for prompt in measured["prompt"]],  # for the oracle subsets, then dropped
        "distinct_prompts": len(distinct),
        "visits_per_prompt": len(rows) / len(distinct),
        "visits_per_prompt_min": min(visits.values()),
        "visits_per_prompt_max": max(visits.values()),
    }


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)  # 1: the toy model's matrices are too small to split (trl_ada.toy.TOY_NUM_THREADS)


def run_all(seeds: Sequence[int], methods: Sequence[str], settings: dict[str, Any], jobs: int) -> list[dict]:
    """Every (seed, method) run; with ``jobs`` > 1 in that many one-thread worker processes, each reused across runs
    (start-up is paid once per worker). Runs come back ordered by method, then seed."""
    tasks = [(seed, key) for key in methods for seed in seeds]
    with tempfile.TemporaryDirectory(prefix="trl_ada_bench_") as scratch:
        if jobs <= 1:
            _set_threads(1)
            return [run_one(seed, key, settings, scratch) for seed, key in tasks]
        context = get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=context, initializer=_set_threads, initargs=(1,)) as pool:
            # The most expensive runs first, so no worker is left alone with a long run at the end.
            order = sorted(tasks, key=lambda task: -CATALOG[task[1]][1])
            futures = {task: pool.submit(run_one, *task, settings, scratch) for task in order}
            return [futures[task].result() for task in tasks]
