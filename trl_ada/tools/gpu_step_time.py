"""`python -m trl_ada.gpu_step_time`: step time of GRPO and Reinforce-Ada at a real model's size, offline, one table.

Builds a model of a real model's shape with random weights (Qwen2.5-0.5B's by default, `--model qwen2.5-1.5b`) and a
word-level tokenizer, locally (`trl_ada.tools.sized_model`), and trains each configuration a GPU user would compare for
a few optimizer steps on random prompts with a pass-rate reward whose per-prompt pass rate is U-shaped: GRPO n=4, 8 and
16; `seq-positive-4x2` (exit rule positive, rounds of 4, at most 2, no prompt selection); `seq-balanced-8x4` (exit
rule balanced, rounds of 8, at most 4: the paper's defaults); two posterior-sized rounds of up to 16; one round of 16
downsampled to the group (one generation call); streaming through transformers' continuous batching, with GRPO n=4
through the same engine beside it; and `seq-positive-4x2` with LoRA. Rows are named by the benchmark catalog's keys
(docs/names.md) where the configuration is one of its; `--runs` still takes the names earlier records used
(`RENAMED`). Each runs with completions at a fixed length (every one to the limit) and at varied lengths (each token
ends the completion with probability 2 / `--max-tokens`). It prints seconds a step (the median of
the steps after the first, which pays for CUDA's start-up), the ratio to GRPO n=4 with the same lengths, samples a
prompt, generation calls a step, mean completion length and peak GPU memory.

The runs go in `PLAN` order, most telling first, and each is started only when its estimated time (from GRPO n=4's
measured step time and the run's expected cost, `ESTIMATE`) fits in what is left of `--budget-seconds` (480 s: the
command fits 8 minutes on one H100 or H200, the model's builds included); the others are listed as skipped, with
their estimate. A run that passes the budget stops after its current step. `--device cpu --model tiny` is a dry run
of the same code (the tests run it). Exit status 0 when every run that ran had finite losses, 1 otherwise, 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")

from transformers import TrainerCallback  # noqa: E402  (after the offline settings)

from .gpu_check import (  # noqa: E402
    StepTimer,
    comma_choices,
    continuous_batching_available,
    continuous_batching_settings,
    device_description,
    positive_int,
    resolve_dtype,
    timing_run_settings,
    versions,
)
from .sized_model import SHAPES, build_model, pass_rate_reward, prompt_dataset, word_tokenizer  # noqa: E402

LENGTHS = ("fixed", "varied")


@dataclass(frozen=True)
class Run:
    """One configuration: `grpo` is GRPO's group size (None for Reinforce-Ada, whose fields are in `ada`)."""

    key: str
    label: str
    grpo: int | None = None
    ada: dict[str, Any] = field(default_factory=dict)
    engine: str = "generate"  # "generate" (model.generate) or "cb" (transformers continuous batching)
    lora: bool = False


RUNS = {
    run.key: run
    for run in (
        Run("grpo-4", "grpo-4", grpo=4),
        Run("grpo-8", "grpo-8", grpo=8),
        Run("grpo-16", "grpo-16", grpo=16),
        Run(
            "seq-positive-4x2",
            "seq-positive-4x2",
            ada=dict(sampling_strategy="positive", samples_per_round=4, max_rounds=2),
        ),
        Run(
            "seq-balanced-8x4",
            "seq-balanced-8x4",
            ada=dict(sampling_strategy="balanced", samples_per_round=8, max_rounds=4),
        ),
        Run(
            "posterior",
            "seq-balanced, posterior 16x2",
            ada=dict(sampling_strategy="balanced", samples_per_round=16, max_rounds=2, round_sizing="posterior"),
        ),
        Run(
            "one-round",
            "seq-balanced, one round of 16",
            ada=dict(sampling_strategy="balanced", samples_per_round=16, max_rounds=1),
        ),
        Run(
            "streaming",
            "seq-balanced-8x4, streaming",
            ada=dict(
                sampling_strategy="balanced",
                samples_per_round=8,
                max_rounds=4,
                rollout_schedule="streaming",
                round_sizing="posterior",
            ),
            engine="cb",
        ),
        Run("grpo-4-cb", "grpo-4", grpo=4, engine="cb"),
        Run(
            "lora",
            "seq-positive-4x2 + LoRA r=16",
            ada=dict(sampling_strategy="positive", samples_per_round=4, max_rounds=2),
            lora=True,
        ),
    )
}
# Run order: the comparisons a GPU user needs first, then the rest while the budget lasts.
PLAN = [
    ("grpo-4", "fixed"), ("seq-positive-4x2", "fixed"), ("seq-balanced-8x4", "fixed"),
    ("grpo-4", "varied"), ("seq-positive-4x2", "varied"), ("seq-balanced-8x4", "varied"),
    ("grpo-16", "fixed"), ("one-round", "fixed"), ("posterior", "fixed"),
    ("streaming", "varied"), ("grpo-4-cb", "varied"),
    ("grpo-8", "fixed"), ("lora", "fixed"),
    ("posterior", "varied"), ("one-round", "varied"), ("grpo-16", "varied"), ("grpo-8", "varied"),
    ("streaming", "fixed"), ("grpo-4-cb", "fixed"), ("lora", "varied"),
]  # fmt: skip
# Expected step time in GRPO n=4 steps (generate, same lengths), for the budget: 1.60 and 5.33 recorded on an H200
# at 0.5B (benchmarks/results/gpu), 2.54 for GRPO n=4 through continuous batching, 7 for streaming (it did not
# finish 3 steps in about 200 s there); the others from their rows and calls.
ESTIMATE = {
    "grpo-4": 1.0, "grpo-8": 1.3, "grpo-16": 2.0, "seq-positive-4x2": 1.6, "seq-balanced-8x4": 5.3,
    "posterior": 3.5,
    "one-round": 2.0, "streaming": 7.0, "grpo-4-cb": 2.5, "lora": 1.6,
}  # fmt: skip
# The run names earlier records and commands used -> the current ones.
RENAMED = {"recommended": "seq-positive-4x2", "paper": "seq-balanced-8x4"}


@dataclass
class Row:
    """What one run measured."""

    key: str
    label: str
    lengths: str
    engine: str
    steps: int
    step_seconds: list[float]
    median_step_seconds: float
    losses_finite: bool
    samples_per_prompt: float
    calls_per_step: float
    mean_completion_length: float
    peak_memory_mib: float | None
    setup_seconds: float  # building the model and the trainer
    stopped_at_budget: bool = False


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trl_ada.gpu_step_time",
        description="Step time of GRPO and Reinforce-Ada configurations at a real model's shape (random weights, "
        "built offline), at fixed and varied completion lengths, within a time budget.",
    )
    parser.add_argument("--model", choices=sorted(SHAPES), default="qwen2.5-0.5b", help="the shape (default 0.5B)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a dry run of the same code")
    parser.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None, help="bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--prompts", type=positive_int, default=16, help="prompts a step (default 16)")
    parser.add_argument("--prompt-length", type=positive_int, default=64, help="tokens a prompt (default 64)")
    parser.add_argument("--max-tokens", type=positive_int, default=256, help="max_completion_length (default 256)")
    parser.add_argument("--steps", type=positive_int, default=2, help="optimizer steps a run; the first is untimed")
    parser.add_argument("--budget-seconds", type=float, default=480.0, help="the whole command's time (default 480)")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, from {', '.join(RUNS)}")
    parser.add_argument("--lengths", default=",".join(LENGTHS), help="comma-separated, from fixed, varied")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results to PATH as JSON")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.runs.split(",")]
    for name in names:
        if name in RENAMED:
            print(f"renamed: {name} is now {RENAMED[name]}", flush=True)
    args.runs = comma_choices(parser, "--runs", ",".join(RENAMED.get(name, name) for name in names), list(RUNS))
    args.lengths = comma_choices(parser, "--lengths", args.lengths, LENGTHS)
    resolve_dtype(parser, args)
    return args


def plan(args: argparse.Namespace) -> tuple[list[tuple[Run, str]], list[str]]:
    """The runs asked for, in `PLAN` order, and a note for each one this machine cannot run."""
    runs, notes = [], []
    cb_ok, cb_why = continuous_batching_available()
    try:
        import peft  # noqa: F401

        peft_ok = True
    except ImportError:
        peft_ok = False
    for key, lengths in PLAN:
        if key not in args.runs or lengths not in args.lengths:
            continue
        run = RUNS[key]
        if run.engine == "cb" and not cb_ok:
            notes.append(f"{run.label} ({lengths}, continuous batching): {cb_why}")
        elif run.lora and not peft_ok:
            notes.append(f"{run.label} ({lengths}): peft is not installed")
        else:
            runs.append((run, lengths))
    return runs, notes


def estimate(run: Run, lengths: str, rows: Sequence[Row], steps: int) -> float | None:
    """Seconds the run should take: its steps at `ESTIMATE` times GRPO n=4's measured step time (with the same
    lengths when measured, else the other), plus the setup the slowest run so far took. None before GRPO n=4 ran."""
    grpo = {r.lengths: r.median_step_seconds for r in rows if r.key == "grpo-4"}
    base = grpo.get(lengths, next(iter(grpo.values()), None))
    if base is None:
        return None
    return steps * base * ESTIMATE[run.key] + max((r.setup_seconds for r in rows), default=0.0)


def trainer_for(run: Run, lengths: str, args: argparse.Namespace, model: Any, output_dir: str) -> Any:
    """The run's trainer: the same settings for every run but its sampling, engine and adapter."""
    from trl import GRPOConfig, GRPOTrainer

    from .. import ReinforceAdaConfig, ReinforceAdaTrainer

    group = run.grpo or 4
    settings = timing_run_settings(os.path.join(output_dir, f"{run.key}-{lengths}"), args, learning_rate=1e-6)
    settings.update(
        per_device_train_batch_size=args.prompts * group, num_generations=group, max_completion_length=args.max_tokens
    )
    if run.engine == "cb":
        rows = args.prompts * (group if run.grpo else run.ada["samples_per_round"])
        settings.update(
            continuous_batching_settings(model.config, rows, args.prompt_length, args.max_tokens, args.dtype)
        )
    config = GRPOConfig(**settings) if run.grpo else ReinforceAdaConfig(**settings, **run.ada)
    peft_config = None
    if run.lora:
        from peft import LoraConfig

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        peft_config = LoraConfig(r=16, lora_alpha=32, target_modules=targets, task_type="CAUSAL_LM")
    trainer_class = GRPOTrainer if run.grpo else ReinforceAdaTrainer
    dataset = prompt_dataset(args.steps * args.prompts, args.prompt_length, model.config.vocab_size, args.seed)
    tokenizer = word_tokenizer(model.config.vocab_size)
    return trainer_class(
        model,
        pass_rate_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )


class Deadline(TrainerCallback):
    """Stops training after the step during which the command's budget ran out."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.stopped = False

    def on_step_end(self, args, state, control, **kwargs):
        if time.perf_counter() > self.deadline and state.global_step < state.max_steps:
            control.should_training_stop = self.stopped = True


def train_one(run: Run, lengths: str, args: argparse.Namespace, margins: dict[str, float], deadline: float) -> Row:
    """Build the model and the trainer, train, and measure."""
    import torch
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from .demo import count_generated_tokens

    cuda = args.device == "cuda"
    started = time.perf_counter()
    mean_length = None if lengths == "fixed" else args.max_tokens / 2
    model = build_model(SHAPES[args.model], args.seed, mean_length, args.device, margin=margins.get(lengths))
    margins[lengths] = model.eos_margin
    with tempfile.TemporaryDirectory(prefix="trl-ada-step-time-") as output_dir:
        trainer = trainer_for(run, lengths, args, model, output_dir)
        for noisy in (ProgressCallback, PrinterCallback):
            trainer.remove_callback(noisy)
        timer, stop = StepTimer(torch.cuda.synchronize if cuda else (lambda: None)), Deadline(deadline)
        trainer.add_callback(timer)
        trainer.add_callback(stop)
        counter = count_generated_tokens(trainer)
        if cuda:
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        setup = time.perf_counter() - started
        trainer.train()
    logs = trainer.state.log_history
    losses = [float(row["loss"]) for row in logs if "loss" in row]
    samples = [row["ada/samples_per_prompt"] for row in logs if "ada/samples_per_prompt" in row]
    steps = len(timer.seconds)
    timed = timer.seconds[1:] if steps > 1 else timer.seconds
    row = Row(
        key=run.key,
        label=run.label,
        lengths=lengths,
        engine=run.engine,
        steps=steps,
        step_seconds=timer.seconds,
        median_step_seconds=statistics.median(timed) if timed else float("nan"),
        losses_finite=bool(losses) and all(math.isfinite(loss) for loss in losses),
        samples_per_prompt=statistics.fmean(samples) if samples else float(run.grpo or 4),
        calls_per_step=counter.calls / max(steps, 1),
        mean_completion_length=counter.completion_tokens / max(counter.completions, 1),
        peak_memory_mib=torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        setup_seconds=setup,
        stopped_at_budget=stop.stopped,
    )
    del trainer, model
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return row


def ratios(rows: Sequence[Row]) -> dict[tuple[str, str], float]:
    """Each run's median step time over GRPO n=4's (model.generate) with the same lengths."""
    grpo = {r.lengths: r.median_step_seconds for r in rows if r.key == "grpo-4"}
    return {(r.key, r.lengths): r.median_step_seconds / grpo[r.lengths] for r in rows if grpo.get(r.lengths)}


def report(header: dict[str, str], rows: Sequence[Row], notes: Sequence[str], seconds: float) -> Iterator[str]:
    """The printed table: one line per run, then the skipped runs and the verdict."""
    yield "trl-ada step time at a realistic size"
    for key, value in header.items():
        yield f"  {key:<9} {value}"
    yield ""
    yield (
        f"  {'run':<31} {'lengths':<7} {'engine':<8} {'steps':>5} {'s/step':>8} {'x GRPO4':>7} {'samples':>7} "
        f"{'calls':>5} {'length':>6} {'peak MiB':>8}"
    )
    by_ratio = ratios(rows)
    for r in sorted(rows, key=lambda r: (LENGTHS.index(r.lengths), list(RUNS).index(r.key))):
        ratio = by_ratio.get((r.key, r.lengths))
        peak = "-" if r.peak_memory_mib is None else f"{r.peak_memory_mib:,.0f}"
        steps = f"{r.steps}{'*' if r.stopped_at_budget else ''}"
        yield (
            f"  {r.label:<31} {r.lengths:<7} {r.engine:<8} {steps:>5} {r.median_step_seconds:>8.2f} "
            f"{'-' if ratio is None else f'{ratio:.2f}':>7} {r.samples_per_prompt:>7.2f} {r.calls_per_step:>5.2f} "
            f"{r.mean_completion_length:>6.1f} {peak:>8}"
        )
    yield ""
    yield "  s/step: median of the steps after the first; x GRPO4: over GRPO n=4 (generate) with the same lengths;"
    yield "  samples: completions drawn a prompt; calls: generation calls a step; length: mean completion tokens"
    if any(r.stopped_at_budget for r in rows):
        yield "  *: stopped early, at the budget"
    for note in notes:
        yield f"  skipped: {note}"
    bad = [f"{r.label} ({r.lengths})" for r in rows if not r.losses_finite]
    verdict = f"FAIL: loss not finite in {', '.join(bad)}" if bad else "done"
    yield f"{verdict}: {len(rows)} runs in {seconds:.0f} s"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpu_step_time: no CUDA device visible to torch; `--device cpu --model tiny` is a dry run", file=sys.stderr
        )
        return 2
    shape = SHAPES[args.model]
    runs, notes = plan(args)
    deadline = started + args.budget_seconds
    rows: list[Row] = []
    margins: dict[str, float] = {}
    for run, lengths in runs:
        expected = estimate(run, lengths, rows, args.steps)
        left = deadline - time.perf_counter()
        if expected is not None and expected > left:
            notes.append(
                f"{run.label} ({lengths}, {run.engine}): estimated {expected:.0f} s, {max(left, 0):.0f} s left"
            )
            continue
        print(f"gpu_step_time: {run.label} ({lengths}, {run.engine}) ...", file=sys.stderr, flush=True)
        rows.append(train_one(run, lengths, args, margins, deadline))
    header = {
        "device": device_description(args.device, args.dtype),
        "versions": ", ".join(f"{name} {version}" for name, version in versions().items()),
        "model": f"{shape.name} shape, {shape.parameters() / 1e6:.1f}M parameters, random weights (seed {args.seed})",
        "workload": f"{args.prompts} prompts x {args.prompt_length} tokens a step, completions up to "
        f"{args.max_tokens} tokens: fixed (to the limit) or varied (each token ends one with probability "
        f"{2 / args.max_tokens:.3g}); "
        f"{args.steps} steps a run; budget {args.budget_seconds:.0f} s",
    }
    seconds = time.perf_counter() - started
    print("\n".join(report(header, rows, notes, seconds)), flush=True)
    passed = all(r.losses_finite for r in rows)
    if args.json:
        payload = {"header": header, "args": vars(args), "runs": [asdict(r) for r in rows], "skipped": notes}
        payload |= {"ratios": {f"{k} / {n}": v for (k, n), v in ratios(rows).items()}, "seconds": seconds}
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)
            handle.write("\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
