"""Bookkeeping overhead: the share of a Reinforce-Ada training step spent in this package's own code.

    python benchmarks/overhead.py             # Ada-balanced and GRPO n=4, 50 steps each, twice (ABBA order)
    python benchmarks/overhead.py --quick     # 10 steps each, once

One process trains the warmed-up toy model with Ada-balanced and with GRPO n=4 (same prompts, same kept completions
per step: 16 prompts x 4). Timers wrap the functions from outside (thin subclasses and patched module names, nothing
in `trl_ada` changes) and charge wall time *exclusively*: time inside a nested timer goes to the nested one.

Ours: the engine (`sample_adaptively` with its round bookkeeping, `downsample`, `Tally`), `trl_ada.core.advantages`,
and the trainer's own code around them (its `_generate`, `_calculate_rewards`, `_generate_and_score_completions`
overrides and the round buffer). TRL's: generation (GRPOTrainer's `_generate`: tokenize, generate, decode), reward
scoring (its `_calculate_rewards`), the rest of its `_generate_and_score_completions`, the loss forward and backward
(`training_step`), and the optimizer step, callbacks and loop (the rest of `trainer.train()` from its first step to
its end). Set-up and the held-out evaluations are excluded.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import pathlib
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from machine import describe, machine_info

RESULTS = pathlib.Path(__file__).parent / "results"
OURS = ("engine", "advantages", "trainer bookkeeping")
THEIRS = ("generation", "reward scoring", "other TRL step work", "loss forward + backward", "optimizer, loop (rest)")
EVALUATION = "held-out evaluation"


class SectionClock:
    """Exclusive wall time per named section: while a nested section runs, its parent's clock is paused."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self._stack: list[str] = []
        self._mark = 0.0

    def enter(self, name: str) -> None:
        now = time.perf_counter()
        if self._stack:
            self.seconds[self._stack[-1]] += now - self._mark
        self._stack.append(name)
        self.calls[name] += 1
        self._mark = now

    def exit(self) -> None:
        now = time.perf_counter()
        self.seconds[self._stack.pop()] += now - self._mark
        self._mark = now

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[None]:
        self.enter(name)
        try:
            yield
        finally:
            self.exit()

    def wrap(self, name: str, function: Callable) -> Callable:
        @functools.wraps(function)
        def timed(*args, **kwargs):
            with self.section(name):
                return function(*args, **kwargs)

        return timed


def timed_trainers(clock: SectionClock) -> tuple[type, type]:
    """(GRPO, Ada) trainer subclasses whose TRL and trl_ada layers report to ``clock``.

    The Ada class lists the timed GRPO class after ReinforceAdaTrainer, so the MRO puts the timers between the two:
    ReinforceAdaTrainer's ``super()`` calls land in the timed GRPO layer, which separates our code from TRL's.
    """
    from trl import GRPOTrainer

    from trl_ada import ReinforceAdaTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        def training_step(self, *args, **kwargs):
            with clock.section("loss forward + backward"):
                return super().training_step(*args, **kwargs)

        def _generate_and_score_completions(self, inputs):
            with clock.section("other TRL step work"):
                return super()._generate_and_score_completions(inputs)

        def _generate(self, prompts):
            with clock.section("generation"):
                return super()._generate(prompts)

        def _calculate_rewards(self, *args):
            with clock.section("reward scoring"):
                return super()._calculate_rewards(*args)

    class TimedReinforceAdaTrainer(ReinforceAdaTrainer, TimedGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            with clock.section("trainer bookkeeping"):
                return super()._generate_and_score_completions(inputs)

        def _generate(self, prompts):
            with clock.section("trainer bookkeeping"):
                return super()._generate(prompts)

        def _calculate_rewards(self, *args):
            with clock.section("trainer bookkeeping"):
                return super()._calculate_rewards(*args)

    return TimedGRPOTrainer, TimedReinforceAdaTrainer


@contextlib.contextmanager
def timed_internals(clock: SectionClock) -> Iterator[None]:
    """Time the engine and advantage functions where the trainer looks them up, restoring them afterwards."""
    from trl_ada.adapter.schedules import rounds
    from trl_ada.core import step as module  # the step the trainer composes: downsampling and advantages
    from trl_ada.core.engine import Tally

    patches = [(rounds, "sample", "engine"), (module, "downsample", "engine")]
    patches += [(module, "pool_advantages", "advantages")]
    patches += [(Tally, "metrics", "engine"), (rounds.Rollouts, "add", "trainer bookkeeping")]
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    saved.append((Tally, "of", Tally.__dict__["of"]))
    try:
        for owner, name, section in patches:
            setattr(owner, name, clock.wrap(section, getattr(owner, name)))
        Tally.of = classmethod(clock.wrap("engine", Tally.__dict__["of"].__func__))
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def measure(key: str, model_dir: str, steps: int, seed: int, clock: SectionClock, trainer_class: type) -> dict:
    """Train one method for ``steps`` steps with every section timed; return the run's facts."""
    from transformers import TrainerCallback

    from trl_ada.tools.demo import HeldoutCurve, train_toy
    from trl_ada.toy import make_arithmetic_dataset

    class TrainingLoop(TrainerCallback):  # from the first step to the end, set-up excluded
        def on_train_begin(self, args, state, control, **kwargs):
            clock.enter("optimizer, loop (rest)")

        def on_train_end(self, args, state, control, **kwargs):
            clock.exit()

    def time_train(trainer: Any) -> None:
        for callback in trainer.callback_handler.callbacks:
            if isinstance(callback, HeldoutCurve):
                callback._evaluate = clock.wrap(EVALUATION, callback._evaluate)
        trainer.add_callback(TrainingLoop())

    train = make_arithmetic_dataset(steps * 16, seed=seed, split="train")
    heldout = make_arithmetic_dataset(16, seed=1_000_003, split="eval")
    with tempfile.TemporaryDirectory(prefix="trl_ada_overhead_") as scratch:
        run = train_toy(
            key,
            model_dir,
            train,
            heldout,
            steps=steps,
            seed=seed,
            output_dir=scratch,
            log_every=steps,
            verbose=False,
            trainer_class=trainer_class,
            before_train=time_train,
        )
    return {"completions": run.generated.completions, "tokens": run.generated.completion_tokens}


def breakdown(seconds: dict[str, float], steps: int) -> dict[str, Any]:
    """Shares of the step time per section (evaluation excluded) and the ratio of ours to the total."""
    total = sum(value for name, value in seconds.items() if name != EVALUATION)
    sections = {name: seconds.get(name, 0.0) for name in (*OURS, *THEIRS)}
    ours = sum(sections[name] for name in OURS)
    return {
        "steps": steps,
        "step_seconds": total / steps,
        "ms_per_step": {name: 1000 * value / steps for name, value in sections.items()},
        "share": {name: value / total for name, value in sections.items()},
        "ours_over_total": ours / total,
    }


def markdown(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    lines = [
        "| section | " + " | ".join(f"{name} ms/step | share" for name in names) + " |",
        "|---|" + "---|---|" * len(names),
    ]
    for section in (*OURS, *THEIRS):
        mark = " (ours)" if section in OURS else ""
        cells = [f"{results[n]['ms_per_step'][section]:.1f} | {results[n]['share'][section]:.1%}" for n in names]
        lines.append(f"| {section}{mark} | " + " | ".join(cells) + " |")
    cells = [f"**{1000 * results[n]['step_seconds']:.1f}** | 100%" for n in names]
    lines.append("| **step** | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 steps per method, one repeat")
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps per method and repeat")
    parser.add_argument("--repeats", type=int, default=2, help="repeats, alternating the order (ABBA...)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared CPU)")
    parser.add_argument("--output-dir", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--name", help="result file stem (default overhead[_quick])")
    parser.add_argument("--model-dir", type=pathlib.Path, help="start from this model (default: the warm toy model)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    steps, repeats = (10, 1) if args.quick else (args.steps, args.repeats)
    name = args.name or ("overhead_quick" if args.quick else "overhead")
    import torch

    from trl_ada.toy import toy_model_dir

    torch.set_num_threads(args.threads)
    model_dir = str(args.model_dir or toy_model_dir())
    machine = machine_info()
    print(f"machine: {describe(machine)}", flush=True)
    clocks = {"Ada-balanced": SectionClock(), "GRPO n=4": SectionClock()}
    keys = {"Ada-balanced": "seq-balanced-8x4", "GRPO n=4": "grpo-4"}
    counts: dict[str, Counter] = {label: Counter() for label in clocks}
    for repeat in range(repeats):
        order = list(clocks) if repeat % 2 == 0 else list(reversed(clocks))  # AB BA AB...: drift hits both alike
        for label in order:
            clock = clocks[label]
            grpo_class, ada_class = timed_trainers(clock)
            trainer_class = grpo_class if keys[label].startswith("grpo") else ada_class
            with timed_internals(clock):
                counts[label].update(measure(keys[label], model_dir, steps, args.seed + repeat, clock, trainer_class))
    total_steps = steps * repeats
    results = {label: breakdown(clock.seconds, total_steps) for label, clock in clocks.items()}
    for label in results:
        results[label]["completions_per_step"] = counts[label]["completions"] / total_steps
        results[label]["tokens_per_step"] = counts[label]["tokens"] / total_steps
    ada, grpo = results["Ada-balanced"], results["GRPO n=4"]
    ratio = ada["step_seconds"] / grpo["step_seconds"]
    machine_after = machine_info()
    text = (
        f"{total_steps} steps per method ({repeats} x {steps}, alternating), 16 prompts x 4 kept completions per "
        f"step, {args.threads} torch threads.\nMachine: {describe(machine)}; load average after: "
        f"{machine_after['load_average_1min']}.\n\n{markdown(results)}\n\n"
        f"- ours / Ada step time: {ada['ours_over_total']:.2%} "
        f"({sum(ada['ms_per_step'][s] for s in OURS):.1f} ms of {1000 * ada['step_seconds']:.1f} ms per step)\n"
        f"- Ada step time / GRPO n=4 step time: {ratio:.2f} "
        f"(completions generated per step: {ada['completions_per_step']:.0f} vs {grpo['completions_per_step']:.0f}; "
        f"tokens {ada['tokens_per_step']:.0f} vs {grpo['tokens_per_step']:.0f})\n"
    )
    report = {
        "command": " ".join(["python benchmarks/overhead.py", *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine,
        "load_average_1min_after": machine_after["load_average_1min"],
        "threads": args.threads,
        "results": results,
        "ada_over_grpo_step_time": ratio,
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.output_dir / f"{name}.md").write_text(text)
    print("\n" + text, flush=True)
    return report


if __name__ == "__main__":
    main()
