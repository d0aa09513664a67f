"""The main job: GRPO and Reinforce-Ada trained from the same start on the built-in toy task, on CPU, in two minutes.

    trl-ada demo [--steps 100] [--strategy balanced] [--output-dir outputs/demo]     (or: python -m trl_ada.demo)

It takes a tiny Qwen2 model warmed up on small-integer arithmetic (shipped with the package), trains it with plain
GRPO (group of 4) and with `ReinforceAdaTrainer` from the same weights, on the same prompts, for the same optimizer
steps, and ends with a side-by-side summary: held-out accuracy before and after, completion tokens generated, samples
drawn per prompt, and how many groups gave the loss no learning signal. The command pins torch's threads and kernels
before torch loads (`trl_ada.reproducible` says what that covers), so the summary comes out the same bit for bit run
after run and, by design, on any x86-64 CPU with AVX2; only the times printed after it vary.

The building blocks (`train_toy`, `count_generated_tokens`, `HeldoutCurve`) are also what the benchmarks under
`benchmarks/` run on.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from ..toy import toy_dataset_split, toy_model_dir, toy_task, toy_threads
from . import reproducible
from .heldout_curve import ENTROPY_SAMPLES, Checkpoint, GenerationCounter, HeldoutCurve

__all__ = [
    "ENTROPY_SAMPLES",
    "METHODS",
    "Checkpoint",
    "GenerationCounter",
    "HeldoutCurve",
    "ToyMethod",
    "ToyRun",
    "count_generated_tokens",
    "main",
    "train_toy",
]

HELDOUT_SAMPLES = 4  # sampled completions per held-out prompt in the demo's accuracy report


# --------------------------------------------------------------------------------------------------------------------
# Methods compared on the toy task
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToyMethod:
    """A training recipe: plain `GRPOTrainer` (``strategy=None``) or `ReinforceAdaTrainer` with a sampling strategy."""

    label: str
    num_generations: int  # the group size the loss sees
    strategy: str | None = None
    # further config fields, e.g. (("refill", True),); GRPOConfig's own (("num_iterations", 2),) for plain GRPO too
    options: tuple[tuple[str, Any], ...] = ()


METHODS: dict[str, ToyMethod] = {
    "grpo-4": ToyMethod("grpo-4", 4),
    "grpo-16": ToyMethod("grpo-16", 16),
    "seq-positive-8x4": ToyMethod("seq-positive-8x4", 4, "positive"),
    "seq-balanced-8x4": ToyMethod("seq-balanced-8x4", 4, "balanced"),
}  # each named by its key in benchmarks/learning_catalog.py (docs/names.md)


# --------------------------------------------------------------------------------------------------------------------
# Measuring from outside the trainer
# --------------------------------------------------------------------------------------------------------------------


def count_generated_tokens(trainer: Any) -> GenerationCounter:
    """Wrap ``trainer._generate_single_turn`` (GRPOTrainer's one call into the generation backend) to count its output.

    The wrapper sits on the instance, so it sees the same calls for `GRPOTrainer` and `ReinforceAdaTrainer` (whose
    rounds all go through the parent's `_generate`). Counted per process, before any gathering. This benchmark
    harness is the one place outside the adapter (`trainer.py`, `compat.py`) that touches a private trainer method:
    measuring both trainers at the same call is the point (docs/architecture.md).

    Streaming (`rollout_schedule="streaming"`) generates through its own engine, and only hands the kept completions
    to that call afterwards, for decoding: there every batch's count is the engine's own, which includes the tokens
    of requests aborted in flight and of completions finished after their prompt had stopped.
    """
    counter = GenerationCounter()
    if getattr(trainer.args, "rollout_schedule", "rounds") != "streaming":
        generate = trainer._generate_single_turn

        def counted(prompt_ids, *args, **kwargs):
            completion_ids, logprobs = generate(prompt_ids, *args, **kwargs)
            counter.calls += 1
            counter.completions += len(completion_ids)
            counter.completion_tokens += sum(len(ids) for ids in completion_ids)
            counter.prompt_tokens += sum(len(ids) for ids in prompt_ids)
            return completion_ids, logprobs

        trainer._generate_single_turn = counted
    else:
        generate_batch = trainer._generate

        def counted_batch(prompts):
            output = generate_batch(prompts)
            step = trainer._ada_step  # what this batch sampled, until the loss's inputs are built
            if step is not None:
                result = step.result
                counter.calls += 1
                counter.completions += sum(len(pool) for pool in result.pools) + result.dropped
                counter.completion_tokens += result.generated_tokens
            return output

        trainer._generate = counted_batch
    return counter


COLUMNS = {  # logged metric -> (header, format); GRPO logs no ada/* metrics and shows "-" there
    "reward": ("reward", "{:6.3f}"),
    "ada/samples_per_prompt": ("samples", "{:7.2f}"),
    "ada/frac_zero_std_first_round": ("0-std@1", "{:7.2f}"),
    "frac_reward_zero_std": ("0-std", "{:5.2f}"),
}


class StepLog(TrainerCallback):
    """Keep every training log (for the summary) and optionally print one compact line per log."""

    def __init__(self, counter: GenerationCounter, prefix: str = "", verbose: bool = True) -> None:
        self.counter, self.prefix, self.verbose = counter, prefix, verbose
        self.rows: list[dict[str, float]] = []

    def on_train_begin(self, args, state, control, **kwargs):
        if self.verbose:
            headers = [header.rjust(len(fmt.format(0))) for header, fmt in COLUMNS.values()]
            print(f"{self.prefix} step " + " ".join([*headers, "  tokens"]), flush=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "frac_reward_zero_std" not in logs:  # not a training-step log
            return
        self.rows.append(logs)
        if self.verbose:
            cells = [_cell(fmt, logs.get(name)) for name, (_, fmt) in COLUMNS.items()]
            print(f"{self.prefix}{state.global_step:5d} " + " ".join([*cells, f"{self.counter.completion_tokens:8d}"]))

    def mean(self, name: str, default: float = math.nan) -> float:
        values = [row[name] for row in self.rows if name in row]
        return sum(values) / len(values) if values else default


def _cell(fmt: str, value: float | None) -> str:
    width = len(fmt.format(0))
    return "-".rjust(width) if value is None else fmt.format(value)


# --------------------------------------------------------------------------------------------------------------------
# One training run
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class ToyRun:
    """What one `train_toy` run measured."""

    method: str
    seed: int
    checkpoints: list[Checkpoint]
    generated: GenerationCounter
    samples_per_prompt: float  # completions drawn per prompt per step
    frac_zero_std: float  # share of the groups handed to the loss whose rewards were all equal (TRL's metric)
    frac_zero_std_first_round: float  # the same for the first round alone (= frac_zero_std for GRPO)
    train_seconds: float  # wall time of training, evaluations excluded
    logs: list[dict[str, float]] = field(repr=False, default_factory=list)

    @property
    def accuracy_before(self) -> float:
        return self.checkpoints[0].accuracy

    @property
    def accuracy_after(self) -> float:
        return self.checkpoints[-1].accuracy

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "seed": self.seed,
            "checkpoints": [c.as_dict() for c in self.checkpoints],
            "generated": vars(self.generated),
            "samples_per_prompt": self.samples_per_prompt,
            "frac_zero_std": self.frac_zero_std,
            "frac_zero_std_first_round": self.frac_zero_std_first_round,
            "train_seconds": self.train_seconds,
        }


def train_toy(
    method: str | ToyMethod,
    model_dir: str | os.PathLike,
    train: datasets.Dataset,
    heldout: datasets.Dataset,
    *,
    steps: int,
    prompts_per_step: int = 16,
    seed: int = 0,
    learning_rate: float = 2e-4,
    scale_rewards: str = "none",
    samples_per_round: int = 8,
    max_rounds: int = 4,
    eval_every: int | None = None,
    heldout_samples: int = HELDOUT_SAMPLES,
    output_dir: str | os.PathLike = "outputs/demo",
    log_every: int = 1,
    verbose: bool = True,
    trainer_class: type | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    before_train: Callable[[Any], None] | None = None,
    task: str = "arithmetic",
    shuffle: bool = True,
    heldout_entropy: bool = False,
    token_grid: Sequence[int] | None = None,
    step_grid: Sequence[int] | None = None,
    stop_when_covered: bool = False,
) -> ToyRun:
    """Train the toy model in ``model_dir`` with one method and measure accuracy against generated tokens and time.

    Every method gets the same settings except its sampling: same learning rate, reward scaling (``"none"``, the
    Reinforce-Ada authors' recipe, so only the sampling differs), loss, prompts per step and, through TRL's seeded
    sampler, the same prompts in the same order. ``train`` must hold at least ``steps * prompts_per_step`` prompts.
    ``trainer_class`` overrides the trainer (a subclass of the method's own); ``before_train(trainer)`` runs just
    before ``trainer.train()``. ``task`` names the toy task (`trl_ada.toy.toy_task`): its reward and completion
    budget are used for training and for the held-out evaluations. ``shuffle=False`` trains on ``train`` in its own
    order (TRL's seeded shuffle otherwise), so runs of different lengths over one ordered set share their prefix.
    ``heldout_entropy`` also measures the policy's mean token entropy at every held-out evaluation (`HeldoutCurve`).
    ``token_grid`` and ``step_grid`` evaluate at those generated-token counts and steps instead of every
    ``eval_every`` steps, and ``stop_when_covered`` ends training once both are covered (`HeldoutCurve`).
    """
    spec = METHODS[method] if isinstance(method, str) else method
    toy = toy_task(task)
    _check_train_size(train, steps, prompts_per_step)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    settings = _toy_settings(
        spec,
        toy.max_completion_length,
        steps,
        prompts_per_step,
        seed,
        learning_rate,
        scale_rewards,
        output_dir,
        log_every,
    )
    settings["shuffle_dataset"] = shuffle
    config, default_class = _toy_config(spec, settings, samples_per_round, max_rounds)
    trainer_class = _checked_trainer_class(spec, trainer_class or default_class, default_class)
    trainer = trainer_class(model, toy.reward, args=config, train_dataset=train, processing_class=tokenizer)
    counter = count_generated_tokens(trainer)
    curve = HeldoutCurve(
        trainer.model,
        tokenizer,
        heldout,
        counter,
        eval_every or steps,
        heldout_samples,
        seed,
        task=task,
        entropy=heldout_entropy,
        token_grid=token_grid,
        step_grid=step_grid,
        stop_when_covered=stop_when_covered,
    )
    log = StepLog(counter, prefix=f"{spec.label:>13} " if verbose else "", verbose=verbose)
    _replace_callbacks(trainer, (curve, log, *callbacks))
    if before_train is not None:
        before_train(trainer)
    trainer.train()
    return _toy_run(spec, seed, curve, counter, log)


def _check_train_size(train: datasets.Dataset, steps: int, prompts_per_step: int) -> None:
    if len(train) < steps * prompts_per_step:
        raise ValueError(
            f"{steps} steps x {prompts_per_step} prompts need {steps * prompts_per_step} training prompts, got "
            f"{len(train)}: pass a larger train set"
        )


def _toy_settings(
    spec: ToyMethod,
    max_completion_length: int,
    steps: int,
    prompts_per_step: int,
    seed: int,
    learning_rate: float,
    scale_rewards: str,
    output_dir: str | os.PathLike,
    log_every: int,
) -> dict[str, Any]:
    """The GRPOConfig fields every method shares; only the group size comes from the method, the completion budget
    from the task."""
    return dict(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=log_every,
        seed=seed,
        max_steps=steps,
        per_device_train_batch_size=prompts_per_step * spec.num_generations,
        num_generations=spec.num_generations,
        max_completion_length=max_completion_length,
        temperature=1.0,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        beta=0.0,
        scale_rewards=scale_rewards,
    )


def _toy_config(
    spec: ToyMethod, settings: dict[str, Any], samples_per_round: int, max_rounds: int
) -> tuple[Any, type]:
    """The method's config and its trainer class: `GRPOTrainer`, or `ReinforceAdaTrainer` with the Ada fields."""
    from trl import GRPOConfig, GRPOTrainer

    from .. import ReinforceAdaConfig, ReinforceAdaTrainer

    # A method's options override the shared fields (e.g. its own learning rate).
    if spec.strategy is None:
        return GRPOConfig(**{**settings, **dict(spec.options)}), GRPOTrainer
    ada = dict(sampling_strategy=spec.strategy, samples_per_round=samples_per_round, max_rounds=max_rounds)
    ada.update(spec.options)
    return ReinforceAdaConfig(**{**settings, **ada}), ReinforceAdaTrainer


def _checked_trainer_class(spec: ToyMethod, trainer_class: type, default_class: type) -> type:
    if not issubclass(trainer_class, default_class):
        raise TypeError(f"{spec.label} trains with {default_class.__name__}; got {trainer_class.__name__}")
    return trainer_class


def _replace_callbacks(trainer: Any, callbacks: Sequence[TrainerCallback]) -> None:
    """Add ours; our one line per log replaces TRL's progress bar and full log dicts."""
    for callback in callbacks:
        trainer.add_callback(callback)
    for noisy in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(noisy)


def _toy_run(spec: ToyMethod, seed: int, curve: HeldoutCurve, counter: GenerationCounter, log: StepLog) -> ToyRun:
    """What the run measured, from its callbacks; GRPO logs no ada/* metrics, which then take GRPO's values."""
    zero_std = log.mean("frac_reward_zero_std")
    return ToyRun(
        method=spec.label,
        seed=seed,
        checkpoints=curve.checkpoints,
        generated=counter,
        samples_per_prompt=log.mean("ada/samples_per_prompt", default=float(spec.num_generations)),
        frac_zero_std=zero_std,
        frac_zero_std_first_round=log.mean("ada/frac_zero_std_first_round", default=zero_std),
        train_seconds=curve.train_seconds,
        logs=log.rows,
    )


# --------------------------------------------------------------------------------------------------------------------
# The demo
# --------------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``trl-ada demo``."""
    from .cli import show_defaults

    # prog: `trl-ada demo` runs this module's parser, whose default name would be that of the script (`trl-ada`).
    parser = argparse.ArgumentParser(
        prog="trl-ada demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps per method")
    parser.add_argument("--strategy", default="balanced", choices=["balanced", "positive"])
    parser.add_argument("--prompts-per-step", type=int, default=16)
    parser.add_argument("--samples-per-round", type=int, default=8)
    parser.add_argument("--max-rounds", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--heldout", type=int, default=256, help="held-out prompts for the accuracy report")
    parser.add_argument("--log-every", type=int, default=10, help="print one line (of means) every this many steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="outputs/demo")
    parser.add_argument("--cache-dir", default=None, help="cache of built toy models (default ~/.cache/trl_ada)")
    parser.add_argument("--no-warmup", action="store_true", help="start from the untrained model (smoke tests)")
    return show_defaults(parser)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, ToyRun]:
    """Run the demo in this process. Its numbers are the README's only under the pinned settings, which must be in
    place before torch is imported: ``trl-ada demo`` and ``python -m trl_ada.demo`` see to that; a direct call cannot.
    """
    args = parse_args(argv)
    with toy_threads():
        return _run(args)


def _run(args: argparse.Namespace) -> dict[str, ToyRun]:
    start = time.perf_counter()
    for problem in reproducible.problems():
        print(f"[trl_ada.demo] not pinned, numbers may differ from the README's: {problem}", file=sys.stderr)
    model_dir = toy_model_dir(args.cache_dir, warmup=not args.no_warmup)
    train, heldout = toy_dataset_split(args.steps * args.prompts_per_step, args.heldout, seed=args.seed)
    print(f"toy model: {model_dir}", flush=True)

    runs = {}
    for key in ("grpo-4", f"seq-{args.strategy}-{args.samples_per_round}x{args.max_rounds}"):
        runs[key] = train_toy(
            METHODS.get(key) or ToyMethod(key, 4, args.strategy),
            model_dir,
            train,
            heldout,
            steps=args.steps,
            prompts_per_step=args.prompts_per_step,
            seed=args.seed,
            learning_rate=args.learning_rate,
            samples_per_round=args.samples_per_round,
            max_rounds=args.max_rounds,
            output_dir=os.path.join(args.output_dir, key),
            log_every=args.log_every,
        )
    print(timings(runs.values(), time.perf_counter() - start), flush=True)  # before the summary, which ends the run
    print(summary(runs.values(), args), flush=True)
    return runs


def summary(runs: Sequence[ToyRun], args: argparse.Namespace) -> str:
    """The side-by-side table the demo ends with: every number in it is reproducible (times come before it)."""
    width = 17
    lines = [
        f"\nGRPO vs Reinforce-Ada on the toy task, same start: {args.steps} steps x {args.prompts_per_step} prompts, "
        f"group 4, Ada rounds {args.max_rounds} x {args.samples_per_round}",
        " " * 32 + "".join(run.method.rjust(width) for run in runs),
    ]

    def row(name: str, cells: Sequence[str]) -> None:
        lines.append(f"  {name:<30}" + "".join(cell.rjust(width) for cell in cells))

    accuracy = [f"{r.accuracy_before:.3f} -> {r.accuracy_after:.3f}" for r in runs]
    row(f"held-out acc. ({args.heldout} x {HELDOUT_SAMPLES})", accuracy)
    row("completion tokens generated", [f"{r.generated.completion_tokens:,}" for r in runs])
    row("samples drawn per prompt", [f"{r.samples_per_prompt:.2f}" for r in runs])
    row("groups with no signal", [f"{r.frac_zero_std:.2f}" for r in runs])
    row(f"  ... in round 1 ({args.samples_per_round} for Ada)", [f"{r.frac_zero_std_first_round:.2f}" for r in runs])
    lines.append("  No signal: share of the loss's groups whose rewards are all equal.")
    return "\n".join(lines)


def timings(runs: Sequence[ToyRun], total_seconds: float) -> str:
    """Wall times, which vary from run to run and machine to machine (evaluations excluded from training time);
    printed just before the summary, so that the run ends on the reproducible block."""
    training = ", ".join(f"{run.method} {run.train_seconds:.0f}s" for run in runs)
    return f"\nTraining time: {training}; {total_seconds:.0f}s in all."


if __name__ == "__main__":
    if not reproducible.is_pinned():
        reproducible.restart_pinned("trl_ada.demo", sys.argv[1:])
    main()
