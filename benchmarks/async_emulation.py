"""The asynchronous benchmark's emulation (`async_worker.py`'s docstring says what runs): the workers compared
(`Method`), an asyncio event loop on a virtual clock, the client that sends each request to the emulated engine and
records every prompt's cost, the trainer stand-in that consumes the groups, and one simulated run of a worker's
loops."""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from step_time_emulation import EmulatedEngine, Regime, Workload

from trl_ada.adapter.async_worker import AdaRolloutConfig
from trl_ada.core.engine import Draw

# --------------------------------------------------------------------------------------------------------------------
# Methods
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    """A worker: TRL's own loop (`ada` None) or the Ada loop with these sampling settings."""

    key: str
    name: str
    num_generations: int
    ada: AdaRolloutConfig | None = None


# --------------------------------------------------------------------------------------------------------------------
# Virtual clock, engine client, trainer stand-in
# --------------------------------------------------------------------------------------------------------------------


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop on a virtual clock: when no callback is ready it moves the clock to the next timer instead
    of sleeping, so `asyncio.sleep`, `wait_for` timeouts and `call_at` all run in virtual seconds. Real I/O still
    wakes it (it polls the selector without blocking first); nothing in this benchmark uses threads."""

    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 0.0
        self._poll = self._selector.select
        self._selector.select = self._select  # type: ignore[method-assign]

    def time(self) -> float:
        return self._virtual_now

    def _select(self, timeout: float | None = None) -> list[Any]:
        events = self._poll(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise RuntimeError("Nothing is ready and no timer is due: the emulation is stuck.")
        self._virtual_now += timeout
        return []


@dataclass
class PromptCost:
    """What one prompt's requests cost the engine."""

    started: int = 0
    finished: int = 0  # returned by the engine (pooled, dropped, or finished before an abort reached it)
    aborted: int = 0  # cancelled while decoding
    tokens: int = 0  # decoded, aborted ones included
    aborted_tokens: int = 0  # decoded by requests cancelled while decoding


class EngineClient:
    """`EmulatedEngine` behind an awaitable `request(prompt)`, on the running virtual-clock loop.

    The engine only moves at events: a timer is set at its next finish (`EmulatedEngine.next_finish_time`), reset at
    every submit and abort (they change how many sequences run, hence the step time). At the timer, `wait` returns the
    finished draws and their futures are resolved. The loops submit only in callbacks of such events (or at the start),
    so every submit lands at the engine's own time; `off_event_submits` counts any that do not."""

    def __init__(self, engine: EmulatedEngine) -> None:
        self.engine = engine
        self.cost: dict[int, PromptCost] = defaultdict(PromptCost)
        self.off_event_submits = 0
        self._pending: dict[int, tuple[asyncio.Future, int]] = {}  # ticket -> (future, prompt)
        self._next_ticket = 0
        self._timer: asyncio.TimerHandle | None = None

    async def request(self, prompt: int) -> tuple[float, int]:
        """One completion of `prompt`: its (reward, tokens) once the engine has decoded it."""
        loop = asyncio.get_running_loop()
        if abs(loop.time() - self.engine.now) > 1e-6:
            self.off_event_submits += 1
        ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
        future = loop.create_future()
        self._pending[ticket] = (future, prompt)
        self.cost[prompt].started += 1
        self.engine.submit([Draw(prompt, ticket)])
        self._reschedule()
        try:
            return await future
        except asyncio.CancelledError:
            if self._pending.pop(ticket, None) is not None:  # still decoding: the engine stops it
                tokens = self.engine.abort([ticket])
                cost = self.cost[prompt]
                cost.aborted += 1
                cost.tokens += tokens
                cost.aborted_tokens += tokens
                self._reschedule()
            raise

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        due = self.engine.next_finish_time()
        self._timer = None if due is None else asyncio.get_running_loop().call_at(due, self._fire)

    def _fire(self) -> None:
        self._timer = None
        for finished in self.engine.wait():
            future, prompt = self._pending.pop(finished.ticket)
            cost = self.cost[prompt]
            cost.finished += 1
            cost.tokens += finished.num_tokens
            future.set_result((finished.handle, finished.num_tokens))
        self._reschedule()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


async def emulated_reward(completions: list[list[dict[str, str]]], **kwargs: Any) -> list[float]:
    """The engine's reward, carried in the completion's text (asynchronous: the loops await it on the event loop)."""
    return [float(completion[-1]["content"]) for completion in completions]


def emulated(loop_cls: type) -> type:
    """`loop_cls` whose one request to vLLM (`_generate_one`, a whole conversation) goes to the emulated engine."""
    from trl.experimental.async_grpo.async_rollout_worker import TrainingSequence

    class Emulated(loop_cls):  # type: ignore[misc, valid-type]
        client: EngineClient

        async def _generate_one(self, prompt: Any, tool_dict: Any, tools: Any, group_id: int = 0) -> tuple:
            reward, tokens = await self.client.request(group_id)
            # The ids only carry the length: the loops count tokens with len(completion_ids).
            row = TrainingSequence(input_ids=[0], completion_mask=[1], old_log_probs=[0.0], rollout_id=str(group_id))
            completion = [{"role": "assistant", "content": repr(float(reward))}]
            return completion, [0] * tokens, [row], 0, 0, None

    Emulated.__name__ = Emulated.__qualname__ = f"Emulated{loop_cls.__name__}"
    return Emulated


class Shared:
    """Stands in for the worker's `mp.Value`s (`.value`)."""

    def __init__(self, value: float = 0) -> None:
        self.value = value


class Discard:
    """A metrics queue that drops everything (the loops never block on it)."""

    def put_nowait(self, item: Any) -> None:
        pass


@dataclass
class GroupRecord:
    """One trained group: when its last row reached the trainer, its rows' rewards, its version lag, its cost."""

    group_id: int
    done_at: float
    rewards: list[float]
    lag: int
    cost: PromptCost


class TrainerStandIn:
    """The worker's `rollout_buffer`, consumed at once: records each group when its last row arrives, moves the policy
    version on every `samples_per_step` rows, and sets `done` after `target` groups."""

    def __init__(self, client: EngineClient, rows_per_group: int, samples_per_step: int, warmup: int, target: int):
        self.client, self.rows_per_group, self.samples_per_step = client, rows_per_group, samples_per_step
        self.warmup, self.target = warmup, target
        self.version = Shared(0)
        self.records: list[GroupRecord] = []
        self.rows: dict[int, list[Any]] = defaultdict(list)
        self.consumed = 0
        self.window_start: tuple[int, int] | None = None  # the engine's (steps, tokens) when the warm-up ended
        self.window_end: tuple[int, int] | None = None
        self.done = asyncio.Event()

    def qsize(self) -> int:
        return 0

    def put_nowait(self, sample: Any) -> None:
        rows = self.rows[sample.group_id]
        rows.append(sample)
        if len(rows) < self.rows_per_group:
            return
        del self.rows[sample.group_id]
        lag = int(self.version.value) - min(int(s.model_version) for s in rows)
        now = asyncio.get_running_loop().time()
        cost = self.client.cost[sample.group_id]
        self.records.append(GroupRecord(sample.group_id, now, [s.metrics["reward"] for s in rows], lag, cost))
        self.consumed += len(rows)
        self.version.value = self.consumed // self.samples_per_step
        engine = self.client.engine
        if len(self.records) == self.warmup:
            self.window_start = (engine.steps, engine.tokens)
        if len(self.records) == self.target:
            self.window_end = (engine.steps, engine.tokens)
            self.done.set()


_TOKENIZER: Any = None


def tokenizer() -> Any:
    """The toy model's tokenizer (shipped with the package): the loops need one to build, never to generate here."""
    global _TOKENIZER
    if _TOKENIZER is None:
        from accelerate.state import PartialState
        from transformers import AutoTokenizer
        from trl.chat_template_utils import qwen3_template

        from trl_ada.toy import toy_model_dir

        PartialState()  # the loops log through accelerate, which needs its state
        _TOKENIZER = AutoTokenizer.from_pretrained(toy_model_dir())
        _TOKENIZER.response_template = qwen3_template  # its ChatML turns parse as Qwen3's
    return _TOKENIZER


def build_loop(method: Method, dataset: Any, client: EngineClient, trainer: TrainerStandIn, max_inflight: int) -> Any:
    """The method's loop, as `AsyncRolloutWorker` would build it in its child, with the emulated request."""
    from trl.experimental.async_grpo.async_rollout_worker import _AsyncRolloutLoop

    from trl_ada.adapter.async_worker import AdaRolloutLoop

    tok = tokenizer()
    kwargs: dict[str, Any] = {
        "model_name": "emulated",
        "dataset": dataset,
        "reward_funcs": [emulated_reward],
        "processing_class": tok,
        "rollout_buffer": trainer,
        "model_version_value": trainer.version,
        "heartbeat_value": Shared(0.0),
        "failed_event": threading.Event(),
        "exception_info_queue": queue.Queue(),
        "metrics_queue": Discard(),
        "num_generations": method.num_generations,
        "max_inflight_tasks": max_inflight,
    }
    if "eos_token_ids" in inspect.signature(_AsyncRolloutLoop.__init__).parameters:  # TRL >= 1.16.0
        kwargs["eos_token_ids"] = [tok.eos_token_id]
    if method.ada is not None:
        kwargs["ada"] = method.ada
    loop = emulated(AdaRolloutLoop if method.ada is not None else _AsyncRolloutLoop)(**kwargs)
    loop.client = client
    return loop


async def _drive(loop: Any, trainer: TrainerStandIn) -> None:
    stop = asyncio.Event()
    tasks = [
        asyncio.ensure_future(loop._generate_loop(stop_event=stop)),
        asyncio.ensure_future(loop._score_loop(stop)),
    ]
    done = asyncio.ensure_future(trainer.done.wait())
    await asyncio.wait([*tasks, done], return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    for task in tasks:
        if task.done() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        task.cancel()
    done.cancel()
    await asyncio.gather(*tasks, done, return_exceptions=True)
    if not trainer.done.is_set():
        raise RuntimeError(f"The loops stopped after {len(trainer.records)} of {trainer.target} groups.")


@dataclass
class Simulation:
    """What one run left: the trainer stand-in (its group records), the engine client (per-prompt costs) and the
    virtual time the event loop ended at."""

    trainer: TrainerStandIn
    client: EngineClient
    end_time: float


def simulate(
    method: Method,
    workload: Workload,
    regime: Regime,
    dataset: Any,
    *,
    max_inflight: int,
    samples_per_step: int,
    warmup: int,
    groups: int,
) -> Simulation:
    """Run `method`'s loops on the emulated engine until `warmup + groups` groups have reached the trainer, then stop
    them (what is still in flight is cancelled, hence aborted in the engine)."""
    engine = EmulatedEngine(workload, regime)
    client = EngineClient(engine)
    trainer = TrainerStandIn(client, method.num_generations, samples_per_step, warmup, warmup + groups)
    loop = build_loop(method, dataset, client, trainer, max_inflight)
    loop._loop.close()  # the loop it made for its own `run()`; this benchmark drives its coroutines instead
    event_loop = VirtualClockLoop()
    try:
        asyncio.set_event_loop(event_loop)
        event_loop.run_until_complete(_drive(loop, trainer))
        client.close()
    finally:
        asyncio.set_event_loop(None)
        event_loop.close()
        loop._tool_pool.shutdown(wait=False)
    # Every token the engine decoded belongs to one prompt's requests: the two counts must agree.
    if sum(c.tokens for c in client.cost.values()) != engine.tokens:
        raise RuntimeError("The per-prompt token counts do not add up to the engine's.")
    return Simulation(trainer, client, event_loop.time())
