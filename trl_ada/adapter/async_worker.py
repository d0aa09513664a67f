"""Reinforce-Ada inside TRL's asynchronous GRPO trainer: a rollout worker with per-prompt adaptive budgets.

`AdaRolloutWorker` is a drop-in `rollout_worker=` for `trl.experimental.async_grpo.AsyncGRPOTrainer`. Each prompt
keeps drawing completions, one request each, until its exit rule holds (on the longest finished prefix of its
requests, in request order) or its budget is spent; its other requests are aborted; its pool is downsampled to
`num_generations` and the kept rows get pool-level advantages (`trl_ada.advantages.pool_advantages`). The stopping
rule is `trl_ada.engine`'s streaming loop itself (`streaming_session`), driven from TRL's asyncio loop.

Design note: the seams in TRL (line numbers: TRL 1.16.0, `trl/experimental/async_grpo/`)
-------------------------------------------------------------------------------------------
- `async_rollout_worker.py:1155` `AsyncRolloutWorker._loop_cls`: the class the spawned child builds
  (`_child_main`, :271-305) with the worker's constructor kwargs (:1181-1185). `AdaRolloutWorker` only sets it and
  adds one kwarg, `ada`; lifecycle, the picklability check (:1208-1217), health checks and the model-version
  `mp.Value` stay TRL's.
- `_AsyncRolloutLoop._generate_loop` (:536-722): requests exactly `num_generations` completions per prompt
  (`_repeat_iterator`, :878) and queues a group when that many finished (:696). This is the one method replaced:
  `AdaRolloutLoop._generate_loop` runs one engine session per prompt and queues the pool when it stops. With
  `environment_factory` TRL's loop takes an instance from its pool per request, resets it with the row (:555-584),
  folds the observation into the prompt and offers its methods as tools (:585-610), and reads `get_reward` when
  the request ends (:673-692); `AdaRolloutLoop._draw` does the same per request, on TRL's pool. An aborted
  request's instance is not put back (a tool call of it may still be running in a thread): the pool makes a new one
  when it runs short (`ada/environments_discarded_total`).
- `_AsyncRolloutLoop._generate_one` (:890): one conversation (tools, re-tokenisation, fork reconciliation), one
  `/v1/completions` request per turn (`_generate_one_turn`, :999). Reused as is: it is one draw. Cancelling its task
  closes the HTTP connection, which vLLM's server takes as an abort of the request.
- `_AsyncRolloutLoop._score_group` (:1026): rewards and group-normalised advantages of a group, then the
  `RolloutSample`s (:1085-1124). Replaced: rewards are computed per completion as it finishes (the exit rule needs
  them), so `_score_group` downsamples, computes the pool advantages and builds the samples the same way as TRL.
- `_AsyncRolloutLoop._score_loop` (:724): pushes samples into the trainer's queue with backpressure and the
  `rollout/*` metrics. Reused as is; it takes our group object through the same `_groups_to_score` queue.
- `_push_metrics` (:817): the metric channel; `ada/*` metrics go through it.
- `RolloutSample` (:213): `input_ids`, `completion_mask`, `old_log_probs` (NumPy arrays from 1.16.0, lists in
  1.14), `advantage`, `model_version`, `group_id`, `metrics`. The trainer (`async_grpo_trainer.py:351-407`) drops a
  sample when `current version - sample.model_version > max_staleness` and batches rows by `group_id` (:445, :540).

Releases: the seams above were read in TRL 1.14.0, 1.14.1, 1.14.2, 1.15.0 and 1.16.0 (`SUPPORTED_ASYNC_TRL`;
`AdaRolloutWorker` refuses any other release, as `trl.experimental` changes without deprecation). Differences that
touch this module: the loop takes `eos_token_ids` from 1.15.0 on (forwarded untouched), and `RolloutSample`'s arrays
are lists before 1.16.0 (`_as_row` follows the installed annotation).

Concurrency: TRL's loop keeps `max_inflight_tasks` requests in flight, whatever prompt they belong to. Here each prompt
keeps up to its own cap (`max_in_flight`, default `samples_per_round`) and the prompts share the loop's
`max_inflight_tasks` request slots (`RequestSlots`): a draw's request is sent once it holds a slot, draws waiting for
one start oldest prompt first, then in request order, and whenever a slot is neither held nor waited for (the open
prompts are at their caps, or near their budgets with fewer draws left to make) the loop opens the next prompt. A
finished draw keeps its slot until its session has stepped, so a prompt's top-up is queued before the slot can go to a
new prompt. Every open prompt holds a slot when the next one opens, so at most `max_inflight_tasks` prompts are open.
Slots change when requests run, never what a session decides: each pool is still the first request-order prefix of
its prompt's draws on which the rule holds.

Staleness: a completion's version is the policy version when its request was dispatched (TRL tags a group with the
version when its first request was dispatched, :626, the oldest of its requests). A pool may span versions; all
rows of a kept group carry one tag, the *oldest* dispatch version among the kept completions, so the trainer's
per-sample staleness check drops the whole group together when its oldest trained completion is too stale, never
part of a group (its advantages were computed together). Completions of the pool that are not kept shape only the
baseline and do not set the tag. `ada/pool_version_span` reports how many versions a pool spans.

Prompt selection, the pilot and refill: the synchronous trainer's rules, per prompt. Selection
(`prompt_selection="pass_rate"`) asks the pass-rate memory before a prompt is dispatched and skips it (to the next
row of the dataset) with probability `1 - selection_floor` when its next group would likely carry no signal
(`trl_ada.selection.keep_probability`), from an RNG seeded with `seed`. The pilot is `trl_ada.engine.Pilot` with
`trl_ada.selection.pilot_stop_rule`, in each prompt's session. Refill has no batch slots to refill here: a group
whose pool has no signal is not pushed and the loop goes on with the next prompt (DAPO's dynamic sampling, the
asynchronous way); after `max_consecutive_drops` drops in a row the next group is pushed anyway (zero advantages),
so the trainer is never starved. A group whose pilot stopped has no signal: it is pushed (its pilot completions
repeated to `num_generations`, advantage 0, as the synchronous trainer trains it and as TRL pushes zero-advantage
groups) unless `refill` is on, which drops it like any group without signal.

Not supported: `sampling_strategy="estimate"` (it splits one step's budget across a batch in advance) and
`scale_rewards="batch"` (there is no batch here).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import heapq
import inspect
import logging
import math
import random
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import trl
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from trl.trainer.utils import is_async_callable

from ..core.advantages import pool_advantages, total_reward
from ..core.engine import (
    Draw,
    ExitRule,
    Finished,
    Pilot,
    Pool,
    SamplingResult,
    Schedule,
    StreamSession,
    downsample,
    has_signal,
    streaming_session,
)
from ..core.memory import PassRateMemory, memory_key, memory_updates
from ..core.prompt_stream import SidePrompts
from ..core.selection import keep_probability, pilot_stop_rule
from .checks import refill_filter_column
from .config import ReinforceAdaConfig
from .config_fields import pass_rate_memory, sampling_schedule
from .config_validation import _check_exit_and_budget, _check_odc_downsample, _check_pilot, _check_prompt_source

# The TRL releases whose asynchronous GRPO worker was read and tested (`make test-compat`). Kept apart from
# `trl_ada.compat.SUPPORTED_TRL`: `trl.experimental` may change in a release whose GRPOTrainer does not.
_ASYNC_TRL_RANGE = ">=1.14.0,<1.17"  # written out: SpecifierSet's str() reorders it
SUPPORTED_ASYNC_TRL = SpecifierSet(_ASYNC_TRL_RANGE)


def _unsupported_trl(installed: str) -> str:
    return (
        f"trl_ada.adapter.async_worker supports TRL {_ASYNC_TRL_RANGE} (trl.experimental.async_grpo as read in those "
        f"releases), and TRL {installed} is installed: its private rollout-loop seams may differ. Install a "
        f"supported TRL (pip install 'trl{_ASYNC_TRL_RANGE}')."
    )


try:
    from trl.experimental.async_grpo.async_rollout_worker import (
        AsyncRolloutWorker,
        RolloutSample,
        TrainingSequence,
        _AsyncRolloutLoop,
    )
except ImportError as error:  # a TRL without the seams: say which TRL is needed, not which name is missing
    raise ImportError(_unsupported_trl(trl.__version__)) from error


def check_async_trl_version() -> None:
    """Raise a RuntimeError unless the installed TRL is one whose asynchronous worker this module was built on."""
    if not SUPPORTED_ASYNC_TRL.contains(Version(trl.__version__), prereleases=True):
        raise RuntimeError(_unsupported_trl(trl.__version__))


_ADA_FIELDS = {f.name: f for f in dataclasses.fields(ReinforceAdaConfig)}


def _ada_field(name: str, choices: Sequence[str] | None = None) -> Any:
    """`ReinforceAdaConfig`'s field `name` (default and help), so the two configs cannot drift; `choices` narrows
    the declared choices to those that apply to the asynchronous worker."""
    source = _ADA_FIELDS[name]
    metadata = dict(source.metadata)
    if choices is not None:
        metadata["choices"] = list(choices)
    return field(default=source.default, metadata=metadata)


@dataclass(frozen=True)
class AdaRolloutConfig:
    """Reinforce-Ada's sampling settings for `AdaRolloutWorker`: `ReinforceAdaConfig`'s fields of the same names,
    with their defaults and meanings. `num_generations`, the group handed to the loss, is the worker's own kwarg (the
    trainer's `AsyncGRPOConfig.num_generations`). `sampling_strategy="estimate"` is not offered (it splits one
    step's budget across a batch in advance), `scale_rewards` has no `"batch"`: the asynchronous loop samples and
    scores one prompt at a time, and `advantage_baseline` has no `"memory"` (not built here yet).

    Where the asynchronous loop differs from the synchronous trainer: there are no batch slots, so `refill` does not
    replace a prompt in a slot but drops its group (the loop moves on to the next prompt; `max_consecutive_drops`
    bounds how long the trainer can wait), and prompt selection skips a prompt by moving on to the next prompt of the
    dataset rather than drawing a replacement from a side stream."""

    sampling_strategy: str = _ada_field("sampling_strategy", ("balanced", "positive", "uniform"))
    samples_per_round: int = _ada_field("samples_per_round")
    max_rounds: int = _ada_field("max_rounds")
    round_sizing: str = _ada_field("round_sizing")
    max_in_flight: int | None = _ada_field("max_in_flight")
    positive_threshold: float = _ada_field("positive_threshold")
    min_positives: int | None = _ada_field("min_positives")
    min_negatives: int | None = _ada_field("min_negatives")
    advantage_baseline: str = _ada_field("advantage_baseline", ("pool", "group"))
    scale_rewards: str = _ada_field("scale_rewards", ("group", "none"))
    difficulty_weighting: str = _ada_field("difficulty_weighting")
    max_difficulty_weight: float = _ada_field("max_difficulty_weight")
    downsample: str = _ada_field("downsample")
    pass_rate_alpha: float = _ada_field("pass_rate_alpha")
    pass_rate_beta: float = _ada_field("pass_rate_beta")
    pass_rate_decay: float = _ada_field("pass_rate_decay")
    pass_rate_max_prompts: int | None = _ada_field("pass_rate_max_prompts")
    prompt_id_column: str | None = _ada_field("prompt_id_column")
    prompt_selection: str = _ada_field("prompt_selection")
    selection_threshold: float = _ada_field("selection_threshold")
    selection_floor: float = _ada_field("selection_floor")
    pilot_size: int = _ada_field("pilot_size")
    pilot_stop_threshold: float = _ada_field("pilot_stop_threshold")
    refill: bool = field(
        default=False,
        metadata={
            "help": "Do not push a group whose pool ends with no signal (every reward equal, so every advantage "
            "zero); the loop moves on to the next prompt. With sampling_strategy='uniform': DAPO's dynamic sampling."
        },
    )
    refill_filter_reward: str | None = _ada_field("refill_filter_reward")
    max_consecutive_drops: int = field(
        default=64,
        metadata={
            "help": "refill: after this many groups in a row were not pushed, the next is pushed whatever its "
            "signal, so the trainer is never starved when no prompt gives signal."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the downsampling and prompt-selection RNGs."})

    def validate(self, num_generations: int) -> None:
        """Raise a ValueError on the first broken rule, with `ReinforceAdaConfig`'s own checks and messages."""
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            if choices is not None and getattr(self, f.name) not in choices:
                raise ValueError(f"{f.name}={getattr(self, f.name)!r} is not one of {tuple(choices)}.")
        in_flight = self.max_in_flight
        if in_flight is not None and (isinstance(in_flight, bool) or in_flight < 1):
            raise ValueError(f"max_in_flight must be an integer >= 1 or None, got {in_flight!r}.")
        drops = self.max_consecutive_drops
        if isinstance(drops, bool) or not isinstance(drops, int) or drops < 1:
            raise ValueError(
                f"max_consecutive_drops must be an integer >= 1, got {drops!r}: it bounds how many groups in a row "
                "refill may keep from the trainer."
            )
        # The config checks read these attributes only; a view adds the group size they are checked against.
        view = _CheckView(self, num_generations)
        _check_exit_and_budget(view)  # type: ignore[arg-type]
        _check_odc_downsample(view)  # type: ignore[arg-type]
        _check_prompt_source(view)  # type: ignore[arg-type]
        _check_pilot(view)  # type: ignore[arg-type]
        self.pass_rate_memory()  # its constructor checks the prior, the decay and the cap

    def exit_rule(self, num_generations: int) -> ExitRule:
        return ExitRule.for_strategy(self.sampling_strategy, num_generations, self.min_positives, self.min_negatives)

    def schedule(self, num_generations: int) -> Schedule:
        """The per-prompt schedule: the same as `ReinforceAdaConfig.schedule()` for these fields."""
        return sampling_schedule(self, num_generations, self.samples_per_round)

    def pass_rate_memory(self) -> PassRateMemory:
        return pass_rate_memory(self)


class _CheckView:
    """`AdaRolloutConfig` plus `num_generations`, read as a `ReinforceAdaConfig` by the config's rule functions."""

    max_refills_per_step = None  # no steps here: refill is bounded by `max_consecutive_drops` instead

    def __init__(self, config: AdaRolloutConfig, num_generations: int) -> None:
        self._config, self.num_generations = config, num_generations
        self.exit_rule = config.exit_rule(num_generations)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


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
    """`trl_ada.engine.Backend` over asyncio tasks: each draw is a task running `start()` on the running loop, once
    the draw holds one of `slots` (waiting ones start by `priority`, then ticket; without `slots`, at once).
    `next_batch` is the awaitable form of `wait`; after the session has stepped through a batch, `settle` hands its
    slots back. `abort` cancels tasks, which closes their HTTP requests (vLLM aborts a request whose client left),
    and withdraws draws still waiting for a slot. Tokens an aborted request had generated are not reported back (0)."""

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


_ARRAY_ROWS = RolloutSample.__dataclass_fields__["input_ids"].type is np.ndarray  # TRL >= 1.16.0


def _as_row(values: list[Any], dtype: Any) -> Any:
    """A `RolloutSample` array field as the installed TRL declares it: a NumPy array (1.16) or a list (1.14)."""
    return np.asarray(values, dtype=dtype) if _ARRAY_ROWS else list(values)


class AdaRolloutLoop(_AsyncRolloutLoop):
    """TRL's asynchronous rollout loop with Reinforce-Ada's per-prompt sampling (see the module docstring)."""

    def __init__(self, *, ada: AdaRolloutConfig | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ada = ada or AdaRolloutConfig()
        self.ada.validate(self.num_generations)
        self.ada_schedule = self.ada.schedule(self.num_generations)
        self.ada_memory = self.ada.pass_rate_memory()
        self._ada_rng = random.Random(self.ada.seed)
        # Selection draws from its own RNG, so turning it on leaves the downsampling draws as they were.
        self._ada_select_rng = random.Random(f"{self.ada.seed}-select")
        # As in the synchronous trainer, selection predicts the signal of the schedule's first round.
        self._ada_select_size = self.ada_schedule.round_size(Pool(self.ada_schedule.positive_threshold), 0)
        self._ada_filter_column = refill_filter_column(self.ada.refill_filter_reward, self.reward_func_names)
        self._ada_drops = 0  # groups in a row that refill kept from the trainer
        self._ada_drop_guard_warned = False
        self._pilot_keys: list[str] = []
        self._pilot_rule: Callable[[int, Pool], bool] | None = None
        # Each prompt keeps up to its in-flight cap of requests; the loop's `max_inflight_tasks` requests are shared
        # (`RequestSlots`): when the open prompts hold fewer, the loop opens another in the free slots.
        per_prompt = self.ada.max_in_flight or self.ada_schedule.samples_per_round
        self._per_prompt_in_flight = min(per_prompt, max(1, self.max_inflight_tasks))
        # Prompts that fill `max_inflight_tasks` at their caps: one pilot rule serves this many prompts in turn.
        self.concurrent_prompts = max(1, self.max_inflight_tasks // self._per_prompt_in_flight)
        self._slots = RequestSlots(max(1, self.max_inflight_tasks))

    def _prompt_iterator(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each dataset row once, as `(group_id, row)`, cycling over epochs as TRL's `_repeat_iterator` does (which
        yields each row `num_generations` times, one per request).

        With `prompt_selection="pass_rate"` a row the selection test skips is passed over for the next one and gets
        no group id. As in the synchronous trainer (`SidePrompts.MAX_CANDIDATES`), after that many skips in a row the
        next row is taken whatever the test says, so a dataset of prompts that would all be skipped cannot hold the
        event loop in this iterator."""
        group_id = skipped = 0
        while True:
            try:
                row = next(self._dataset_iter)
            except StopIteration:
                self._dataset_iter = iter(self.dataset)
                row = next(self._dataset_iter)
            if skipped < SidePrompts.MAX_CANDIDATES and not self._keeps(row):
                skipped += 1
                continue
            if self.ada.prompt_selection != "none":
                self._push_metrics({"ada/skipped_total": float(skipped), "ada/frac_skipped": (skipped, skipped + 1.0)})
            skipped = 0
            yield group_id, row
            group_id += 1

    def _keeps(self, row: dict[str, Any]) -> bool:
        """Prompt selection's test (`trl_ada.selection.keep_probability` on the row's memory counts): whether to
        sample this row now. Always true without selection, and for a prompt the memory has not seen."""
        if self.ada.prompt_selection == "none":
            return True
        num_positive, num_total = self.ada_memory.counts(self._memory_key(row))
        probability = keep_probability(
            num_positive, num_total, self._ada_select_size, self.ada.selection_threshold, self.ada.selection_floor
        )
        return probability >= 1.0 or self._ada_select_rng.random() < probability

    def _memory_key(self, row: dict[str, Any]) -> str:
        """The row's key in the pass-rate memory, as the synchronous trainer makes it (by row with environments)."""
        environments = self.environment_factories is not None
        return memory_key(row.get("prompt"), row, self.ada.prompt_id_column, by_row=environments)

    def _pilot(self, key: str) -> Pilot | None:
        """The pilot of the prompt with memory key `key` (None without one). `pilot_stop_rule` fits its prior to the
        whole memory once, when the rule is made; one rule serves `concurrent_prompts` prompts in turn, the
        asynchronous loop's counterpart of the synchronous trainer's one rule per generation batch."""
        if not self.ada.pilot_size:
            return None
        if self._pilot_rule is None or len(self._pilot_keys) >= self.concurrent_prompts:
            self._pilot_keys = []
            self._pilot_rule = pilot_stop_rule(
                self.ada_memory, self._pilot_keys, self.num_generations, self.ada.pilot_stop_threshold
            )
        index, rule = len(self._pilot_keys), self._pilot_rule
        self._pilot_keys.append(key)
        return Pilot(self.ada.pilot_size, lambda _session_index, pool: rule(index, pool))

    async def _generate_loop(self, stop_event: asyncio.Event) -> None:
        """Open prompts while `max_inflight_tasks` has room (a request slot no draw holds or waits for), each with its
        own engine session; queue each prompt's group for scoring when its session stops."""
        self._slots = slots = RequestSlots(max(1, self.max_inflight_tasks))  # this run's, on the running loop
        sessions: dict[asyncio.Task, TaskBackend] = {}
        work = self._prompt_iterator()
        self._generation_start_time = time.monotonic()
        try:
            while True:
                self._heartbeat_value.value = time.time()  # wall clock: the parent compares with time.time()
                slots.wake.clear()
                while slots.room > 0 and not stop_event.is_set():
                    group_id, row = next(work)
                    session, backend = self._open_prompt(group_id, row)  # its first draws take slots (or wait)
                    task = asyncio.create_task(self._sample_prompt(group_id, row, session, backend))
                    task.add_done_callback(lambda _: slots.wake.set())
                    sessions[task] = backend
                self._inflight = slots.held
                if stop_event.is_set():
                    return  # a prompt may be far from its exit rule: cancel its requests (below), do not finish it
                for task in [task for task in sessions if task.done()]:  # in the order the prompts were opened
                    sessions.pop(task)
                    group = task.result()  # a failed draw fails the loop, as in TRL's
                    group.queued_at = time.monotonic()
                    t_blocked = None
                    while True:
                        try:
                            self._groups_to_score.put_nowait(group)
                            break
                        except asyncio.QueueFull:
                            if stop_event.is_set():
                                return
                            t_blocked = t_blocked or time.monotonic()
                            await asyncio.sleep(0.1)
                    if t_blocked is not None:
                        self._push_metrics({"rollout/score_block_s": time.monotonic() - t_blocked})
                try:  # woken when room appears or a prompt stops; else, now and then, for the heartbeat and a stop
                    await asyncio.wait_for(slots.wake.wait(), timeout=0.5)  # the score loop's period
                except TimeoutError:
                    pass
        finally:
            for task in sessions:
                task.cancel()
            if sessions:
                await asyncio.gather(*sessions, return_exceptions=True)
                # A prompt's requests start when it opens: close them even where its task was cancelled unstarted.
                await asyncio.gather(*(backend.close() for backend in sessions.values()))
            try:
                self._groups_to_score.put_nowait(None)
            except asyncio.QueueFull:
                pass

    def _open_prompt(self, group_id: int, row: dict[str, Any]) -> tuple[StreamSession, TaskBackend]:
        """One prompt's streaming successive elimination, started: the engine's session, fed by this loop's requests
        through the shared slots (an older prompt's draws go first: `priority` is the group id)."""
        reward_kwargs = {k: v for k, v in row.items() if k not in {"prompt", "completion", "completion_ids"}}
        backend = TaskBackend(lambda: self._draw(row, reward_kwargs, group_id), self._slots, priority=group_id)
        session = streaming_session(
            1,
            self.ada_schedule,
            backend,
            lambda requests, handles: [handle.reward for handle in handles],  # scored as each draw finished
            max_in_flight=self._per_prompt_in_flight,
            pilot=self._pilot(self._memory_key(row)),
        )
        session.start()
        return session, backend

    async def _sample_prompt(
        self, group_id: int, row: dict[str, Any], session: StreamSession, backend: TaskBackend
    ) -> AdaGroup:
        """Drive an opened prompt's session to its end: each batch of finished draws is stepped through the stopping
        rule, then its slots are handed back (to this prompt's top-up first, if it is the oldest waiting)."""
        try:
            while session.in_flight:
                session.step(await backend.next_batch())
                backend.settle()
        finally:
            await backend.close()
        return AdaGroup(group_id, row, session.finish())

    async def _draw(self, row: dict[str, Any], reward_kwargs: dict[str, Any], group_id: int) -> Completion:
        """One request of a prompt (a whole conversation with tools), scored as soon as it finishes. With
        `environment_factory`, each request resets an environment of its own first, as TRL's loop does per
        generation (`_start_environment`), and the environment's `get_reward` scores it."""
        version = self.model_version  # at dispatch, as TRL tags its groups
        name, environment = self._checkout_environment(row)
        returned = False
        try:
            prompt, tools, tool_dict = await self._start_environment(row, name, environment)
            completion, completion_ids, sequences, n_calls, n_failures, rollout_reward = await self._generate_one(
                prompt, tool_dict=tool_dict, tools=tools, group_id=group_id
            )
            env_reward = await self._environment_reward(environment)
            if environment is not None:
                self._environment_pool[name].append(environment)
                returned = True
        finally:
            if environment is not None and not returned:
                # Aborted (or failed): one of its tool calls may still be running in a thread, so it is not reused;
                # the pool makes a fresh instance when it runs short.
                self._counters["ada/environments_discarded_total"] += 1
        per_func = await self._rewards_of(
            prompt, completion, completion_ids, reward_kwargs, rollout_reward, env_reward
        )
        reward = float(total_reward(torch.tensor([per_func], dtype=torch.float64), torch.ones(len(per_func)))[0])
        self._total_completion_tokens += len(completion_ids)
        return Completion(
            prompt, completion, completion_ids, sequences, n_calls, n_failures, per_func, reward, version
        )

    def _checkout_environment(self, row: dict[str, Any]) -> tuple[Any, Any]:
        """`(environment name, instance)` for one request: an instance from TRL's pool, a new one when the pool is
        empty (TRL's `_generate_loop`); `(None, None)` without `environment_factory`."""
        if self.environment_factories is None:
            return None, None
        name = row.get("environment") if self._multi_environment else None
        if self._multi_environment and name not in self.environment_factories:
            raise ValueError(
                f"Example has `environment={name!r}`, which is not among the environments passed to "
                f"`environment_factory`. Expected one of: {list(self.environment_factories)}."
            )
        pool = self._environment_pool[name]
        return name, (pool.pop() if pool else self.environment_factories[name]())

    async def _start_environment(
        self, row: dict[str, Any], name: Any, environment: Any
    ) -> tuple[list[dict[str, Any]], list[Callable], dict[str, Callable]]:
        """`(prompt, tools, tool dict)` of one request, as TRL's `_generate_loop` builds them: the environment reset
        with the row (its `environment` field left out), its observation appended to the last prompt message, and
        its public methods offered as tools beside the standalone ones."""
        if environment is None:
            return row["prompt"], self.tools, {tool.__name__: tool for tool in self._standalone_tools}
        reset_kwargs = {k: v for k, v in row.items() if k != "environment"} if self._multi_environment else row
        t0 = time.monotonic()
        observation = await asyncio.get_running_loop().run_in_executor(
            self._tool_pool, functools.partial(environment.reset, **reset_kwargs)
        )
        self._rates["env/reset_s"][0] += time.monotonic() - t0
        self._rates["env/reset_s"][1] += 1
        prompt = row["prompt"] if "prompt" in row else [{"role": "user", "content": ""}]
        if observation is not None:
            last = prompt[-1]
            content = last["content"]
            if isinstance(observation, list) and isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if isinstance(observation, str) and isinstance(content, list):
                observation = [{"type": "text", "text": observation}]
            prompt = [*prompt[:-1], {**last, "content": content + observation}]  # a new list: rows are reused
        methods = [
            getattr(environment, member)
            for member, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
            if member not in ("reset", "get_reward") and not member.startswith("_")
        ]
        tool_dict = {tool.__name__: tool for tool in self._standalone_tools + methods}
        return prompt, self._env_tools[name], tool_dict

    async def _environment_reward(self, environment: Any) -> tuple[type, float] | None:
        """`(environment class, reward)` when the request's environment owns its reward (`get_reward`), read while
        it still holds the request's final state; else None."""
        if environment is None or type(environment) not in self._env_reward_types:
            return None
        get_reward = environment.get_reward
        t0 = time.monotonic()
        if inspect.iscoroutinefunction(get_reward):
            reward = await get_reward()
        else:
            reward = await asyncio.get_running_loop().run_in_executor(self._tool_pool, get_reward)
        self._rates["env/reward_s"][0] += time.monotonic() - t0
        self._rates["env/reward_s"][1] += 1
        return type(environment), reward

    async def _rewards_of(
        self,
        prompt: list[dict[str, Any]],
        completion: list[dict[str, Any]],
        completion_ids: list[int],
        reward_kwargs: dict[str, Any],
        rollout_reward: float | None,
        env_reward: tuple[type, float] | None = None,
    ) -> list[float]:
        """One completion's reward per source, called as TRL's `_score_group` calls them (async functions awaited,
        others in a thread), with lists of one, in TRL's column order: the reward functions, one column per
        environment class that owns its reward (`env_reward` fills its own class's), the rollout reward. `None`
        (unscorable) becomes NaN."""
        kwargs = dict(
            completions=[completion],
            prompts=[prompt],
            completion_ids=[completion_ids],
            **{key: [value] for key, value in reward_kwargs.items()},
        )
        columns = await asyncio.gather(
            *[
                func(**kwargs) if is_async_callable(func) else asyncio.to_thread(func, **kwargs)
                for func in self.reward_funcs
            ]
        )
        values = [column[0] for column in columns]
        for env_type in self._env_reward_types:
            values.append(env_reward[1] if env_reward is not None and env_reward[0] is env_type else None)
        if self._provides_rollout_reward:
            values.append(rollout_reward)
        return [math.nan if value is None else float(value) for value in values]

    async def _score_group(self, group: AdaGroup) -> list[RolloutSample]:  # type: ignore[override]
        """Downsample the pool, compute the kept rows' pool advantages, update the memory, build the samples."""
        pool, n, ada = group.pool, self.num_generations, self.ada
        kept = [pool.samples[i] for i in downsample(pool, n, self._ada_rng, ada.downsample)]
        key = self._memory_key(group.row)
        p_hat = self.ada_memory.p_hat(key)  # before this pool is recorded (ODC's weight needs it so)
        num_funcs = len(kept[0].rewards_per_func)
        advantages, weights = pool_advantages(
            torch.tensor([c.rewards_per_func for c in kept], dtype=torch.float64),
            torch.ones(num_funcs, dtype=torch.float64),
            [pool.rewards],
            [pool.pass_rate],
            [p_hat],
            group_size=n,
            budget=self.ada_schedule.budget,
            baseline=ada.advantage_baseline,
            scale_rewards=ada.scale_rewards,
            weighting=ada.difficulty_weighting,
            max_weight=ada.max_difficulty_weight,
        )
        self.ada_memory.update_many(memory_updates([key], [pool]))  # dropped groups too: the memory saw them
        dropped = self._drops(pool)
        self._push_ada_metrics(group, kept, float(weights[0]), dropped)
        if dropped:
            return []
        version = min(c.model_version for c in kept)  # the oldest kept completion sets the group's staleness
        return self._samples(group.group_id, kept, advantages.tolist(), version)

    def _drops(self, pool: Pool) -> bool:
        """Refill, the asynchronous way: whether to keep this pool's group from the trainer because it has no signal
        (DAPO's group filter; a pilot that stopped has none either). There are no batch slots to refill, so the loop
        simply goes on with the next prompt. After `max_consecutive_drops` groups in a row were dropped the next one
        is pushed whatever its signal (zero advantages, as TRL pushes such groups): a task on which no prompt gives
        signal (a reward that never varies, a threshold above every reward) would otherwise starve the trainer."""
        if not self.ada.refill or self._refill_signal(pool):
            self._ada_drops = 0
            return False
        if self._ada_drops < self.ada.max_consecutive_drops:
            self._ada_drops += 1
            return True
        if not self._ada_drop_guard_warned:
            self._ada_drop_guard_warned = True
            logging.getLogger(__name__).warning(
                "refill: %d groups in a row had no signal (all rewards equal), so this one is pushed with zero "
                "advantages to keep the trainer fed (ada/pushed_without_signal_total counts these). If it keeps "
                "happening, check the rewards against positive_threshold and the task's difficulty.",
                self._ada_drops,
            )
        self._ada_drops = 0
        return False

    def _refill_signal(self, pool: Pool) -> bool:
        """Whether refill keeps the pool: any two total rewards differ, or with `refill_filter_reward` any two values
        of that function (completions whose value or total is NaN left out, as in the synchronous trainer)."""
        column = self._ada_filter_column
        if column is None:
            return has_signal(pool)
        values = {
            c.rewards_per_func[column]
            for c, total in zip(pool.samples, pool.rewards, strict=True)
            if not math.isnan(c.rewards_per_func[column] + total)
        }
        return len(values) > 1

    def _samples(
        self, group_id: int, kept: list[Completion], advantages: list[float], version: int
    ) -> list[RolloutSample]:
        """The kept rows as TRL's `_score_group` builds them (one sample per training row of each conversation)."""
        scored = np.array([c.reward for c in kept], dtype=float)
        scored = scored[~np.isnan(scored)]
        reward_std = float(scored.std()) if scored.size else math.nan  # TRL's: population std of the group
        with_tools = sum(c.tool_call_count for c in kept) > 0
        samples = []
        for c, advantage in zip(kept, advantages, strict=True):
            metrics = {
                "reward": c.reward,
                "reward_std": reward_std,
                **{f"rewards/{name}": r for name, r in zip(self.reward_func_names, c.rewards_per_func, strict=True)},
            }
            if with_tools:
                metrics["tools/call_frequency"] = float(c.tool_call_count)
                metrics["tools/failure_frequency"] = (
                    c.tool_failure_count / c.tool_call_count if c.tool_call_count else 0.0
                )
            for seq in c.sequences:
                samples.append(
                    RolloutSample(
                        prompt=c.prompt,
                        completion=c.completion,
                        input_ids=_as_row(seq.input_ids, np.int64),
                        completion_mask=_as_row(seq.completion_mask, np.int64),
                        old_log_probs=_as_row(seq.old_log_probs, np.float32),
                        advantage=float(advantage),
                        model_version=version,
                        group_id=group_id,
                        metrics=dict(metrics),
                    )
                )
        return samples

    def _push_ada_metrics(self, group: AdaGroup, kept: list[Completion], weight: float, dropped: bool) -> None:
        """`ada/*` metrics of one prompt, as rates `(numerator, denominator)` so the trainer averages over prompts,
        and counters (`*_total`, summed by the trainer)."""
        pool, result = group.pool, group.result
        versions = [c.model_version for c in pool.samples]
        kept_pool = Pool(pool.positive_threshold)
        kept_pool.add(kept, [c.reward for c in kept], 0)
        scored = pool.num_positive + pool.num_negative
        values: dict[str, float | tuple[float, float]] = {
            "ada/samples_per_prompt": (float(len(pool)), 1.0),
            "ada/frac_resolved": (float(pool.resolved), 1.0),
            "ada/frac_group_has_signal": (float(has_signal(kept_pool)), 1.0),
            "ada/frac_zero_std_first_round": (float(pool.first_round_has_zero_std()), 1.0),
            "ada/difficulty_weight_mean": (weight, 1.0),
            "ada/aborted_per_prompt": (float(result.aborted + result.dropped), 1.0),
            "ada/pool_version_span_max": float(max(versions) - min(versions)),
            "ada/samples_per_prompt_max": float(len(pool)),
        }
        if scored:
            values["ada/pool_pass_rate"] = (float(pool.num_positive), float(scored))
        if self.ada.pilot_size:
            values["ada/pilot_stopped_total"] = float(result.pilot_stopped)
            values["ada/frac_pilot_stopped"] = (float(result.pilot_stopped), 1.0)
        if self.ada.refill:
            forced = not dropped and not self._refill_signal(pool)
            values["ada/dropped_total"] = float(dropped)
            values["ada/frac_dropped"] = (float(dropped), 1.0)
            values["ada/pushed_without_signal_total"] = float(forced)
        self._push_metrics(values)


if TYPE_CHECKING:
    from trl.experimental.async_grpo import AsyncGRPOConfig

# The worker kwargs `AsyncGRPOTrainer.__init__` fills from its config (TRL 1.16.0, async_grpo_trainer.py:1367-1390):
# worker kwarg -> AsyncGRPOConfig field. `max_inflight_tasks` is also inferred there when negative
# (`_trainer_max_inflight_tasks`).
TRAINER_ARG_KWARGS = {
    "num_generations": "num_generations",
    "max_inflight_tasks": "max_inflight_tasks",
    "queue_maxsize": "queue_maxsize",
    "vllm_server_url": "vllm_server_base_url",
    "max_tokens": "max_completion_length",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "request_timeout": "request_timeout",
    "chat_template_kwargs": "chat_template_kwargs",
    "max_tool_calling_iterations": "max_tool_calling_iterations",
    "log_completions": "log_completions",
    "num_completions_to_print": "num_completions_to_print",
    "fork_threshold_tokens": "fork_threshold_tokens",
}
TRAINER_LORA_NAME = "trl-policy"  # `AsyncGRPOTrainer._lora_name`: the served adapter's name under adapter-only sync


def _trainer_max_inflight_tasks(args: AsyncGRPOConfig, num_processes: int) -> int:
    """`args.max_inflight_tasks`, or, when negative, the trainer's inference: `max(max_staleness, 1)` optimizer steps
    of samples (`per_device_train_batch_size * gradient_accumulation_steps * num_processes`)."""
    if args.max_inflight_tasks >= 0:
        return args.max_inflight_tasks
    samples_per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * num_processes
    return max(args.max_staleness, 1) * samples_per_step


def _trainer_eos_token_ids(processing_class: Any, model_eos_token_id: int | list[int] | None) -> list[int]:
    """The trainer's end-of-completion ids: every eos id of the model's generation config, with the tokenizer's
    first when the model does not declare it."""
    if model_eos_token_id is None:
        ids: list[int] = []
    elif isinstance(model_eos_token_id, int):
        ids = [model_eos_token_id]
    else:
        ids = list(model_eos_token_id)
    if processing_class.eos_token_id not in ids:
        ids = [processing_class.eos_token_id, *ids]
    return ids


def _model_eos_token_id(model_name: str, args: AsyncGRPOConfig) -> int | list[int] | None:
    """The eos id(s) of the generation config the trainer's model would load with (its `generation_config.json`, or
    the one derived from its config when there is none), without loading the weights."""
    from transformers import AutoConfig, GenerationConfig

    init_kwargs = args.model_init_kwargs if isinstance(args.model_init_kwargs, dict) else {}
    source = {"revision": init_kwargs.get("revision"), "trust_remote_code": args.trust_remote_code}
    try:
        return GenerationConfig.from_pretrained(model_name, revision=source["revision"]).eos_token_id
    except OSError:  # no generation_config.json: transformers derives one from the model config
        config = AutoConfig.from_pretrained(model_name, **source)
        return GenerationConfig.from_model_config(config).eos_token_id


# AsyncGRPOTrainer assumes group ids are dataset rows: it checkpoints "the first group id never trained" as the row
# to resume from (async_grpo_trainer.py:1864-1867) and ends an epoch after len(dataset) trained groups (:253).
RESUME_WARNING = (
    "AdaRolloutWorker with refill or prompt_selection: AsyncGRPOTrainer saves the first group id never trained as "
    "the dataset row to resume from, and counts epochs in trained groups. Groups dropped for lack of signal are never "
    "trained and skipped rows get no group id, so a run resumed from a checkpoint restarts earlier in the dataset "
    "than where it stopped, and a run reads more rows than num_train_epochs passes over the dataset."
)


class AdaRolloutWorker(AsyncRolloutWorker):
    """`AsyncRolloutWorker` whose child runs `AdaRolloutLoop`: pass it as `rollout_worker=` to `AsyncGRPOTrainer`.

    Takes `AsyncRolloutWorker`'s kwargs (forwarded to the loop, so picklable) plus `ada`, the sampling settings;
    they are checked here, before the child is spawned. Refuses (RuntimeError) a TRL outside `SUPPORTED_ASYNC_TRL`."""

    _loop_cls = AdaRolloutLoop

    def __init__(self, *, ada: AdaRolloutConfig | None = None, **kwargs: Any) -> None:
        check_async_trl_version()
        ada = ada or AdaRolloutConfig()
        ada.validate(kwargs.get("num_generations", 8))
        if ada.refill or ada.prompt_selection != "none":
            warnings.warn(RESUME_WARNING, UserWarning, stacklevel=2)
        super().__init__(ada=ada, **kwargs)

    @classmethod
    def from_trainer_args(
        cls,
        args: AsyncGRPOConfig,
        ada: AdaRolloutConfig | None = None,
        *,
        model_name: str,
        dataset: Any = None,
        reward_funcs: Callable[..., Any] | list[Callable[..., Any]] | None = None,
        processing_class: Any = None,
        tools: list[Callable[..., Any]] | None = None,
        environment_factory: Any = None,
        eos_token_ids: list[int] | None = None,
        lora_sync: bool = False,
        num_processes: int = 1,
        **overrides: Any,
    ) -> AdaRolloutWorker:
        """The worker `AsyncGRPOTrainer(model_name, reward_funcs, args, dataset, processing_class, tools=tools,
        environment_factory=environment_factory)` would build for itself (`AsyncRolloutWorker`, with the same kwargs
        filled from `args`), running the Ada loop with `ada`. Pass it to that trainer as `rollout_worker=`.

        As the trainer does: `reward_funcs` becomes a list; without a `processing_class` the tokenizer is loaded from
        `model_name` (and its pad token set to eos when missing); `eos_token_ids` defaults to the eos ids of the
        model's generation config with the tokenizer's first; a negative `args.max_inflight_tasks` becomes
        `max(max_staleness, 1) * per_device_train_batch_size * gradient_accumulation_steps * num_processes`
        (`num_processes`: the training processes, which the trainer reads from its accelerator); `lora_sync=True`
        (a PEFT model and a server started with `--enable-lora`, which the trainer probes) names the served adapter as
        the trainer does. `args` is not modified. `overrides` replace any kwarg (e.g. `max_inflight_tasks`); kwargs
        the installed TRL's loop does not take (e.g. `eos_token_ids` before 1.16.0) are left out.
        """
        if processing_class is None:
            from transformers import AutoTokenizer

            init_kwargs = args.model_init_kwargs if isinstance(args.model_init_kwargs, dict) else {}
            processing_class = AutoTokenizer.from_pretrained(
                model_name, revision=init_kwargs.get("revision"), trust_remote_code=args.trust_remote_code
            )
        if processing_class.pad_token is None:  # the trainer sets it on the tokenizer it hands its worker
            processing_class.pad_token = processing_class.eos_token
        if reward_funcs is None:
            reward_funcs = []
        elif not isinstance(reward_funcs, list):
            reward_funcs = [reward_funcs]
        if eos_token_ids is None:
            eos_token_ids = _trainer_eos_token_ids(processing_class, _model_eos_token_id(model_name, args))
        kwargs: dict[str, Any] = {
            "model_name": model_name,
            "lora_name": TRAINER_LORA_NAME if lora_sync else None,
            "dataset": dataset,
            "reward_funcs": reward_funcs,
            "processing_class": processing_class,
            "eos_token_ids": eos_token_ids,
            "tools": tools,
            "environment_factory": environment_factory,
            **{kwarg: getattr(args, name) for kwarg, name in TRAINER_ARG_KWARGS.items() if hasattr(args, name)},
        }
        kwargs["max_inflight_tasks"] = _trainer_max_inflight_tasks(args, num_processes)
        kwargs.update(overrides)
        accepted = inspect.signature(_AsyncRolloutLoop.__init__).parameters
        worker_only = {"queue_maxsize", "child_ready_timeout"}  # consumed by AsyncRolloutWorker itself
        dropped = sorted(k for k in kwargs if k not in accepted and k not in worker_only and k not in overrides)
        for key in dropped:
            del kwargs[key]
        return cls(ada=ada, **kwargs)


__all__ = [
    "SUPPORTED_ASYNC_TRL",
    "TRAINER_ARG_KWARGS",
    "AdaGroup",
    "AdaRolloutConfig",
    "AdaRolloutLoop",
    "AdaRolloutWorker",
    "Completion",
    "RequestSlots",
    "TaskBackend",
    "check_async_trl_version",
]
