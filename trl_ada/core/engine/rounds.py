"""`sample`'s rounds (`rollout="rounds"`, the paper's loop): each round draws for every active prompt, waits for all
of it (a barrier), scores it in one call, and retires the prompts whose exit rule holds or whose budget is spent;
a prompt without signal can hand its slot to a refill, which then runs rounds of its own."""

from __future__ import annotations

from collections.abc import Callable

# `_refilled`, `_is_finished`, `_mark_resolved`: the engine's own helpers, shared by its two loops (rounds, streaming).
from .backend import Backend, Draw, Finished, RefillFn, Request, ScoreFn, SignalFn, _refilled
from .pool import Pool, SamplingResult, has_signal
from .rules import Pilot
from .schedule import Schedule, _is_finished, _mark_resolved


def _sample_in_rounds(
    num_prompts: int,
    schedule: Schedule,
    backend: Backend,
    score: ScoreFn,
    any_active: Callable[[bool], bool],
    first_round_sizes: list[int] | None,
    refill: RefillFn | None,
    pilot: Pilot | None = None,
    signal: SignalFn = has_signal,
) -> SamplingResult:
    pools = [Pool(schedule.positive_threshold) for _ in range(num_prompts)]
    extra = 0 if pilot is None else 1  # the pilot is a round of each prompt's own, before the schedule's rounds
    started = [0] * num_prompts  # the round each prompt started in: a refill starts late, with rounds of its own
    slots = list(range(num_prompts))
    slot_of = {i: i for i in range(num_prompts)}
    active = list(range(num_prompts))
    rounds = tickets = in_flight_max = tokens = refills = pilot_stopped = 0
    # Without refill every prompt starts in round 0, so the step ends after its last round without asking others.
    while (refill is not None or rounds < schedule.max_rounds + extra) and any_active(bool(active)):
        requests = []
        for i in active:
            own_round = rounds - started[i]
            if own_round == 0 and pilot is not None:
                requests.append(Request(i, min(pilot.size, schedule.budget)))
            elif own_round == 0 and first_round_sizes is not None and i < num_prompts:
                requests.append(Request(i, first_round_sizes[i]))
            else:  # a larger first round can leave less than a fixed round of budget: never exceed the budget
                size = min(schedule.round_size(pools[i], own_round - extra), schedule.budget - len(pools[i]))
                requests.append(Request(i, size))
        indices = [r.prompt_index for r in requests for _ in range(r.num_samples)]
        draws = [Draw(i, tickets + j) for j, i in enumerate(indices)]
        tickets += len(draws)
        in_flight_max = max(in_flight_max, len(draws))
        backend.submit(draws)
        pending = {d.ticket for d in draws}
        finished: dict[int, Finished] = {}
        while True:  # the barrier: the whole round, even when nothing was submitted here (see RoundsBackend)
            batch = backend.wait()
            finished.update((f.ticket, f) for f in batch if f.ticket in pending)
            if len(finished) == len(pending):
                break
            if not batch:
                raise RuntimeError(
                    f"Round {rounds}: the backend stopped with {len(pending) - len(finished)} draws due."
                )
        handles = [finished[d.ticket].handle for d in draws]
        tokens += sum(f.num_tokens for f in finished.values())
        rewards = list(score(requests, handles))
        if len(rewards) != len(handles):
            raise RuntimeError(f"Round {rounds}: requested {len(handles)} completions, got {len(rewards)} rewards.")
        start = 0
        for request in requests:
            end = start + request.num_samples
            pools[request.prompt_index].add(
                handles[start:end], rewards[start:end], rounds - started[request.prompt_index]
            )
            start = end
        still_active = []
        for i in active:
            own_round = rounds - started[i]
            stopped = pilot is not None and own_round == 0 and pilot.stops(i, pools[i])
            pilot_stopped += stopped
            if not stopped and not _is_finished(pools[i], schedule) and own_round + 1 < schedule.max_rounds + extra:
                still_active.append(i)
                continue
            new = None if refill is None or signal(pools[i]) else _refilled(refill, i, len(pools))
            if new is not None:
                pools.append(Pool(schedule.positive_threshold))
                started.append(rounds + 1)
                slot = slot_of.pop(i)
                slots[slot], slot_of[new] = new, slot
                still_active.append(new)
                refills += 1
        active = still_active
        rounds += 1
    _mark_resolved(pools, schedule)
    return SamplingResult(
        pools, rounds, in_flight_max, tokens, slots=slots, refills=refills, pilot_stopped=pilot_stopped
    )
