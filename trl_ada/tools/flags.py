"""How ``trl-ada train`` reads a recipe's keys and the flags beyond what TRL's parser does.

A key or flag that names no field is an error that suggests the closest field. A flag replaces the recipe's value of
its own field; one pair of fields also goes together: a recipe that evaluates on a schedule usually evaluates at the
start too (``eval_on_start``), and ``--eval_strategy no`` on the command line means no evaluation, so it turns the
recipe's evaluation at the start off as well, unless the command line sets ``--eval_on_start`` itself.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ..core.hints import did_you_mean

HELP = "check the spelling (`trl-ada train --help`)."


def unknown_fields_message(
    config_path: str | None,
    unknown_in_config: Sequence[str],
    unknown_flags: Sequence[str],
    parser: argparse.ArgumentParser,
) -> str | None:
    """The error for recipe keys and flags that name no field of ``parser`` (TRL's parser leaves them over, the
    recipe's as ``--key value`` pairs), with the closest field for each; None when there are none."""
    fields = [action.dest for action in parser._actions if action.option_strings]
    if unknown_in_config:
        keys = [item[2:] for item in unknown_in_config[::2]]
        return f"{config_path} has unknown keys {keys}{did_you_mean(keys, fields)}: {HELP}"
    if unknown_flags:
        hint = did_you_mean([arg for arg in unknown_flags if arg.startswith("--")], [f"--{name}" for name in fields])
        return f"Unknown arguments {list(unknown_flags)}{hint}: {HELP}"
    return None


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
