"""Built-in reward functions, and resolving a reward by name or dotted import path.

Rewards follow TRL's signature: ``reward(prompts=..., completions=..., **dataset_columns) -> list[float | None]``.
``None`` marks a completion that cannot be scored (TRL turns it into NaN; Reinforce-Ada leaves it out of the pool
statistics).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

RewardFunc = Callable[..., list[float | None]]


def last_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` (or ``\fbox{...}``) in ``text``, braces balanced; None if there is none."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    open_brace = text.find("{", start)
    if open_brace < 0:
        return None
    depth = 0
    for end in range(open_brace, len(text)):
        if text[end] == "{":
            depth += 1
        elif text[end] == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1 : end]
    return None  # unbalanced: the completion was cut off inside the box


def completion_text(completion: Any) -> str:
    """Plain text of a completion, whether standard (a string) or conversational (a list of messages)."""
    if isinstance(completion, str):
        return completion
    return "".join(message.get("content") or "" for message in completion if message.get("role") == "assistant")


def grade_math(response: str, answer: str) -> float | None:
    r"""1.0 if the last ``\boxed{}`` of ``response`` equals ``answer`` under math-verify, else 0.0.

    None when ``answer`` itself cannot be parsed (the prompt is unscorable, not the completion wrong). Grading the
    LAST box follows the paper's evaluation; a response without a box scores 0.
    """
    from math_verify import parse, verify

    # math-verify's timeouts use signal.alarm, which only works in the main thread.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold = parse(f"${answer}$" if "\\boxed" not in answer and "$" not in answer else answer, parsing_timeout=timeout)
    if not gold:
        return None
    boxed = last_boxed(response)
    if boxed is None:
        return 0.0
    predicted = parse(f"${boxed}$", parsing_timeout=timeout)
    return float(bool(predicted) and verify(gold, predicted, timeout_seconds=timeout))


def math_reward(
    completions: Sequence[Any],
    answer: Sequence[str] | None = None,
    solution: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    r"""Math-verify reward on the last ``\boxed{}``; reads the gold from an ``answer`` or ``solution`` column."""
    gold = answer if answer is not None else solution
    if gold is None:
        raise ValueError(
            f"math_reward needs an 'answer' (or 'solution') dataset column; the batch has {sorted(kwargs)}"
        )
    return [grade_math(completion_text(c), str(g)) for c, g in zip(completions, gold, strict=True)]


def toy_reward(completions: Sequence[Any], answer: Sequence[str | int], **kwargs: Any) -> list[float]:
    """The toy arithmetic task's reward (1.0 when the last integer in the completion is the answer)."""
    from ..toy import arithmetic_reward

    return arithmetic_reward(completions, answer, **kwargs)


REWARDS: dict[str, RewardFunc] = {"math": math_reward, "toy": toy_reward}


def score_groups(
    reward: RewardFunc, prompts: Sequence[Any], groups: Sequence[Sequence[str]], answers: Sequence[str]
) -> list[list[float | None]]:
    """Score each prompt's group of completion texts against its gold answer; one reward call per prompt.

    Completions are passed as TRL does: conversations (``[{"role": "assistant", "content": text}]``) when the prompt
    is one, else strings. The gold goes in as both ``answer`` and ``solution``, the two column names built-in and
    TRL rewards read. NaN scores become None (unscorable).
    """
    from tqdm.auto import tqdm

    scores = []
    for prompt, group, gold in tqdm(
        list(zip(prompts, groups, answers, strict=True)), desc="grading", disable=len(prompts) < 64
    ):
        completions = [c if isinstance(prompt, str) else [{"role": "assistant", "content": c}] for c in group]
        n = len(completions)
        values = reward(prompts=[prompt] * n, completions=completions, answer=[gold] * n, solution=[gold] * n)
        scores.append([None if v is None or v != v else float(v) for v in values])  # v != v: NaN
    return scores


def resolve_reward(name: str) -> RewardFunc:
    """A built-in reward by name (see ``REWARDS``), TRL's own by name, or any function by dotted import path."""
    if name in REWARDS:
        return REWARDS[name]
    import trl.rewards

    if hasattr(trl.rewards, name) and callable(getattr(trl.rewards, name)):
        return getattr(trl.rewards, name)
    if "." not in name:
        raise ValueError(
            f"Unknown reward function {name!r}: use one of {sorted(REWARDS)}, a function of trl.rewards, "
            "or a dotted import path such as 'my_package.rewards.my_reward'."
        )
    module_path, attribute = name.rsplit(".", 1)
    if os.getcwd() not in sys.path:  # let users name a module in the directory they launch from
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_path)
    except ImportError as error:
        raise ValueError(f"Cannot import {module_path!r} for reward function {name!r}: {error}") from error
    reward = getattr(module, attribute, None)
    if not callable(reward):
        raise ValueError(f"{module_path!r} has no callable named {attribute!r} (reward function {name!r}).")
    return reward
