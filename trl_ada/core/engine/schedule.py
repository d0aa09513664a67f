"""The schedule of a step: how many completions each active prompt draws per round, for how many rounds, under which
exit rule; round sizes from the Beta posterior of a prompt's counts (`posterior_round_size`, an exact dynamic
programme) and the draws a prompt can still expect to need (`expected_remaining_draws`, streaming's in-flight target);
and when a pool is finished or resolved under a schedule."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..hints import budget_hint
from .pool import Pool
from .rules import ESTIMATE, ExitRule, is_adaptive

ROUND_SIZINGS = ("fixed", "posterior")


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
        if not is_adaptive(strategy) and strategy != ESTIMATE:  # plain GRPO: one group
            samples_per_round, max_rounds, round_sizing = group_size, 1, "fixed"
        elif strategy == ESTIMATE:
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


def _is_finished(pool: Pool, schedule: Schedule) -> bool:
    if len(pool) >= schedule.budget:
        return True
    # A rule like (1 positive, 0 negatives) can hold before the group is full; keep sampling until it is.
    return len(pool) >= schedule.group_size and schedule.exit_rule.holds(pool.num_positive, pool.num_negative)


def _mark_resolved(pools: list[Pool], schedule: Schedule) -> None:
    for pool in pools:
        pool.resolved = schedule.exit_rule.holds(pool.num_positive, pool.num_negative)
