"""Rounds through GRPOTrainer's own generation path: transformers, vLLM colocate or vLLM server.

Each round calls `StepIO.generate` (GRPOTrainer's `_generate`) once with that round's rows, every process with the
same number of rows since vLLM server mode and ZeRO-3 generation are collective calls, and `StepIO.score` once;
`Rollouts` keeps what they returned, so the kept rows can be handed to the loss without generating or scoring
anything twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from ...core.advantages import total_reward
from ...core.engine import Pilot, RefillFn, Request, RoundsBackend, SamplingResult, sample
from ..step_io import Collectives, GenerationOutput, StepIO


def sample_in_rounds(
    io: StepIO,
    prompts: list,
    inputs: list[dict[str, Any]],
    sizes: list[int] | None,
    refill: RefillFn | None = None,
    pilot: Pilot | None = None,
) -> tuple[SamplingResult, Rollouts]:
    """The batch's rounds: each round is one `io.generate` and one `io.score` on every process, with the same number
    of rows everywhere (a process with less to do pads with copies of its first prompt, scored and dropped; `io.score`
    is told how many rows are real, so what reward functions log counts those only).
    `sizes` replaces the first round (Reinforce-Ada-Est). `refill` appends a replacement to `prompts` and `inputs`
    and returns its index; `pilot` makes every prompt draw a pilot first (see `engine.sample`)."""
    rollouts = Rollouts(io.reward_weights)

    def generate(requests: list[Request]) -> list[int]:
        rows = [r.prompt_index for r in requests for _ in range(r.num_samples)]
        run = common_run_length(requests, io.collectives) if io.runs_of_copies else 1
        padding = io.collectives.max(len(rows)) - len(rows)
        rows_padded = rows + [0] * padding  # a process with less to do still joins the collective calls
        round_prompts = io.prepare([prompts[i] for i in rows_padded], [inputs[i] for i in rows_padded])
        output = io.generate(round_prompts, run)
        io.check_context(output.prompt_ids, round_prompts)
        round_inputs = merge_extra_fields([inputs[i] for i in rows_padded], output.extra_fields)
        completions, completion_ids = output.completions, output.completion_ids
        rewards = io.score(round_inputs, round_prompts, completions, completion_ids, rows_padded, len(rows))
        return rollouts.add(output, rewards, io.pop_extra_logs(len(rows_padded)), keep=len(rows))

    def score(requests: list[Request], handles: list[int]) -> list[float]:
        completion_ids = [rollouts.columns["completion_ids"][h] for h in handles]
        return io.exit_rule_totals([rollouts.totals[h] for h in handles], completion_ids)

    backend = RoundsBackend(generate, num_tokens=rollouts.tokens.__getitem__)
    result = sample(
        len(prompts),
        io.schedule,
        backend,
        score,
        any_active=io.collectives.any,
        first_round_sizes=sizes,
        refill=refill,
        pilot=pilot,
        refill_signal=io.refill_signal(rollouts.rewards_per_func),
    )
    rollouts.ended = io.ended(rollouts.columns["completion_ids"])
    return result, rollouts


def common_run_length(requests: list[Request], collectives: Collectives) -> int:
    """Copies of a prompt that stand in a row. vLLM server mode takes every `num_generations`-th prompt and asks for
    `n = num_generations` completions of each, so all processes must agree on the run length."""
    sizes = set().union(*collectives.gather_objects([{r.num_samples for r in requests}]))
    return sizes.pop() if len(sizes) == 1 else 1


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
    ended: list[bool] = field(default_factory=list)  # per row: ended on EOS or pad (set once sampling is over)

    _NAMES = ("prompt_ids", "completion_ids", "tool_mask", "completions", "logprobs")

    def add(
        self, output: GenerationOutput, rewards_per_func: torch.Tensor, logged: dict[str, list], keep: int
    ) -> list[int]:
        """Store the first `keep` rows of one round (the rest is padding) and return their handles."""
        if output.tool_mask is not None:  # as GRPOTrainer counts completion lengths
            self.tokens.extend(sum(mask) for mask in output.tool_mask[:keep])
        else:
            self.tokens.extend(len(ids) for ids in output.completion_ids[:keep])
        columns = {name: getattr(output, name) for name in self._NAMES}
        columns.update(images=output.images, tool_images=output.tool_images or None)
        for name, column in columns.items():
            self.columns[name].extend(column[:keep] if column is not None else [None] * keep)
        total_rows = len(rewards_per_func)
        for key, values in output.extra_fields.items():
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

    def step_lengths(self) -> tuple[list[int], list[bool]]:
        """Generated tokens and ended flags of every completion of the batch, for its `completions/*` metrics."""
        return self.tokens, self.ended

    def uncounted_tokens(self, rows: list[int]) -> int:
        """Tokens GRPOTrainer's `_generate` has not counted in `num_input_tokens_seen`: none, it ran every round."""
        return 0

    def select(self, rows: list[int]) -> GenerationOutput:
        """GRPOTrainer._generate's output for the given rows."""
        picked = {name: [column[r] for r in rows] for name, column in self.columns.items()}
        none_if_empty = {name: None if all(v is None for v in values) else values for name, values in picked.items()}
        return GenerationOutput(
            prompt_ids=picked["prompt_ids"],
            completion_ids=picked["completion_ids"],
            tool_mask=none_if_empty["tool_mask"],
            completions=picked["completions"],
            logprobs=none_if_empty["logprobs"],
            extra_fields={key: [values[r] for r in rows] for key, values in self.extra_fields.items()},
            images=none_if_empty["images"],
            tool_images=none_if_empty["tool_images"] or [],
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
