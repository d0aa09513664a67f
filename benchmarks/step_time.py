"""Step time of Reinforce-Ada's sampling, rounds vs streaming, on an emulated continuous-batching engine.

    python benchmarks/step_time.py                      # both regimes, 512 prompts, 3 seeds, paper-fit mix
    python benchmarks/step_time.py --quick              # seconds: 48 prompts, 1 seed (what the test runs)

No model and no real time: a discrete-event engine with a virtual clock (`EmulatedEngine`) implements the engine's
`Backend` protocol (submit / wait / abort), and every method runs through `trl_ada.core.engine.sample`, the scheduler
the trainer uses. Deterministic given a seed.

The engine (the back-of-envelope event model of the project's cost notes, cost.md; not a measurement of vLLM):
- continuous batching: every running sequence gets one token per decode step, and a step with b running sequences
  takes t(b) = t0 + c * b seconds. Between two events (a finish, a submit, an abort) b is constant, so the clock jumps
  from event to event analytically. Optionally at most `max_running` sequences run; the rest wait in a FIFO queue.
- prefill is ignored (0 s): a sequence starts decoding in the step after it is submitted (or admitted from the queue).
- a finished completion reports its length in tokens; an aborted one the tokens it had decoded so far (0 if queued).
The time of a step is therefore exactly t0 * S + c * T, with S the decode steps run and T the tokens decoded (aborted
ones included); the report splits it that way.

Completions: prompt i has a pass rate p_i from a mix (the Beta(0.337, 0.298) fitted to the paper's trained 1.5B model
by default, or uniform); draw k of prompt i (k-th in request order) is right with probability p_i, and its length is
lognormal with median 500 tokens when right and 800 when wrong (cost.md) and log-sd `sigma` (default 0.55, our
assumption, chosen so GRPO n=4 generates cost.md's 1.5M tokens for 512 prompts), capped at 2048 tokens
(max_completion_length in the paper's recipe); a capped completion is truncated and counts as wrong. The (reward,
length) of every (prompt, k) is fixed per seed and shared by all methods (common random numbers), so every method sees
the same prompts and the same request-order stream per prompt.

Methods: GRPO n=4 and n=16 (one round); Ada-balanced (rule 2 right + 2 wrong, group 4, budget 8 x 4 = 32) with fixed
rounds of 8, posterior-sized rounds, streaming with k draws *running* per prompt (`max_in_flight`, default
samples_per_round = 8, and 16; finished draws held behind an unfinished earlier one do not count), streaming with
posterior sizing (each prompt keeps min(8, max(1, ceil(E[remaining draws]))) running, E under the Beta(1, 1) prior
from every outcome it has seen: `trl_ada.core.engine.expected_remaining_draws`); Ada-positive (1 right, group 4, 8 x 4)
rounds and streaming; and each rule's sequential limit (streaming with max_in_flight = 1: one draw at a time, stop as
soon as the rule holds), whose pools are the floor on samples. Extras: streaming with k = 2, 4, 32 running; posterior
sizing with a budget of 16 x 2 (rounds: 2 posterior-sized rounds; streaming: the same expected-need window, capped
at 16 instead of 8, since the cap is samples_per_round); Ada-positive streaming with k = 4. With common random
numbers, request-order streaming's pools equal the sequential limit's exactly; what streaming spends beyond them is
its aborted draws (running when their prompt stopped) and dropped ones (finished beyond the pool).

Physical limit of a run, a lower bound on that run's time given the work it did:
    limit = max(T / peak throughput, longest chain * t(1)),
- T: tokens the run decoded (aborted ones included); peak throughput: max_running / t(max_running) tokens per
  second, or 1 / c without a cap (the supremum of b / t(b)). A step decoding b tokens takes t(b) >= b / peak.
- longest chain: the largest, over prompts, of the tokens along a chain c_1, ..., c_m of that prompt's completions in
  which each c_{j+1} was submitted after c_j had finished (the scheduler could not know it needed c_{j+1} before:
  under rounds, c_{j+1} belongs to a later round; under streaming, to a later top-up). Decoding L tokens takes L steps
  of at least t(1) = t0 + c each and c_{j+1} starts after c_j ends, so the run lasts at least (sum of L_j) * t(1).
  Completions of other prompts are not in the chain, so time a prompt spends waiting at a round barrier for other
  prompts shows up as time above the limit. Only finished completions count (aborted draws end no chain).
Both terms are true lower bounds of the run's time, hence so is their max. Since time = t0 * S + c * T exactly and
S >= chain (a chain's completions decode in disjoint successive steps), t0 * chain + c * T is a tighter true bound,
also reported; time / (t0 * chain + c * T) = 1 means no decode step was spent off the longest chain. Under streaming
with no cap on running sequences it is always 1: a prompt's draws are submitted in the step where one of its own
completions finished and start at once, so the prompt that finishes last has a chain of exactly S steps. The max()
form then falls short of the time by whichever of t0 * S and c * T is smaller: time / max(...) is about
1 + smaller / larger, so it is within 1.15x only when one term is under about 15% of the other.

"Floor" rows (per rule) bound any scheduler that returns the same pools, with no chain at all: it must decode every
pooled token and run at least as many steps as the longest pooled completion: t0 * (longest pooled completion)
+ c * (pooled tokens).
"""

from __future__ import annotations

import argparse
import heapq
import json
import pathlib
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from trl_ada.core.engine import Finished, SamplingResult, Schedule, sample

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from machine import describe, machine_info

RESULTS = pathlib.Path(__file__).parent / "results"
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
    most sequences running at once and, per completion, the longest chain ending in it (see the module docstring)."""

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


# --------------------------------------------------------------------------------------------------------------------
# Summary, targets, tables
# --------------------------------------------------------------------------------------------------------------------


def summarise(per_seed: dict[str, list[dict[str, Any]]], method_list: list[Method]) -> list[dict[str, Any]]:
    """Mean over seeds of every metric, plus ratios computed per seed, then averaged: finished completions and tokens
    to the rule's sequential limit (its pools are the floor on samples), seconds to GRPO n=4 and n=16."""
    rows = []
    for method in method_list:
        runs = per_seed[method.key]
        row: dict[str, Any] = {"key": method.key, "method": method.name, "rule": method.rule, "extra": method.extra}
        for name in runs[0]:
            row[name] = float(np.mean([r[name] for r in runs]))
        ratios: dict[str, list[float]] = {"x_seq_samples": [], "x_seq_tokens": [], "x_grpo4": [], "x_grpo16": []}
        for s, r in enumerate(runs):
            if method.rule:
                seq = per_seed[SEQUENTIAL[method.rule]][s]
                ratios["x_seq_samples"].append(r["samples_per_prompt"] / seq["pool_per_prompt"])
                ratios["x_seq_tokens"].append(r["tokens"] / seq["tokens"])
            ratios["x_grpo4"].append(r["seconds"] / per_seed["grpo4"][s]["seconds"])
            ratios["x_grpo16"].append(r["seconds"] / per_seed["grpo16"][s]["seconds"])
        for name, values in ratios.items():
            row[name] = float(np.mean(values)) if values else None
        row["seconds_per_seed"] = [round(r["seconds"], 2) for r in runs]
        rows.append(row)
    return rows


STREAMING = ("bal-stream", "bal-stream-16", "bal-stream-post", "pos-stream")  # the main list's streaming rows
STREAM_VS_ROUNDS = [  # (streaming, its rounds counterpart)
    ("bal-stream", "bal-rounds"),
    ("bal-stream-16", "bal-rounds"),
    ("bal-stream-post", "bal-rounds-post"),
    ("pos-stream", "pos-rounds"),
]


def targets(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The step-time targets, each with its numbers (seed means unless said otherwise): met or not."""
    out = []

    def add(name: str, met: bool, detail: str) -> None:
        out.append({"target": name, "met": bool(met), "detail": detail})

    rows = {regime: {r["key"]: r for r in res["summary"]} for regime, res in results.items()}
    per_seed = {regime: res["per_seed"] for regime, res in results.items()}

    def seconds(regime: str, key: str) -> float:
        return rows[regime][key]["seconds"]

    if "latency" in rows:
        cuts = {
            k: 1 - seconds("latency", k) / seconds("latency", "bal-rounds") for k in ("bal-stream", "bal-stream-16")
        }
        cut_post = 1 - seconds("latency", "bal-stream-post") / seconds("latency", "bal-rounds-post")
        add(
            "latency-bound: streaming (default k=8) cuts Seq-balance's generation time by >= 25% against rounds 8x4",
            cuts["bal-stream"] >= 0.25,
            f"{seconds('latency', 'bal-stream'):.1f} s vs {seconds('latency', 'bal-rounds'):.1f} s: "
            f"{cuts['bal-stream']:.1%} cut (k=16: {cuts['bal-stream-16']:.1%}; posterior streaming vs posterior "
            f"rounds: {cut_post:.1%})",
        )
    for regime in rows:
        ratios = {
            (stream, base): [
                a["seconds"] / b["seconds"]
                for a, b in zip(per_seed[regime][stream], per_seed[regime][base], strict=True)
            ]
            for stream, base in STREAM_VS_ROUNDS
        }
        detail = "; ".join(
            f"{stream} / {base}: {seconds(regime, stream) / seconds(regime, base):.3f} (worst seed {max(v):.3f})"
            for (stream, base), v in ratios.items()
        )
        worst = max(max(v) for v in ratios.values())
        add(f"{regime}: streaming never slower than rounds (every row, every seed)", worst <= 1, detail)
    for regime in rows:
        for key in STREAMING:
            row = rows[regime][key]
            add(
                f"{regime}: {row['method']} within 1.15x of its physical limit",
                row["time_over_limit"] <= 1.15,
                f"{row['seconds']:.1f} s / {row['limit_s']:.1f} s = {row['time_over_limit']:.2f}x; limit = max("
                f"throughput {row['throughput_s']:.1f} s, chain {row['chain_s']:.1f} s); time = t0*S "
                f"{row['t0_steps_s']:.1f} s + c*T {row['c_tokens_s']:.1f} s (smaller / larger "
                f"{min(row['t0_steps_s'], row['c_tokens_s']) / max(row['t0_steps_s'], row['c_tokens_s']):.2f}); "
                f"vs t0*chain + c*T: {row['time_over_tight_limit']:.2f}x",
            )
    for regime in rows:
        for key in STREAMING:
            row = rows[regime][key]
            add(
                f"{regime}: {row['method']} samples within 1.05x of the sequential limit",
                row["x_seq_samples"] <= 1.05,
                f"{row['samples_per_prompt']:.2f} finished completions per prompt = {row['x_seq_samples']:.3f}x; "
                f"{row['started_per_prompt']:.2f} started (aborted included); tokens {row['x_seq_tokens']:.3f}x",
            )
    for regime in rows:
        for key in STREAMING:
            row = rows[regime][key]
            add(
                f"{regime}: {row['method']} aborted tokens under 10% of generated",
                row["aborted_share"] < 0.10,
                f"{row['aborted_share']:.1%} of {row['tokens'] / 1e6:.2f}M tokens: "
                f"{row['abort_running_share']:.1%} in {row['aborted_per_prompt']:.2f} draws per prompt aborted while "
                f"running, {row['dropped_share']:.1%} in {row['dropped_per_prompt']:.2f} finished beyond the pool "
                "(dropped)",
            )
    return out


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| method | samples/prompt | x seq. limit | tokens (x seq. limit) | aborted = running + dropped | seconds | "
        "x GRPO n=4 | x GRPO n=16 | limit s = max(throughput, chain) | time / limit | t0*S + c*T s | "
        "time / (t0*chain + c*T) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        seq = "-" if r["x_seq_samples"] is None else f"{r['x_seq_samples']:.3f}"
        tokens = f"{r['tokens'] / 1e6:.2f}M" + ("" if r["x_seq_tokens"] is None else f" ({r['x_seq_tokens']:.3f})")
        lines.append(
            f"| {r['method']} | {r['samples_per_prompt']:.2f} | {seq} | {tokens} | {r['aborted_share']:.1%} = "
            f"{r['abort_running_share']:.1%} + {r['dropped_share']:.1%} | "
            f"{r['seconds']:.1f} | {r['x_grpo4']:.2f} | {r['x_grpo16']:.2f} | "
            f"{r['limit_s']:.1f} = max({r['throughput_s']:.1f}, {r['chain_s']:.1f}) | {r['time_over_limit']:.2f} | "
            f"{r['t0_steps_s']:.1f} + {r['c_tokens_s']:.1f} | {r['time_over_tight_limit']:.2f} |"
        )
    return "\n".join(lines)


def floor_line(rows: list[dict[str, Any]]) -> str:
    by_key = {r["key"]: r for r in rows}
    parts = []
    for rule, key in SEQUENTIAL.items():
        r = by_key[key]
        parts.append(
            f"{rule}: {r['floor_s']:.1f} s (longest pooled completion {r['longest_pooled']:.0f} tokens, "
            f"{r['pooled_tokens'] / 1e6:.2f}M pooled tokens)"
        )
    text = "Floor for the sequential limit's pools (any scheduler, see the docstring): " + "; ".join(parts) + "."
    return text + (
        f" Prompts that spend their whole budget unresolved: {by_key['bal-seq']['unresolved']:.1%} (balanced), "
        f"{by_key['pos-seq']['unresolved']:.1%} (positive). Pool size of the prompt with the longest chain, mean over "
        f"seeds: rounds 8x4 {by_key['bal-rounds']['chain_prompt_pool']:.1f}, streaming k=8 "
        f"{by_key['bal-stream']['chain_prompt_pool']:.1f}, k=16 {by_key['bal-stream-16']['chain_prompt_pool']:.1f}, "
        f"posterior {by_key['bal-stream-post']['chain_prompt_pool']:.1f} (balanced; budget 32)."
    )


def targets_table(checks: list[dict[str, Any]]) -> str:
    lines = ["| target | met | numbers |", "|---|---|---|"]
    lines += [f"| {c['target']} | {'met' if c['met'] else '**not met**'} | {c['detail']} |" for c in checks]
    return "\n".join(lines)


def parameter_table(args: argparse.Namespace, lengths: Lengths, regimes: list[Regime]) -> str:
    rows = [
        ("decode step time", "t(b) = t0 + c*b, b = running sequences", "cost.md's event model (ours, not measured)"),
        ("t0", f"{regimes[0].t0 * 1e3:g} ms", "cost.md (assumption)"),
        *[(f"c, {r.name} regime", f"{r.c:g} s per running sequence", "cost.md (assumption)") for r in regimes],
        ("max running sequences", str(args.max_running or "no cap"), "cost.md's model has none (assumption)"),
        ("prefill", "ignored (0 s)", "assumption"),
        ("prompts per engine", str(args.prompts), "the paper's 512 prompts per step on one engine"),
        ("pass-rate mix", MIXES[args.mix], "fit to the paper's trained 1.5B model (sampler-efficiency section)"),
        ("length medians", f"{lengths.right:g} right / {lengths.wrong:g} wrong tokens", "cost.md (assumption)"),
        ("length log-sd", f"{lengths.sigma:g}", "assumption, so GRPO n=4 makes cost.md's ~1.5M tokens"),
        ("length cap", f"{lengths.cap} tokens, truncated = wrong", "the paper's recipe (response 2048)"),
        ("group / budget", "4 / 8 x 4 = 32", "the authors' defaults (algorithm.md)"),
        ("seeds", ", ".join(map(str, range(args.seeds))), "same prompts and completions for every method of a seed"),
    ]
    lines = ["| parameter | value | source |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


LEGEND = (
    "samples/prompt: completions that finished (pool + dropped; aborted draws not counted); x seq. limit: over the "
    "sequential limit's pool size (request-order streaming's pools equal it exactly); tokens: every token decoded, "
    "aborted ones included; aborted: share of tokens in draws aborted while running plus draws that finished beyond "
    "the pool (dropped); seconds: virtual, mean of the "
    "seeds; S: decode steps, T: tokens."
)


def regime_text(name: str, regime: Regime, rows: list[dict[str, Any]]) -> str:
    main_rows = [r for r in rows if not r["extra"]]
    extra_rows = [r for r in rows if r["extra"]]
    text = f"### {name} regime (c = {regime.c:g})\n\n{markdown_table(main_rows)}\n\n{LEGEND}\n\n{floor_line(rows)}"
    if extra_rows:
        text += f"\n\nOther settings (measured, beyond the main list):\n\n{markdown_table(extra_rows)}"
    return text


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regime", choices=("throughput", "latency", "both"), default="both")
    parser.add_argument("--prompts", type=int, help="prompts per step on the engine (default 512; --quick 48)")
    parser.add_argument("--seeds", type=int, help="number of seeds, 0..n-1 (default 3; --quick 1)")
    parser.add_argument("--mix", choices=sorted(MIXES), default="paper", help="pass-rate mix (default: paper fit)")
    parser.add_argument("--sigma", type=float, default=Lengths.sigma, help="log-sd of completion lengths")
    parser.add_argument("--max-running", type=int, help="cap on running sequences (default: none, as cost.md)")
    parser.add_argument(
        "--in-flight",
        type=int,
        nargs="*",
        help="more max_in_flight values to measure for Ada-balanced streaming (default: 2 4 32)",
    )
    parser.add_argument("--quick", action="store_true", help="48 prompts, 1 seed, no extra settings: a few seconds")
    parser.add_argument("--output-dir", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--name", help="result file stem (default step_time[_quick])")
    args = parser.parse_args(argv)
    args.prompts = args.prompts or (48 if args.quick else 512)
    args.seeds = args.seeds or (1 if args.quick else 3)
    if args.in_flight is None:
        args.in_flight = [2, 4, 32]
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    lengths = Lengths(sigma=args.sigma)
    names = ["throughput", "latency"] if args.regime == "both" else [args.regime]
    regimes = [Regime(n, REGIMES[n].c, REGIMES[n].t0, args.max_running) for n in names]
    method_list = methods(args.in_flight, extras=not args.quick)
    machine = machine_info()
    print(f"machine: {describe(machine)} (every time below is virtual; this is for the run's own)", flush=True)
    print(
        f"{args.prompts} prompts, {args.seeds} seed(s), mix {MIXES[args.mix]}, lengths {asdict(lengths)}, "
        f"regimes {[asdict(r) for r in regimes]}",
        flush=True,
    )
    start = time.perf_counter()
    workloads = [Workload.draw(args.mix, args.prompts, seed, lengths) for seed in range(args.seeds)]
    results: dict[str, dict[str, Any]] = {}
    for regime in regimes:
        per_seed: dict[str, list[dict[str, Any]]] = {m.key: [] for m in method_list}
        for workload in workloads:
            for method in method_list:
                per_seed[method.key].append(run(method, workload, regime))
        summary = summarise(per_seed, method_list)
        results[regime.name] = {"regime": asdict(regime), "per_seed": per_seed, "summary": summary}
        print(f"\n{regime_text(regime.name, regime, summary)}", flush=True)
    checks = targets(results)
    elapsed = time.perf_counter() - start
    print(f"\n### Targets\n\n{targets_table(checks)}\n\n({elapsed:.0f} s)", flush=True)

    name = args.name or ("step_time_quick" if args.quick else "step_time")
    command = " ".join(["python benchmarks/step_time.py", *(argv if argv is not None else sys.argv[1:])])
    report = {
        "command": command,
        "machine": machine,
        "elapsed_seconds": round(elapsed, 1),
        "settings": {
            "prompts": args.prompts,
            "seeds": list(range(args.seeds)),
            "mix": MIXES[args.mix],
            "lengths": asdict(lengths),
            "prefill_seconds": 0.0,
        },
        "regimes": {k: {"regime": v["regime"], "summary": v["summary"]} for k, v in results.items()},
        "targets": checks,
        "per_seed": {k: v["per_seed"] for k, v in results.items()},
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    parts = [f"`{command}`\n\n{describe(machine)}; {elapsed:.0f} s.", parameter_table(args, lengths, regimes)]
    parts += [regime_text(r.name, r, results[r.name]["summary"]) for r in regimes]
    parts.append(f"### Targets\n\n{targets_table(checks)}")
    (args.output_dir / f"{name}.md").write_text("\n\n".join(parts) + "\n")
    return report


if __name__ == "__main__":
    main()
