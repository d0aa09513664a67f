"""GRPOTrainer's decoding and scoring, usable while streaming, and the step's completion-length metrics.

Streamed completions are scored in small batches on each process, with no collective call: the processes stream
independently, and a gather per batch would pair up unrelated batches (or wait forever). GRPOTrainer's
`_calculate_rewards` ends with a gather across processes; `local_reward_gather` turns that one gather into the
identity for the duration of a call, so the reward functions run exactly as GRPOTrainer runs them (sync and async
functions, reward models, `log_extra`, `log_metric`), on this process's rows only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import transformers
import trl.trainer.grpo_trainer as grpo_trainer
from accelerate.utils import gather_object
from packaging.version import Version
from trl.data_utils import is_conversational

from ..compat import eos_token_ids, parse_response
from ..metrics import LENGTH_METRICS, length_metrics


@contextmanager
def local_reward_gather() -> Iterator[None]:
    """Within this context, GRPOTrainer's reward gather returns this process's rewards unchanged."""
    saved = grpo_trainer.gather
    grpo_trainer.gather = lambda tensor: tensor
    try:
        yield
    finally:
        grpo_trainer.gather = saved


def decode_completions(
    trainer: Any, prompts: Sequence[Any], prompt_ids: Sequence[list[int]], completion_ids: Sequence[list[int]]
) -> list[Any]:
    """Completions as GRPOTrainer's `_generate` decodes them for the reward functions (text, or an assistant
    message for conversational prompts, parsed with the tokenizer's response schema when it has one)."""
    tokenizer = trainer._tokenizer
    if not is_conversational({"prompt": prompts[0]}):
        return trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
    has_schema = (
        getattr(tokenizer, "response_template", None) is not None
        or getattr(tokenizer, "response_schema", None) is not None
    )
    if Version(transformers.__version__) >= Version("5.0.0") and has_schema:
        return [
            [parse_response(tokenizer, ids, prefix, trainer.tools)]
            for ids, prefix in zip(completion_ids, prompt_ids, strict=True)
        ]
    contents = trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
    return [[{"role": "assistant", "content": content}] for content in contents]


def log_step_lengths(trainer: Any, lengths: Sequence[int], ended: Sequence[bool], marks: dict[str, int]) -> None:
    """Replace the `completions/*` entries GRPOTrainer's `_generate` appended since `marks` (one per generation
    call) with one entry over every completion of the step on every process: weighted by count, true extremes."""
    local = list(zip(lengths, ended, strict=True))
    if trainer.accelerator.num_processes > 1:
        local = gather_object(local)
    values = length_metrics([n for n, _ in local], [done for _, done in local])
    for name, value in values.items():
        entries = trainer._metrics["train"][name]
        del entries[marks.get(name, len(entries)) :]
        entries.append(value)


def length_marks(trainer: Any) -> dict[str, int]:
    """Where each `completions/*` metric's entries stand before a step's generation calls."""
    return metric_marks(trainer, LENGTH_METRICS)


def metric_marks(trainer: Any, names: Sequence[str]) -> dict[str, int]:
    """Where each named training metric's entries stand now."""
    return {name: len(trainer._metrics["train"][name]) for name in names}


TOOL_METRICS = ("tools/call_frequency", "tools/failure_frequency")


def log_step_tool_calls(trainer: Any, counts: Sequence[tuple[int, int, int]], marks: dict[str, int]) -> None:
    """Replace the `tools/*` entries GRPOTrainer's `_generate` appended since `marks` (one per round) with one over
    the step: tool calls per rollout and failures per call, as GRPOTrainer defines them, summed over every round on
    every process. `counts` holds each tool loop's (calls, failures, rollouts) on this process."""
    totals = [sum(column) for column in zip(*counts, strict=True)] if counts else [0, 0, 0]
    if trainer.accelerator.num_processes > 1:
        totals = [sum(column) for column in zip(*gather_object([totals]), strict=True)]
    calls, failures, rollouts = totals
    values = {
        "tools/call_frequency": calls / rollouts if rollouts else 0.0,
        "tools/failure_frequency": failures / calls if calls else 0.0,
    }
    for name, value in values.items():
        entries = trainer._metrics["train"][name]
        del entries[marks.get(name, len(entries)) :]
        entries.append(value)


def ended(trainer: Any, completion_ids: Sequence[list[int]]) -> list[bool]:
    """Whether each completion ended (last token EOS or pad, as GRPOTrainer decides it) rather than being clipped."""
    ends = {*eos_token_ids(trainer), trainer._tokenizer.pad_token_id}
    return [bool(ids) and ids[-1] in ends for ids in completion_ids]


def exit_rule_totals(trainer: Any, totals: Sequence[float], completion_ids: Sequence[list[int]]) -> list[float]:
    """The totals the exit rules see. With `mask_truncated_completions=True` GRPOTrainer masks a truncated
    completion out of the loss, so it counts as neither positive nor negative (NaN, like an unscorable one: left out
    of the exit counts, the pass rate and the pool baseline, and kept only when nothing else is left); a masked
    negative would otherwise let a prompt stop with negatives the loss never sees."""
    if not trainer.args.mask_truncated_completions:
        return list(totals)
    flags = ended(trainer, completion_ids)
    return [total if done else float("nan") for total, done in zip(totals, flags, strict=True)]
