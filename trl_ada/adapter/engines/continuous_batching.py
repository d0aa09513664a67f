"""Streaming through transformers' continuous batching (`use_transformers_continuous_batching=True`).

transformers' `ContinuousBatchingManager` runs generation in a background thread: requests are added and cancelled at
any moment, and results come back through a queue as they finish. That is all streaming needs, on CPU too. Requests
are added with `streaming=True` so that the tokens a request had generated when it was cancelled are known (each
update carries the tokens so far); the cost is one queue item per generated token, small next to the forward pass.

A request is only cancelled while it can still be stopped. The manager finishes requests in its own thread, so when
the engine aborts a draw, the draw may already be finished there (its last event in the queue, not read yet), or be
about to finish in the step the manager is running. Cancelling such a request frees cache blocks that are already
free (transformers 5.17 logs "CacheAllocator ... attempted to free blocks for non-existent request_id" for each).
`abort` therefore first reads every event already delivered, and does not cancel a request that has finished or
that is within `FINISH_MARGIN` tokens of `max_new_tokens`: those finish on their own within the steps in progress,
and their tokens count as aborted (`max_new_tokens` for one not finished yet). A request that ends with its
end-of-sequence token in the very step that processes its cancellation still meets a cancel: only the manager's
thread can know that, and it does not say.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ...core.engine import Draw, Finished
from .base import TokenBackend

POLL_SECONDS = 1.0  # how often `wait` checks that the generation thread is still alive
# Decode steps the manager may have in progress when a cancellation is queued: the one running and, with transformers'
# asynchronous batching, the one prepared behind it. A request this close to its token limit finishes before a cancel
# can reach it.
FINISH_MARGIN = 2


class ContinuousBatchingBackend(TokenBackend):
    """A `Backend` over a started `ContinuousBatchingManager`; request ids are `ada-<ticket>`."""

    def __init__(self, manager: Any, prompt_ids: Sequence[list[int]], max_new_tokens: int) -> None:
        super().__init__(prompt_ids)
        self.manager = manager
        self.max_new_tokens = max_new_tokens
        self.draws: dict[str, Draw] = {}  # in flight, by request id
        self.generated: dict[str, int] = {}  # tokens generated so far, by request id (from the last event read)
        self.ready: dict[str, Any] = {}  # finished in the manager, event read, not yet returned by `wait`
        self.cancelled = 0  # cancellations sent to the manager
        self.let_finish = 0  # aborted draws not cancelled, because they had finished or were about to

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
        while self.draws and not self.ready:
            if not self._read(POLL_SECONDS) and not self.manager.is_running():
                raise RuntimeError("transformers' continuous batching thread stopped with requests in flight.")
        self._read_delivered()  # return what is ready without waiting for more
        finished = []
        for request_id, output in self.ready.items():
            draw = self.draws.pop(request_id)
            logprobs = list(output.logprobs) or None
            finished.append(self._finished(draw, list(output.generated_tokens), logprobs))
        self.ready.clear()
        return finished

    def abort(self, tickets: Sequence[int]) -> int:
        self._read_delivered()
        tokens = 0
        for ticket in tickets:
            request_id = f"ada-{ticket}"
            if self.draws.pop(request_id, None) is None:
                continue
            done = self.ready.pop(request_id, None)
            generated = self.generated.pop(request_id, 0)
            if done is not None:  # finished in the manager: nothing to cancel
                self.let_finish += 1
                tokens += len(done.generated_tokens)
            elif generated + FINISH_MARGIN >= self.max_new_tokens:  # finishes in the steps already under way
                self.let_finish += 1
                tokens += self.max_new_tokens
            else:
                self.cancelled += 1
                self.manager.cancel_request(request_id)
                tokens += generated
        return tokens

    def close(self) -> None:
        self.abort([draw.ticket for draw in list(self.draws.values())])
        if self.manager.is_running():
            self.manager.stop(block=True, timeout=10)
        self.manager.destroy()

    def _read_delivered(self) -> None:
        """Take every event the manager has delivered, without waiting."""
        while self._read(0.0):
            pass

    def _read(self, timeout: float) -> bool:
        """Take one event (waiting up to `timeout` seconds for it) into `generated` or `ready`; False when none came.
        Events of requests aborted earlier are dropped; a failed request raises."""
        output = self.manager.get_result(timeout=timeout)
        if output is None:
            return False
        request_id = output.request_id
        if request_id in self.draws:
            if output.error is not None:
                raise RuntimeError(f"Continuous batching failed on a request: {output.error}")
            if output.is_finished():
                self.generated.pop(request_id, None)
                self.ready[request_id] = output
            else:
                self.generated[request_id] = len(output.generated_tokens)
        return True


@dataclass(frozen=True)
class CacheSize:
    """A continuous-batching KV cache sized for one generation batch (`cache_size`)."""

    num_blocks: int
    page_size: int  # tokens per block (transformers < 5.18 calls it block_size)
    max_batch_tokens: int  # tokens the manager may process in one forward pass (prefill chunks and decodes)
    bytes: int  # the key and value tensors' size: num_blocks * page_size tokens, every layer

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.page_size


def kv_bytes_per_token(model_config: Any, dtype_bytes: int) -> int:
    """Bytes of key and value cache one token takes across every layer of the model: 2 (key, value) x layers x
    key-value heads x head dimension x the cache dtype's size."""
    heads = getattr(model_config, "num_key_value_heads", None) or model_config.num_attention_heads
    head_dim = getattr(model_config, "head_dim", None) or model_config.hidden_size // model_config.num_attention_heads
    return 2 * model_config.num_hidden_layers * heads * head_dim * dtype_bytes


def cache_size(
    model_config: Any,
    rows: int,
    prompt_length: int,
    completion_length: int,
    dtype_bytes: int = 2,
    page_size: int = 32,
    max_batch_tokens: int | None = None,
) -> CacheSize:
    """A cache that holds `rows` sequences of `prompt_length + completion_length` tokens at once, each in whole
    blocks of `page_size` tokens, plus one block per row of slack (a request's last block is partly empty).

    `rows` is the most requests a step has in flight: the group size times the prompts for GRPO, the per-prompt
    budget (or the streaming window) times the prompts for Reinforce-Ada. `max_batch_tokens` defaults to twice the
    rows (at least 256, at most 8,192, transformers' own default): a decode step takes one token per running row,
    and the rest goes to prefill. It is not larger because without flash attention transformers allocates an
    attention mask of `max_batch_tokens` x (cache tokens + `max_batch_tokens`) elements. Pass the sizes with
    `trl_ada.adapter.compat.continuous_batching_cache`, which writes the installed transformers' names."""
    if min(rows, prompt_length + completion_length, page_size, dtype_bytes) < 1:
        raise ValueError(
            f"cache_size: rows={rows}, prompt_length + completion_length={prompt_length + completion_length}, "
            f"page_size={page_size} and dtype_bytes={dtype_bytes} must each be >= 1"
        )
    blocks_per_row = -(-(prompt_length + completion_length) // page_size) + 1
    num_blocks = rows * blocks_per_row
    if max_batch_tokens is None:
        max_batch_tokens = min(8192, max(256, 2 * rows))
    size = num_blocks * page_size * kv_bytes_per_token(model_config, dtype_bytes)
    return CacheSize(num_blocks, page_size, max_batch_tokens, size)


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
