"""The step-time benchmark's emulation (`step_time.py`'s docstring has the event model): the workload (pass rates,
rewards and lengths of every completion, drawn per seed), the continuous-batching engine on a virtual clock, the
methods compared and one method's run through the trainer's scheduler. `async_worker.py` and `step_time_vllm.py`
use the same workload, engine and methods."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trl_ada.core.engine import Finished, SamplingResult, Schedule, sample

PAPER_FIT = (0.3372, 0.2984)  # E[p^4] = 0.353, E[p^256] = 0.102: see benchmarks/sampler_efficiency.py (fit_beta)
MIXES = {"paper": f"Beta({PAPER_FIT[0]}, {PAPER_FIT[1]}) (paper fit)", "uniform": "uniform(0, 1)"}
BUDGET = 32  # the largest per-prompt budget of any method below (8 x 4)


# --------------------------------------------------------------------------------------------------------------------
# Workload and engine
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lengths:
    """Completion lengths: lognormal, median `right` / `wrong` tokens, log-sd `sigma`, capped at `cap` (truncated:
    counted wrong)."""

    right: float = 500.0
    wrong: float = 800.0
    sigma: float = 0.55
    cap: int = 2048


@dataclass(frozen=True)
class Regime:
    """An engine: decode step time t(b) = t0 + c * b, at most `max_running` sequences decoding (None: no cap)."""

    name: str
    c: float
    t0: float = 0.012
    max_running: int | None = None

    def step_time(self, running: int) -> float:
        return self.t0 + self.c * running

    @property
    def peak_throughput(self) -> float:
        """Tokens per second at the most sequences the engine can run (1 / c without a cap: the supremum)."""
        if self.max_running is None:
            return 1.0 / self.c
        return self.max_running / self.step_time(self.max_running)


REGIMES = {
    "throughput": Regime("throughput", c=2e-5),  # cost.md's saturated engine
    "latency": Regime("latency", c=2e-6),  # cost.md's latency-bound engine
}


@dataclass
class Workload:
    """`rewards[i][k]` and `lengths[i][k]`: the k-th completion of prompt i in request order; `pass_rates[i]`."""

    pass_rates: list[float]
    rewards: list[list[float]]
    lengths: list[list[int]]

    @classmethod
    def draw(cls, mix: str, prompts: int, seed: int, lengths: Lengths = Lengths(), budget: int = BUDGET) -> Workload:
        rng = np.random.default_rng([seed, 20251])
        if mix == "paper":
            p = rng.beta(*PAPER_FIT, prompts)
        elif mix == "uniform":
            p = rng.random(prompts)
        else:
            raise ValueError(f"Unknown mix {mix!r}; expected one of {sorted(MIXES)}.")
        right = rng.random((prompts, budget)) < p[:, None]
        raw = np.where(right, lengths.right, lengths.wrong) * np.exp(lengths.sigma * rng.standard_normal(right.shape))
        truncated = raw > lengths.cap
        tokens = np.clip(np.rint(raw), 1, lengths.cap).astype(int)
        rewards = (right & ~truncated).astype(float)
        return cls(p.tolist(), rewards.tolist(), tokens.tolist())


class EmulatedEngine:
    """A continuous-batching engine on a virtual clock, as a `trl_ada.core.engine.Backend`.

    A sequence admitted at decode step s with length L finishes at step s + L. `wait` runs decode steps up to the next
    finish (all running sequences advance together, each step taking t(b) for the b running then), and returns every
    sequence finishing in that step. Handles are the rewards. It also records the steps run, the tokens decoded, the
    most sequences running at once and, per completion, the longest chain ending in it (see step_time.py's
    docstring)."""

    def __init__(self, workload: Workload, regime: Regime) -> None:
        self.workload, self.regime = workload, regime
        self.now = 0.0  # virtual seconds
        self.steps = 0  # decode steps run
        self.tokens = 0  # tokens decoded, aborted sequences included
        self.heap: list[tuple[int, int]] = []  # (finish step, ticket); aborted tickets are skipped lazily
        self.running: dict[
            int, tuple[int, int, float, int, int]
        ] = {}  # ticket -> (start, length, reward, prompt, chain)
        self.queue: deque[int] = deque()
        self.queued: dict[int, tuple[int, float, int, int]] = {}  # ticket -> (length, reward, prompt, chain)
        self.drawn = [0] * len(workload.rewards)
        self.prompt_chain = [0] * len(workload.rewards)  # longest chain ending in a finished completion of the prompt
        self.longest_chain = 0
        self.peak_running = 0
        self.aborted_tokens = 0  # tokens of sequences aborted while running

    def submit(self, draws) -> None:
        for draw in draws:
            i = draw.prompt_index
            k = self.drawn[i]
            self.drawn[i] += 1
            length, reward = self.workload.lengths[i][k], self.workload.rewards[i][k]
            # Every completion of this prompt that has finished did so before this submit: this draw extends the
            # longest chain ending in one of them.
            self.queue.append(draw.ticket)
            self.queued[draw.ticket] = (length, reward, i, self.prompt_chain[i])
        self._admit()

    def _admit(self) -> None:
        cap = self.regime.max_running
        while self.queue and (cap is None or len(self.running) < cap):
            ticket = self.queue.popleft()
            if ticket not in self.queued:
                continue  # aborted while queued
            length, reward, prompt, chain = self.queued.pop(ticket)
            self.running[ticket] = (self.steps, length, reward, prompt, chain)
            heapq.heappush(self.heap, (self.steps + length, ticket))
        self.peak_running = max(self.peak_running, len(self.running))

    def next_finish_time(self) -> float | None:
        """The virtual time at which `wait` would return, were nothing submitted or aborted before then (None: nothing
        running). An event-driven caller (the asynchronous benchmark) schedules its wake-up here; the arithmetic is
        `wait`'s own, so the two agree to the bit."""
        while self.heap and self.heap[0][1] not in self.running:
            heapq.heappop(self.heap)
        if not self.heap:
            return None
        return self.now + (self.heap[0][0] - self.steps) * self.regime.step_time(len(self.running))

    def wait(self) -> list[Finished]:
        while self.heap and self.heap[0][1] not in self.running:
            heapq.heappop(self.heap)
        if not self.heap:
            return []
        finish = self.heap[0][0]
        advance, running = finish - self.steps, len(self.running)
        self.now += advance * self.regime.step_time(running)
        self.tokens += advance * running
        self.steps = finish
        batch = []
        while self.heap and self.heap[0][0] == finish:
            _, ticket = heapq.heappop(self.heap)
            if ticket in self.running:
                _, length, reward, prompt, base = self.running.pop(ticket)
                self.prompt_chain[prompt] = max(self.prompt_chain[prompt], base + length)
                self.longest_chain = max(self.longest_chain, base + length)
                batch.append(Finished(ticket, reward, length))
        self._admit()
        return batch

    def abort(self, tickets: Sequence[int]) -> int:
        tokens = 0
        for ticket in tickets:
            if ticket in self.running:
                tokens += self.steps - self.running.pop(ticket)[0]
            else:
                self.queued.pop(ticket)  # raises on a ticket that is neither running nor queued
        self.aborted_tokens += tokens
        self._admit()
        return tokens


def _score(requests, handles) -> list[float]:
    return list(handles)


# --------------------------------------------------------------------------------------------------------------------
# Methods and one run
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    key: str
    name: str
    schedule: Schedule
    rollout: str = "rounds"
    max_in_flight: int | None = None
    rule: str = ""  # the Ada rule this method belongs to ("" for GRPO)
    extra: bool = False  # a measurement beyond the main list (second table)


BALANCED = Schedule.from_strategy("balanced", 4, 8, 4)
BALANCED_POSTERIOR = Schedule.from_strategy("balanced", 4, 8, 4, round_sizing="posterior")
POSITIVE = Schedule.from_strategy("positive", 4, 8, 4)
SEQUENTIAL = {"balanced": "bal-seq", "positive": "pos-seq"}  # the sequential limit's key, per rule


def methods(extra_in_flight: Sequence[int] = (), extras: bool = True) -> list[Method]:
    """The main list of methods, then (with `extras`) streaming at other `max_in_flight` values and posterior sizing in
    2 rounds of up to 16 (same budget of 32), rounds and streaming."""
    out = [
        Method("grpo4", "GRPO n=4", Schedule.from_strategy("uniform", 4)),
        Method("grpo16", "GRPO n=16", Schedule.from_strategy("uniform", 16)),
        Method("bal-rounds", "Ada-balanced rounds 8x4", BALANCED, rule="balanced"),
        Method("bal-rounds-post", "Ada-balanced rounds posterior", BALANCED_POSTERIOR, rule="balanced"),
        Method("bal-stream", "Ada-balanced streaming k=8 running (default)", BALANCED, "streaming", rule="balanced"),
        Method("bal-stream-16", "Ada-balanced streaming k=16 running", BALANCED, "streaming", 16, "balanced"),
        Method(
            "bal-stream-post",
            "Ada-balanced streaming posterior (E[remaining] running, cap 8)",
            BALANCED_POSTERIOR,
            "streaming",
            rule="balanced",
        ),
        Method("bal-seq", "Ada-balanced sequential limit (k=1)", BALANCED, "streaming", 1, "balanced"),
        Method("pos-rounds", "Ada-positive rounds 8x4", POSITIVE, rule="positive"),
        Method("pos-stream", "Ada-positive streaming k=8 running (default)", POSITIVE, "streaming", rule="positive"),
        Method("pos-seq", "Ada-positive sequential limit (k=1)", POSITIVE, "streaming", 1, "positive"),
    ]
    if not extras:
        return out
    out += [
        Method(f"bal-stream-{k}", f"Ada-balanced streaming k={k} running", BALANCED, "streaming", k, "balanced", True)
        for k in extra_in_flight
    ]
    two = Schedule.from_strategy("balanced", 4, 16, 2, round_sizing="posterior")
    out += [
        Method("bal-rounds-post2", "Ada-balanced rounds posterior 16x2 (2 rounds)", two, rule="balanced", extra=True),
        Method(
            "bal-stream-post2",
            "Ada-balanced streaming posterior, cap 16 (budget 16x2)",
            two,
            "streaming",
            None,
            "balanced",
            True,
        ),
        Method("pos-stream-4", "Ada-positive streaming k=4 running", POSITIVE, "streaming", 4, "positive", True),
    ]
    return out


def run(method: Method, workload: Workload, regime: Regime) -> dict[str, Any]:
    """One step of `method` on the emulated engine: its counts, virtual seconds and physical limit."""
    engine = EmulatedEngine(workload, regime)
    result: SamplingResult = sample(
        len(workload.rewards),
        method.schedule,
        engine,
        _score,
        rollout=method.rollout,
        max_in_flight=method.max_in_flight,
    )
    if result.generated_tokens != engine.tokens:  # the engine's count and the scheduler's must agree
        raise RuntimeError(
            f"{method.name}: the scheduler counted {result.generated_tokens} tokens, the engine {engine.tokens}"
        )
    prompts = len(workload.rewards)
    sizes = [len(p) for p in result.pools]
    # Pools are request-order prefixes (rounds: whole rounds; streaming: by construction), so pool i holds draws
    # 0..len-1 of prompt i.
    pooled_lengths = [length for i, n in enumerate(sizes) for length in workload.lengths[i][:n]]
    throughput_s = engine.tokens / regime.peak_throughput
    chain_s = engine.longest_chain * regime.step_time(1)
    limit = max(throughput_s, chain_s)
    tight = max(regime.t0 * engine.longest_chain + regime.c * engine.tokens, throughput_s)
    return {
        "pool_per_prompt": sum(sizes) / prompts,
        "samples_per_prompt": (sum(sizes) + result.dropped) / prompts,  # completions that finished
        "started_per_prompt": (sum(sizes) + result.dropped + result.aborted) / prompts,
        "tokens": engine.tokens,
        "pooled_tokens": sum(pooled_lengths),
        "longest_pooled": max(pooled_lengths),
        "aborted_tokens": result.aborted_tokens,
        "aborted_share": result.aborted_tokens / engine.tokens,
        # the two parts of it: draws aborted while running, and draws that finished beyond the pool (dropped)
        "abort_running_share": engine.aborted_tokens / engine.tokens,
        "dropped_share": (result.aborted_tokens - engine.aborted_tokens) / engine.tokens,
        "aborted_per_prompt": result.aborted / prompts,
        "dropped_per_prompt": result.dropped / prompts,
        "seconds": engine.now,
        "decode_steps": engine.steps,
        "t0_steps_s": regime.t0 * engine.steps,
        "c_tokens_s": regime.c * engine.tokens,
        "longest_chain_tokens": engine.longest_chain,
        "chain_s": chain_s,
        "throughput_s": throughput_s,
        "limit_s": limit,
        "time_over_limit": engine.now / limit,
        "tight_limit_s": tight,
        "time_over_tight_limit": engine.now / tight,
        "floor_s": regime.t0 * max(pooled_lengths) + regime.c * sum(pooled_lengths),
        # the prompt whose chain is the longest: did it spend its whole budget?
        "chain_prompt_pool": sizes[int(np.argmax(engine.prompt_chain))],
        "unresolved": sum(not p.resolved for p in result.pools) / prompts,
        "peak_running": engine.peak_running,
        "rounds": result.rounds,
    }
