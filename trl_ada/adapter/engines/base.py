"""What every streaming generation backend shares: a store of finished completions whose row number is the handle
the engine passes around, and the `Backend` protocol of `trl_ada.core.engine` (submit / wait / abort)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...core.engine import Draw, Finished


@dataclass
class Completion:
    """One finished completion of prompt `prompt_index`: its token ids and, when the engine reports them, the
    sampling log-probability of each token (what TRL's importance-sampling correction needs)."""

    prompt_index: int
    completion_ids: list[int]
    logprobs: list[float] | None = None


class TokenBackend:
    """Base of the trainer's streaming backends. Prompts are token ids, one list per prompt of the step (`add_prompt`
    appends one mid-stream, for refill); a subclass
    starts generation in `submit`, reports finished draws through `_finished` from `wait`, and stops draws in
    `abort`. `close` releases whatever the step held (threads, connections, engine requests)."""

    def __init__(self, prompt_ids: Sequence[list[int]]) -> None:
        self.prompt_ids = list(prompt_ids)
        self.completions: list[Completion] = []

    def add_prompt(self, prompt_ids: list[int]) -> int:
        """Make one more prompt available to draws; returns its index."""
        self.prompt_ids.append(list(prompt_ids))
        return len(self.prompt_ids) - 1

    def _finished(self, draw: Draw, completion_ids: list[int], logprobs: list[float] | None = None) -> Finished:
        """Store a finished completion; its handle is its row in `completions`."""
        self.completions.append(Completion(draw.prompt_index, list(completion_ids), logprobs))
        return Finished(draw.ticket, len(self.completions) - 1, len(completion_ids))

    def submit(self, draws: Sequence[Draw]) -> None:
        raise NotImplementedError

    def wait(self) -> list[Finished]:
        raise NotImplementedError

    def abort(self, tickets: Sequence[int]) -> int:
        raise NotImplementedError

    def close(self) -> None:
        """Abort anything still in flight and release the step's resources. Safe to call twice."""
