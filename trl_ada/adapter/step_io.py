"""The one interface between `ReinforceAdaTrainer` and a generation batch's sampling code.

The two schedules in `trl_ada.adapter.schedules` (`rounds.py`, `streaming.py`) sample a batch's prompts through TRL's
generation paths and reward functions, on one process among several. They receive a `StepIO`, never the trainer:
every value they read and every action they take on the trainer or on TRL is one field of it, built by the trainer
once per generation batch (`ReinforceAdaTrainer._step_io`). What they hand back (pools, kept rows, lengths, token
counts) the trainer writes into its own state and metrics; nothing below the trainer writes trainer or TRL state.

`Collectives` is the agreement across processes the schedules need (and the trainer's own metrics and checks use):
on one process every method returns its input and makes no collective call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from accelerate.utils import gather, gather_object

if TYPE_CHECKING:
    from ..core.engine import Pool, Schedule, SignalFn
    from .engines.base import TokenBackend


class GenerationOutput(NamedTuple):
    """What `GRPOTrainer._generate` returns, by name (a tuple, so it goes back to TRL as is)."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    tool_mask: list[list[int]] | None
    completions: list
    logprobs: list | None
    extra_fields: dict[str, Any]
    images: list | None
    tool_images: list


@dataclass(frozen=True)
class Collectives:
    """Cross-process agreement for one trainer: `num_processes` processes, this one `process_index`. Every process
    must make the same calls in the same order (each is a collective call when `num_processes > 1`)."""

    num_processes: int = 1
    process_index: int = 0
    device: torch.device | str = "cpu"

    def gather_objects(self, items: list) -> list:
        """The concatenation of every process's `items`, in rank order."""
        return gather_object(items) if self.num_processes > 1 else list(items)

    def gather_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's `tensor` concatenated along the first dimension (accelerate's `gather`, on this
        process's device), on `tensor`'s device."""
        return gather(tensor.to(self.device)).to(tensor.device)

    def _gathered(self, value: int) -> torch.Tensor:
        return gather(torch.tensor([value], device=self.device))

    def any(self, flag: bool) -> bool:
        return bool(self._gathered(int(flag)).any()) if self.num_processes > 1 else flag

    def sum(self, value: int) -> int:
        return int(self._gathered(value).sum()) if self.num_processes > 1 else value

    def max(self, value: int) -> int:
        return int(self._gathered(value).max()) if self.num_processes > 1 else value

    def raise_everywhere(
        self, local_message: str | None, error_type: type[Exception], cause: BaseException | None = None
    ) -> None:
        """Raise `error_type` on every process when any process has a message, else return. A process raising alone
        would leave the others waiting forever in their next collective call; this costs one gathered flag."""
        if not self.any(local_message is not None):
            return
        message = local_message
        if self.num_processes > 1:
            messages = gather_object([local_message])
            rank = next(r for r, m in enumerate(messages) if m is not None)
            message = f"On process {rank}: {messages[rank]}"
        raise error_type(message) from cause


# Signatures of the StepIO callables (prompts are strings or conversations; rows are dataset rows).
PrepareFn = Callable[[list, list[dict[str, Any]]], list]
GenerateFn = Callable[[list, int], GenerationOutput]
ScoreFn = Callable[[list[dict[str, Any]], list, list, list[list[int]], Sequence[int], int], torch.Tensor]


@dataclass(frozen=True)
class StepIO:
    """What a generation batch's sampling code may read from, and do through, the trainer.

    Values:
        schedule: the exit rules, round sizes and budgets (`ReinforceAdaConfig.schedule()`).
        reward_weights: one weight per reward function; the exit rules look at the weighted total.
        collectives: agreement across processes.
        max_in_flight: streaming's cap on requests in flight per process.
        runs_of_copies: whether the copies of a prompt may be generated as one run (vLLM server mode asks for `n`
            completions of every `num_generations`-th prompt). False with environments: each rollout's `reset`
            may make its prompt differ.
        mask_truncated: `mask_truncated_completions`: a truncated completion counts as neither positive nor negative.
        refill_filter_column: the reward function (its column) whose values decide which pools refill keeps
            (`refill_filter_reward`); None: the weighted total.

    Actions (each as GRPOTrainer does it, on this process's rows):
        prepare(prompts, rows): the prompts of one rollout per row, with TRL's per-rollout state (tools, environment
            instances) set for exactly these rollouts.
        generate(prompts, run_length): GRPOTrainer's `_generate` (collective: every process calls it with as many
            rows), copies of a prompt standing in runs of `run_length`.
        score(rows, prompts, completions, completion_ids, prompt_indices, real_rows): this process's rewards, (rows,
            reward functions), NaN where a function returned None; collective, and a failing reward function raises
            `RewardFunctionError` on every process. `prompt_indices` name each row's prompt in messages; the rows
            after the first `real_rows` are padding (scored so every process makes the same calls), which what a
            reward function logs with `log_metric` must not count.
        score_local(...): the same with no collective call (streaming), raising on this process only.
        tokenize(prompts): `(prompt_ids, images)` as GRPOTrainer tokenizes them.
        decode(prompts, prompt_ids, completion_ids): completions as reward functions receive them.
        ended(completion_ids): whether each completion ended on an EOS or pad token (else it was truncated).
        check_context(prompt_ids, prompts): warn (once per run) when a prompt leaves too little context.
        open_engine(prompt_ids): the streaming backend of this batch, weights synced, closed on exit.
        replay(prompts, completion_ids, logprobs): GRPOTrainer's `_generate` output for completions already
            generated (streaming hands its kept completions to TRL's decoding, masks and logging this way).
        pop_extra_logs(num_rows): the columns reward functions logged with `log_extra` for the last `num_rows`.
    """

    schedule: Schedule
    reward_weights: torch.Tensor
    collectives: Collectives
    max_in_flight: int | None
    runs_of_copies: bool
    mask_truncated: bool
    prepare: PrepareFn
    generate: GenerateFn
    score: ScoreFn
    score_local: ScoreFn
    tokenize: Callable[[list], tuple[list[list[int]], Any]]
    decode: Callable[[list, Sequence[list[int]], Sequence[list[int]]], list]
    ended: Callable[[Sequence[list[int]]], list[bool]]
    check_context: Callable[[Sequence[list[int]], list], None]
    open_engine: Callable[[list[list[int]]], AbstractContextManager[TokenBackend]]
    replay: Callable[[list, list[list[int]], list | None], GenerationOutput]
    pop_extra_logs: Callable[[int], dict[str, list]]
    refill_filter_column: int | None = None

    def refill_signal(self, rewards_per_func: Callable[[list], torch.Tensor]) -> SignalFn | None:
        """Which pools refill keeps: None for the engine's default (any two total rewards differ), or, with
        `refill_filter_column`, a pool in which any two values of that reward function differ (`rewards_per_func`
        reads a handle's rewards). Completions the exit rules leave out (NaN totals: unscorable, or truncated under
        `mask_truncated`) are left out here too."""
        column = self.refill_filter_column
        if column is None:
            return None

        def differs(pool: Pool) -> bool:
            values = rewards_per_func(pool.samples)[:, column].tolist() if pool.samples else []
            kept = {v for v, total in zip(values, pool.rewards, strict=True) if not math.isnan(v + total)}
            return len(kept) > 1

        return differs

    def exit_rule_totals(self, totals: Sequence[float], completion_ids: Sequence[list[int]]) -> list[float]:
        """The totals the exit rules see. With `mask_truncated` GRPOTrainer masks a truncated completion out of the
        loss, so it counts as neither positive nor negative (NaN, like an unscorable one: left out of the exit
        counts, the pass rate and the pool baseline, and kept only when nothing else is left); a masked negative
        would otherwise let a prompt stop with negatives the loss never sees."""
        if not self.mask_truncated:
            return list(totals)
        flags = self.ended(completion_ids)
        return [total if done else float("nan") for total, done in zip(totals, flags, strict=True)]
