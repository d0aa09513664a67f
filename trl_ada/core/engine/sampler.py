"""`sample`, one step's sampling for every prompt of a batch: the scheduler the trainer, the simulator and the
benchmarks share, in rounds (`rounds.py`) or streaming (`streaming.py`); `sample_adaptively` is its rounds over a
blocking `generate`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .backend import Backend, GenerateFn, RefillFn, RoundsBackend, ScoreFn, SignalFn
from .pool import SamplingResult, has_signal
from .rounds import _sample_in_rounds  # the rounds loop, private to the engine: `sample` is its entry point
from .rules import Pilot
from .schedule import Schedule
from .streaming import POOL_ORDERS, streaming_session

ROLLOUT_SCHEDULES = ("rounds", "streaming")


def sample_adaptively(
    num_prompts: int,
    schedule: Schedule,
    generate: GenerateFn,
    score: ScoreFn,
    any_active: Callable[[bool], bool] = bool,
    first_round_sizes: Sequence[int] | None = None,
) -> SamplingResult:
    """Run the successive-elimination rounds for `num_prompts` prompts with a blocking `generate`.

    `generate(requests)` returns a flat list of completion handles, `request.num_samples` per request, in request
    order; `score(requests, handles)` returns one reward per handle. `any_active(local)` lets several processes
    agree on whether another round is needed: every process must run the same number of rounds because generation
    is a collective call (vLLM server, ZeRO-3), so a process with nothing left still calls `generate([])`.
    `first_round_sizes`, one per prompt within `[1, schedule.budget]`, replaces the schedule's first round (sized
    from a pass-rate memory, e.g. by `allocation.allocate` for Reinforce-Ada-Est); later rounds follow the schedule.
    This is `sample` with `rollout="rounds"` over a `RoundsBackend`.
    """
    return sample(
        num_prompts,
        schedule,
        RoundsBackend(generate),
        score,
        any_active=any_active,
        first_round_sizes=first_round_sizes,
    )


def sample(
    num_prompts: int,
    schedule: Schedule,
    backend: Backend,
    score: ScoreFn,
    rollout: str = "rounds",
    max_in_flight: int | None = None,
    any_active: Callable[[bool], bool] = bool,
    first_round_sizes: Sequence[int] | None = None,
    pool_order: str = "request",
    refill: RefillFn | None = None,
    pilot: Pilot | None = None,
    refill_signal: SignalFn | None = None,
) -> SamplingResult:
    """Sample every prompt's pool for one step: the scheduler the trainer, the simulator and the benchmarks share.

    `rollout="rounds"` (the paper's loop): each round submits a round for every active prompt, waits for all of it
    (a barrier: the slowest completion sets the pace), scores it in one call, and retires prompts whose exit rule
    holds or whose budget is spent. `any_active` and `first_round_sizes` are as in `sample_adaptively`.

    `rollout="streaming"`: no barriers. Each prompt keeps up to `max_in_flight` draws in flight (default
    `samples_per_round`), topped up as draws finish; with `round_sizing="posterior"`, as many as it is expected to
    still need (`expected_remaining_draws`, from every outcome seen so far), capped by that. Drawn and in flight
    together never exceed its budget. Completions are scored in the batches the backend returns them. A prompt's
    pool is the longest prefix of its draws *in request order* whose completions have all finished; the prompt
    stops at the first prefix where its exit rule holds (with a full group) or its budget is spent, and its draws
    beyond that prefix are aborted (in flight) or dropped (finished). Since the draws of a prompt are exchangeable,
    and how many are requested never depends on the outcome of an unrequested one, the pool is distributed exactly
    as the sequential limit's (draw one at a time, stop as soon as the rule holds), whatever the finish order.
    Stopping on the first completions to *finish* would bias pools toward fast completions (short answers, which
    are more often right); that variant exists only as `pool_order="finish_order_biased"`, to measure the bias.

    `refill`, when given, is called for each pool that ends with no signal (`has_signal`); a fresh prompt it returns
    takes over that prompt's slot and is sampled under the same schedule with a budget and `max_rounds` of its own,
    starting in the next round (rounds) or at once (streaming). `SamplingResult.slots` says which pool each of the
    `num_prompts` slots ends with; the replaced pools stay in `pools` (they were generated and scored).
    `refill_signal` replaces `has_signal` in that test (e.g. one reward function's values differ, as DAPO filters on
    accuracy).

    `pilot`, when given, makes every prompt (refills included) draw `pilot.size` completions first and stop there when
    `pilot.stops` holds (see `Pilot`); a stopped prompt's pool is its pilot, smaller than a group (`downsample`
    repeats it). Under rounds the pilot is an extra first round, before the schedule's `max_rounds`.
    """
    if rollout not in ROLLOUT_SCHEDULES:
        raise ValueError(f"Unknown rollout schedule {rollout!r}; expected one of {ROLLOUT_SCHEDULES}.")
    if pool_order not in POOL_ORDERS:
        raise ValueError(f"Unknown pool order {pool_order!r}; expected one of {POOL_ORDERS}.")
    if first_round_sizes is not None:
        first_round_sizes = list(first_round_sizes)
        if len(first_round_sizes) != num_prompts or not all(1 <= n <= schedule.budget for n in first_round_sizes):
            raise ValueError(
                f"first_round_sizes must hold {num_prompts} sizes in [1, {schedule.budget}] (the per-prompt budget), "
                f"got {first_round_sizes}."
            )
    if pilot is not None and first_round_sizes is not None:
        raise ValueError("A pilot is a first round of its own; it cannot be combined with first_round_sizes.")
    signal = refill_signal or has_signal
    if rollout == "rounds":
        return _sample_in_rounds(
            num_prompts, schedule, backend, score, any_active, first_round_sizes, refill, pilot, signal
        )
    if first_round_sizes is not None:
        raise ValueError("Sizes fixed in advance (first_round_sizes) make one round with nothing to stream.")
    return streaming_session(
        num_prompts, schedule, backend, score, max_in_flight, pool_order, refill, pilot, refill_signal
    ).run()
