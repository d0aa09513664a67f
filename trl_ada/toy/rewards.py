"""The toy tasks' rewards, read from a completion's text alone: the arithmetic task's (the last integer) and the final
answer every chain task ends with. No model, no task registry: the sampling helpers use the arithmetic reward as their
default, and the tasks import these, so this module sits below both."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# An integer, optionally negative; a "-" right after a digit is subtraction, not a sign ("47-8" -> 47, 8).
_INTEGER = re.compile(r"(?<!\d)-?\d+")


def _completion_text(completion: Any) -> str:
    """Text of a completion given as a plain string or as a conversation (list of messages)."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return ""
    content = completion[-1].get("content", "")
    return content if isinstance(content, str) else ""


def final_answer_rewards(
    completions: Sequence[Any],
    answer: Sequence[str],
    completion_ids: Sequence[Sequence[int]] | None,
    final_at_end: re.Pattern[str],
    max_completion_length: int,
    eos_token_id: int,
) -> list[float]:
    """1.0 per completion whose text ends with ``final_at_end`` (group 1 equal to its answer) and was not truncated.

    A completion was truncated when its ``completion_ids`` do not end with ``eos_token_id``; without ids, when its text
    has ``max_completion_length`` characters or more (each character of a toy task is one token: no room left for EOS).
    """
    ids_per_completion = completion_ids if completion_ids is not None else [None] * len(completions)
    rewards = []
    for completion, target, ids in zip(completions, answer, ids_per_completion, strict=True):
        text = _completion_text(completion)
        truncated = (
            (len(ids) == 0 or ids[-1] != eos_token_id) if ids is not None else len(text) >= max_completion_length
        )
        match = None if truncated else final_at_end.search(text)
        rewards.append(1.0 if match is not None and match[1] == target else 0.0)
    return rewards


def arithmetic_reward(completions: Sequence[Any], answer: Sequence[str | int], **kwargs: Any) -> list[float]:
    """TRL reward function: 1.0 if the last integer in a completion equals the answer, else 0.0.

    ``completions`` may be strings or conversations (``[{"role": "assistant", "content": "39"}]``); ``answer`` is
    the dataset column of the same name. Extra keyword arguments (prompts, trainer_state, ...) are ignored.
    """
    rewards = []
    for completion, target in zip(completions, answer, strict=True):
        numbers = _INTEGER.findall(_completion_text(completion))
        rewards.append(1.0 if numbers and int(numbers[-1]) == int(target) else 0.0)
    return rewards


arithmetic_reward.__name__ = "arithmetic_reward"  # TRL logs rewards under the function's __name__
