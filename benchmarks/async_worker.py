"""TRL's asynchronous rollout worker against the Reinforce-Ada worker, on the step-time benchmark's emulated engine.

    python benchmarks/async_worker.py            # paper-fit and uniform mixes, both regimes, 5 seeds: minutes
    python benchmarks/async_worker.py --quick    # seconds: 1 seed, 48 groups, 64 requests in flight

What runs: the workers' own asyncio loops. `trl.experimental.async_grpo`'s `_AsyncRolloutLoop` (requests exactly
`num_generations` completions per prompt) and `trl_ada.adapter.async_worker.AdaRolloutLoop` (one `streaming_session`
per prompt: the engine's stopping rule, its aborts, the pool's downsampling and advantages), each with its generate
loop and its score loop, on an asyncio event loop whose clock is virtual (`VirtualClockLoop`: when nothing is ready it
jumps to the next timer instead of sleeping). One method is replaced, `_generate_one` (a whole conversation over HTTP
in the real loops): here it submits one request to `benchmarks/step_time.py`'s `EmulatedEngine` and awaits its finish;
cancelling it (the Ada loop's abort) aborts the request in the engine, which reports the tokens it had decoded. The
reward function is asynchronous (the loops await it; a synchronous one would run in a thread, outside the virtual
clock).

The engine, the pass-rate mixes and the completions are step_time.py's (its module docstring has the event model):
continuous batching, a decode step with b running sequences takes t(b) = t0 + c * b virtual seconds, no cap on
running sequences other than the loops' own (`max_inflight_tasks` requests in flight; in the Ada loop each prompt
has up to `max_in_flight` of them, and another prompt starts in the slots the open ones leave); prefill is free.
Completion k of prompt i (k-th in request order) has a fixed reward and length per seed, shared by every method
(common random numbers); prompts arrive as a stream, prompt i being the loop's group i.

The trainer is a stand-in that consumes every row at once (generation is the bottleneck), and moves the policy
version on by one every `--samples-per-step` rows, as `AsyncGRPOTrainer` does after each optimizer step; the loops
read it when they dispatch a request. A group's version lag is the trainer's version when the group arrives minus
the version the group is tagged with; the trainer drops a row whose lag exceeds `max_staleness` (the share reported;
those rows are not removed from the other numbers).

Reported per trained group (a prompt whose rows reached the trainer), over the groups that arrive after `--warmup`
groups, `--groups` of them: requests started, finished (pooled, dropped beyond the pool, and finished after an abort
was decided) and aborted while decoding; tokens decoded for the prompt, aborted ones included, and the aborted ones
alone; virtual seconds per trained group (the time between the arrival of the warm-up's last group and the window's
last, divided by the groups in the window); the share of trained groups whose rewards are not all equal (non-zero
std: the group has a gradient); seconds per group with signal (the two divided); the engine's mean running sequences
over the window's decode steps and, since every request in flight decodes, the occupancy: that mean over
`max_inflight_tasks`. Each is a per-seed value; the tables give the mean over seeds with a 95% Student-t interval
over seeds, and the ratios to TRL n=4 are computed per seed (same prompts and draws) before the same summary.

The occupancy table runs every method again at a few small `max_inflight_tasks` (`--small-inflight`, default 7, 8
and 12: below, at and above the default per-prompt cap of 8), on the first mix's first seed, with a sixteenth of
the warm-up and an eighth of the window.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import math
import pathlib
import queue
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from machine import describe, machine_info
from step_time import MIXES, REGIMES, EmulatedEngine, Lengths, Regime, Workload

from trl_ada.adapter.async_worker import AdaRolloutConfig
from trl_ada.core.engine import Draw

RESULTS = pathlib.Path(__file__).parent / "results"
# Student t quantiles 0.975 for 1..30 degrees of freedom (a 95% two-sided interval); beyond, the normal's 1.96.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
T975 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


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


METHODS = (
    Method("trl4", "TRL n=4", 4),
    Method("trl16", "TRL n=16", 16),
    # AdaRolloutConfig's defaults: balanced, rounds of 8, at most 4 (budget 32), 8 requests in flight per prompt.
    Method("ada-bal", "Ada-balanced 8x4 (n=4)", 4, AdaRolloutConfig(sampling_strategy="balanced")),
    Method("ada-pos", "Ada-positive 8x4 (n=4)", 4, AdaRolloutConfig(sampling_strategy="positive")),
    # The sampling fields of the recipes' `efficient` setting (positive, 4 x 2), without its prompt selection: every
    # prompt here is new, so the memory would have nothing to act on.
    Method(
        "ada-pos-4x2",
        "Ada-positive 4x2 (n=4)",
        4,
        AdaRolloutConfig(sampling_strategy="positive", samples_per_round=4, max_rounds=2),
    ),
)


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


# --------------------------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------------------------


def has_signal(rewards: Sequence[float]) -> bool:
    """Whether a trained group's rewards have a non-zero spread (NaN rewards ignored): else every advantage is 0."""
    scored = [r for r in rewards if not math.isnan(r)]
    return len(scored) > 1 and float(np.std(scored)) > 0


def window_metrics(records: Sequence[GroupRecord], warmup: int, count: int, max_staleness: int) -> dict[str, float]:
    """Per trained group, over the `count` groups that arrived after the first `warmup` (in arrival order): mean
    requests started, finished and aborted, tokens and aborted tokens, the share with signal, mean version lag and the
    share staler than `max_staleness`; and seconds per group, the window's duration (from the arrival of group
    `warmup`, or 0 without a warm-up, to the arrival of the window's last) over `count`."""
    if count < 1 or len(records) < warmup + count:
        raise ValueError(f"Need {warmup} + {count} groups, got {len(records)}.")
    window = records[warmup : warmup + count]
    start = records[warmup - 1].done_at if warmup else 0.0
    signal = float(np.mean([has_signal(r.rewards) for r in window]))
    seconds = (window[-1].done_at - start) / count
    return {
        "started": float(np.mean([r.cost.started for r in window])),
        "finished": float(np.mean([r.cost.finished for r in window])),
        "aborted": float(np.mean([r.cost.aborted for r in window])),
        "tokens": float(np.mean([r.cost.tokens for r in window])),
        "aborted_tokens": float(np.mean([r.cost.aborted_tokens for r in window])),
        "seconds": seconds,
        "signal": signal,
        "seconds_per_signal": seconds / signal if signal else math.inf,
        "lag": float(np.mean([r.lag for r in window])),
        "stale": float(np.mean([r.lag > max_staleness for r in window])),
    }


def interval(values: Sequence[float]) -> dict[str, float]:
    """Mean of per-seed values with a 95% Student-t interval over seeds (no width with one seed)."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if len(x) < 2:
        return {"mean": mean, "low": math.nan, "high": math.nan}
    df = len(x) - 1
    half = (T975[df - 1] if df <= len(T975) else 1.96) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return {"mean": mean, "low": mean - half, "high": mean + half}


# --------------------------------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------------------------------


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


def run(
    method: Method,
    workload: Workload,
    regime: Regime,
    dataset: Any,
    *,
    max_inflight: int,
    samples_per_step: int,
    max_staleness: int,
    warmup: int,
    groups: int,
) -> dict[str, Any]:
    """One method on one seed's prompt stream: the window's metrics per trained group, and the run's counters."""
    sim = simulate(
        method,
        workload,
        regime,
        dataset,
        max_inflight=max_inflight,
        samples_per_step=samples_per_step,
        warmup=warmup,
        groups=groups,
    )
    trainer = sim.trainer
    out = window_metrics(trainer.records, warmup, groups, max_staleness)
    (steps0, tokens0), (steps1, tokens1) = trainer.window_start or (0, 0), trainer.window_end
    out["window_steps"], out["window_tokens"] = steps1 - steps0, tokens1 - tokens0
    # The engine's time is exactly t0 * steps + c * tokens (step_time.py); the virtual clock must agree with it.
    expected = (regime.t0 * out["window_steps"] + regime.c * out["window_tokens"]) / groups
    if not math.isclose(out["seconds"], expected, rel_tol=1e-9, abs_tol=1e-12):
        raise RuntimeError(f"Virtual clock {out['seconds']} s per group, engine arithmetic {expected} s.")
    out["running"] = out["window_tokens"] / max(1, out["window_steps"])  # mean sequences decoding per step
    # Every request in flight decodes (the engine has no cap of its own and prefill is free), so `running` is the mean
    # of the requests in flight over the window's decode steps; occupancy is its share of max_inflight_tasks.
    out["occupancy"] = out["running"] / max_inflight
    out["engine_tokens_per_group"] = out["window_tokens"] / groups  # every prompt's tokens in the window, per group
    out["off_event_submits"] = sim.client.off_event_submits
    out["virtual_seconds"] = sim.end_time
    return out


def in_regime(out: dict[str, Any], regime: Regime, groups: int) -> dict[str, Any]:
    """A run's metrics with its seconds in `regime`. The engine's events happen at decode steps, whose order neither
    t0 nor c changes, and the loops submit only at those events (`off_event_submits` is 0), so one run serves every
    regime: its window lasts t0 * steps + c * tokens."""
    if out["off_event_submits"]:
        raise RuntimeError("A submit fell between the engine's events: the run's seconds hold for its regime only.")
    seconds = (regime.t0 * out["window_steps"] + regime.c * out["window_tokens"]) / groups
    signal = out["signal"]
    return {**out, "seconds": seconds, "seconds_per_signal": seconds / signal if signal else math.inf}


# --------------------------------------------------------------------------------------------------------------------
# Summary and tables
# --------------------------------------------------------------------------------------------------------------------


SUMMARISED = ("started", "finished", "aborted", "tokens", "aborted_tokens", "seconds", "signal")
SUMMARISED += ("seconds_per_signal", "lag", "stale", "running", "occupancy")


def summarise(per_seed: dict[str, list[dict[str, Any]]], methods: Sequence[Method]) -> list[dict[str, Any]]:
    """Per method: each metric's mean over seeds and 95% interval, and the per-seed ratios of tokens, seconds and
    seconds per group with signal to TRL n=4's (same seed), summarised the same way."""
    rows = []
    base = per_seed.get("trl4")
    for method in methods:
        runs = per_seed[method.key]
        row: dict[str, Any] = {"key": method.key, "method": method.name}
        for name in SUMMARISED:
            row[name] = interval([r[name] for r in runs])
        if base is not None:
            for name in ("tokens", "seconds", "seconds_per_signal"):
                ratios = [r[name] / b[name] for r, b in zip(runs, base, strict=True)]
                row[f"{name}_x_trl4"] = interval(ratios)
        rows.append(row)
    return rows


def fmt(stat: dict[str, float], spec: str = ".2f", scale: float = 1.0, pct: bool = False) -> str:
    """`mean [low, high]` of an `interval`, scaled (or as percentages); the mean alone without an interval."""
    factor = 100.0 if pct else scale
    mean = format(stat["mean"] * factor, spec)
    if math.isnan(stat["low"]):
        return mean + ("%" if pct else "")
    low, high = format(stat["low"] * factor, spec), format(stat["high"] * factor, spec)
    return f"{mean}% [{low}, {high}]" if pct else f"{mean} [{low}, {high}]"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The per-group table of one regime and mix."""
    lines = [
        "| method | requests started / finished / aborted | tokens (aborted) | seconds | x TRL n=4 | with signal | "
        "seconds per group with signal (x TRL n=4) | running | occupancy | version lag (> max_staleness) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "-" if "seconds_x_trl4" not in r else fmt(r["seconds_x_trl4"])
        per_signal = fmt(r["seconds_per_signal"], ".3f")
        if "seconds_per_signal_x_trl4" in r:
            per_signal += f" ({fmt(r['seconds_per_signal_x_trl4'])})"
        lines.append(
            f"| {r['method']} | {r['started']['mean']:.2f} / {r['finished']['mean']:.2f} / {r['aborted']['mean']:.2f} "
            f"| {fmt(r['tokens'], '.0f')} ({r['aborted_tokens']['mean']:.0f}) | {fmt(r['seconds'], '.3f')} | {ratio} "
            f"| {fmt(r['signal'], '.1f', pct=True)} | {per_signal} | {r['running']['mean']:.0f} "
            f"| {fmt(r['occupancy'], '.1f', pct=True)} "
            f"| {r['lag']['mean']:.2f} ({r['stale']['mean']:.1%}) |"
        )
    return "\n".join(lines)


def occupancy_table(summaries: dict[int, list[dict[str, Any]]], methods: Sequence[Method]) -> str:
    """Per method, at each small max_inflight_tasks: mean requests in flight over the window's decode steps, and
    that as a share of max_inflight_tasks [95% t-interval over seeds]."""
    settings = sorted(summaries)
    lines = [
        "| method | per-prompt cap | " + " | ".join(f"max_inflight_tasks = {n}" for n in settings) + " |",
        "|---|---|" + "---|" * len(settings),
    ]
    for i, method in enumerate(methods):
        cap = "-" if method.ada is None else str(method.ada.max_in_flight or method.ada.samples_per_round)
        cells = []
        for n in settings:
            row = summaries[n][i]
            cells.append(f"{row['running']['mean']:.2f} of {n} ({fmt(row['occupancy'], '.1f', pct=True)})")
        lines.append(f"| {method.name} | {cap} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


LEGEND = (
    "Per trained group, mean over seeds [95% t-interval over seeds]. requests: started, finished (pooled, dropped, or "
    "done before its abort), aborted while decoding; tokens: decoded for the group's prompt, aborted ones included "
    "(in brackets: the aborted ones); seconds: virtual seconds of generation per trained group at steady state; "
    "x TRL n=4: ratio to TRL n=4 on the same seed; with signal: share of trained groups whose rewards are not all "
    "equal; running: mean sequences decoding per engine step, which is the mean of the requests in flight over the "
    "decode steps (every request in flight decodes); occupancy: running / max_inflight_tasks; version lag: policy "
    "versions between a group's tag and its arrival (in brackets: share above max_staleness, which the trainer would "
    "drop)."
)


def settings_table(args: argparse.Namespace, lengths: Lengths) -> str:
    rows = [
        ("engine", "step_time.py's EmulatedEngine: t(b) = t0 + c*b per decode step, prefill free", "cost.md (ours)"),
        *[(f"regime {n}", f"t0 = {REGIMES[n].t0:g} s, c = {REGIMES[n].c:g} s", "step_time.py") for n in args.regimes],
        ("max_inflight_tasks", str(args.max_inflight), "TRL's default rule: max_staleness x samples per step"),
        ("occupancy table", ", ".join(map(str, args.small_inflight)) or "none", "max_inflight_tasks of its runs"),
        ("samples per trainer step", str(args.samples_per_step), "version moves on every this many rows"),
        ("max_staleness", str(args.max_staleness), "AsyncGRPOConfig's default"),
        (
            "lengths",
            f"median {lengths.right:g} right / {lengths.wrong:g} wrong, log-sd {lengths.sigma:g}, cap {lengths.cap}",
            "step_time.py",
        ),
        ("groups", f"{args.warmup} warm-up, then {args.groups} measured", "per run"),
        ("seeds", ", ".join(map(str, range(args.seeds))), "same prompts and draws for every method of a seed"),
    ]
    lines = ["| setting | value | source |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mix", nargs="+", choices=sorted(MIXES), help="pass-rate mixes (default: paper uniform)")
    parser.add_argument(
        "--regime",
        choices=("throughput", "latency", "both"),
        help="engine regime(s) (default both; --quick throughput)",
    )
    parser.add_argument("--seeds", type=int, help="seeds 0..n-1 (default 5; --quick 1)")
    parser.add_argument("--warmup", type=int, help="groups before the measured window (default 256; --quick 16)")
    parser.add_argument("--groups", type=int, help="measured groups per run (default 512; --quick 48)")
    parser.add_argument("--max-inflight", type=int, help="TRL's max_inflight_tasks (default 256; --quick 64)")
    parser.add_argument(
        "--small-inflight",
        type=int,
        nargs="*",
        default=[7, 8, 12],
        help="max_inflight_tasks of the occupancy table (default 7 8 12; none for no table)",
    )
    parser.add_argument("--samples-per-step", type=int, default=64, help="rows per trainer step (default 64)")
    parser.add_argument("--max-staleness", type=int, default=4, help="AsyncGRPOConfig.max_staleness (default 4)")
    parser.add_argument("--methods", nargs="+", choices=[m.key for m in METHODS], help="default: all")
    parser.add_argument("--quick", action="store_true", help="1 seed, paper mix, throughput regime, a short window")
    parser.add_argument("--output-dir", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--name", help="result file stem (default async_worker[_quick])")
    args = parser.parse_args(argv)
    quick = args.quick
    args.mix = args.mix or (["paper"] if quick else ["paper", "uniform"])
    regime = args.regime or ("throughput" if quick else "both")
    args.regimes = ["throughput", "latency"] if regime == "both" else [regime]
    defaults = {"seeds": (1, 5), "warmup": (16, 256), "groups": (48, 512), "max_inflight": (64, 256)}
    for name, (short, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, short if quick else full)
    args.methods = args.methods or [m.key for m in METHODS]
    for name in ("seeds", "groups", "max_inflight", "samples_per_step"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if any(n < 1 for n in args.small_inflight):
        parser.error("--small-inflight values must be >= 1")
    args.small_inflight = sorted(set(args.small_inflight))
    if args.warmup < 0 or args.max_staleness < 0:
        parser.error("--warmup and --max-staleness must be >= 0")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    from datasets import Dataset

    lengths = Lengths()
    methods = [m for m in METHODS if m.key in args.methods]
    machine = machine_info()
    print(f"machine: {describe(machine)} (every time below is virtual)", flush=True)
    start = time.perf_counter()
    # Prompts enough for the warm-up, the window and whatever is in flight when the run stops (under one per request).
    small_warmup, small_groups, small_seeds = args.warmup // 16, max(1, args.groups // 8), 1
    prompts = max(
        args.warmup + args.groups + args.max_inflight + 1,
        small_warmup + small_groups + max(args.small_inflight, default=0) + 1,
    )
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": str(i)}]} for i in range(prompts)])
    results: dict[str, Any] = {}
    text = []
    simulated = REGIMES[args.regimes[0]]  # the clock runs in this one; the others follow from the same events
    # The occupancy table: every method at a few small max_inflight_tasks, on the first mix's first seed, with a
    # shorter window (at a few requests in flight a group takes many virtual seconds, which the loops' polls fill).
    small: dict[int, dict[str, list[dict[str, Any]]]] = {n: {m.key: [] for m in methods} for n in args.small_inflight}
    for mix in args.mix:
        runs: dict[str, list[dict[str, Any]]] = {m.key: [] for m in methods}
        for seed in range(args.seeds):
            workload = Workload.draw(mix, prompts, seed, lengths)
            for method in methods:
                for slots in args.small_inflight if mix == args.mix[0] and seed < small_seeds else ():
                    small[slots][method.key].append(
                        run(
                            method,
                            workload,
                            simulated,
                            dataset,
                            max_inflight=slots,
                            samples_per_step=args.samples_per_step,
                            max_staleness=args.max_staleness,
                            warmup=small_warmup,
                            groups=small_groups,
                        )
                    )
                runs[method.key].append(
                    run(
                        method,
                        workload,
                        simulated,
                        dataset,
                        max_inflight=args.max_inflight,
                        samples_per_step=args.samples_per_step,
                        max_staleness=args.max_staleness,
                        warmup=args.warmup,
                        groups=args.groups,
                    )
                )
        for regime_name in args.regimes:
            regime = REGIMES[regime_name]
            per_seed = {key: [in_regime(r, regime, args.groups) for r in v] for key, v in runs.items()}
            rows = summarise(per_seed, methods)
            results[f"{regime_name}/{mix}"] = {
                "regime": asdict(regime),
                "mix": MIXES[mix],
                "summary": rows,
                "per_seed": per_seed,
            }
            block = f"### {regime_name} regime (c = {regime.c:g}), {MIXES[mix]}\n\n{markdown_table(rows)}"
            text.append(block)
            print(f"\n{block}  ({time.perf_counter() - start:.0f} s)", flush=True)
    if args.small_inflight:
        summaries = {n: summarise(per_seed, methods) for n, per_seed in small.items()}
        results["occupancy"] = {
            "mix": MIXES[args.mix[0]],
            "seeds": list(range(small_seeds)),
            "warmup_groups": small_warmup,
            "measured_groups": small_groups,
            "summary": {str(n): rows for n, rows in summaries.items()},
            "per_seed": {str(n): per_seed for n, per_seed in small.items()},
        }
        block = (
            f"### Occupancy at small max_inflight_tasks, {MIXES[args.mix[0]]}\n\n"
            f"Seed 0; groups: {small_warmup} warm-up, then {small_groups} "
            f"measured. Occupancy is the same in both regimes.\n\n{occupancy_table(summaries, methods)}"
        )
        text.append(block)
        print(f"\n{block}  ({time.perf_counter() - start:.0f} s)", flush=True)
    elapsed = time.perf_counter() - start
    main_runs = [r for key, res in results.items() if key != "occupancy" for v in res["per_seed"].values() for r in v]
    off_event = sum(r["off_event_submits"] for r in main_runs) // len(args.regimes)  # each run once per regime
    off_event += sum(r["off_event_submits"] for per_seed in small.values() for v in per_seed.values() for r in v)
    print(f"\n{LEGEND}\n\nsubmits off the engine's event times: {off_event}; {elapsed:.0f} s", flush=True)

    name = args.name or ("async_worker_quick" if args.quick else "async_worker")
    command = " ".join(["python benchmarks/async_worker.py", *(argv if argv is not None else sys.argv[1:])])
    report = {
        "command": command,
        "machine": machine,
        "elapsed_seconds": round(elapsed, 1),
        "settings": {
            "regimes": args.regimes,
            "mixes": args.mix,
            "seeds": list(range(args.seeds)),
            "warmup_groups": args.warmup,
            "measured_groups": args.groups,
            "max_inflight_tasks": args.max_inflight,
            "occupancy_max_inflight_tasks": args.small_inflight,
            "samples_per_step": args.samples_per_step,
            "max_staleness": args.max_staleness,
            "lengths": asdict(lengths),
            "methods": {
                m.key: {
                    "name": m.name,
                    "num_generations": m.num_generations,
                    "ada": None if m.ada is None else asdict(m.ada),
                }
                for m in methods
            },
        },
        "off_event_submits": off_event,
        "results": results,
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"{name}.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    parts = [f"`{command}`\n\n{describe(machine)}; {elapsed:.0f} s.", settings_table(args, lengths), *text, LEGEND]
    (args.output_dir / f"{name}.md").write_text("\n\n".join(parts) + "\n")
    return report


if __name__ == "__main__":
    main()
