"""``trl-ada train``: train with ``ReinforceAdaTrainer`` from a YAML recipe and/or command-line flags.

    trl-ada train --config toy-cpu
    trl-ada train --config qwen2.5-math-1.5b/hard-balanced --max_steps 100 --output_dir runs/try
    trl-ada train --config my-recipe.yaml
    accelerate launch --config_file "$(trl-ada recipes --path accelerate/zero2)" -m trl_ada.train \\
        --config qwen2.5-math-1.5b/hard-balanced

--config takes a YAML file or the name of a recipe shipped with the package (`trl-ada recipes` lists them; a file
of that name wins). Every field of ReinforceAdaConfig (all of GRPOConfig plus the sampling fields), trl.ModelConfig
and trl.DatasetMixtureConfig is a flag, as in TRL's own ``trl grpo`` script; a flag overrides the same key in the
YAML.

Built-ins (the ``builtin:`` prefix cannot be a Hub id, so it never shadows a real model or dataset):
  --model_name_or_path builtin:toy        the toy model after its supervised warm-up (shipped with the package)
  --model_name_or_path builtin:toy-cold   the untrained toy model (smoke tests)
  --dataset_name builtin:toy              the toy arithmetic task (train and test splits)
  --reward_funcs toy | math | <a trl.rewards function> | <dotted.import.path>

Datasets: a Hub name, a local .json/.jsonl/.parquet/.csv file (one split, "train"), a folder written by
``Dataset.save_to_disk`` or holding data files, or a ``datasets:`` mixture in the YAML. The training split needs a
``prompt`` column; ``trl-ada prepare`` writes one.

Precision: GRPOConfig turns bf16 on by default. Without a bf16-capable GPU this command stops and says so instead of
quietly training in fp32 on the CPU; pass ``--use_cpu true --bf16 false`` to train on the CPU on purpose.

Resume: ``--resume_from_checkpoint PATH`` resumes from that checkpoint folder; ``--resume_from_checkpoint true``, or
the bare flag, from the latest complete ``checkpoint-N`` in ``--output_dir``. Ctrl-C stops a run with one line
naming its last checkpoint and the command that resumes it (exit code 130).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from transformers.trainer_callback import ProgressCallback
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, ScriptArguments, TrlParser

from ..adapter.checks import missing_prompt_column_message, reward_columns_message, reward_signature_message
from ..adapter.config import ReinforceAdaConfig
from ..adapter.config_fields import ReinforceAdaFields
from ..adapter.errors import RunError, UsageError
from ..adapter.model_names import check_model_name, nearby
from .catalog import RecipeNotFound, resolve_config
from .cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, show_defaults
from .flags import follow_eval_strategy, unknown_fields_message

BUILTIN_PREFIX = "builtin:"
TOY_MODELS = {"builtin:toy": True, "builtin:toy-cold": False}  # name -> supervised warm-up
TOY_DATASET = "builtin:toy"
TOY_SPLIT_SIZES = {"train": 8192, "test": 256}
DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
PROG = "trl-ada train"
RESUME_FLAG = "--resume_from_checkpoint"
RESUME_LATEST = "true"  # what the bare flag means


@dataclass
class TrainScriptArguments(ScriptArguments):
    """Script arguments of ``trl-ada train``: TRL's dataset arguments plus the rewards."""

    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions: 'math' (math-verify on the last \\boxed{}), 'toy', a function of trl.rewards "
            "(e.g. 'accuracy_reward'), or a dotted import path ('my_module.my_reward'). Weights: --reward_weights."
        },
    )
    reward_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A sequence-classification reward model (Hub id or local folder), scored first."},
    )


# -------------------------------------------------------------------------------------------------------------------
# Parsing
# -------------------------------------------------------------------------------------------------------------------


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each flag once, in its underscore spelling: HfArgumentParser also accepts ``--dashed-names``, and listing both
    doubled the width of every entry."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        first = action.option_strings[0]
        flags = ", ".join(flag for flag in action.option_strings if flag == first or flag != first.replace("_", "-"))
        if action.nargs == 0:
            return flags
        return f"{flags} {self._format_args(action, self._get_default_metavar_for_optional(action))}"


class TrainParser(TrlParser):
    """TrlParser over (script, ReinforceAdaConfig, ModelConfig, DatasetMixtureConfig) that checks the precision flags
    against the hardware before GRPOConfig sees them, because GRPOConfig's own check fails with a less useful message.
    """

    def parse_known_args(self, args=None, namespace=None):
        namespace, remaining = super().parse_known_args(args, namespace)
        check_precision(namespace.bf16, namespace.fp16, namespace.use_cpu)
        return namespace, remaining


# (dataclass, heading, description) in the order `--help` lists them: what this package adds first.
HELP_GROUPS: tuple[tuple[type, str, str], ...] = (
    (
        ReinforceAdaConfig,
        "Reinforce-Ada sampling (ReinforceAdaConfig's own fields)",
        "How many completions each prompt draws and which ones the loss sees. Everything else below is TRL's.",
    ),
    (TrainScriptArguments, "data and rewards", "Where the prompts come from and how completions are scored."),
    (ModelConfig, "model (trl.ModelConfig)", "The policy, its precision, LoRA and quantization."),
    (
        GRPOConfig,
        "training (trl.GRPOConfig and transformers.TrainingArguments)",
        "Batches, optimizer, generation, logging, checkpoints.",
    ),
    (DatasetMixtureConfig, "dataset mixture (trl.DatasetMixtureConfig)", "A `datasets:` list in the YAML."),
)


def own_fields(dataclass_type: type) -> list[str]:
    """The fields a dataclass declares itself (for ReinforceAdaFields: the sampling fields, not GRPOConfig's)."""
    return list(vars(dataclass_type).get("__annotations__", {}))


def dataclass_field_names(dtype: type) -> list[str]:
    """The names of a dataclass's fields, its parents' included (each one a flag)."""
    return [item.name for item in dataclasses.fields(dtype) if item.init]


def _group_help(parser: TrainParser) -> None:
    """Move every flag from argparse's single "options" list into a heading per dataclass, Reinforce-Ada's first.

    Only the help changes: parsing reads ``parser._actions``, which keeps every flag whatever its heading.
    """
    ada = set(own_fields(ReinforceAdaFields))
    owners = {name: index for index, (dtype, _, _) in enumerate(HELP_GROUPS) for name in dataclass_field_names(dtype)}
    for name in ada:
        owners[name] = 0  # scale_rewards is GRPOConfig's too: listed with Ada's, whose default ("none") it changes
    groups = [parser.add_argument_group(title, description) for _, title, description in HELP_GROUPS]
    remaining = []
    for action in parser._optionals._group_actions:
        index = owners.get(action.dest)
        if index is None:
            remaining.append(action)  # -h and --config stay on top
        else:
            groups[index]._group_actions.append(action)
    parser._optionals._group_actions[:] = remaining
    order = {name: position for position, name in enumerate(own_fields(ReinforceAdaFields))}
    groups[0]._group_actions.sort(key=lambda action: order[action.dest])  # as the class declares them
    parser._action_groups[:] = [parser._optionals, *groups]  # no positional arguments to list


def make_parser(prog: str = PROG) -> TrainParser:
    """The parser of ``trl-ada train``: every field a flag, listed under one heading per dataclass, Ada's first.

    The usage line is short (the full list would be some 270 flags long), so a usage error prints two lines.
    """
    dataclass_types = (TrainScriptArguments, ReinforceAdaConfig, ModelConfig, DatasetMixtureConfig)
    parser = TrainParser(
        dataclass_types,
        prog=prog,
        usage="%(prog)s [--config RECIPE] [--FIELD VALUE ...]  (`%(prog)s --help` lists every field)",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=_HelpFormatter,
    )
    # TrlParser takes `--config PATH` out of the arguments before argparse sees them: this entry is for the help only
    # (SUPPRESS keeps it out of the parsed namespace, which HfArgumentParser would return as an extra object).
    parser.add_argument(
        "--config",
        metavar="RECIPE",
        default=argparse.SUPPRESS,
        help="a YAML recipe: a file, or a packaged recipe's name (`trl-ada recipes` lists them); flags override it",
    )
    resume = next(action for action in parser._actions if action.dest == "resume_from_checkpoint")
    resume.nargs, resume.const, resume.metavar = "?", RESUME_LATEST, "PATH|true"
    resume.help = (
        "A checkpoint folder to resume from; `true` (or the bare flag): the latest complete checkpoint-N in "
        "--output_dir."
    )
    _group_help(parser)
    return show_defaults(parser)


def parse_args(
    argv: Sequence[str] | None = None,
) -> tuple[TrainScriptArguments, ReinforceAdaConfig, ModelConfig, DatasetMixtureConfig]:
    """Parse ``--config file.yaml`` and flags into the four dataclasses; unknown keys or flags are a UsageError."""
    argv = sys.argv[1:] if argv is None else list(argv)
    config_path = None
    for position, arg in enumerate(argv):
        if arg.startswith("--config="):  # TrlParser reads `--config PATH` only
            argv[position : position + 1] = ["--config", arg.removeprefix("--config=")]
    if "--config" not in argv and not {"-h", "--help"} & set(argv):
        message = missing_essentials(argv)
        if message is not None:  # before the precision check, whose bf16 advice would come first otherwise
            raise UsageError(message)
    if "--config" in argv:
        position = argv.index("--config")
        if position + 1 == len(argv):
            raise UsageError("--config needs a YAML file or a packaged recipe's name (`trl-ada recipes` lists them).")
        try:
            config_path = str(resolve_config(argv[position + 1]))
        except RecipeNotFound as error:
            raise UsageError(error.args[0]) from None
        argv[position + 1] = config_path
    parser = make_parser()
    *parsed, unknown_in_config, unknown_flags = parser.parse_args_and_config(
        argv, return_remaining_strings=True, separate_remaining_strings=True
    )
    message = unknown_fields_message(config_path, unknown_in_config, unknown_flags, parser)
    if message is not None:
        raise UsageError(message)
    script_args, training_args, model_args, dataset_args = parsed
    follow_eval_strategy(training_args, argv)
    return script_args, training_args, model_args, dataset_args


# What a run needs and no default gives: (what, the flags that give it). A recipe (--config) may give them all.
ESSENTIALS = (
    ("model", ("--model_name_or_path",)),
    ("dataset", ("--dataset_name",)),
    ("reward", ("--reward_funcs", "--reward_model_name_or_path")),
)
TOY_RECIPE_NAME = "toy-cpu"


def missing_essentials(argv: Sequence[str]) -> str | None:
    """Without a --config recipe and with none of a model, a dataset and a reward given (bare ``trl-ada train``),
    the error saying so, which points to the toy recipe; None otherwise. When only some are missing, the later
    checks name the one missing (`resolve_model`, `load_data`, `load_rewards`)."""
    given = {arg.split("=", 1)[0].replace("-", "_").replace("__", "--", 1) for arg in argv if arg.startswith("--")}
    if any(given & set(flags) for _, flags in ESSENTIALS):
        return None
    missing = ", ".join(f"no {what} ({flags[0]})" for what, flags in ESSENTIALS)
    return (
        f"Nothing says what to train: no --config recipe, {missing}. To try "
        f"trl-ada, train the built-in toy task on this CPU: `{PROG} --config {TOY_RECIPE_NAME}`. Otherwise pass "
        f"--config with a recipe (`trl-ada recipes` lists them), or those three (`{PROG} --help` lists every flag)."
    )


def check_precision(bf16: bool | None, fp16: bool, use_cpu: bool) -> None:
    """Refuse mixed precision the hardware cannot run, naming the flags that fix it.

    Refusing, rather than falling back to fp32, is deliberate: the usual cause is a GPU node whose CUDA is not
    visible, and a silent fallback would start a multi-hour CPU run of a GPU recipe.
    """
    from transformers.utils import is_torch_bf16_gpu_available, is_torch_cuda_available, is_torch_xla_available

    bf16 = (not fp16) if bf16 is None else bf16  # GRPOConfig's default: bf16 unless fp16 is asked for
    cpu_hint = "To train on the CPU on purpose, pass `--use_cpu true --bf16 false` (the toy-cpu recipe does)."
    if fp16 and not is_torch_cuda_available():
        raise UsageError(f"fp16 mixed precision needs a CUDA GPU and none is visible. {cpu_hint}")
    if bf16 and not use_cpu and not (is_torch_bf16_gpu_available() or is_torch_xla_available()):
        gpu_hint = (
            "This GPU has no bf16: pass `--bf16 false` (fp32) or `--bf16 false --fp16 true`."
            if is_torch_cuda_available()
            else "On a GPU machine, check that `python -c 'import torch; print(torch.cuda.is_available())'` prints "
            "True (CUDA_VISIBLE_DEVICES, driver, a CUDA build of torch)."
        )
        raise UsageError(
            "bf16 mixed precision is on (GRPOConfig's default, or the recipe asks for it) but no bf16-capable GPU "
            f"is visible. {gpu_hint} {cpu_hint}"
        )


def check_vllm(training_args: ReinforceAdaConfig) -> None:
    if training_args.use_vllm and importlib.util.find_spec("vllm") is None:
        raise UsageError(
            f"use_vllm is true (vllm_mode={training_args.vllm_mode!r}) but vLLM is not installed. Install it with "
            "`pip install -e '.[vllm]'` in the trl-ada clone (it needs a CUDA GPU), or pass `--use_vllm false` to "
            "generate with transformers."
        )


# -------------------------------------------------------------------------------------------------------------------
# Model, rewards, data
# -------------------------------------------------------------------------------------------------------------------


def resolve_model(name: str | None, revision: str | None = None, flag: str = "--model_name_or_path") -> str:
    """The folder or Hub id to load for ``name``, checked before any weights are read.

    ``builtin:`` names give the toy model's folder (the shipped warm model, or the cold one built in the cache).
    Anything else goes through :func:`trl_ada.model_names.check_model_name`: a missing local folder is a UsageError
    ("no such folder"), a Hub id that can be neither downloaded nor read from the cache a RunError, both in seconds.
    """
    if not name:
        raise UsageError(f"No model: pass {flag} (a Hub id, a local folder, or builtin:toy for the toy model).")
    if name.startswith(BUILTIN_PREFIX):
        if name not in TOY_MODELS:
            raise UsageError(f"Unknown built-in model {name!r}: use one of {sorted(TOY_MODELS)}.")
        from ..toy import toy_model_dir

        return str(toy_model_dir(warmup=TOY_MODELS[name]))  # file-locked: concurrent processes build it once
    return check_model_name(name, revision, flag)


def load_rewards(script_args: TrainScriptArguments) -> list[Any]:
    from .rewards import resolve_reward

    rewards: list[Any] = []
    if script_args.reward_model_name_or_path:
        rewards.append(resolve_model(script_args.reward_model_name_or_path, flag="--reward_model_name_or_path"))
    for name in script_args.reward_funcs or []:
        try:
            rewards.append(resolve_reward(name))
        except ValueError as error:
            raise UsageError(str(error)) from None
    if not rewards:
        raise UsageError(
            "No reward: pass --reward_funcs with one or more of 'math', 'toy', a trl.rewards function such as "
            "'accuracy_reward', or a dotted import path; or --reward_model_name_or_path."
        )
    return rewards


def load_data(script_args: TrainScriptArguments, dataset_args: DatasetMixtureConfig):
    """The dataset as a DatasetDict (or IterableDatasetDict when streaming), from whichever source was named."""
    import datasets

    name = script_args.dataset_name
    if dataset_args.datasets:
        from trl import get_dataset

        return get_dataset(dataset_args)  # a YAML `datasets:` mixture wins over dataset_name, as in `trl grpo`
    if not name:
        raise UsageError(
            "No dataset: pass --dataset_name (a Hub dataset, a local .jsonl/.json/.parquet/.csv file or folder, or "
            "builtin:toy), or list a `datasets:` mixture in the YAML."
        )
    if name.startswith(BUILTIN_PREFIX):
        if name != TOY_DATASET:
            raise UsageError(f"Unknown built-in dataset {name!r}: use {TOY_DATASET!r}.")
        from ..toy import toy_dataset_split

        train, test = toy_dataset_split(TOY_SPLIT_SIZES["train"], TOY_SPLIT_SIZES["test"], seed=0)
        return datasets.DatasetDict(train=train, test=test)

    path = pathlib.Path(name).expanduser()
    if path.is_file():
        builder = DATA_FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise UsageError(f"Cannot read {name}: unknown extension; use one of {sorted(DATA_FILE_BUILDERS)}.")
        return datasets.load_dataset(builder, data_files=str(path))
    if path.suffix.lower() in DATA_FILE_BUILDERS:  # looks like a file, so do not send it to the Hub
        raise UsageError(f"--dataset_name {name}: no such file.")
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        loaded = datasets.load_from_disk(str(path))
        return loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict(train=loaded)
    return datasets.load_dataset(name, name=script_args.dataset_config, streaming=script_args.dataset_streaming)


def pick_splits(data, script_args: TrainScriptArguments, training_args: ReinforceAdaConfig, rewards=()):
    """(train, eval or None); eval when eval_strategy or eval_on_start asks for it. Checks the splits, their `prompt`
    columns and the columns `rewards` need, and reports every problem found in one RunError (bad data: exit 1)."""
    splits = list(data)
    problems = []
    train = data[script_args.dataset_train_split] if script_args.dataset_train_split in data else None
    if train is None:
        problems.append(
            f"The dataset has no {script_args.dataset_train_split!r} split; it has {splits}. "
            "Pass --dataset_train_split with one of them."
        )
    evaluation = None
    strategy = getattr(training_args.eval_strategy, "value", training_args.eval_strategy)
    if strategy != "no" or training_args.eval_on_start:
        if script_args.dataset_test_split not in data:
            asked = f"eval_strategy={strategy!r}" if strategy != "no" else "eval_on_start=True"
            problems.append(
                f"{asked} needs an evaluation split, but the dataset has no {script_args.dataset_test_split!r} split "
                f"(it has {splits}). Pass --dataset_test_split with one of them, or --eval_strategy no "
                "--eval_on_start false."
            )
        else:
            evaluation = data[script_args.dataset_test_split]
    for split_name, split in (("train", train), ("eval", evaluation)):
        # The trainer checks this too; here it is a usage error, before any model loads. None for some streamed
        # datasets: nothing to check.
        if split is not None:
            problems.append(missing_prompt_column_message(split_name, getattr(split, "column_names", None)))
    if train is not None:  # the trainer checks this too, after the splits; here it is reported with them
        problems.append(reward_columns_message(rewards, getattr(train, "column_names", None)))
    problems = [problem for problem in problems if problem is not None]
    if len(problems) == 1:
        raise RunError(problems[0])
    if problems:  # one line, as every error
        raise RunError(
            f"{len(problems)} problems with the data: "
            + " ".join(f"({number}) {problem}" for number, problem in enumerate(problems, 1))
        )
    return train, evaluation


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


def build_trainer(script_args, training_args, model_args, dataset_args):
    """Everything ``main`` does before ``train()``: checks, model, rewards, data; returns the trainer."""
    from trl import get_peft_config, get_quantization_config

    from ..adapter.trainer import ReinforceAdaTrainer

    check_vllm(training_args)
    rewards = load_rewards(script_args)
    model = resolve_model(model_args.model_name_or_path, model_args.model_revision)
    if model_args.model_name_or_path in TOY_MODELS:
        from ..toy import use_toy_threads

        use_toy_threads()  # 1 torch thread unless OMP_NUM_THREADS says otherwise: more spin on matrices this small
    train, evaluation = pick_splits(load_data(script_args, dataset_args), script_args, training_args, rewards)
    signature = reward_signature_message(rewards, getattr(train, "column_names", None))
    if signature is not None:  # the trainer checks this too; here it is one line, before any model loads
        raise UsageError(signature)

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
    try:
        try:
            try:
                script_args, training_args, model_args, dataset_args = parse_args(argv)
            except ValueError as error:  # the configs' own validation names the fields to change: no traceback
                raise UsageError(str(error)) from None
            resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
            training_args.resume_from_checkpoint = resume
            trainer = build_trainer(script_args, training_args, model_args, dataset_args)
        except UsageError as error:
            print(f"{PROG}: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        except RunError as error:
            print(f"{PROG}: error: {error}", file=sys.stderr)
            return EXIT_FAILURE

        trainer.accelerator.print(describe(training_args, trainer.accelerator.num_processes))
        if resume is not None:
            trainer.accelerator.print(f"Resuming from {resume} (step {checkpoint_step(pathlib.Path(resume))})")
        trainer.train(resume_from_checkpoint=resume)
        trainer.save_model(training_args.output_dir)
        trainer.save_state()  # trainer_state.json next to the model: every logged metric, whatever report_to says
        trainer.accelerator.print(f"Model saved to {training_args.output_dir}")
        if training_args.push_to_hub:
            dataset_name = script_args.dataset_name
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
