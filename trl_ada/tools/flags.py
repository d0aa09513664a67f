"""How ``trl-ada train`` reads a recipe's keys and the flags beyond what TRL's parser does.

A key or flag that names no field is an error that suggests the closest field, when one is close enough to be the
one meant. A recipe is read here rather than by TRL's parser, so that a file that is not YAML, or a value that is not
of its field's type, is one line naming the file and the key (argparse would report a recipe's value as if it had
been typed after a flag). A flag replaces the recipe's value of its own field; one pair of fields also goes together:
a recipe that evaluates on a schedule usually evaluates at the start too (``eval_on_start``), and ``--eval_strategy
no`` on the command line means no evaluation, so it turns the recipe's evaluation at the start off as well, unless
the command line sets ``--eval_on_start`` itself.
"""

from __future__ import annotations

import argparse
import numbers
import os
import re
from collections.abc import Sequence
from typing import Any

from ..adapter.errors import UsageError
from ..core.hints import did_you_mean

HELP = "check the spelling (`trl-ada train --help`)."
# How close a misspelt name must be to a field to be offered (difflib's ratio): `max_stpes` (0.89) is `max_steps`,
# while `max_staleness` (0.73), an AsyncGRPOConfig field, is not.
SUGGESTION_CUTOFF = 0.8
ASYNC_KEY = "ada"  # the AdaRolloutConfig section of a recipe for TRL's asynchronous trainer (recipes/async-*.yaml)
ASYNC_COMMAND = "python -m trl_ada.gpu_async_check --config"


def unknown_fields_message(
    config_path: str | None,
    unknown_in_config: Sequence[str],
    unknown_flags: Sequence[str],
    parser: argparse.ArgumentParser,
) -> str | None:
    """The error for recipe keys and flags that name no field of ``parser`` (the recipe's as ``--key value`` pairs),
    with the closest field for each; None when there are none."""
    fields = [action.dest for action in parser._actions if action.option_strings]
    if unknown_in_config:
        keys = [item[2:] for item in unknown_in_config[::2]]
        return f"{config_path} has unknown keys {keys}{did_you_mean(keys, fields, SUGGESTION_CUTOFF)}: {HELP}"
    if unknown_flags:
        flags = [arg for arg in unknown_flags if arg.startswith("--")]
        hint = did_you_mean(flags, [f"--{name}" for name in fields], SUGGESTION_CUTOFF)
        return f"Unknown arguments {list(unknown_flags)}{hint}: {HELP}"
    return None


def async_recipe_message(config_path: str, recipe: dict[str, Any]) -> str | None:
    """The error for a recipe of TRL's asynchronous trainer (an ``ada:`` section of AdaRolloutConfig fields, the rest
    AsyncGRPOConfig's), which ``trl-ada train`` cannot run: what runs it instead. None for any other recipe."""
    if not isinstance(recipe.get(ASYNC_KEY), dict):
        return None
    name = os.path.splitext(os.path.basename(config_path))[0]
    return (
        f"{config_path} is a recipe for TRL's asynchronous trainer (AsyncGRPOTrainer with trl-ada's rollout worker: "
        f"AsyncGRPOConfig fields and an `{ASYNC_KEY}:` section), not for `trl-ada train`. Run it with "
        f"`{ASYNC_COMMAND} {name}` (docs/async.md: a Hopper GPU and a vLLM server), or train with a `trl-ada train` "
        "recipe (`trl-ada recipes` lists them)."
    )


def read_recipe(config_path: str) -> dict[str, Any]:
    """The recipe's mapping of field to value; a file that cannot be read, is not YAML, or is not a mapping is one
    UsageError naming the file (and the line and column yaml found wrong)."""
    import yaml

    try:
        with open(config_path) as file:
            recipe = yaml.safe_load(file)
    except OSError as error:
        raise UsageError(f"--config {config_path}: cannot be read ({error.strerror or error}).") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise UsageError(f"--config {config_path} is not valid YAML: {problem}{where}.") from None
    if recipe is None:
        return {}  # an empty file (or only comments): nothing to set
    if not isinstance(recipe, dict):
        raise UsageError(
            f"--config {config_path} holds a YAML {type(recipe).__name__}, not a mapping of `field: value` lines."
        )
    return recipe


def recipe_value_problem(action: argparse.Action, value: Any) -> str | None:
    """What is wrong with a recipe's ``value`` for the flag ``action``, by the same rules the command line applies
    (its type and its choices), or None. A value only argparse can judge (a list, a field without a simple type) is
    left to the field's own checks."""
    convert = action.type
    if convert is None or action.nargs not in (None, "?") or value is None:
        return None
    # HfArgumentParser's bool fields convert with a `string_to_bool` (transformers' and TRL's each have one).
    is_bool = getattr(convert, "__name__", "") == "string_to_bool"
    wanted = "true or false" if is_bool else {int: "an integer", float: "a number"}.get(convert, "a valid value")
    if isinstance(value, str):
        try:
            value = convert(value)
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            return f"{value!r} is not {wanted}."
    elif convert is int and not (isinstance(value, numbers.Integral) and not isinstance(value, bool)):
        return f"{value!r} is not an integer."
    elif convert is float and not (isinstance(value, numbers.Real) and not isinstance(value, bool)):
        return f"{value!r} is not a number."
    elif is_bool and not isinstance(value, bool):
        return f"{value!r} is not true or false."
    if action.choices is not None and value not in action.choices:
        return f"{value!r} is not one of {[str(choice) for choice in action.choices]}."
    return None


def set_recipe_defaults(
    parser: argparse.ArgumentParser, config_path: str, recipe: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """Make the recipe's values the parser's defaults (flags then override them), as TRL's parser does, and return
    (its keys that name no flag as ``--key value`` strings, the problems with its values). A value refused is left
    out, so the checks that follow see the field's default and report their own problems."""
    actions = {action.dest: action for action in parser._actions if action.option_strings}
    unknown: list[str] = []
    problems: list[str] = []
    for key, value in recipe.items():
        action = actions.get(key)
        if action is None:
            unknown += [f"--{key}", str(value)]
            continue
        problem = recipe_value_problem(action, value)
        if problem is not None:
            problems.append(f"recipe {config_path}, key {key}: {problem}")
            continue
        action.default, action.required = value, False
    return unknown, problems


def from_recipe(problem: str, config_path: str | None, keys: Sequence[str]) -> str:
    """``problem`` with the recipe keys it names (whose values came from the recipe: ``keys``) said to be the
    recipe's, so that a bad value in a file is not looked for on the command line."""
    if config_path is None:
        return problem
    named = sorted(
        (key for key in keys if re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", problem)), key=problem.find
    )
    if not named:
        return problem
    return f"{problem.rstrip()} (recipe {config_path}, key{'s' if len(named) > 1 else ''} {', '.join(named)})"


# A negative number, which argparse takes for a flag after another flag (`--learning_rate -1e-4`): 3.11 only knows
# `-1` and `-1.5`, and only while no flag looks like a number itself.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-inf(inity)?$", re.IGNORECASE)


def join_negative_values(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with each ``--flag -1e-4`` written ``--flag=-1e-4``, for a flag that takes one value."""
    joined: list[str] = []
    position = 0
    while position < len(argv):
        arg = argv[position]
        action = parser._option_string_actions.get(arg)
        following = argv[position + 1] if position + 1 < len(argv) else None
        takes_value = action is not None and action.nargs in (None, "?") and action.type is not None
        if takes_value and following is not None and _NEGATIVE_NUMBER.match(following):
            joined.append(f"{arg}={following}")
            position += 2
            continue
        joined.append(arg)
        position += 1
    return joined


def given_fields(argv: Sequence[str]) -> set[str]:
    """The fields the flags in ``argv`` set (``--eval-strategy=no`` and ``--eval_strategy no`` both name
    ``eval_strategy``)."""
    return {arg[2:].split("=", 1)[0].replace("-", "_") for arg in argv if arg.startswith("--") and len(arg) > 2}


def follow_eval_strategy(config: Any, argv: Sequence[str]) -> None:
    """Turn ``config.eval_on_start`` off when the command line says ``--eval_strategy no`` and not
    ``--eval_on_start``: the recipe's evaluation at the start goes with its evaluation schedule."""
    given = given_fields(argv)
    strategy = getattr(config.eval_strategy, "value", config.eval_strategy)
    if "eval_strategy" in given and strategy == "no" and "eval_on_start" not in given:
        config.eval_on_start = False
