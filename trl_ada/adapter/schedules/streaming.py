"""The streaming schedule: one backend per generation batch, rewards scored per finished batch on each process, and
the kept completions handed to GRPOTrainer's `_generate` (`StepIO.replay`) for decoding and logging, as if the
engine had just produced them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from ...core.advantages import total_reward
from ...core.engine import Pilot, RefillFn, Request, SamplingResult, sample
from ..engines.base import TokenBackend
from ..step_io import GenerationOutput, StepIO

IMAGES_REFUSED = "rollout_schedule='streaming' does not take image prompts yet; use rollout_schedule='rounds'."


def sample_streaming(
    io: StepIO,
    prompts: list,
    inputs: list[dict[str, Any]],
    refill: RefillFn | None = None,
    pilot: Pilot | None = None,
) -> tuple[SamplingResult, Streamed]:
    """Stream through the backend `io.open_engine` opens (vLLM server, vLLM colocate or transformers continuous
    batching). Each process streams on its own, with no collective call until the batch's generation is over: a
    failure on one process (a reward, a server that stops answering) aborts its requests, and then stops every
    process with its error. A prompt `refill` appends to `prompts` is tokenized and streamed at once; `pilot` holds
    each prompt to its pilot until the pilot has decided (see `engine.sample`)."""
    prompt_ids, images = io.tokenize(prompts)
    io.collectives.raise_everywhere(IMAGES_REFUSED if images is not None else None, NotImplementedError)
    io.check_context(prompt_ids, prompts)
    streamed: Streamed | None = None
    failure: BaseException | None = None
    try:
        with io.open_engine(prompt_ids) as backend:
            streamed = Streamed(io, prompts, inputs, prompt_ids, backend, refill)
            result = sample(
                len(prompts),
                io.schedule,
                backend,
                streamed.score,
                rollout="streaming",
                max_in_flight=io.max_in_flight,
                refill=None if refill is None else streamed.refill_and_tokenize,
                pilot=pilot,
                refill_signal=io.refill_signal(streamed.rewards_per_func),
            )
    except Exception as error:  # raised below on every process, or the others would wait forever
        if io.collectives.num_processes == 1:
            raise
        failure = error
    message = None if failure is None else f"{type(failure).__name__}: {failure}"
    io.collectives.raise_everywhere(message, type(failure) if failure is not None else RuntimeError, failure)
    return result, streamed


@dataclass
class Streamed:
    """The completions a streaming backend finished this batch, with their rewards and logged columns; a handle is
    a row of `backend.completions`. `select` hands the kept rows to GRPOTrainer's `_generate` through `io.replay`."""

    io: StepIO
    prompts: list  # the batch's prompts, refills appended
    inputs: list[dict[str, Any]]
    prompt_ids: list[list[int]]
    backend: TokenBackend
    refill: RefillFn | None = None
    rewards: dict[int, torch.Tensor] = field(default_factory=dict)  # per handle: one reward per function
    logged: dict[str, dict[int, Any]] = field(default_factory=lambda: defaultdict(dict))

    def score(self, requests: list[Request], handles: list[int]) -> list[float]:
        """The engine's `score`: this process's reward functions on finished completions, with no collective call;
        returns the totals the exit rules look at."""
        completions = [self.backend.completions[h] for h in handles]
        rows = [c.prompt_index for c in completions]
        prompts = [self.prompts[i] for i in rows]
        completion_ids = [c.completion_ids for c in completions]
        texts = self.io.decode(prompts, [self.prompt_ids[i] for i in rows], completion_ids)
        row_inputs = [self.inputs[i] for i in rows]
        rewards = self.io.score_local(row_inputs, prompts, texts, completion_ids, rows, len(rows)).cpu()
        for handle, per_func in zip(handles, rewards, strict=True):
            self.rewards[handle] = per_func
        for key, values in self.io.pop_extra_logs(len(handles)).items():
            self.logged[key].update(zip(handles, values, strict=True))
        totals = total_reward(rewards, self.io.reward_weights).tolist()
        return self.io.exit_rule_totals(totals, completion_ids)

    def refill_and_tokenize(self, index: int) -> int | None:
        """The engine's `refill`, with the new prompt tokenized and made available to the backend."""
        new = self.refill(index)
        if new is not None:
            ids = self.io.tokenize([self.prompts[new]])[0][0]
            self.prompt_ids.append(ids)
            self.backend.add_prompt(ids)
        return new

    def rewards_per_func(self, rows: list[int]) -> torch.Tensor:
        return torch.stack([self.rewards[r] for r in rows])

    def extra_logs(self, rows: list[int]) -> dict[str, list]:
        return {key: [values.get(r) for r in rows] for key, values in self.logged.items()}

    def step_lengths(self) -> tuple[list[int], list[bool]]:
        """Generated tokens and ended flags of every finished completion, for the batch's `completions/*` metrics.
        Aborted requests are not completions: their tokens are in `ada/aborted_tokens`."""
        completion_ids = [c.completion_ids for c in self.backend.completions]
        return [len(ids) for ids in completion_ids], self.io.ended(completion_ids)

    def uncounted_tokens(self, kept: list[int]) -> int:
        """Prompt and completion tokens of the completions not kept: the replay counted only the kept rows in
        `num_input_tokens_seen`."""
        kept_set = set(kept)
        return sum(
            len(self.prompt_ids[c.prompt_index]) + len(c.completion_ids)
            for row, c in enumerate(self.backend.completions)
            if row not in kept_set
        )

    def select(self, rows: list[int]) -> GenerationOutput:
        completions = [self.backend.completions[r] for r in rows]
        logprobs = [c.logprobs for c in completions]
        return self.io.replay(
            [self.prompts[c.prompt_index] for c in completions],
            [c.completion_ids for c in completions],
            None if None in logprobs else logprobs,
        )
