"""The asynchronous loop's bookkeeping: one finished draw (`Completion`), one prompt's finished sampling
(`AdaGroup`), the request slots every open prompt shares (`RequestSlots`), and the engine backend that runs a
prompt's draws as asyncio tasks in those slots (`TaskBackend`)."""

from __future__ import annotations

import asyncio
import functools
import heapq
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...core.engine import (
    Draw,
    Finished,
    Pool,
    SamplingResult,
)
from .seams import (
    TrainingSequence,
)


@dataclass
class Completion:
    """One finished draw: what `_generate_one` returned, its rewards, and the policy version at dispatch."""

    prompt: list[dict[str, Any]]
    completion: list[dict[str, Any]]
    completion_ids: list[int]
    sequences: list[TrainingSequence]
    tool_call_count: int
    tool_failure_count: int
    rewards_per_func: list[float]  # NaN: that function could not score it
    reward: float  # total (sum over functions, as TRL's async worker); NaN when no function could score it
    model_version: int


@dataclass
class AdaGroup:
    """One prompt's finished sampling: its pool (handles are `Completion`s, in request order) and the engine's
    counts. It travels through TRL's `_groups_to_score` queue in place of a `RolloutGroup`."""

    group_id: int
    row: dict[str, Any]
    result: SamplingResult
    queued_at: float = 0.0

    @property
    def pool(self) -> Pool:
        return self.result.pools[0]


class RequestSlots:
    """The loop's `max_inflight_tasks` requests, shared by every prompt being sampled (`limit` None: no limit).

    A prompt's session submits draws up to its own in-flight cap; a draw runs (its request is sent) only while it
    holds a slot. Draws waiting for one start as slots free, oldest prompt first, then in request order, so a prompt
    never holds less than its cap while a younger prompt holds a slot it could have had, except for draws it asks
    for later (after its pilot, say), which wait for the next free slot. A draw holds its slot until it is aborted or
    its prompt's session has taken its finish (`TaskBackend.settle`, after the session's `step`): a prompt's top-up
    competes for the slots its own finished requests leave before the loop can hand them to a new prompt.

    `room` counts the slots no draw holds or waits for; `wake` is set whenever a change leaves it positive, and the
    loop then opens another prompt. Only draws whose prompt is open wait, so with `room` positive every open prompt
    holds at least one slot: the loop has at most `max_inflight_tasks` prompts open."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.held = 0  # slots held: draws running, or finished and not yet taken by their session
        self._waiting: list[tuple[tuple[int, int], int, list[Any]]] = []  # heap of (priority, order, [start | None])
        self._num_waiting = 0
        self._order = 0
        self.wake = asyncio.Event()

    @property
    def room(self) -> int | float:
        free = math.inf if self.limit is None else self.limit - self.held
        return free - self._num_waiting

    def request(self, priority: tuple[int, int], start: Callable[[], None]) -> list[Any]:
        """Queue a draw; `start()` is called when it gets a slot (at a `pump`). Returns its handle for `cancel`."""
        entry: list[Any] = [start]
        heapq.heappush(self._waiting, (priority, self._order, entry))
        self._order += 1
        self._num_waiting += 1
        return entry

    def cancel(self, entry: list[Any]) -> None:
        """Withdraw a draw that is still waiting (it never starts)."""
        if entry[0] is not None:
            entry[0] = None
            self._num_waiting -= 1

    def release(self, count: int) -> None:
        self.held -= count

    def pump(self) -> None:
        """Start waiting draws while slots are free, highest priority first; set `wake` if room is left."""
        while self._waiting and (self.limit is None or self.held < self.limit):
            _, _, entry = heapq.heappop(self._waiting)
            start = entry[0]
            if start is None:
                continue  # cancelled while waiting
            entry[0] = None
            self._num_waiting -= 1
            self.held += 1
            start()
        if self.room > 0:
            self.wake.set()


class TaskBackend:
    """`trl_ada.core.engine.Backend` over asyncio tasks: each draw is a task running `start()` on the running loop,
    once the draw holds one of `slots` (waiting ones start by `priority`, then ticket; without `slots`, at once).
    `next_batch` is the awaitable form of `wait`; after the session has stepped through a batch, `settle` hands its
    slots back. `abort` cancels tasks, which closes their HTTP requests (vLLM aborts a request whose client left), and
    withdraws draws still waiting for a slot. Tokens an aborted request had generated are not reported back (0)."""

    def __init__(
        self, start: Callable[[], Awaitable[Completion]], slots: RequestSlots | None = None, priority: int = 0
    ) -> None:
        self._start = start
        self._slots = slots or RequestSlots(None)
        self._priority = priority
        self._tasks: dict[asyncio.Task, int] = {}  # running: task -> ticket
        self._waiting: dict[int, list[Any]] = {}  # ticket -> its entry in the slots' queue
        self._done: list[tuple[int, asyncio.Task]] = []
        self._taken = 0  # draws handed over by the last `next_batch`, whose slots `settle` releases
        self._event = asyncio.Event()

    @property
    def in_flight(self) -> int:
        """Draws running (holding a slot); draws waiting for one are not counted."""
        return len(self._tasks)

    def submit(self, draws: Sequence[Draw]) -> None:
        for draw in draws:
            start = functools.partial(self._run, draw.ticket)
            self._waiting[draw.ticket] = self._slots.request((self._priority, draw.ticket), start)
        self._slots.pump()

    def _run(self, ticket: int) -> None:
        """The draw got its slot: send its request."""
        del self._waiting[ticket]
        task = asyncio.get_running_loop().create_task(self._start())
        self._tasks[task] = ticket
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task) -> None:
        ticket = self._tasks.pop(task, None)
        if ticket is None:  # aborted: the engine must never see it again
            return
        self._done.append((ticket, task))
        self._event.set()

    def wait(self) -> list[Finished]:
        raise RuntimeError("TaskBackend runs on an event loop: await next_batch() instead of wait().")

    async def next_batch(self) -> list[Finished]:
        """Every draw finished since the last call (at least one); raises the first draw that failed. Their slots stay
        held until `settle`."""
        while not self._done:
            self._event.clear()
            await self._event.wait()
        batch, self._done = self._done, []
        self._taken += len(batch)
        finished = []
        for ticket, task in batch:
            completion = task.result()
            finished.append(Finished(ticket, completion, len(completion.completion_ids)))
        return finished

    def settle(self) -> None:
        """Release the slots of the draws the last `next_batch` handed over (call it once the session has stepped,
        so that its top-up already waits) and start waiting draws in the free slots."""
        self._slots.release(self._taken)
        self._taken = 0
        self._slots.pump()

    def abort(self, tickets: Sequence[int]) -> int:
        wanted = set(tickets)
        for ticket in wanted & self._waiting.keys():
            self._slots.cancel(self._waiting.pop(ticket))
        released = 0
        for task, ticket in list(self._tasks.items()):
            if ticket in wanted:
                del self._tasks[task]  # first, so that `_finished` ignores it
                task.cancel()
                released += 1
        self._slots.release(released)  # handed on at the next `settle` (the session is stepping)
        return 0

    async def close(self) -> None:
        """Cancel whatever is still in flight or waiting, hand every slot back and wait until it has stopped."""
        for entry in self._waiting.values():
            self._slots.cancel(entry)
        self._waiting.clear()
        tasks = list(self._tasks)
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        self._slots.release(len(tasks) + len(self._done) + self._taken)
        self._done, self._taken = [], 0
        self._slots.pump()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
