"""Input checks for the parts of the contract Reinforce-Ada changes: rewards scored in rounds, on several processes.

A reward function is called once per round, inside a collective step: if it raises on one process only, the other
processes would wait forever in the next gather. `RewardGuard` therefore catches a reward failure (an exception, a
wrong number of rewards, a value that is not a number, an infinite value) where it happens, lets the caller agree
across processes that the round failed, and only then raises a `RewardFunctionError` naming the function, the prompt
and the fix, on every process.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from trl.trainer.utils import is_async_callable

from ..core.engine import ExitRule

# Keyword arguments GRPOTrainer passes to every reward function besides the dataset columns.
TRAINER_REWARD_KWARGS = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)
# Dataset columns GRPOTrainer does not forward as keyword arguments (the prompt arrives as `prompts`).
NOT_FORWARDED_COLUMNS = frozenset({"prompt", "completion", "completion_ids"})
EXCERPT_CHARS = 80


class RewardFunctionError(RuntimeError):
    """A reward function failed while a training step was being sampled."""


def excerpt(text: Any, limit: int = EXCERPT_CHARS) -> str:
    """A one-line, bounded rendering of a prompt or completion (the last message's content when conversational)."""
    if isinstance(text, list) and text and isinstance(text[-1], dict):
        text = text[-1].get("content", text[-1])
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= limit else flat[: limit - 3] + "...")


def check_reward_columns(reward_funcs: Sequence[Any], column_names: Sequence[str] | None) -> None:
    """Fail at construction when a reward function has a required parameter that no dataset column provides.

    GRPOTrainer passes every dataset column (but the prompt and completion ones) as a keyword argument, so a missing
    column would otherwise surface as a `TypeError` deep in the first training step.
    """
    message = reward_columns_message(reward_funcs, column_names)
    if message is not None:
        raise ValueError(message)


def reward_columns_message(reward_funcs: Sequence[Any], column_names: Sequence[str] | None) -> str | None:
    """The error `check_reward_columns` raises for the first reward function missing a column; None when none is."""
    if column_names is None:  # streaming dataset: the columns are not known before the first row
        return None
    available = sorted((set(column_names) - NOT_FORWARDED_COLUMNS) | TRAINER_REWARD_KWARGS)
    for func in reward_funcs:
        parameters = _parameters(func)
        if parameters is None:
            continue
        required = [
            p.name
            for p in parameters
            if p.default is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        ]
        missing = [name for name in required if name not in available]
        if missing:
            return (
                f"Reward function {_name(func)!r} needs {missing}, which the training dataset does not provide. "
                f"Reward functions receive these keyword arguments: {available}. Add the column(s) to the dataset "
                "(e.g. with `dataset.map`) or give the parameter(s) a default."
            )
    return None


def reward_signature_message(
    reward_funcs: Sequence[Any], column_names: Sequence[str] | None, environments: bool = False
) -> str | None:
    """The error for the first reward function that cannot take a keyword argument GRPOTrainer passes it (its own
    ones, and each dataset column when `column_names` are known); None when every function can.

    GRPOTrainer calls `func(prompts=..., completions=..., completion_ids=..., trainer_state=..., log_extra=...,
    log_metric=..., <every dataset column but the prompt>)` (and `environments=` with an environment factory), so a
    function without `**kwargs` would otherwise fail with a `TypeError` at the first training step. Reward models and
    callables whose signature cannot be read are left alone.
    """
    passed = TRAINER_REWARD_KWARGS if environments else TRAINER_REWARD_KWARGS - {"environments"}
    if column_names is not None:
        passed = passed | (set(column_names) - NOT_FORWARDED_COLUMNS)
    for func in reward_funcs:
        parameters = _parameters(func)
        if parameters is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            continue
        accepted = {
            p.name
            for p in parameters
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        }
        unexpected = sorted(passed - accepted)
        if unexpected:
            name = _name(func)
            return (
                f"Reward function {name!r} does not accept the keyword argument(s) {unexpected}, which GRPOTrainer "
                "passes to every reward function (with each dataset column but the prompt), so it would fail at the "
                f"first training step. Accept **kwargs: `def {name}(completions, **kwargs)`, taking what it needs by "
                "name."
            )
    return None


def _parameters(func: Any) -> list[inspect.Parameter] | None:
    """The parameters of a reward callable, or None for a reward model, a model name or an unreadable signature."""
    if isinstance(func, torch.nn.Module) or not callable(func):
        return None
    try:
        return list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return None


def check_trainer_setup(args: Any, config_class: type, kwargs: dict[str, Any], reward_funcs: Sequence[Any]) -> None:
    """What `ReinforceAdaTrainer` refuses before GRPOTrainer builds anything: a config of another class, multi-turn
    rollouts and custom rollout functions under streaming, and reward functions whose arguments no dataset column
    provides."""
    if not isinstance(args, config_class):
        raise TypeError(
            f"ReinforceAdaTrainer needs a {config_class.__name__}, got {type(args).__name__}. "
            f"{config_class.__name__} accepts every GRPOConfig argument."
        )
    multi_turn = [name for name in ("tools", "environment_factory") if kwargs.get(name)]
    if multi_turn and args.rollout_schedule == "streaming":
        raise NotImplementedError(
            f"rollout_schedule='streaming' does not run `{multi_turn[0]}`: a tool call ends a turn, and "
            "GRPOTrainer's tool loop continues every rollout of a batch together, while streaming hands the "
            "engine one single-turn request per completion. Use rollout_schedule='rounds': each round runs "
            "TRL's tool loop (with an environment instance of its own per rollout)."
        )
    if kwargs.get("rollout_func") is not None and args.rollout_schedule == "streaming":
        raise NotImplementedError(
            "rollout_schedule='streaming' drives the generation engine itself, so a custom rollout_func cannot "
            "run per completion; use rollout_schedule='rounds' (rollout_func is then called once per round)."
        )
    columns = getattr(kwargs.get("train_dataset"), "column_names", None)
    if kwargs.get("rollout_func") is None:  # a rollout_func may add the columns a reward needs
        check_reward_columns(reward_funcs, columns)
    message = reward_signature_message(reward_funcs, columns, environments=bool(kwargs.get("environment_factory")))
    if message is not None:
        raise TypeError(message)
    if not kwargs.get("environment_factory"):  # with environments, `prompt` is optional: each reset() supplies it
        check_prompt_column(kwargs.get("train_dataset"), "train")
        evaluation = kwargs.get("eval_dataset")
        for name, split in evaluation.items() if isinstance(evaluation, dict) else [("eval", evaluation)]:
            check_prompt_column(split, name)


def missing_prompt_column_message(split_name: str, columns: Sequence[str] | None) -> str | None:
    """The error for a dataset split with no `prompt` column (None when it has one, or its columns are unknown, as
    for some streamed datasets): GRPOTrainer would otherwise die at the first step with a bare `KeyError`."""
    if columns is None or "prompt" in columns:
        return None
    return (
        f"The {split_name} split has no 'prompt' column; its columns are {list(columns)}. Rename the question "
        "column to 'prompt' (a string or a list of chat messages), or build the set with `trl-ada prepare`."
    )


def check_prompt_column(dataset: Any, split_name: str) -> None:
    """Raise `ValueError` when `dataset` has known columns and none is `prompt`."""
    message = missing_prompt_column_message(split_name, getattr(dataset, "column_names", None))
    if message is not None:
        raise ValueError(message)


TOY_MARKER = "toy_info.json"  # in every toy model folder trl-ada builds or ships (trl_ada.toy)


def toy_plain_prompt_message(model: Any, dataset: Any) -> str | None:
    """A warning when `model` is the folder of a toy model (it holds `toy_info.json`) and the training set's first
    prompt is a plain string: the toy model answers only through its chat template, so a plain-string prompt gets
    empty completions and every reward is 0. None otherwise, and for datasets that cannot be indexed."""
    if not isinstance(model, str) or not os.path.isfile(os.path.join(model, TOY_MARKER)):
        return None
    if "prompt" not in (getattr(dataset, "column_names", None) or []) or not hasattr(dataset, "__len__"):
        return None  # an iterable dataset is not read here: its first row may cost a download
    if len(dataset) == 0 or not isinstance(prompt := dataset[0]["prompt"], str):
        return None
    return (
        f"{model} is a trl-ada toy model (it holds {TOY_MARKER}), which answers only through its chat template, and "
        f"the training set's prompts are plain strings ({excerpt(prompt)}): it gives them empty completions, so every "
        "reward is 0 and nothing is learned. Give each prompt as a conversation, "
        f"[{{'role': 'user', 'content': {prompt!r}}}], as trl_ada.toy's datasets do."
    )


def refill_filter_column(name: str | None, reward_func_names: Sequence[str]) -> int | None:
    """The column of the reward function `refill_filter_reward` names (None when it names none)."""
    if name is None:
        return None
    if name not in reward_func_names:
        raise ValueError(
            f"refill_filter_reward={name!r} names no reward function; the trainer's are {list(reward_func_names)} "
            "(a function's __name__, or a reward model's name)."
        )
    return list(reward_func_names).index(name)


def check_prompt_id_column(column: str | None, columns: Sequence[str] | None) -> None:
    """`prompt_id_column` must name a column of the training set (when its columns are known)."""
    if column is not None and columns is not None and column not in columns:
        raise ValueError(
            f"prompt_id_column={column!r} is not a column of the training dataset ({columns}). "
            "Name a column that identifies each prompt, or leave it None to identify prompts by their text."
        )


def server_unreachable_message(error: BaseException, model_name: str, timeout: float) -> str:
    """TRL's message suggests `vllm serve`; TRL's server is `trl vllm-serve`."""
    return (
        f"{error} Start TRL's server first, on GPUs the trainer does not use: `CUDA_VISIBLE_DEVICES=... trl "
        f"vllm-serve --model {model_name}`, then point the trainer at it with vllm_server_base_url (or "
        f"vllm_server_host / vllm_server_port). The trainer waits vllm_server_timeout="
        f"{timeout} s for it; raise that if the server is still loading the model."
    )


def check_streaming_reward_models(zero_stage: int, reward_funcs: Sequence[Any]) -> None:
    """Streaming scores each process's completions alone; a reward model under ZeRO-3 cannot run that way."""
    if zero_stage == 3 and any(isinstance(func, torch.nn.Module) for func in reward_funcs):
        raise NotImplementedError(
            "rollout_schedule='streaming' scores each process's completions without collective calls, but a "
            "reward model's forward pass under DeepSpeed ZeRO-3 is collective. Use rollout_schedule='rounds', "
            "a reward function, or ZeRO-2."
        )


def empty_prompt_message(prompts: Sequence[Any]) -> str | None:
    """Empty text prompts tokenize to nothing and make generation fail far from the cause; None when there is none."""
    empty = [i for i, prompt in enumerate(prompts) if isinstance(prompt, str) and not prompt.strip()]
    if not empty:
        return None
    return (
        f"Prompt {empty[0]} of this process's batch is empty or blank ({prompts[empty[0]]!r}); an empty text "
        "prompt cannot be sampled. Drop such rows from the dataset, e.g. "
        "`dataset.filter(lambda row: row['prompt'].strip())`."
    )


def missing_id_column_message(column: str | None, rows: Sequence[dict[str, Any]]) -> str | None:
    """`prompt_id_column` missing from a training row (an iterable dataset's columns are known only now)."""
    missing = None if column is None else next((row for row in rows if column not in row), None)
    if missing is None:
        return None
    return (
        f"prompt_id_column={column!r} is not a column of the training rows (columns: {sorted(missing)}). "
        "Add it to the dataset or set prompt_id_column=None to identify prompts by their text."
    )


class ContextCheck:
    """Warns once per run, through `warn`, when a prompt plus `max_completion_length` (`budget`) overruns the
    model's `context` (max_position_embeddings): generation still runs, and Transformers only warns without naming
    the prompt, but such completions are unreliable. No check without a known context."""

    def __init__(self, context: int | None, budget: int, warn: Callable[[str], None]) -> None:
        self.context, self.budget, self.warn = context, budget, warn
        self.warned = False

    def __call__(self, prompt_ids: Sequence[list[int]], prompts: Sequence[Any]) -> None:
        if self.warned or self.context is None:
            return
        for ids, prompt in zip(prompt_ids, prompts, strict=True):
            if len(ids) > self.context - self.budget:
                self.warned = True
                self.warn(
                    f"A prompt of {len(ids)} tokens, {excerpt(prompt)}, leaves less than max_completion_length="
                    f"{self.budget} tokens of the model's {self.context}-token context "
                    "(max_position_embeddings); its completions run past the positions the model was trained on. "
                    "Filter long prompts from the dataset or lower max_completion_length. Warned once per run."
                )
                return


def reward_failure_message(
    failure: RewardFailure | None, prompts: Sequence[Any], completions: Sequence[Any], rows: Sequence[int], step: int
) -> str | None:
    """What a failed reward function raises, naming the row and training step `step` (1-based); None without one."""
    if failure is None:
        return None
    return (
        f"{failure.describe(prompts, completions, rows.__getitem__)} (training step {step}). Fix or guard the "
        "reward function; return None for a completion it cannot score."
    )


@dataclass
class RewardFailure:
    """The first failure of one reward function in one call: the row it happened on (None: not one row)."""

    function: str
    row: int | None
    problem: str
    error: BaseException | None = None

    def describe(self, prompts: Sequence[Any], completions: Sequence[Any], prompt_index: Callable[[int], int]) -> str:
        where = "on the whole batch (no single row fails on its own)"
        if self.row is not None:
            where = (
                f"on prompt {prompt_index(self.row)} of this process's batch, {excerpt(prompts[self.row])}, "
                f"completion {excerpt(completions[self.row])}"
            )
        return f"Reward function {self.function!r} failed {where}: {self.problem}"


class RewardGuard:
    """Wraps reward callables so a failure is recorded instead of raised; see the module docstring.

    A failing call returns `None` for every row, so GRPOTrainer's scoring still reaches its gather on this process;
    the caller must then check `failure` (on every process) and raise.
    """

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self.failure: RewardFailure | None = None

    def wrap(self, funcs: Sequence[Any]) -> list[Any]:
        return [
            func if isinstance(func, torch.nn.Module) else self._wrap_one(func, name)
            for func, name in zip(funcs, self.names, strict=True)
        ]

    def _wrap_one(self, func: Callable, name: str) -> Callable:
        if is_async_callable(func):  # GRPOTrainer awaits these, so the guard must be awaitable too

            @functools.wraps(func)
            async def guarded_async(**kwargs):
                try:
                    values = await func(**kwargs)
                except Exception as error:
                    return self._failed(name, None, f"{type(error).__name__}: {error}", error, kwargs)
                return self._checked(name, values, kwargs)

            return guarded_async

        @functools.wraps(func)
        def guarded(**kwargs):
            try:
                values = func(**kwargs)
            except Exception as error:
                row = _first_failing_row(func, kwargs)
                return self._failed(name, row, f"{type(error).__name__}: {error}", error, kwargs)
            return self._checked(name, values, kwargs)

        return guarded

    def _checked(self, name: str, values: Any, kwargs: dict[str, Any]) -> list[float | None]:
        expected = len(kwargs["prompts"])
        try:
            values = list(values)
        except TypeError:
            return self._failed(name, None, f"returned {type(values).__name__}, not a list of rewards.", None, kwargs)
        if len(values) != expected:
            return self._failed(
                name,
                None,
                f"returned {len(values)} rewards for {expected} completions. Return exactly one reward per "
                "completion (None for one that cannot be scored).",
                None,
                kwargs,
            )
        checked = []
        for row, value in enumerate(values):
            reward = to_reward(value)
            if isinstance(reward, str):
                return self._failed(name, row, reward, None, kwargs)
            checked.append(reward)
        return checked

    def _failed(
        self, name: str, row: int | None, problem: str, error: BaseException | None, kwargs: dict[str, Any]
    ) -> list[None]:
        if self.failure is None:
            self.failure = RewardFailure(name, row, problem, error)
        return [None] * len(kwargs["prompts"])


def to_reward(value: Any) -> float | str | None:
    """A reward value as GRPOTrainer stores it (None and NaN: unscorable), or a message saying what is wrong."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if value is None:
        return None
    if not isinstance(value, numbers.Real):
        return (
            f"returned {value!r} ({type(value).__name__}), not a number. Return a float per completion, or None "
            "for one that cannot be scored."
        )
    reward = float(value)
    if math.isnan(reward):
        return None  # as in TRL: NaN and None both mean "unscorable"
    if math.isinf(reward):
        return (
            f"returned {reward}, which would make every advantage of the prompt infinite or NaN. Return a finite "
            "reward (clip it), or None for a completion that cannot be scored."
        )
    return reward


def _first_failing_row(func: Callable, kwargs: dict[str, Any]) -> int | None:
    """Call `func` one row at a time to find the first row it raises on (only after it failed on the batch)."""
    num_rows = len(kwargs["prompts"])
    for row in range(num_rows):
        single = {
            key: [value[row]] if isinstance(value, list) and len(value) == num_rows else value
            for key, value in kwargs.items()
        }
        try:
            func(**single)
        except Exception:
            return row
    return None


def _name(func: Any) -> str:
    return getattr(func, "__name__", None) or type(func).__name__


@dataclass
class SignalWatch:
    """Warns when training has nothing to learn from, `after` generation batches into training and again after
    `2 * after`, `4 * after`, ... batches (3, 6, 12, 24, ...) while it lasts. Three cases, the first that applies:

    - no completion has earned any reward (every reward so far 0, negative or unscorable), under any strategy: the
      prompt format, the chat template or the reward function is wrong far more often than the threshold;
    - no completion has scored above `positive_threshold` although the exit rule needs positives (a 0/0.5 reward under
      the default 0.7 makes every prompt spend its whole budget);
    - no prompt has resolved although positives were seen.

    Fed each generation batch's totals over every process; returns the warnings to emit. The metrics
    `ada/frac_batches_no_reward` and `ada/frac_batches_no_positive` (`trl_ada.core.metrics.signal_metrics`) show the
    same per batch."""

    exit_rule: ExitRule
    positive_threshold: float
    budget: int
    after: int = 3
    batches: int = 0
    highest_reward: float = -math.inf
    resolved: int = 0

    def update(self, highest_reward: float, resolved: int) -> list[str]:
        """Count one generation batch: the highest reward scored in it (-inf when none) and prompts resolved."""
        self.batches += 1
        self.highest_reward = max(self.highest_reward, highest_reward)
        self.resolved += resolved
        rounds = self.batches // self.after
        if self.batches % self.after or rounds & (rounds - 1):  # due at after x 1, 2, 4, 8, ... batches
            return []
        seen = f"{self.batches} generation batches"
        again = (
            f"Warned after {self.after}, {2 * self.after}, {4 * self.after}, ... generation batches while it lasts "
            f"(next: after {2 * self.batches})."
        )
        budget = f"every prompt draws its whole budget of {self.budget} completions"
        if self.highest_reward <= 0:
            highest = "no reward scored" if self.highest_reward == -math.inf else f"{self.highest_reward:g}"
            return [
                f"No completion has earned any reward in {seen} (highest reward: {highest}), so there is nothing to "
                "learn from (ada/frac_batches_no_reward is 1). Lowering positive_threshold will not help. Check, in "
                "this order: the prompt format, conversational ([{'role': 'user', 'content': ...}]) or a plain "
                "string, against what the model expects (a chat model, like trl-ada's toy model, answers only "
                "through its chat template: given the plain string '47-8' it returns empty completions); the "
                "tokenizer's chat template; and the reward function, called by hand on a few completions with the "
                f"dataset's columns. {again}"
            ]
        if self.exit_rule.min_positives > 0 and self.highest_reward <= self.positive_threshold:
            return [
                f"No completion has scored above positive_threshold={self.positive_threshold:g} in {seen} "
                f"(highest reward: {self.highest_reward:g}), so no prompt can meet its exit rule and {budget} "
                "(ada/frac_batches_no_positive is 1). A completion is positive when its total reward is strictly "
                f"greater than positive_threshold: set it below your reward's success value. {again}"
            ]
        if self.resolved == 0 and self.exit_rule.min_positives + self.exit_rule.min_negatives > 0:
            return [
                f"No prompt has met its exit rule in {seen} (ada/frac_resolved is 0): {budget}. The rule needs "
                f"{self.exit_rule.min_positives} completion(s) above positive_threshold={self.positive_threshold:g} "
                f"and {self.exit_rule.min_negatives} at or below it; check the threshold against your rewards, or "
                f"use sampling_strategy='positive' on a task where wrong answers are rare. {again}"
            ]
        return []


def group_starts(prompts: list, group_size: int) -> list[int]:
    """First rows of the prompt groups: TRL's sampler repeats each prompt `num_generations` times in a row."""
    if len(prompts) % group_size:
        raise ValueError(f"This process got {len(prompts)} rows, not whole groups of num_generations={group_size}.")
    starts = list(range(0, len(prompts), group_size))
    for start in starts:
        if any(prompts[start + j] != prompts[start] for j in range(1, group_size)):
            raise ValueError(f"Rows {start}..{start + group_size - 1} are not one prompt repeated {group_size} times.")
    return starts
