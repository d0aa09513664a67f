"""Successive-elimination sampling (Reinforce-Ada-Seq), free of any model.

One training step, for a batch of prompts:

    active <- every prompt
    for round in 1..max_rounds:
        draw a round of completions for each active prompt (`samples_per_round`, or sized from the prompt's counts
        so far with `round_sizing="posterior"`), score them
        retire a prompt once its exit rule holds (and it has a full group) or its budget is spent
        stop when no prompt is active (on any process)
    downsample each prompt's pool to `group_size` completions, half positive where it can

Reinforce-Ada-Est is the same loop with a single round whose per-prompt sizes the caller passes in
(`first_round_sizes`, from `allocation.allocate` over a pass-rate memory) and no exit rule.

Pilot (pilot-then-commit): every prompt first draws a small pilot; a prompt whose pilot completions all agree stops
there when the caller's `Pilot.stop` (a prediction from earlier steps) says the rest of its group would very likely
agree too. It costs the pilot instead of a group, and gives no gradient, as an all-equal group would not.

Refill (DAPO's dynamic sampling, generalised): a prompt whose pool ends with no signal (every scored reward equal,
so every advantage is zero) hands its slot in the batch to a fresh prompt from the caller (`refill`), which is
sampled with a budget of its own while the others go on; the batch keeps its size and the slot trains on whichever
prompt it ends with.

Completions are opaque handles: the caller's `generate` returns them and `score` turns them into rewards, so the
same loop runs inside the trainer (handles are row indices into TRL's generation output) and in simulations
(handles are Bernoulli draws).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .hints import budget_hint

STRATEGIES = ("balanced", "positive", "uniform")  # exit rules; "estimate" (Est) is one round sized by the caller
ROUND_SIZINGS = ("fixed", "posterior")
DOWNSAMPLES = ("balanced", "uniform")


@dataclass(frozen=True)
class ExitRule:
    """A prompt is resolved once its pool holds at least `min_positives` positives and `min_negatives` negatives."""

    min_positives: int
    min_negatives: int

    def __post_init__(self) -> None:
        if self.min_positives < 0 or self.min_negatives < 0:
            raise ValueError(f"Exit counts must be >= 0, got {self.min_positives=} and {self.min_negatives=}.")

    def holds(self, num_positive: int, num_negative: int) -> bool:
        return num_positive >= self.min_positives and num_negative >= self.min_negatives

    @classmethod
    def for_strategy(
        cls,
        strategy: str,
        group_size: int,
        min_positives: int | None = None,
        min_negatives: int | None = None,
    ) -> ExitRule:
        """The paper's rules: `balanced` waits for a half-positive, half-negative group; `positive` for one
        correct answer; `uniform` (plain GRPO) and `estimate` (Reinforce-Ada-Est, one round sized in advance) accept
        whatever one round gives. Explicit counts override."""
        defaults = {
            "balanced": (group_size // 2, group_size - group_size // 2),
            "positive": (1, 0),
            "uniform": (0, 0),
            "estimate": (0, 0),
        }
        if strategy not in defaults:
            raise ValueError(f"Unknown sampling strategy {strategy!r}; expected one of {(*STRATEGIES, 'estimate')}.")
        default_pos, default_neg = defaults[strategy]
        return cls(
            default_pos if min_positives is None else min_positives,
            default_neg if min_negatives is None else min_negatives,
        )


@dataclass(frozen=True)
class Schedule:
    """How many completions to draw per round, for how many rounds, and when a prompt is done.

    With `round_sizing="fixed"` every round draws `samples_per_round` completions per active prompt. With
    `"posterior"` each prompt's next round is sized from its counts so far by `posterior_round_size`, and
    `samples_per_round` only sets the per-prompt budget `samples_per_round * max_rounds`.
    """

    group_size: int  # completions per prompt handed to the loss (GRPO's num_generations)
    samples_per_round: int
    max_rounds: int
    exit_rule: ExitRule
    positive_threshold: float = 0.5  # a completion is positive when its reward is strictly greater
    round_sizing: str = "fixed"
    prior: tuple[float, float] = (1.0, 1.0)  # Beta(alpha, beta) prior on a prompt's pass rate (posterior sizing)

    def __post_init__(self) -> None:
        if self.group_size < 1 or self.samples_per_round < 1 or self.max_rounds < 1:
            raise ValueError(
                f"group_size, samples_per_round and max_rounds must be >= 1, got {self.group_size}, "
                f"{self.samples_per_round} and {self.max_rounds}."
            )
        if self.budget < self.group_size:
            raise ValueError(
                f"The per-prompt budget samples_per_round * max_rounds = {self.budget} is smaller than the group size "
                f"{self.group_size}: a prompt could never fill its group. "
                + budget_hint(self.samples_per_round, self.max_rounds, self.group_size, "the group size")
            )
        if self.round_sizing not in ROUND_SIZINGS:
            raise ValueError(f"Unknown round_sizing {self.round_sizing!r}; expected one of {ROUND_SIZINGS}.")
        if len(self.prior) != 2 or not all(x > 0 for x in self.prior):  # also rejects NaN
            raise ValueError(f"The Beta prior needs two parameters > 0, got {self.prior}.")

    def round_size(self, pool: Pool, round_index: int) -> int:
        """Completions to draw for an active prompt whose pool is `pool`, in round `round_index` (0-based)."""
        if self.round_sizing == "fixed":
            return self.samples_per_round
        return posterior_round_size(
            pool.num_positive, pool.num_negative, len(pool), self.max_rounds - round_index, self
        )

    @property
    def budget(self) -> int:
        """The most completions any prompt may receive in one step."""
        return self.samples_per_round * self.max_rounds

    @classmethod
    def from_strategy(
        cls,
        strategy: str,
        group_size: int,
        samples_per_round: int = 8,
        max_rounds: int = 4,
        positive_threshold: float = 0.5,
        min_positives: int | None = None,
        min_negatives: int | None = None,
        round_sizing: str = "fixed",
        prior: tuple[float, float] = (1.0, 1.0),
    ) -> Schedule:
        """`uniform` is plain GRPO: a single round of exactly `group_size` completions. `estimate` is a single round
        whose per-prompt sizes the caller passes to `sample_adaptively` (`first_round_sizes`); `samples_per_round`
        is then the most any prompt may get."""
        rule = ExitRule.for_strategy(strategy, group_size, min_positives, min_negatives)
        if strategy == "uniform":
            samples_per_round, max_rounds, round_sizing = group_size, 1, "fixed"
        elif strategy == "estimate":
            max_rounds, round_sizing = 1, "fixed"
        return cls(group_size, samples_per_round, max_rounds, rule, positive_threshold, round_sizing, prior)


def posterior_round_size(
    num_positive: int, num_negative: int, num_drawn: int, rounds_left: int, schedule: Schedule
) -> int:
    """Size of an active prompt's next round that minimises its expected total samples, given its counts so far.

    The prompt's pass rate has the posterior Beta(alpha + num_positive, beta + num_negative) under the schedule's
    prior. The size is the first decision of the policy that, among all ways to split the remaining budget into at
    most `rounds_left` rounds, draws the fewest completions in expectation (exact dynamic programme over the counts),
    subject to resolving whenever the budget allows it: the last round always takes the whole remaining budget,
    because a prompt that has not met its exit rule keeps going, as in the sequential limit. `num_drawn` counts
    unscorable completions too; future completions are assumed scorable.
    """
    if rounds_left < 1:
        raise ValueError(f"rounds_left must be >= 1, got {rounds_left}.")
    size = _plan(
        schedule.exit_rule,
        schedule.group_size,
        schedule.budget,
        tuple(map(float, schedule.prior)),
        num_positive,
        num_negative,
        num_drawn,
        rounds_left,
    )[1]
    if size == 0:
        raise ValueError(
            f"A prompt with {num_positive} positives, {num_negative} negatives and {num_drawn} samples is finished "
            f"under {schedule.exit_rule} with budget {schedule.budget}: it has no next round."
        )
    return size


@functools.lru_cache(maxsize=1 << 20)
def _plan(
    rule: ExitRule,
    group_size: int,
    budget: int,
    prior: tuple[float, float],
    pos: int,
    neg: int,
    drawn: int,
    rounds_left: int,
) -> tuple[float, int]:
    """(expected further samples, next round size) of the optimal policy from this state. Memoised, so each state is
    solved once per process, paid by the first prompt of the first step: under 0.1 s for a budget of 32 and a few
    seconds for 128."""
    remaining = budget - drawn
    if remaining <= 0 or (drawn >= group_size and rule.holds(pos, neg)):
        return 0.0, 0
    if rounds_left == 1:
        return float(remaining), remaining
    a, b = prior[0] + pos, prior[1] + neg
    best_cost, best_size = math.inf, remaining
    pmf = [1.0]  # Beta-binomial law of the positives among the next k draws, built up one draw at a time
    for k in range(1, remaining + 1):
        # Polya urn: after j positives in k - 1 draws, the next draw is positive w.p. (a + j) / (a + b + k - 1).
        total = a + b + k - 1
        pmf = [
            (pmf[j] * (b + k - 1 - j) if j < k else 0.0) + (pmf[j - 1] * (a + j - 1) if j > 0 else 0.0)
            for j in range(k + 1)
        ]
        pmf = [q / total for q in pmf]
        cost = k + sum(
            q * _plan(rule, group_size, budget, prior, pos + j, neg + k - j, drawn + k, rounds_left - 1)[0]
            for j, q in enumerate(pmf)
        )
        if cost < best_cost - 1e-12:  # ties go to the smaller round
            best_cost, best_size = cost, k
    return best_cost, best_size


def expected_remaining_draws(num_positive: int, num_negative: int, num_drawn: int, schedule: Schedule) -> float:
    """Expected further draws until a prompt stops (its exit rule holds with a full group, or its budget is spent),
    drawing one at a time, given the outcomes seen so far, under the schedule's Beta prior on its pass rate.

    Streaming with `round_sizing="posterior"` keeps about this many draws in flight for a prompt: many for one whose
    outcomes so far all agree (it will likely spend its budget, so requests sent early are not wasted), few for one
    close to its rule (requests beyond its need would be aborted)."""
    return _expected_remaining(
        schedule.exit_rule,
        schedule.group_size,
        schedule.budget,
        tuple(map(float, schedule.prior)),
        num_positive,
        num_negative,
        num_drawn,
    )


@functools.lru_cache(maxsize=1 << 16)
def _expected_remaining(
    rule: ExitRule, group_size: int, budget: int, prior: tuple[float, float], pos: int, neg: int, drawn: int
) -> float:
    # E[N] = sum over k >= 1 of P(N >= k), and N >= k exactly when the rule still fails after k - 1 more draws (the
    # counts only grow, so a rule that held earlier still holds). Positives among m draws: Beta-binomial, built up
    # one draw at a time as in `_plan`.
    a, b = prior[0] + pos, prior[1] + neg
    expected, pmf = 0.0, [1.0]
    for m in range(budget - drawn):
        full = drawn + m >= group_size
        expected += sum(q for j, q in enumerate(pmf) if not (full and rule.holds(pos + j, neg + m - j)))
        total = a + b + m
        pmf = [
            ((pmf[j] * (b + m - j) if j <= m else 0.0) + (pmf[j - 1] * (a + j - 1) if j > 0 else 0.0)) / total
            for j in range(m + 2)
        ]
    return expected


@dataclass
class Pool:
    """Every completion drawn for one prompt during a step, with its reward (NaN: unscorable) and round."""

    positive_threshold: float
    samples: list[Any] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    resolved: bool = False  # the exit rule held when sampling stopped
    _counted: int = field(default=0, init=False, repr=False, compare=False)
    _positives: int = field(default=0, init=False, repr=False, compare=False)
    _negatives: int = field(default=0, init=False, repr=False, compare=False)

    def add(self, samples: Sequence[Any], rewards: Sequence[float], round_index: int) -> None:
        if len(samples) != len(rewards):
            raise ValueError(f"Got {len(rewards)} rewards for {len(samples)} completions.")
        self.samples.extend(samples)
        self.rewards.extend(float(r) for r in rewards)
        self.rounds.extend([round_index] * len(samples))

    def __len__(self) -> int:
        return len(self.samples)

    def is_positive(self, index: int) -> bool:
        return self.rewards[index] > self.positive_threshold  # False for NaN

    def is_negative(self, index: int) -> bool:
        return self.rewards[index] <= self.positive_threshold  # False for NaN

    @property
    def num_positive(self) -> int:
        return self._counts()[0]

    @property
    def num_negative(self) -> int:
        return self._counts()[1]

    def _counts(self) -> tuple[int, int]:
        # Counted incrementally (pools only grow), so the exit check stays O(round size) per prompt and round.
        for i in range(self._counted, len(self)):
            self._positives += self.is_positive(i)
            self._negatives += self.is_negative(i)
        self._counted = len(self)
        return self._positives, self._negatives

    @property
    def scored_rewards(self) -> list[float]:
        return [r for r in self.rewards if not math.isnan(r)]

    @property
    def pass_rate(self) -> float:
        """Share of scorable completions that are positive; NaN when nothing could be scored."""
        scored = len(self.scored_rewards)
        return self.num_positive / scored if scored else math.nan

    @property
    def mean(self) -> float:
        scored = self.scored_rewards
        return sum(scored) / len(scored) if scored else math.nan

    @property
    def std(self) -> float:
        """Unbiased standard deviation of the scorable rewards (NaN below two), as TRL's `nanstd`."""
        scored = self.scored_rewards
        if len(scored) < 2:
            return math.nan
        mean = sum(scored) / len(scored)
        return math.sqrt(sum((r - mean) ** 2 for r in scored) / (len(scored) - 1))

    def first_round_has_zero_std(self) -> bool:
        """Whether the first round alone (what fixed-n sampling sees) had all-equal rewards."""
        first = [r for r, k in zip(self.rewards, self.rounds, strict=True) if k == 0 and not math.isnan(r)]
        return len(set(first)) <= 1


@dataclass(frozen=True)
class Request:
    """Draw `num_samples` completions of prompt number `prompt_index`."""

    prompt_index: int
    num_samples: int


GenerateFn = Callable[[list[Request]], list[Any]]
ScoreFn = Callable[[list[Request], list[Any]], Sequence[float]]
# refill(prompt_index) -> the index of a fresh prompt to take over that prompt's slot (the next index: the caller has
# just appended it), or None for no more refills. Called once per pool that ends with no signal.
RefillFn = Callable[[int], "int | None"]
# signal(pool) -> whether refill keeps the pool (default `has_signal`: any two total rewards differ).
SignalFn = Callable[["Pool"], bool]


def has_signal(pool: Pool) -> bool:
    """Whether any two scored rewards of the pool differ. Without that, every advantage of the prompt is zero."""
    return len(set(pool.scored_rewards)) > 1


@dataclass(frozen=True)
class Pilot:
    """Pilot-then-commit. Every prompt first draws `size` completions (in rounds, a round of its own; streaming, at
    most `size` in flight until they have finished). A prompt whose pilot has no signal then stops when
    `stop(prompt_index, pool)` holds, else it goes on under the schedule, the pilot counting towards its group and
    budget. `stop` sees only the pilot's completions, so the decision never depends on a completion beyond them."""

    size: int
    stop: Callable[[int, Pool], bool]

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"A pilot draws at least one completion, got size={self.size}.")

    def stops(self, index: int, pool: Pool) -> bool:
        """Whether prompt `index`, whose pool is its finished pilot, stops here."""
        return not has_signal(pool) and self.stop(index, pool)


ROLLOUT_SCHEDULES = ("rounds", "streaming")
POOL_ORDERS = ("request", "finish_order_biased")


@dataclass(frozen=True)
class Draw:
    """One completion requested for prompt `prompt_index`; `ticket` numbers the step's draws in request order."""

    prompt_index: int
    ticket: int


@dataclass(frozen=True)
class Finished:
    """A completion the backend has finished: its draw's ticket, the caller's handle, and the tokens it generated."""

    ticket: int
    handle: Any
    num_tokens: int = 0


class Backend(Protocol):
    """A generation engine seen as events: draws go in, finished completions come out, in-flight draws can be
    aborted. The trainer's backends (`trl_ada.backends`) and the step-time benchmark's emulated engine implement it."""

    def submit(self, draws: Sequence[Draw]) -> None:
        """Start generating one completion per draw (`draws` may be empty)."""

    def wait(self) -> list[Finished]:
        """Block until at least one submitted draw that was not aborted has finished; return every finished draw not
        returned before. Return `[]` only when nothing is in flight."""

    def abort(self, tickets: Sequence[int]) -> int:
        """Stop these in-flight draws (they must never be returned by `wait`); return the tokens they had generated,
        as far as the backend knows (0 when it cannot tell)."""


class RoundsBackend:
    """A blocking `generate(requests) -> handles` call as a `Backend`: `wait` generates everything submitted since the
    last call, in one call (grouped into one `Request` per run of draws of the same prompt), and returns it all.

    It calls `generate` on every `wait`, even with nothing submitted: under rounds, every process must make the same
    number of generation calls (vLLM server mode and ZeRO-3 generation are collective). `num_tokens(handle)`, when
    given, reports each completion's generated tokens."""

    def __init__(self, generate: GenerateFn, num_tokens: Callable[[Any], int] | None = None) -> None:
        self._generate = generate
        self._num_tokens = num_tokens
        self._pending: list[Draw] = []

    def submit(self, draws: Sequence[Draw]) -> None:
        self._pending.extend(draws)

    def wait(self) -> list[Finished]:
        draws, self._pending = self._pending, []
        requests: list[Request] = []
        for draw in draws:
            if requests and requests[-1].prompt_index == draw.prompt_index:
                requests[-1] = Request(draw.prompt_index, requests[-1].num_samples + 1)
            else:
                requests.append(Request(draw.prompt_index, 1))
        handles = self._generate(requests)
        if len(handles) != len(draws):
            raise RuntimeError(f"generate: requested {len(draws)} completions, got {len(handles)}.")
        count = self._num_tokens or (lambda handle: 0)
        return [Finished(d.ticket, h, count(h)) for d, h in zip(draws, handles, strict=True)]

    def abort(self, tickets: Sequence[int]) -> int:
        raise RuntimeError("A blocking generate call has nothing in flight to abort.")


@dataclass
class SamplingResult:
    pools: list[Pool]
    rounds: int  # rounds: generation calls made this step; streaming: the most submission waves of any prompt
    in_flight_max: int = 0  # the most draws in flight at once on this process
    generated_tokens: int = 0  # every token the backend reported generating, aborted and dropped draws included
    aborted_tokens: int = 0  # tokens of draws aborted in flight or dropped after their prompt stopped
    aborted: int = 0  # draws aborted in flight
    dropped: int = 0  # draws that finished after their prompt had stopped (beyond its pool): generated, not used
    slots: list[int] = field(default_factory=list)  # per prompt of the batch: the pool it ends with (refill)
    refills: int = 0  # pools replaced by a fresh prompt because they ended with no signal
    pilot_stopped: int = 0  # prompts (refills included) that stopped after their pilot

    @property
    def kept_pools(self) -> list[Pool]:
        """The pool each prompt slot of the batch ends with: what is downsampled and trained on."""
        return [self.pools[i] for i in self.slots]

    @property
    def replaced_pools(self) -> list[Pool]:
        """Pools sampled this step and then replaced by refill (their completions are generated, not trained on)."""
        kept = set(self.slots)
        return [pool for i, pool in enumerate(self.pools) if i not in kept]


def _is_finished(pool: Pool, schedule: Schedule) -> bool:
    if len(pool) >= schedule.budget:
        return True
    # A rule like (1 positive, 0 negatives) can hold before the group is full; keep sampling until it is.
    return len(pool) >= schedule.group_size and schedule.exit_rule.holds(pool.num_positive, pool.num_negative)


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


def _refilled(refill: RefillFn, index: int, num_pools: int) -> int | None:
    """Ask `refill` for a prompt to replace prompt `index`; check it is the next prompt index."""
    new = refill(index)
    if new is not None and new != num_pools:
        raise ValueError(f"refill must return the next prompt index, {num_pools}, or None; got {new!r}.")
    return new


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


def _mark_resolved(pools: list[Pool], schedule: Schedule) -> None:
    for pool in pools:
        pool.resolved = schedule.exit_rule.holds(pool.num_positive, pool.num_negative)


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


def downsample(pool: Pool, group_size: int, rng: random.Random, mode: str = "balanced") -> list[int]:
    """Pick `group_size` pool indices at random.

    `"balanced"`: `group_size // 2` positives and the rest negatives, topping up from the other kind when one is
    short. `"uniform"`: a uniform draw without replacement from the scorable completions, so the kept group is
    distributed as a fresh GRPO group (what an importance weight such as ODC's 1/p_hat assumes). In both modes
    unscorable completions are used only when nothing else is left.
    """
    if mode not in DOWNSAMPLES:
        raise ValueError(f"Unknown downsample mode {mode!r}; expected one of {DOWNSAMPLES}.")
    if len(pool) < group_size:
        # Only a pilot that stopped leaves a pool smaller than a group: its rewards all agree (no signal, so every
        # advantage is zero), and its completions fill the group in turn.
        if has_signal(pool) or not pool.samples:
            raise ValueError(f"A pool of {len(pool)} completions cannot fill a group of {group_size}.")
        return sorted(i % len(pool) for i in range(group_size))
    unscored = [i for i in range(len(pool)) if math.isnan(pool.rewards[i])]
    if mode == "uniform":
        scored = [i for i in range(len(pool)) if not math.isnan(pool.rewards[i])]
        num_scored = min(len(scored), group_size)
        return sorted(rng.sample(scored, num_scored) + rng.sample(unscored, group_size - num_scored))
    positives = [i for i in range(len(pool)) if pool.is_positive(i)]
    negatives = [i for i in range(len(pool)) if pool.is_negative(i)]
    num_pos = min(len(positives), group_size // 2)
    num_neg = min(len(negatives), group_size - num_pos)
    num_pos = min(len(positives), group_size - num_neg)
    chosen = (
        rng.sample(positives, num_pos)
        + rng.sample(negatives, num_neg)
        + rng.sample(unscored, group_size - num_pos - num_neg)
    )
    return sorted(chosen)


@dataclass
class Tally:
    """Additive per-step counts, summed across processes before they become metrics."""

    prompts: int = 0
    samples: int = 0
    max_samples: int = 0
    resolved: int = 0
    zero_std_first_round: int = 0
    pass_rate_sum: float = 0.0
    pass_rate_count: int = 0  # prompts with at least one scorable completion
    weight_sum: float = 0.0

    @classmethod
    def of(cls, pools: Sequence[Pool], weights: Sequence[float] | None = None) -> Tally:
        pass_rates = [p.pass_rate for p in pools if not math.isnan(p.pass_rate)]
        return cls(
            prompts=len(pools),
            samples=sum(len(p) for p in pools),
            max_samples=max((len(p) for p in pools), default=0),
            resolved=sum(p.resolved for p in pools),
            zero_std_first_round=sum(p.first_round_has_zero_std() for p in pools),
            pass_rate_sum=sum(pass_rates),
            pass_rate_count=len(pass_rates),
            weight_sum=float(sum(weights)) if weights is not None else float(len(pools)),
        )

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            prompts=self.prompts + other.prompts,
            samples=self.samples + other.samples,
            max_samples=max(self.max_samples, other.max_samples),
            resolved=self.resolved + other.resolved,
            zero_std_first_round=self.zero_std_first_round + other.zero_std_first_round,
            pass_rate_sum=self.pass_rate_sum + other.pass_rate_sum,
            pass_rate_count=self.pass_rate_count + other.pass_rate_count,
            weight_sum=self.weight_sum + other.weight_sum,
        )

    def metrics(self, rounds: int) -> dict[str, float]:
        prompts = max(self.prompts, 1)
        return {
            "ada/rounds": float(rounds),
            "ada/samples_per_prompt": self.samples / prompts,
            "ada/samples_per_prompt_max": float(self.max_samples),
            "ada/frac_resolved": self.resolved / prompts,
            "ada/frac_zero_std_first_round": self.zero_std_first_round / prompts,
            "ada/pool_pass_rate": self.pass_rate_sum / self.pass_rate_count if self.pass_rate_count else math.nan,
            "ada/difficulty_weight_mean": self.weight_sum / prompts,
        }
