"""``trl-ada train``: train with ``ReinforceAdaTrainer`` from a YAML recipe and/or command-line flags.

The flags, recipes and ``--help`` text are train_args.py's; the model, rewards and data train_data.py's. Here: the
progress line printed per training log, checkpoints, resume and Ctrl-C, and ``main``.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import sys
from collections.abc import Mapping, Sequence

from transformers.trainer_callback import ProgressCallback

from ..adapter.checks import RewardFunctionError, reward_signature_message
from ..adapter.config import ReinforceAdaConfig
from ..adapter.errors import RunError, UsageError, combined, one_line
from ..adapter.model_names import nearby
from .cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE
from .train_args import PROG, RESUME_FLAG, RESUME_LATEST, ParsedArgs, read_args, vllm_problem
from .train_data import (
    BUILTIN_PREFIX,
    TOY_MODELS,
    check_dataset_name,
    load_data,
    load_rewards,
    resolve_model,
    split_problems,
)

# -------------------------------------------------------------------------------------------------------------------
# Progress
# -------------------------------------------------------------------------------------------------------------------


# One line per training log: (logged metric, header, format). `tokens` is `ada/completion_tokens`: the completion
# tokens generated for the step on all processes, every sample drawn included (not only the kept ones), which is
# what adaptive sampling spends.
LOG_COLUMNS = (
    ("reward", "reward", "{:6.3f}"),
    ("ada/completion_tokens", "tokens", "{:8.0f}"),
    ("ada/rounds", "rounds", "{:6.0f}"),
    ("ada/samples_per_prompt", "samples", "{:7.2f}"),
    ("ada/frac_resolved", "resolved", "{:8.2f}"),
    ("ada/frac_zero_std_first_round", "0-std@1", "{:7.2f}"),
    ("frac_reward_zero_std", "0-std", "{:5.2f}"),
)


def log_header() -> str:
    return " step " + " ".join(header.rjust(len(fmt.format(0))) for _, header, fmt in LOG_COLUMNS)


def log_line(step: int, logs: dict[str, float]) -> str:
    cells = (fmt.format(logs[name]) if name in logs else "-".rjust(len(fmt.format(0))) for name, _, fmt in LOG_COLUMNS)
    return f"{step:5d} " + " ".join(cells)


class AdaProgressCallback(ProgressCallback):
    """TRL's progress bar, printing one line of Ada metrics per training log instead of the full log dict.

    Columns: mean reward of each prompt's first `num_generations` draws (the kept rows' is `ada/kept_reward`),
    completion tokens generated, rounds run, samples drawn per prompt, share of prompts whose exit rule held, share
    of groups with all-equal rewards after the first round (what GRPO would have trained on) and in the final groups.
    The full dict still goes to trainer_state.json and to `report_to`; evaluation logs print as before.
    """

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        if state.is_world_process_zero:
            self.training_bar.write(log_header())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "ada/rounds" not in logs:
            return super().on_log(args, state, control, logs=logs, **kwargs)
        if state.is_world_process_zero and self.training_bar is not None:
            self.training_bar.write(log_line(state.global_step, logs))


# -------------------------------------------------------------------------------------------------------------------
# Checkpoints, resume and Ctrl-C
# -------------------------------------------------------------------------------------------------------------------

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")  # transformers' PREFIX_CHECKPOINT_DIR folders
TRAINER_STATE = "trainer_state.json"  # written last in a checkpoint: its presence marks a complete one


def checkpoints(output_dir: str | os.PathLike) -> list[pathlib.Path]:
    """The complete ``checkpoint-N`` folders of ``output_dir`` (holding ``trainer_state.json``), by step.

    transformers' ``get_last_checkpoint`` takes the highest N even when that save was cut short (Ctrl-C, a full
    disk) and cannot be resumed; such folders are left out here.
    """
    folder = pathlib.Path(output_dir).expanduser()
    if not folder.is_dir():
        return []
    found = [
        (int(match.group(1)), child)
        for child in folder.iterdir()
        if (match := _CHECKPOINT.match(child.name)) and (child / TRAINER_STATE).is_file()
    ]
    return [child for _, child in sorted(found)]


def checkpoint_step(checkpoint: pathlib.Path) -> int:
    """The optimizer step a checkpoint was saved at, from its ``trainer_state.json``."""
    return int(json.loads((checkpoint / TRAINER_STATE).read_text())["global_step"])


def resolve_resume(value: str | bool | None, output_dir: str) -> str | None:
    """``--resume_from_checkpoint`` as the path to resume from, or None to start afresh.

    ``true`` (any case; also YAML's ``true`` and the bare flag): the latest complete checkpoint in ``output_dir``.
    ``false`` or empty: none. Anything else is a checkpoint folder. TrainingArguments types the field as a string, so
    without this "true" would be read as a folder named true.
    """
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() in ("", "false")):
        return None
    if value is True or value.strip().lower() == RESUME_LATEST:
        found = checkpoints(output_dir)
        if not found:
            raise UsageError(
                f"{RESUME_FLAG} true: no checkpoint to resume from in --output_dir {output_dir} (no checkpoint-N "
                f"folder holding {TRAINER_STATE}). Pass the --output_dir of the run to resume, or a checkpoint folder."
            )
        return str(found[-1])
    path = pathlib.Path(value).expanduser()
    if not path.is_dir():
        raise UsageError(f"{RESUME_FLAG} {value}: no such folder{nearby(path)}.")
    if not (path / TRAINER_STATE).is_file():
        inside = [child.name for child in checkpoints(path)]
        hint = (
            f"; it holds {', '.join(inside)}: pass one of them, or --output_dir {value} {RESUME_FLAG} true"
            if inside
            else f" (a save cut short leaves such a folder; {RESUME_FLAG} true takes the latest complete one)"
        )
        raise UsageError(f"{RESUME_FLAG} {value}: not a checkpoint, it has no {TRAINER_STATE}{hint}.")
    return str(path)


def without_resume(argv: Sequence[str]) -> list[str]:
    """``argv`` minus any ``--resume_from_checkpoint`` flag and its value (``--flag V``, ``--flag=V``, bare)."""
    names = (RESUME_FLAG, RESUME_FLAG.replace("_", "-"))
    kept, skip_value = [], False
    for arg in argv:
        if skip_value:
            skip_value = False
            if not arg.startswith("-"):
                continue
        if arg in names:
            skip_value = True
            continue
        if arg.startswith(tuple(f"{name}=" for name in names)):
            continue
        kept.append(arg)
    return kept


def command_prefix(launcher: str) -> str:
    """How this run was started, as far as it can be told from here: ``launcher`` (``trl-ada train``, or
    ``python -m trl_ada.train``), except under a multi-process launcher, whose own flags are not visible here."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return "accelerate launch <your launch flags> -m trl_ada.train"
    return launcher


# What a multi-process launcher leaves in the environment: torch.distributed.run (accelerate's --multi_gpu) sets
# WORLD_SIZE, MPI (accelerate's --cpu with --mpirun_hostfile) its own size.
STARTED_SEVERAL = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def single_cpu_launch_message(env: Mapping[str, str]) -> str | None:
    """The warning for ``accelerate launch --cpu --num_processes N`` (N > 1) without MPI: accelerate's CPU launcher
    then starts this one process, with MASTER_ADDR set for the N it was asked for but no process count, so the run
    trains on one process. None for any other start."""
    asked_for_several = "MASTER_ADDR" in env and env.get("ACCELERATE_USE_CPU", "").lower() in ("true", "1", "yes")
    if not asked_for_several or any(name in env for name in STARTED_SEVERAL):
        return None
    return (
        f"{PROG}: warning: `accelerate launch --cpu` started one process: without MPI (--mpirun_hostfile) its CPU "
        "launcher runs a single process whatever --num_processes says, so this run trains on 1 process. For N CPU "
        "processes over gloo: `accelerate launch --multi_gpu --num_processes N -m trl_ada.train ... --use_cpu true "
        "--bf16 false`."
    )


def interrupted_message(output_dir: str, argv: Sequence[str], launcher: str = PROG) -> str:
    """The one line Ctrl-C ends ``trl-ada train`` with: the last complete checkpoint and the command resuming it."""
    found = checkpoints(output_dir)
    prefix = command_prefix(launcher)
    if not found:
        return (
            f"{PROG}: interrupted before any checkpoint was saved in {output_dir}: nothing to resume. Start again "
            f"with: {prefix} {shlex.join(without_resume(argv))}".rstrip()
        )
    last = found[-1]
    return (
        f"{PROG}: interrupted; last checkpoint: {last} (step {checkpoint_step(last)}). Resume with: "
        f"{prefix} {shlex.join([*without_resume(argv), RESUME_FLAG, str(last)])}"
    )


def _close_progress_bar(trainer) -> None:
    """End the progress bar's line, so the interruption message starts a line of its own."""
    if trainer is None:
        return
    for callback in trainer.callback_handler.callbacks:
        bar = getattr(callback, "training_bar", None)
        if bar is not None:
            bar.close()


# -------------------------------------------------------------------------------------------------------------------
# Main
# -------------------------------------------------------------------------------------------------------------------


def build_trainer(parsed: ParsedArgs, problems: Sequence[UsageError | RunError] = ()):
    """Everything ``main`` does before ``train()``: checks, model, rewards, data; returns the trainer.

    Every check that loads no weights runs first, and everything they find, with ``problems`` (the command line's),
    is raised as one error, numbered on one line: the hardware (mixed precision, vLLM), the rewards, the model and
    dataset names (a Hub name must be cached or the Hub reachable), and the data's splits and columns. The data is
    read for that when it is on this machine, or when nothing else is wrong (a Hub dataset is not downloaded for a
    run that cannot start).
    """
    from trl import get_peft_config, get_quantization_config

    from ..adapter.trainer import ReinforceAdaTrainer

    found = list(problems)
    # A dataclass that refused its values is None; its fields' values as parsed stand in for the checks below.
    settings = parsed.values
    script_args, training_args = parsed.script_args or settings, parsed.training_args or settings
    model_args, dataset_args = parsed.model_args or settings, parsed.dataset_args

    def attempt(check, *args):
        try:
            return check(*args)
        except (UsageError, RunError) as error:
            found.append(error)
            return None

    if (message := vllm_problem(training_args.use_vllm, training_args.vllm_mode)) is not None:
        found.append(UsageError(message))
    rewards = attempt(load_rewards, script_args)
    model = attempt(resolve_model, model_args.model_name_or_path, model_args.model_revision)
    data_found = []
    if dataset_args is not None:
        local = attempt(check_dataset_name, script_args, dataset_args)
        if local or (local is not None and not found):
            data = attempt(load_data, script_args, dataset_args, local)
            if data is not None:
                train, evaluation, data_found = split_problems(data, script_args, training_args, rewards or [])
                found += [RunError(problem) for problem in data_found]
                signature = reward_signature_message(rewards or [], getattr(train, "column_names", None))
                if signature is not None:  # the trainer checks this too; here it is one line, before any model loads
                    found.append(UsageError(signature))
    if found:
        # Named when they are all of one kind, as each kind's own checks do.
        what = "the data" if len(found) == len(data_found) else "the settings" if len(found) == len(problems) else ""
        raise combined(found, what)
    if model_args.model_name_or_path in TOY_MODELS:
        from ..toy import use_toy_threads

        use_toy_threads()  # 1 torch thread unless OMP_NUM_THREADS says otherwise: more spin on matrices this small

    model_init_kwargs = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    training_args.model_init_kwargs = model_init_kwargs | (training_args.model_init_kwargs or {})
    try:
        trainer = ReinforceAdaTrainer(
            model=model,
            reward_funcs=rewards,
            args=training_args,
            train_dataset=train,
            eval_dataset=evaluation,
            quantization_config=get_quantization_config(model_args),
            peft_config=get_peft_config(model_args),
        )
    except OSError as error:
        # transformers reports a model it cannot load (no such repository, a gated one, missing files) as an OSError
        # naming it, chained to huggingface_hub's: its own message is the useful part.
        if model not in str(error):
            raise
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        raise RunError(f"cannot load --model_name_or_path {model}: {' '.join(lines)}") from None
    if not training_args.disable_tqdm:
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(AdaProgressCallback())
    return trainer


def describe(args: ReinforceAdaConfig, num_processes: int) -> str:
    """The batch arithmetic of a run, stated once at start-up (what a 'step' means is easy to get wrong)."""
    group = args.num_generations
    per_optimizer_step = args.per_device_train_batch_size * num_processes * args.gradient_accumulation_steps
    per_generation = args.per_device_train_batch_size * num_processes * args.steps_per_generation
    if args.sampling_strategy == "uniform":
        budget = f", {group} samples per prompt"
    elif args.sampling_strategy in ("balanced", "positive"):
        budget = f", at most {args.max_rounds} rounds x {args.samples_per_round} samples per prompt"
    else:  # a strategy that sizes its own budget
        budget = ""
    return (
        f"Reinforce-Ada ({args.sampling_strategy}) on {num_processes} process(es): "
        f"{per_generation // group} prompts x {group} kept completions per generation, "
        f"{per_optimizer_step // group} prompts per optimizer step, "
        f"{args.steps_per_generation / args.gradient_accumulation_steps:g} optimizer steps per generation{budget}"
    )


def end_run(trainer) -> None:
    """Finish the trackers and destroy the process group (TRL's scripts call ``trainer.end()``), except over gloo.

    A gloo (CPU) process group destroyed explicitly is freed later, with the DDP wrapper, while its worker thread
    still needs the interpreter lock to release the last collective's tensors: the process then hangs at exit
    (torch 2.13, two CPU processes, about one run in two). Over gloo the group is left to process exit.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
        trainer.accelerator.wait_for_everyone()
        for tracker in trainer.accelerator.trackers:
            tracker.finish()
    elif hasattr(trainer, "end"):  # transformers >= 5.18
        trainer.end()


def main(argv: Sequence[str] | None = None, launcher: str = PROG) -> int:
    """Run ``trl-ada train`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code: 0 done, 1 the run
    failed before training (no network, a model that cannot be loaded, data without a split or column the run
    needs), 2 a usage error, 130 Ctrl-C. ``launcher`` starts the command that Ctrl-C prints to resume the run
    (``python -m trl_ada.train`` when run as a module)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    trainer = training_args = None
    if (warning := single_cpu_launch_message(os.environ)) is not None:
        print(warning, file=sys.stderr)
    try:
        try:
            parsed = read_args(argv)
            problems: list[UsageError | RunError] = [UsageError(problem) for problem in parsed.problems]
            training_args, resume = parsed.training_args, None
            if training_args is not None:
                try:
                    resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
                except UsageError as error:
                    problems.append(error)
                training_args.resume_from_checkpoint = resume
            trainer = build_trainer(parsed, problems)
        except UsageError as error:
            print(f"{PROG}: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        except RunError as error:
            print(f"{PROG}: error: {error}", file=sys.stderr)
            return EXIT_FAILURE

        trainer.accelerator.print(describe(training_args, trainer.accelerator.num_processes))
        if resume is not None:
            trainer.accelerator.print(f"Resuming from {resume} (step {checkpoint_step(pathlib.Path(resume))})")
        try:
            trainer.train(resume_from_checkpoint=resume)
        except RewardFunctionError as error:  # raised on every process, naming the function, the row and the fix
            _close_progress_bar(trainer)
            if trainer.accelerator.is_main_process:
                print(f"{PROG}: error: {one_line(error)}", file=sys.stderr)
            return EXIT_FAILURE
        trainer.save_model(training_args.output_dir)
        trainer.save_state()  # trainer_state.json next to the model: every logged metric, whatever report_to says
        trainer.accelerator.print(f"Model saved to {training_args.output_dir}")
        if training_args.push_to_hub:
            dataset_name = parsed.script_args.dataset_name
            is_builtin = dataset_name is not None and dataset_name.startswith(BUILTIN_PREFIX)
            trainer.push_to_hub(dataset_name=None if is_builtin else dataset_name)
            trainer.accelerator.print(f"Model pushed to https://huggingface.co/{trainer.hub_model_id}")
        end_run(trainer)
        return 0
    except KeyboardInterrupt:
        # Ctrl-C: one line saying what is saved and how to go on, instead of a traceback from deep in the step.
        _close_progress_bar(trainer)
        if int(os.environ.get("RANK", "0")) == 0:  # once, from the main process
            if training_args is None:
                print(f"\n{PROG}: interrupted", file=sys.stderr)
            else:
                print(interrupted_message(training_args.output_dir, argv, launcher), file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main(launcher="python -m trl_ada.train"))
