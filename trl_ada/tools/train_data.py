"""What a ``trl-ada train`` run trains on: the model (``builtin:`` names, local folders, Hub ids checked before any
weights load), the reward functions, and the training and evaluation splits of the dataset."""

from __future__ import annotations

import pathlib
from typing import Any

from trl import DatasetMixtureConfig

from ..adapter.checks import missing_prompt_column_message, reward_columns_message
from ..adapter.config import ReinforceAdaConfig
from ..adapter.errors import RunError, UsageError, numbered, one_line
from ..adapter.model_names import check_hub_dataset, check_model_name, looks_local, nearby
from .train_args import TrainScriptArguments

BUILTIN_PREFIX = "builtin:"
TOY_MODELS = {"builtin:toy": True, "builtin:toy-cold": False}  # name -> supervised warm-up
TOY_DATASET = "builtin:toy"
TOY_SPLIT_SIZES = {"train": 8192, "test": 256}
DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def resolve_model(name: str | None, revision: str | None = None, flag: str = "--model_name_or_path") -> str:
    """The folder or Hub id to load for ``name``, checked before any weights are read.

    ``builtin:`` names give the toy model's folder (the shipped warm model, or the cold one built in the cache).
    Anything else goes through :func:`trl_ada.adapter.model_names.check_model_name`: a missing local folder is a
    UsageError ("no such folder"), a Hub id that can be neither downloaded nor read from the cache a RunError, both in
    seconds.
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


def check_dataset_name(script_args: TrainScriptArguments, dataset_args: DatasetMixtureConfig | None) -> bool:
    """Check the dataset named without loading it, as :func:`load_data` will read it; True when it is on this
    machine (a file, a folder, ``builtin:toy``), so reading it costs no download. A missing file or a name that is
    not a source is a UsageError; a Hub name that is neither cached nor reachable a RunError, in seconds
    (:func:`trl_ada.adapter.model_names.check_hub_dataset`). A ``datasets:`` mixture is left to TRL."""
    name = script_args.dataset_name
    if dataset_args is not None and dataset_args.datasets:
        return False
    if not name:
        raise UsageError(
            "No dataset: pass --dataset_name (a Hub dataset, a local .jsonl/.json/.parquet/.csv file or folder, or "
            "builtin:toy), or list a `datasets:` mixture in the YAML."
        )
    if name.startswith(BUILTIN_PREFIX):
        if name != TOY_DATASET:
            raise UsageError(f"Unknown built-in dataset {name!r}: use {TOY_DATASET!r}.")
        return True
    path = pathlib.Path(name).expanduser()
    if path.is_file():
        if path.suffix.lower() not in DATA_FILE_BUILDERS:
            raise UsageError(f"Cannot read {name}: unknown extension; use one of {sorted(DATA_FILE_BUILDERS)}.")
        return True
    if path.suffix.lower() in DATA_FILE_BUILDERS:  # looks like a file, so do not send it to the Hub
        raise UsageError(f"--dataset_name {name}: no such file.")
    if path.is_dir():
        return True
    if looks_local(name):
        raise UsageError(f"--dataset_name {name}: no such file or folder{nearby(path)}.")
    check_hub_dataset(name)
    return False


def load_data(script_args: TrainScriptArguments, dataset_args: DatasetMixtureConfig, local: bool | None = None):
    """The dataset as a DatasetDict (or IterableDatasetDict when streaming), from whichever source was named.
    ``local``: what :func:`check_dataset_name` returned for it (None: it is checked here), so that the Hub is asked
    once."""
    import datasets

    name = script_args.dataset_name
    if dataset_args.datasets:
        from trl import get_dataset

        return get_dataset(dataset_args)  # a YAML `datasets:` mixture wins over dataset_name, as in `trl grpo`
    if local is None:
        local = check_dataset_name(script_args, dataset_args)
    if name.startswith(BUILTIN_PREFIX):
        from ..toy import toy_dataset_split

        train, test = toy_dataset_split(TOY_SPLIT_SIZES["train"], TOY_SPLIT_SIZES["test"], seed=0)
        return datasets.DatasetDict(train=train, test=test)
    path = pathlib.Path(name).expanduser()
    if path.is_file():
        return datasets.load_dataset(DATA_FILE_BUILDERS[path.suffix.lower()], data_files=str(path))
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        loaded = datasets.load_from_disk(str(path))
        return loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict(train=loaded)
    try:
        return datasets.load_dataset(name, name=script_args.dataset_config, streaming=script_args.dataset_streaming)
    except (ConnectionError, FileNotFoundError) as error:  # DatasetNotFoundError is a FileNotFoundError
        if local:
            raise
        raise RunError(f"cannot load --dataset_name {name}: {one_line(error)}") from None


def pick_splits(data, script_args: TrainScriptArguments, training_args: ReinforceAdaConfig, rewards=()):
    """(train, eval or None); eval when eval_strategy or eval_on_start asks for it. Checks the splits, their `prompt`
    columns and the columns `rewards` need, and reports every problem found in one RunError (bad data: exit 1)."""
    train, evaluation, problems = split_problems(data, script_args, training_args, rewards)
    if problems:  # one line, as every error
        raise RunError(numbered(problems, "the data"))
    return train, evaluation


def split_problems(
    data, script_args: TrainScriptArguments, training_args: ReinforceAdaConfig, rewards=()
) -> tuple[Any, Any, list[str]]:
    """:func:`pick_splits`'s splits and the problems with them, not raised (``trl-ada train`` reports them with the
    other problems it finds before loading the model). ``training_args`` may be any object with its
    ``eval_strategy`` and ``eval_on_start``."""
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
    return train, evaluation, [problem for problem in problems if problem is not None]
