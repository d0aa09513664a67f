"""The continuous-batching backend against a stand-in manager (no model, no thread): which aborted requests reach the
manager as cancellations, the tokens `abort` counts, what `wait` returns; and the cache sized from the model."""

import queue
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from trl_ada.adapter.engines.continuous_batching import (
    FINISH_MARGIN,
    ContinuousBatchingBackend,
    cache_size,
    kv_bytes_per_token,
)
from trl_ada.core.engine import Draw


@dataclass
class Event:
    """What transformers' manager delivers for a streaming request: the tokens so far, finished or not."""

    request_id: str
    generated_tokens: list[int]
    finished: bool = False
    error: str | None = None
    logprobs: list[float] = field(default_factory=list)

    def is_finished(self) -> bool:
        return self.finished


class StandInManager:
    """The four calls the backend makes on `ContinuousBatchingManager`; the test delivers events by hand, as the
    manager's generation thread would, into a queue that `get_result` reads."""

    def __init__(self):
        self.events: queue.Queue = queue.Queue()
        self.added: list[str] = []
        self.cancelled: list[str] = []
        self.running = True

    def add_request(self, input_ids, request_id, max_new_tokens, streaming):
        assert streaming and max_new_tokens == MAX_NEW
        self.added.append(request_id)
        return request_id

    def cancel_request(self, request_id):
        self.cancelled.append(request_id)

    def get_result(self, request_id=None, timeout=None):
        try:
            return self.events.get(block=bool(timeout), timeout=timeout or None)
        except queue.Empty:
            return None

    def is_running(self):
        return self.running

    def deliver(self, request_id, tokens, finished=False):
        self.events.put(Event(request_id, list(range(tokens)), finished))


MAX_NEW = 16


def backend_with(tickets):
    manager = StandInManager()
    backend = ContinuousBatchingBackend(manager, [[1, 2, 3]], MAX_NEW)
    backend.submit([Draw(0, ticket) for ticket in tickets])
    return manager, backend


def test_a_request_finished_in_the_manager_with_its_event_unread_is_not_cancelled():
    """The fault seen on a GPU: the engine aborts ada-1 after the manager has finished it (its last event waits in
    the queue). Cancelling it made transformers 5.17 free its cache blocks a second time, with a warning. It must not
    be cancelled; its tokens (all 9, read from the event) count as aborted, and `wait` never returns it."""
    manager, backend = backend_with([0, 1])
    manager.deliver("ada-0", 3)
    manager.deliver("ada-1", 9, finished=True)  # finished, event not read yet
    assert backend.abort([1]) == 9
    assert manager.cancelled == []
    manager.deliver("ada-0", 5, finished=True)
    (finished,) = backend.wait()
    assert (finished.ticket, finished.num_tokens) == (0, 5)
    assert backend.completions[finished.handle].completion_ids == [0, 1, 2, 3, 4]
    assert (backend.cancelled, backend.let_finish) == (0, 1)


def test_only_requests_that_can_still_be_stopped_are_cancelled():
    """ada-0 has generated 2 tokens of 16: cancelled, 2 tokens counted. ada-1 is FINISH_MARGIN tokens from its limit,
    so it finishes within the steps the manager already has under way: not cancelled, counted at the limit, 16.
    ada-2 was never scheduled (no event): cancelled, 0 tokens. ada-3 finished before (returned by `wait`): an abort of
    it is a no-op."""
    manager, backend = backend_with([0, 1, 2, 3])
    manager.deliver("ada-3", 4, finished=True)
    assert [f.ticket for f in backend.wait()] == [3]
    manager.deliver("ada-0", 2)
    manager.deliver("ada-1", MAX_NEW - FINISH_MARGIN)
    assert backend.abort([0, 1, 2, 3]) == 2 + MAX_NEW + 0
    assert manager.cancelled == ["ada-0", "ada-2"]
    assert (backend.cancelled, backend.let_finish) == (2, 1)
    manager.deliver("ada-1", MAX_NEW, finished=True)  # its last event arrives after the abort: dropped
    assert backend.wait() == [] and backend.draws == {}


def test_wait_returns_every_delivered_finish_in_finish_order_and_raises_on_a_failed_request():
    manager, backend = backend_with([0, 1, 2])
    manager.deliver("ada-2", 1)
    manager.deliver("ada-2", 2, finished=True)
    manager.deliver("ada-0", 7, finished=True)
    assert [(f.ticket, f.num_tokens) for f in backend.wait()] == [(2, 2), (0, 7)]
    manager.events.put(Event("ada-1", [], error="out of blocks"))
    with pytest.raises(RuntimeError, match="failed on a request: out of blocks"):
        backend.wait()


def test_wait_raises_when_the_generation_thread_stopped_with_requests_in_flight():
    manager, backend = backend_with([0])
    manager.running = False
    manager.get_result = lambda request_id=None, timeout=None: None
    with pytest.raises(RuntimeError, match="thread stopped with requests in flight"):
        backend.wait()


QWEN_05B = SimpleNamespace(num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, hidden_size=896)


def test_the_cache_is_sized_from_the_models_key_value_size_and_the_steps_rows():
    """Qwen2.5-0.5B (24 layers, 2 key-value heads of 64 = 896 / 14) in bf16: 2 x 24 x 2 x 64 x 2 bytes = 12,288 bytes
    a token. GRPO n=4 on 16 prompts (64 rows) of 64 prompt tokens and 256 completion tokens, in pages of 32:
    ceil(320 / 32) + 1 = 11 blocks a row, 704 blocks, 22,528 tokens, 276,824,064 bytes (264 MiB); a forward pass
    takes twice the rows, 128 tokens, raised to the 256-token floor."""
    assert kv_bytes_per_token(QWEN_05B, 2) == 12_288
    size = cache_size(QWEN_05B, rows=64, prompt_length=64, completion_length=256)
    assert (size.num_blocks, size.page_size, size.tokens, size.max_batch_tokens) == (704, 32, 22_528, 256)
    assert size.bytes == 22_528 * 12_288 == 276_824_064
    # Ada's budget of 32 a prompt: 512 rows, 1,024 tokens a forward pass; 8,192 rows are capped at transformers'
    # default of 8,192
    assert cache_size(QWEN_05B, rows=512, prompt_length=64, completion_length=256).max_batch_tokens == 1_024
    assert cache_size(QWEN_05B, rows=8_192, prompt_length=2, completion_length=8).max_batch_tokens == 8_192
    no_kv_heads = SimpleNamespace(num_hidden_layers=2, num_attention_heads=4, hidden_size=128)  # head_dim 32
    assert kv_bytes_per_token(no_kv_heads, 4) == 2 * 2 * 4 * 32 * 4
    with pytest.raises(ValueError, match="rows=0"):
        cache_size(QWEN_05B, rows=0, prompt_length=64, completion_length=256)
