"""Posterior-sized rounds (`round_sizing="posterior"`): optimality against brute force, budget and round caps.

The reference optimum is computed independently of the engine: by exhaustive search over policies that may depend on
the whole observed reward sequence (not just its counts), with sequence probabilities from the Beta function.
"""

from __future__ import annotations

import functools
import math
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ada.core.engine import ExitRule, Schedule, posterior_round_size, sample_adaptively


def log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


class BruteForce:
    """Expected further samples of the best round sizes, by enumerating every reward sequence."""

    def __init__(self, schedule: Schedule):
        self.s = schedule

    def finished(self, seq: tuple[int, ...]) -> bool:
        pos = sum(seq)
        return len(seq) >= self.s.budget or (
            len(seq) >= self.s.group_size and self.s.exit_rule.holds(pos, len(seq) - pos)
        )

    def probability(self, prefix: tuple[int, ...], extension: tuple[int, ...]) -> float:
        """P(next rewards = extension | prefix) when p ~ Beta(prior): a ratio of Beta functions."""
        a, b = self.s.prior
        pos, total = sum(prefix), len(prefix)
        new_pos = pos + sum(extension)
        new_total = total + len(extension)
        return math.exp(log_beta(a + new_pos, b + new_total - new_pos) - log_beta(a + pos, b + total - pos))

    def cost_of(self, prefix: tuple[int, ...], rounds_left: int, k: int) -> float:
        """Draw k now, then play optimally; the last round must take the rest of the budget."""
        total = 0.0
        for extension in product((0, 1), repeat=k):
            seq = prefix + extension
            rest = 0.0 if self.finished(seq) else self.best(seq, rounds_left - 1)
            total += self.probability(prefix, extension) * (k + rest)
        return total

    @functools.cache  # noqa: B019 - one instance per test
    def best(self, prefix: tuple[int, ...], rounds_left: int) -> float:
        remaining = self.s.budget - len(prefix)
        if rounds_left == 1:
            return float(remaining)
        return min(self.cost_of(prefix, rounds_left, k) for k in range(1, remaining + 1))


SMALL_SCHEDULES = [
    Schedule(2, 2, 3, ExitRule(1, 1), round_sizing="posterior"),  # balanced, group 2, budget 6
    Schedule(3, 3, 3, ExitRule(2, 1), round_sizing="posterior"),  # uneven rule, budget 9
    Schedule(2, 3, 2, ExitRule(1, 0), round_sizing="posterior", prior=(0.5, 2.0)),  # positive, skewed prior
    Schedule(4, 2, 4, ExitRule(2, 2), round_sizing="posterior", prior=(2.0, 1.0)),  # 4 rounds, budget 8
]


@pytest.mark.parametrize("schedule", SMALL_SCHEDULES, ids=["balanced-2", "rule-2-1", "positive-skewed", "balanced-4"])
def test_round_size_is_optimal_in_every_state(schedule):
    brute = BruteForce(schedule)
    checked = 0
    for length in range(schedule.budget):
        for prefix in product((0, 1), repeat=length):
            if brute.finished(prefix):
                continue
            pos = sum(prefix)
            for rounds_left in range(1, schedule.max_rounds + 1):
                k = posterior_round_size(pos, length - pos, length, rounds_left, schedule)
                assert 1 <= k <= schedule.budget - length
                if rounds_left == 1:
                    assert k == schedule.budget - length  # the last round takes the rest
                else:
                    optimum = brute.best(prefix, rounds_left)
                    assert brute.cost_of(prefix, rounds_left, k) == pytest.approx(optimum, abs=1e-9), (prefix, k)
                checked += 1
    assert checked >= 10  # the comparison ran over many states


def test_hand_worked_first_round():
    """Group 2, rule (1, 1), budget 3 in 2 rounds, uniform prior. Drawing 1 first can never finish (group of 2):
    cost 1 + 2 = 3. Drawing 2 finishes with P(one of each) = E[2p(1-p)] = 1/3: cost 2 + (2/3) * 1 = 8/3. Drawing 3
    costs 3. So the first round is 2."""
    schedule = Schedule(2, 1, 3, ExitRule(1, 1), round_sizing="posterior")
    assert posterior_round_size(0, 0, 0, 2, schedule) == 2
    assert posterior_round_size(2, 0, 2, 1, schedule) == 1


def test_last_round_and_unscorable_samples():
    schedule = Schedule.from_strategy("balanced", 4, 8, 4, round_sizing="posterior")
    assert posterior_round_size(1, 5, 6, 1, schedule) == 26  # whatever the counts, the last round takes the rest
    # Four unscorable samples count against the budget: 10 drawn, 22 left.
    assert 1 <= posterior_round_size(1, 5, 10, 2, schedule) <= 22
    assert posterior_round_size(1, 5, 10, 1, schedule) == 22


def test_finished_prompts_and_bad_arguments_are_rejected():
    schedule = Schedule.from_strategy("balanced", 4, 8, 4, round_sizing="posterior")
    with pytest.raises(ValueError, match="finished"):
        posterior_round_size(2, 2, 4, 3, schedule)
    with pytest.raises(ValueError, match="finished"):
        posterior_round_size(0, 32, 32, 1, schedule)  # budget spent
    with pytest.raises(ValueError, match="rounds_left"):
        posterior_round_size(0, 0, 0, 0, schedule)
    with pytest.raises(ValueError, match="round_sizing"):
        Schedule(4, 8, 4, ExitRule(2, 2), round_sizing="adaptive")
    for prior in [(0.0, 1.0), (1.0, -1.0), (math.nan, 1.0), (1.0,)]:
        with pytest.raises(ValueError, match="prior"):
            Schedule(4, 8, 4, ExitRule(2, 2), round_sizing="posterior", prior=prior)
    # Plain GRPO stays one round of the group size.
    uniform = Schedule.from_strategy("uniform", 4, round_sizing="posterior")
    assert (uniform.round_sizing, uniform.budget, uniform.max_rounds) == ("fixed", 4, 1)


@st.composite
def streams(draw):
    group_size = draw(st.integers(1, 5))
    samples_per_round = draw(st.integers(1, 6))
    max_rounds = draw(st.integers(1, 4))
    if samples_per_round * max_rounds < group_size:
        samples_per_round = group_size
    budget = samples_per_round * max_rounds
    min_pos = draw(st.integers(0, group_size))
    min_neg = draw(st.integers(0, group_size - min_pos))
    rates = draw(st.lists(st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0]), min_size=1, max_size=6))
    seqs = [[float(draw(st.floats(0, 1)) < r) for _ in range(budget)] for r in rates]
    schedule = Schedule(
        group_size, samples_per_round, max_rounds, ExitRule(min_pos, min_neg), round_sizing="posterior"
    )
    return schedule, seqs


def sequential_stop(schedule: Schedule, seq: list[float]) -> tuple[int, bool]:
    """Samples the one-at-a-time sampler draws from this stream, and whether the rule held."""
    for t in range(1, len(seq) + 1):
        pos = sum(seq[:t])
        if t >= schedule.group_size and schedule.exit_rule.holds(pos, t - pos):
            return t, True
    return len(seq), False


@settings(max_examples=200, deadline=None, derandomize=True)
@given(case=streams())
def test_posterior_rounds_respect_caps_and_resolve_like_the_sequential_limit(case):
    schedule, seqs = case
    served = [0] * len(seqs)
    calls = []

    def generate(requests):
        calls.append([(r.prompt_index, r.num_samples) for r in requests])
        out = []
        for r in requests:
            out.extend(seqs[r.prompt_index][served[r.prompt_index] : served[r.prompt_index] + r.num_samples])
            served[r.prompt_index] += r.num_samples
        return out

    result = sample_adaptively(len(seqs), schedule, generate, lambda requests, handles: handles)
    assert result.rounds == len(calls) <= schedule.max_rounds
    assert all(n >= 1 for call in calls for _, n in call)
    for pool, seq in zip(result.pools, seqs, strict=True):
        stop, resolved = sequential_stop(schedule, seq)
        assert len(pool) <= schedule.budget
        assert pool.rewards == seq[: len(pool)]
        # Never stops before the sequential sampler would, and resolves exactly the same prompts.
        assert len(pool) >= stop
        assert pool.resolved == resolved
        if not resolved:
            assert len(pool) == schedule.budget
