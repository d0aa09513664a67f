"""Streaming through transformers' continuous batching (`use_transformers_continuous_batching=True`).

transformers' `ContinuousBatchingManager` runs generation in a background thread: requests are added and cancelled at
any moment, and results come back through a queue as they finish. That is all streaming needs, on CPU too. Requests
are added with `streaming=True` so that the tokens a request had generated when it was cancelled are known (each
update carries the tokens so far); the cost is one queue item per generated token, small next to the forward pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..engine import Draw, Finished
from .base import TokenBackend

POLL_SECONDS = 1.0  # how often `wait` checks that the generation thread is still alive


class ContinuousBatchingBackend(TokenBackend):
    """A `Backend` over a started `ContinuousBatchingManager`; request ids are `ada-<ticket>`."""

    def __init__(self, manager: Any, prompt_ids: Sequence[list[int]], max_new_tokens: int) -> None:
        super().__init__(prompt_ids)
        self.manager = manager
        self.max_new_tokens = max_new_tokens
        self.draws: dict[str, Draw] = {}  # in flight, by request id
        self.generated: dict[str, int] = {}  # tokens generated so far, by request id

    def submit(self, draws: Sequence[Draw]) -> None:
        for draw in draws:
            request_id = f"ada-{draw.ticket}"
            self.draws[request_id] = draw
            added = self.manager.add_request(
                self.prompt_ids[draw.prompt_index],
                request_id=request_id,
                max_new_tokens=self.max_new_tokens,
                streaming=True,
            )
            if added is None:
                raise RuntimeError("transformers' continuous batching manager refused a request (it is stopping).")

    def wait(self) -> list[Finished]:
        finished: list[Finished] = []
        timeout: float | None = POLL_SECONDS
        while self.draws:
            output = self.manager.get_result(timeout=timeout)
            if output is None:
                if finished:
                    return finished
                if not self.manager.is_running():
                    raise RuntimeError("transformers' continuous batching thread stopped with requests in flight.")
                continue
            draw = self.draws.get(output.request_id)
            if draw is not None:  # else: a request cancelled earlier
                if output.error is not None:
                    raise RuntimeError(f"Continuous batching failed on a request: {output.error}")
                if output.is_finished():
                    del self.draws[output.request_id]
                    self.generated.pop(output.request_id, None)
                    logprobs = list(output.logprobs) or None
                    finished.append(self._finished(draw, list(output.generated_tokens), logprobs))
                else:
                    self.generated[output.request_id] = len(output.generated_tokens)
            timeout = 0.0 if finished else POLL_SECONDS  # return what is ready without waiting for more
        return finished

    def abort(self, tickets: Sequence[int]) -> int:
        tokens = 0
        for ticket in tickets:
            request_id = f"ada-{ticket}"
            if self.draws.pop(request_id, None) is not None:
                self.manager.cancel_request(request_id)
                tokens += self.generated.pop(request_id, 0)
        return tokens

    def close(self) -> None:
        self.abort([draw.ticket for draw in list(self.draws.values())])
        if self.manager.is_running():
            self.manager.stop(block=True, timeout=10)
        self.manager.destroy()


@contextmanager
def continuous_batching_backend(
    model: Any,
    prompt_ids: Sequence[list[int]],
    generation_config: Any,
    continuous_batching_config: Any,
    max_new_tokens: int,
) -> Iterator[ContinuousBatchingBackend]:
    """A started continuous-batching manager over `model` (already prepared for generation), stopped and destroyed
    on exit."""
    manager = model.init_continuous_batching(
        generation_config=generation_config, continuous_batching_config=continuous_batching_config
    )
    manager.start()
    backend = ContinuousBatchingBackend(manager, prompt_ids, max_new_tokens)
    try:
        yield backend
    finally:
        backend.close()
