"""``trl-ada train``'s command line: its dataclasses, its parser (what ``--help`` prints, below) and the checks on
what the flags ask for, made before any model loads.

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
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, ScriptArguments, TrlParser

from ..adapter.config import ReinforceAdaConfig
from ..adapter.config_fields import ReinforceAdaFields
from ..adapter.errors import UsageError, numbered, one_line
from .catalog import RecipeNotFound, resolve_config
from .cli import show_defaults
from .flags import (
    async_recipe_message,
    follow_eval_strategy,
    from_recipe,
    given_fields,
    join_negative_values,
    read_recipe,
    set_recipe_defaults,
    unknown_fields_message,
)

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
    """TrlParser over (script, ReinforceAdaConfig, ModelConfig, DatasetMixtureConfig). ``read_args`` drives it: the
    recipe, the flags, then each dataclass built on its own, so that every problem is reported at once."""


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


@dataclass
class ParsedArgs:
    """What ``read_args`` made of the command line. A dataclass whose values it refuses is None and its problems are
    in ``problems`` (each one sentence, the recipe's keys named as such); ``values`` holds every field's value as
    parsed (the recipe's, then the flags'), for the checks that can run without the dataclasses."""

    script_args: TrainScriptArguments | None
    training_args: ReinforceAdaConfig | None
    model_args: ModelConfig | None
    dataset_args: DatasetMixtureConfig | None
    values: argparse.Namespace
    problems: list[str]


def read_args(argv: Sequence[str] | None = None) -> ParsedArgs:
    """Read ``--config RECIPE`` and the flags into the four dataclasses, collecting every problem: the recipe's keys
    that name no field and its values of the wrong type, the flags that name none, mixed precision the hardware
    cannot run, and each dataclass's own checks (ReinforceAdaConfig names all of its own). An unreadable recipe, bare
    ``trl-ada train`` and a flag argparse cannot parse still stop at once (a UsageError; argparse exits with 2)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    for position, arg in enumerate(argv):
        if arg.startswith("--config="):
            argv[position : position + 1] = ["--config", arg.removeprefix("--config=")]
    if "--config" not in argv and not {"-h", "--help"} & set(argv):
        message = missing_essentials(argv)
        if message is not None:  # before the precision check, whose bf16 advice would come first otherwise
            raise UsageError(message)
    parser = make_parser()
    config_path, unknown_in_config, problems, recipe_keys = None, [], [], set()
    if "--config" in argv:
        position = argv.index("--config")
        if position + 1 == len(argv):
            raise UsageError("--config needs a YAML file or a packaged recipe's name (`trl-ada recipes` lists them).")
        try:
            config_path = str(resolve_config(argv[position + 1]))
        except RecipeNotFound as error:
            raise UsageError(error.args[0]) from None
        del argv[position : position + 2]
        recipe = read_recipe(config_path)
        message = async_recipe_message(config_path, recipe)
        if message is not None:
            raise UsageError(message)
        env = recipe.pop("env", {})  # as TRL's parser: environment variables for the run
        if not isinstance(env, dict):
            raise UsageError(f"--config {config_path}: `env` must be a mapping of variable: value.")
        os.environ.update({str(key): str(value) for key, value in env.items()})
        unknown_in_config, problems = set_recipe_defaults(parser, config_path, recipe)
        recipe_keys = set(recipe) - given_fields(argv)  # the keys whose values the run takes from the recipe
    namespace, unknown_flags = parser.parse_known_args(join_negative_values(argv, parser))
    message = unknown_fields_message(config_path, unknown_in_config, unknown_flags, parser)
    if message is not None:
        problems.append(message)
    values = argparse.Namespace(**vars(namespace))
    # The problems with the values, whose fields may come from the recipe: said so, naming its keys.
    checked: list[str] = []
    precision = precision_problem(namespace.bf16, namespace.fp16, namespace.use_cpu)
    if precision is not None:
        # Reported here, in words that say what to do; the config is built in fp32 so that its other checks run
        # without transformers' own "doesn't support bf16/gpu" saying the same again.
        checked.append(precision)
        namespace.bf16, namespace.fp16 = False, False
    built: list[Any] = []
    for dtype in parser.dataclass_types:
        keys = {item.name for item in dataclasses.fields(dtype) if item.init}
        try:
            built.append(dtype(**{key: value for key, value in vars(namespace).items() if key in keys}))
        except ValueError as error:  # the dataclass's own checks name the fields to change
            built.append(None)
            checked += getattr(error, "problems", [str(error)])
    script_args, training_args, model_args, dataset_args = built
    if training_args is not None:
        follow_eval_strategy(training_args, argv)
    follow_eval_strategy(values, argv)
    problems += [from_recipe(one_line(problem), config_path, sorted(recipe_keys)) for problem in checked]
    return ParsedArgs(script_args, training_args, model_args, dataset_args, values, problems)


def parse_args(
    argv: Sequence[str] | None = None,
) -> tuple[TrainScriptArguments, ReinforceAdaConfig, ModelConfig, DatasetMixtureConfig]:
    """Parse ``--config file.yaml`` and flags into the four dataclasses; any problem ``read_args`` finds is one
    UsageError naming them all."""
    parsed = read_args(argv)
    if parsed.problems:
        raise UsageError(numbered(parsed.problems, "the settings"))
    return parsed.script_args, parsed.training_args, parsed.model_args, parsed.dataset_args


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


def precision_problem(bf16: bool | None, fp16: bool, use_cpu: bool) -> str | None:
    """Mixed precision the hardware cannot run, in words naming the flags that fix it; None when it can.

    Refusing, rather than falling back to fp32, is deliberate: the usual cause is a GPU node whose CUDA is not
    visible, and a silent fallback would start a multi-hour CPU run of a GPU recipe.
    """
    from transformers.utils import is_torch_bf16_gpu_available, is_torch_cuda_available, is_torch_xla_available

    bf16 = (not fp16) if bf16 is None else bf16  # GRPOConfig's default: bf16 unless fp16 is asked for
    cpu_hint = "To train on the CPU on purpose, pass `--use_cpu true --bf16 false` (the toy-cpu recipe does)."
    if fp16 and not is_torch_cuda_available():
        return f"fp16 mixed precision needs a CUDA GPU and none is visible. {cpu_hint}"
    if bf16 and not use_cpu and not (is_torch_bf16_gpu_available() or is_torch_xla_available()):
        gpu_hint = (
            "This GPU has no bf16: pass `--bf16 false` (fp32) or `--bf16 false --fp16 true`."
            if is_torch_cuda_available()
            else "On a GPU machine, check that `python -c 'import torch; print(torch.cuda.is_available())'` prints "
            "True (CUDA_VISIBLE_DEVICES, driver, a CUDA build of torch)."
        )
        return (
            "bf16 mixed precision is on (GRPOConfig's default, or the recipe asks for it) but no bf16-capable GPU "
            f"is visible. {gpu_hint} {cpu_hint}"
        )
    return None


def check_precision(bf16: bool | None, fp16: bool, use_cpu: bool) -> None:
    """Raise `precision_problem`'s message as a UsageError."""
    message = precision_problem(bf16, fp16, use_cpu)
    if message is not None:
        raise UsageError(message)


def vllm_problem(use_vllm: bool, vllm_mode: str) -> str | None:
    """What stops ``use_vllm`` here: vLLM not installed, or no CUDA GPU (colocate runs vLLM in this process; server
    mode sends the weights to the server over NCCL); None when nothing does or vLLM is not asked for."""
    from transformers.utils import is_torch_cuda_available

    if not use_vllm:
        return None
    fix = "or pass `--use_vllm false` to generate with transformers."
    if importlib.util.find_spec("vllm") is None:
        return (
            f"use_vllm is true (vllm_mode={vllm_mode!r}) but vLLM is not installed. Install it with "
            f"`pip install -e '.[vllm]'` in the trl-ada clone (it needs a CUDA GPU), {fix}"
        )
    if not is_torch_cuda_available():
        where = "runs vLLM in this process" if vllm_mode == "colocate" else "sends the weights to the server over NCCL"
        return f"use_vllm is true but no CUDA GPU is visible: vllm_mode={vllm_mode!r} {where}. Run on a GPU, {fix}"
    return None


def check_vllm(training_args: ReinforceAdaConfig) -> None:
    """Raise `vllm_problem`'s message as a UsageError."""
    message = vllm_problem(training_args.use_vllm, training_args.vllm_mode)
    if message is not None:
        raise UsageError(message)
