"""The streaming schedule on a trainer: a backend per step, rewards scored per batch on each process, and the kept
completions handed to GRPOTrainer's `_generate` for decoding and logging, as if the engine had just produced them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..advantages import total_reward
from ..checks import RewardFunctionError, RewardGuard
from ..engine import RefillFn, Request, SamplingResult, sample
from .base import TokenBackend
from .scoring import (
    decode_completions,
    ended,
    exit_rule_totals,
    length_marks,
    local_reward_gather,
    log_step_lengths,
)


def sample_streaming(
    trainer: Any,
    prompts: list,
    inputs: list[dict[str, Any]],
    parent_generate: Callable[[list], tuple],
    parent_rewards: Callable[..., torch.Tensor],
    refill: RefillFn | None = None,
) -> tuple[SamplingResult, Streamed]:
    """Stream through the backend (vLLM server, vLLM colocate or transformers continuous batching). Each process
    streams on its own, with no collective call until the step's generation is over: a failure on one process
    (a reward, a server that stops answering) aborts its requests, and then stops every process with its
    error. A prompt `refill` appends to `prompts` is tokenized and streamed at once."""
    prompt_ids, images, _ = trainer._tokenize_prompts(prompts)
    trainer._raise_on_every_process(
        "rollout_schedule='streaming' does not take image prompts yet; use rollout_schedule='rounds'."
        if images is not None
        else None,
        NotImplementedError,
    )
    trainer._warn_if_beyond_context(prompt_ids, prompts)
    if trainer.use_vllm and trainer.state.global_step != trainer._last_loaded_step:  # as GRPOTrainer does, once a step
        trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step
    streamed: Streamed | None = None
    failure: BaseException | None = None

    def refill_and_tokenize(index: int) -> int | None:
        new = refill(index)
        if new is not None:
            ids = trainer._tokenize_prompts([prompts[new]])[0][0]
            prompt_ids.append(ids)
            backend.add_prompt(ids)
        return new

    try:
        with trainer._streaming_backend(prompt_ids) as backend:
            streamed = Streamed(trainer.reward_weights, backend)

            def score(requests: list[Request], handles: list[int]) -> list[float]:
                completions = [backend.completions[h] for h in handles]
                rows = [c.prompt_index for c in completions]
                batch_prompts = [prompts[i] for i in rows]
                completion_ids = [c.completion_ids for c in completions]
                texts = decode_completions(trainer, batch_prompts, [prompt_ids[i] for i in rows], completion_ids)
                guard = RewardGuard(trainer.reward_func_names)
                with trainer._reward_funcs_as(guard.wrap(trainer.reward_funcs)), local_reward_gather():
                    rewards = parent_rewards([inputs[i] for i in rows], batch_prompts, texts, completion_ids)
                if guard.failure is not None:
                    describe = guard.failure.describe(batch_prompts, texts, rows.__getitem__)
                    raise RewardFunctionError(
                        f"{describe} (training step {trainer.state.global_step + 1}). Fix or guard the reward "
                        "function; return None for a completion it cannot score."
                    ) from guard.failure.error
                totals = streamed.add(handles, rewards.cpu(), trainer._pop_extra_logs(len(handles)))
                return exit_rule_totals(trainer, totals, completion_ids)

            result = sample(
                len(prompts),
                trainer.ada_schedule,
                backend,
                score,
                rollout="streaming",
                max_in_flight=trainer.args.max_in_flight,
                refill=None if refill is None else refill_and_tokenize,
            )
    except Exception as error:  # raised below on every process, or the others would wait forever
        if trainer.accelerator.num_processes == 1:
            raise
        failure = error
    message = None if failure is None else f"{type(failure).__name__}: {failure}"
    trainer._raise_on_every_process(message, type(failure) if failure is not None else RuntimeError, failure)

    def replay(rows: list[int]) -> tuple:
        completions = [streamed.backend.completions[r] for r in rows]
        logprobs = [c.logprobs for c in completions]
        trainer._ada_replay = ([c.completion_ids for c in completions], None if None in logprobs else logprobs)
        output = parent_generate([prompts[c.prompt_index] for c in completions])
        log_streamed_lengths(trainer, streamed.backend, prompt_ids, rows)
        return output

    streamed.replay = replay
    return result, streamed


def log_streamed_lengths(trainer: Any, backend: TokenBackend, prompt_ids: list[list[int]], kept: list[int]) -> None:
    """GRPOTrainer's `_generate` just logged completion lengths and counted tokens for the kept rows only; make
    them cover every completion streamed this step, on every process, as under rounds. Aborted requests are not
    completions: their tokens are in `ada/aborted_tokens`."""
    lengths = [len(c.completion_ids) for c in backend.completions]
    flags = ended(trainer, [c.completion_ids for c in backend.completions])
    kept_set = set(kept)
    extra_tokens = sum(
        len(prompt_ids[c.prompt_index]) + len(c.completion_ids)
        for row, c in enumerate(backend.completions)
        if row not in kept_set
    )
    extra_tokens = trainer._sum_over_processes(extra_tokens)
    trainer.state.num_input_tokens_seen += extra_tokens
    trainer._metrics["train"]["num_tokens"] = [trainer.state.num_input_tokens_seen]
    marks = {name: count - 1 for name, count in length_marks(trainer).items()}  # the replay's one entry
    log_step_lengths(trainer, lengths, flags, marks)


@dataclass
class Streamed:
    """Rewards and logged columns of the completions a streaming backend finished; a handle is a row of
    `backend.completions`. `select` hands the kept rows to GRPOTrainer's `_generate` through `replay`."""

    reward_weights: torch.Tensor
    backend: TokenBackend
    replay: Any = None  # rows -> GRPOTrainer._generate's 8-tuple, set by the trainer once streaming is over
    rewards: dict[int, torch.Tensor] = field(default_factory=dict)  # per handle: one reward per function
    logged: dict[str, dict[int, Any]] = field(default_factory=lambda: defaultdict(dict))

    def add(self, handles: list[int], rewards_per_func: torch.Tensor, logged: dict[str, list]) -> list[float]:
        """Store one scored batch; return the weighted totals the exit rules look at."""
        for handle, rewards in zip(handles, rewards_per_func, strict=True):
            self.rewards[handle] = rewards
        for key, values in logged.items():
            self.logged[key].update(zip(handles, values, strict=True))
        return total_reward(rewards_per_func, self.reward_weights).tolist()

    def rewards_per_func(self, rows: list[int]) -> torch.Tensor:
        return torch.stack([self.rewards[r] for r in rows])

    def extra_logs(self, rows: list[int]) -> dict[str, list]:
        return {key: [values.get(r) for r in rows] for key, values in self.logged.items()}

    def select(self, rows: list[int]) -> tuple:
        return self.replay(rows)
