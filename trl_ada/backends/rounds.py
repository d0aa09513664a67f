"""Rounds through GRPOTrainer's own generation path: transformers, vLLM colocate or vLLM server.

Each round calls `GRPOTrainer._generate` once with that round's rows (every process the same number of rows, since
vLLM server mode and ZeRO-3 generation are collective calls) and `GRPOTrainer._calculate_rewards` once; `Rollouts`
keeps what they returned, so the kept rows can be handed to the loss without generating or scoring anything twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..advantages import total_reward
from ..checks import RewardGuard
from ..engine import RefillFn, Request, RoundsBackend, SamplingResult, sample
from .scoring import ended, exit_rule_totals, length_marks, log_step_lengths


def sample_in_rounds(
    trainer: Any,
    prompts: list,
    inputs: list[dict[str, Any]],
    sizes: list[int] | None,
    parent_generate: Callable[[list], tuple],
    parent_rewards: Callable[..., torch.Tensor],
    refill: RefillFn | None = None,
) -> tuple[SamplingResult, Rollouts]:
    """The step's rounds on `trainer`: each round is one call of GRPOTrainer's own `_generate` (`parent_generate`)
    on every process, with the same number of rows everywhere, and one call of its `_calculate_rewards`
    (`parent_rewards`, which gathers across processes). `sizes` replaces the first round (Reinforce-Ada-Est).
    `refill` appends a replacement to `prompts` and `inputs` and returns its index (see `engine.sample`)."""
    rollouts = Rollouts(trainer.reward_weights)

    def generate(requests: list[Request]) -> list[int]:
        rows = [r.prompt_index for r in requests for _ in range(r.num_samples)]
        run = trainer._common_run_length(requests)
        padding = trainer._max_over_processes(len(rows)) - len(rows)
        rows_padded = rows + [0] * padding  # a process with less to do still joins the collective calls
        round_prompts = trainer._round_prompts(prompts, inputs, rows_padded)
        with trainer._num_generations_as(run):
            output = parent_generate(round_prompts)
        trainer._warn_if_beyond_context(output[0], round_prompts)
        round_inputs = merge_extra_fields([inputs[i] for i in rows_padded], output[5])
        guard = RewardGuard(trainer.reward_func_names)
        with trainer._reward_funcs_as(guard.wrap(trainer.reward_funcs)):
            rewards = parent_rewards(round_inputs, round_prompts, output[3], output[1])
        trainer._raise_if_any_reward_failed(guard, round_prompts, output[3], rows_padded)
        first = trainer.accelerator.process_index * len(rows_padded)  # the rewards come back gathered
        rewards = rewards[first : first + len(rows_padded)]
        return rollouts.add(output, rewards, trainer._pop_extra_logs(len(rows_padded)), keep=len(rows))

    def score(requests: list[Request], handles: list[int]) -> list[float]:
        completion_ids = [rollouts.columns["completion_ids"][h] for h in handles]
        return exit_rule_totals(trainer, [rollouts.totals[h] for h in handles], completion_ids)

    backend = RoundsBackend(generate, num_tokens=rollouts.tokens.__getitem__)
    marks = length_marks(trainer)
    result = sample(
        len(prompts),
        trainer.ada_schedule,
        backend,
        score,
        any_active=trainer._any_process,
        first_round_sizes=sizes,
        refill=refill,
    )
    # GRPOTrainer logged completion lengths once per round (padding rows included); log them once, over the step.
    log_step_lengths(trainer, rollouts.tokens, ended(trainer, rollouts.columns["completion_ids"]), marks)
    return result, rollouts


@dataclass
class Rollouts:
    """What GRPOTrainer._generate returned, concatenated over rounds. A completion's handle is its row number."""

    reward_weights: torch.Tensor
    columns: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    extra_fields: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    logged: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    rewards: list[torch.Tensor] = field(default_factory=list)  # per row: one reward per function
    totals: list[float] = field(default_factory=list)  # per row: the weighted sum the exit rules look at
    size: int = 0
    tokens: list[int] = field(default_factory=list)  # per row: generated tokens (model tokens only, under a tool mask)

    _NAMES = ("prompt_ids", "completion_ids", "tool_mask", "completions", "logprobs")

    def add(self, output: tuple, rewards_per_func: torch.Tensor, logged: dict[str, list], keep: int) -> list[int]:
        """Store the first `keep` rows of one round (the rest is padding) and return their handles."""
        *columns, extra_fields, images, tool_images = output
        completion_ids, tool_mask = columns[1][:keep], columns[2]
        if tool_mask is not None:  # as GRPOTrainer counts completion lengths
            self.tokens.extend(sum(mask) for mask in tool_mask[:keep])
        else:
            self.tokens.extend(len(ids) for ids in completion_ids)
        columns = (*columns, images, tool_images or None)
        for name, column in zip((*self._NAMES, "images", "tool_images"), columns, strict=True):
            self.columns[name].extend(column[:keep] if column is not None else [None] * keep)
        total_rows = len(rewards_per_func)
        for key, values in extra_fields.items():
            per_row = isinstance(values, list) and len(values) == total_rows
            self.extra_fields[key].extend(values[:keep] if per_row else [values] * keep)
        for key, values in logged.items():
            self.logged[key].extend(values[:keep])
        kept = rewards_per_func[:keep].cpu()
        self.rewards.extend(kept)
        self.totals.extend(total_reward(kept, self.reward_weights).tolist())
        handles = list(range(self.size, self.size + keep))
        self.size += keep
        return handles

    def rewards_per_func(self, rows: list[int]) -> torch.Tensor:
        return torch.stack([self.rewards[r] for r in rows])

    def extra_logs(self, rows: list[int]) -> dict[str, list]:
        return {key: [values[r] for r in rows] for key, values in self.logged.items()}

    def select(self, rows: list[int]) -> tuple:
        """The 8-tuple GRPOTrainer._generate returns, for the given rows."""
        picked = {name: [column[r] for r in rows] for name, column in self.columns.items()}
        none_if_empty = {name: None if all(v is None for v in values) else values for name, values in picked.items()}
        extra_fields = {key: [values[r] for r in rows] for key, values in self.extra_fields.items()}
        return (
            picked["prompt_ids"],
            picked["completion_ids"],
            none_if_empty["tool_mask"],
            picked["completions"],
            none_if_empty["logprobs"],
            extra_fields,
            none_if_empty["images"],
            none_if_empty["tool_images"] or [],
        )


def merge_extra_fields(inputs: list[dict], extra_fields: dict) -> list[dict]:
    """Add fields returned by a `rollout_func` to the reward inputs, as GRPOTrainer does before scoring."""
    if not extra_fields:
        return inputs
    merged = []
    for i, row in enumerate(inputs):
        row = dict(row)
        for key, values in extra_fields.items():
            row[key] = values[i] if isinstance(values, list) and i < len(values) else values
        merged.append(row)
    return merged
