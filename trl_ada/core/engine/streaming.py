"""`sample`'s streaming (`rollout="streaming"`): no barriers; each prompt keeps draws in flight, its pool is the
longest request-order prefix of finished draws, and it stops at the first prefix where its exit rule holds, aborting
the rest. `StreamSession` is the loop as an object, for callers that drive it from their own event loop."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# `_refilled`, `_is_finished`, `_mark_resolved`: the engine's own helpers, shared by its two loops (rounds, streaming).
from .backend import Backend, Draw, Finished, RefillFn, Request, ScoreFn, SignalFn, _refilled
from .pool import Pool, SamplingResult, has_signal
from .rules import Pilot
from .schedule import Schedule, _is_finished, _mark_resolved, expected_remaining_draws

POOL_ORDERS = ("request", "finish_order_biased")


def streaming_session(
    num_prompts: int,
    schedule: Schedule,
    backend: Backend,
    score: ScoreFn,
    max_in_flight: int | None = None,
    pool_order: str = "request",
    refill: RefillFn | None = None,
    pilot: Pilot | None = None,
    refill_signal: SignalFn | None = None,
) -> StreamSession:
    """`sample(..., rollout="streaming")` as an object the caller drives: `start()`, then `step(finished)` with each
    batch of finished draws while `in_flight`, then `finish()`. For callers whose backend cannot block in `wait`
    (an asyncio event loop that must keep running while draws generate); the arguments are `sample`'s."""
    if pool_order not in POOL_ORDERS:
        raise ValueError(f"Unknown pool order {pool_order!r}; expected one of {POOL_ORDERS}.")
    if max_in_flight is not None and max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1 (or None), got {max_in_flight}.")
    signal = refill_signal or has_signal
    return StreamSession(num_prompts, schedule, backend, score, max_in_flight, pool_order, refill, pilot, signal)


@dataclass
class _Prompt:
    """One prompt's draws under streaming, in request order; `pool` holds the finished prefix."""

    pool: Pool
    tickets: list[int] = field(default_factory=list)
    waves: dict[int, int] = field(default_factory=dict)  # ticket -> submission wave (0: the first)
    arrived: dict[int, tuple[Any, float, int]] = field(default_factory=dict)  # finished beyond the pool
    in_flight: set[int] = field(default_factory=set)
    num_waves: int = 0
    stopped: bool = False
    piloting: bool = False  # its pilot has not all finished yet: no draws beyond the pilot are requested


class StreamSession:
    """The streaming loop of `sample`, one object per step; `streaming_session` opens one for a caller that drives
    it from its own event loop."""

    def __init__(
        self,
        num_prompts: int,
        schedule: Schedule,
        backend: Backend,
        score: ScoreFn,
        max_in_flight: int | None,
        pool_order: str,
        refill: RefillFn | None = None,
        pilot: Pilot | None = None,
        signal: SignalFn = has_signal,
    ) -> None:
        self.schedule, self.backend, self.score = schedule, backend, score
        self.max_in_flight, self.pool_order, self.refill, self.pilot = max_in_flight, pool_order, refill, pilot
        self.signal = signal  # which pools refill keeps
        self.prompts = [self._new_prompt() for _ in range(num_prompts)]
        self.owner: dict[int, int] = {}  # ticket -> prompt index
        self.slot_of = {i: i for i in range(num_prompts)}
        self.next_ticket = 0
        self.in_flight = 0
        self.result = SamplingResult([p.pool for p in self.prompts], 0, slots=list(range(num_prompts)))

    def _new_prompt(self) -> _Prompt:
        return _Prompt(Pool(self.schedule.positive_threshold), piloting=self.pilot is not None)

    def run(self) -> SamplingResult:
        """Drive the stream to the end with the backend's blocking `wait`."""
        self.start()
        while self.in_flight:
            self.step(self.backend.wait())
        return self.finish()

    def start(self) -> None:
        """Submit every prompt's first draws. A caller with its own event loop (an asyncio driver, whose backend
        cannot block in `wait`) calls `start`, then `step` with each batch of finished draws while `in_flight`, then
        `finish`: the same loop as `run`, so there is one implementation of the stopping rule."""
        self._submit([d for i in range(len(self.prompts)) for d in self._top_up(i)])

    def step(self, batch: list[Finished]) -> None:
        """Take one batch of finished draws: score it, move request-order prefixes into pools, stop prompts whose
        rule holds (aborting their other draws through the backend) and submit the draws that keep the rest going."""
        if not batch:
            raise RuntimeError(f"The backend returned nothing with {self.in_flight} draws in flight.")
        batch = [f for f in batch if f.ticket in self.prompts[self.owner[f.ticket]].in_flight]
        if not batch:
            return  # only draws aborted earlier, which a backend may still report
        self.in_flight -= len(batch)
        self.result.generated_tokens += sum(f.num_tokens for f in batch)
        for f in batch:
            self.prompts[self.owner[f.ticket]].in_flight.discard(f.ticket)
        live = batch  # a stopped prompt has nothing in flight, so every finished draw here is still wanted
        rewards = list(self.score([Request(self.owner[f.ticket], 1) for f in live], [f.handle for f in live]))
        if len(rewards) != len(live):
            raise RuntimeError(f"Scored {len(live)} completions, got {len(rewards)} rewards.")
        touched = []
        for f, reward in zip(live, rewards, strict=True):
            index = self.owner[f.ticket]
            self.prompts[index].arrived[f.ticket] = (f.handle, float(reward), f.num_tokens)
            if index not in touched:
                touched.append(index)
        draws, aborts = [], []
        for index in touched:
            aborts.extend(self._advance(index))
            draws.extend(self._top_up(index))
            new = self._replace(index)
            if new is not None:
                draws.extend(self._top_up(new))
        if aborts:
            self.in_flight -= len(aborts)
            self.result.aborted += len(aborts)
            tokens = self.backend.abort(aborts)
            self.result.aborted_tokens += tokens
            self.result.generated_tokens += tokens
        self._submit(draws)

    def finish(self) -> SamplingResult:
        """The result, once nothing is in flight."""
        if self.in_flight:
            raise RuntimeError(f"finish() with {self.in_flight} draws still in flight.")
        self.result.rounds = max((p.num_waves for p in self.prompts), default=0)
        _mark_resolved(self.result.pools, self.schedule)
        return self.result

    def _advance(self, index: int) -> list[int]:
        """Move finished draws into the pool (in request order, or finish order for the biased variant) until the
        prompt stops; return the in-flight draws to abort when it does."""
        prompt = self.prompts[index]
        if self.pool_order == "request":
            order = prompt.tickets[len(prompt.pool) :]
        else:
            order = list(prompt.arrived)  # arrival order: dicts keep insertion order
        for ticket in order:
            if ticket not in prompt.arrived:
                break  # a gap: an earlier draw is still in flight
            handle, reward, _ = prompt.arrived.pop(ticket)
            prompt.pool.add([handle], [reward], prompt.waves[ticket])
            stopped = False
            if prompt.piloting and len(prompt.pool) == min(self.pilot.size, self.schedule.budget):
                prompt.piloting = False
                stopped = self.pilot.stops(index, prompt.pool)
                self.result.pilot_stopped += stopped
            if stopped or _is_finished(prompt.pool, self.schedule):
                prompt.stopped = True
                self._drop([tokens for _, _, tokens in prompt.arrived.values()])
                prompt.arrived.clear()
                aborts, prompt.in_flight = sorted(prompt.in_flight), set()
                return aborts
        return []

    def _replace(self, index: int) -> int | None:
        """Hand a prompt's slot to a fresh prompt (refill) if it has just stopped with no signal."""
        prompt = self.prompts[index]
        if self.refill is None or not prompt.stopped or self.signal(prompt.pool) or index not in self.slot_of:
            return None
        new = _refilled(self.refill, index, len(self.prompts))
        if new is None:
            return None
        self.prompts.append(self._new_prompt())
        self.result.pools.append(self.prompts[new].pool)
        slot = self.slot_of.pop(index)
        self.result.slots[slot], self.slot_of[new] = new, slot
        self.result.refills += 1
        return new

    def _top_up(self, index: int) -> list[Draw]:
        prompt = self.prompts[index]
        if prompt.stopped:
            return []
        room = self.schedule.budget - len(prompt.tickets)
        if prompt.piloting:  # nothing beyond the pilot until the pilot has decided
            room = min(room, self.pilot.size - len(prompt.tickets))
        count = min(self._target(prompt) - len(prompt.in_flight), room)
        if count <= 0:
            return []
        draws = [Draw(index, self.next_ticket + j) for j in range(count)]
        self.next_ticket += count
        for draw in draws:
            self.owner[draw.ticket] = index
            prompt.tickets.append(draw.ticket)
            prompt.waves[draw.ticket] = prompt.num_waves
            prompt.in_flight.add(draw.ticket)
        prompt.num_waves += 1
        return draws

    def _target(self, prompt: _Prompt) -> int:
        """Draws a prompt keeps in flight: `max_in_flight` (default `samples_per_round`); with posterior sizing, the
        expected draws it still needs, from every outcome seen so far (also those waiting behind an unfinished
        earlier draw: sizing may use them, only the pool may not), capped by that."""
        schedule = self.schedule
        cap = self.max_in_flight or schedule.samples_per_round
        if schedule.round_sizing == "fixed":
            return cap
        rewards = prompt.pool.rewards + [reward for _, reward, _ in prompt.arrived.values()]
        positives = sum(reward > schedule.positive_threshold for reward in rewards)
        negatives = sum(reward <= schedule.positive_threshold for reward in rewards)  # NaN: neither
        expected = expected_remaining_draws(positives, negatives, len(rewards), schedule)
        return min(cap, max(1, math.ceil(expected - 1e-9)))

    def _submit(self, draws: list[Draw]) -> None:
        if draws:
            self.in_flight += len(draws)
            self.result.in_flight_max = max(self.result.in_flight_max, self.in_flight)
            self.backend.submit(draws)

    def _drop(self, tokens: list[int]) -> None:
        self.result.dropped += len(tokens)
        self.result.aborted_tokens += sum(tokens)
