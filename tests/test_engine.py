"""Tests of the model-free successive-elimination engine (`trl_ada.core.engine`).

Every expectation is computed independently of the engine: by hand, from the stdlib (`statistics`, `math.comb`),
from a closed form, or from a small exact dynamic programme, with statistical bounds stated where sampling is
involved.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from itertools import combinations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_ada.core.engine import STRATEGIES, ExitRule, Pool, Request, Schedule, Tally, downsample, sample_adaptively

NAN = math.nan


# --------------------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------------------


class Scripted:
    """Deterministic generate/score pair: `script[prompt][k]` is the reward list of the k-th request for `prompt`.

    Handles are `(prompt, k, j)` tuples, so `score` can look rewards up and the tests can check that handles reach the
    pools untouched. Every request list `generate` receives is recorded in `calls`."""

    def __init__(self, script: dict[int, list[list[float]]]):
        self.script = script
        self.served = Counter()
        self.calls: list[list[Request]] = []
        self.score_calls = 0

    def generate(self, requests: list[Request]) -> list[tuple[int, int, int]]:
        self.calls.append(list(requests))
        handles = []
        for request in requests:
            k = self.served[request.prompt_index]
            self.served[request.prompt_index] += 1
            rewards = self.script[request.prompt_index][k]
            assert len(rewards) == request.num_samples, "the script was written for a different round size"
            handles.extend((request.prompt_index, k, j) for j in range(request.num_samples))
        return handles

    def score(self, requests: list[Request], handles: list[tuple[int, int, int]]) -> list[float]:
        self.score_calls += 1
        return [self.script[p][k][j] for p, k, j in handles]

    def requested(self) -> list[list[tuple[int, int]]]:
        return [[(r.prompt_index, r.num_samples) for r in call] for call in self.calls]


def same_floats(a, b) -> bool:
    """Equality of float sequences with NaN == NaN."""
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True))


def pool_of(rewards, rounds=None, threshold=0.5) -> Pool:
    pool = Pool(threshold)
    rounds = [0] * len(rewards) if rounds is None else rounds
    for k in sorted(set(rounds)):
        idx = [i for i, r in enumerate(rounds) if r == k]
        pool.add([f"c{i}" for i in idx], [rewards[i] for i in idx], k)
    return pool


def pool_with_counts(num_pos: int, num_neg: int, num_nan: int, rng: random.Random | None = None) -> Pool:
    """A pool with the given numbers of positive (1.0), negative (0.0) and unscorable (NaN) rewards, in a shuffled
    order when `rng` is given."""
    rewards = [1.0] * num_pos + [0.0] * num_neg + [NAN] * num_nan
    if rng is not None:
        rng.shuffle(rewards)
    return pool_of(rewards)


def composition(pool_rewards, indices, threshold=0.5) -> tuple[int, int, int]:
    picked = [pool_rewards[i] for i in indices]
    nan = sum(math.isnan(r) for r in picked)
    pos = sum(r > threshold for r in picked if not math.isnan(r))
    return pos, len(picked) - pos - nan, nan


# --------------------------------------------------------------------------------------------------------------------
# Exit rules and schedules
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "group_size", "expected"),
    [
        ("balanced", 4, (2, 2)),
        ("balanced", 5, (2, 3)),  # odd: the extra slot goes to negatives
        ("balanced", 8, (4, 4)),
        ("positive", 4, (1, 0)),
        ("positive", 5, (1, 0)),
        ("uniform", 4, (0, 0)),
        ("uniform", 5, (0, 0)),
    ],
)
def test_exit_rule_defaults(strategy, group_size, expected):
    rule = ExitRule.for_strategy(strategy, group_size)
    assert (rule.min_positives, rule.min_negatives) == expected


@pytest.mark.parametrize(
    ("strategy", "overrides", "expected"),
    [
        ("balanced", {"min_positives": 1}, (1, 2)),
        ("balanced", {"min_negatives": 1}, (2, 1)),
        ("balanced", {"min_positives": 0}, (0, 2)),  # 0 is an override, not "unset"
        ("balanced", {"min_positives": 0, "min_negatives": 0}, (0, 0)),
        ("positive", {"min_negatives": 1}, (1, 1)),
        ("positive", {"min_positives": 3}, (3, 0)),
        ("uniform", {"min_positives": 1, "min_negatives": 1}, (1, 1)),
    ],
)
def test_exit_rule_overrides(strategy, overrides, expected):
    rule = ExitRule.for_strategy(strategy, 4, **overrides)
    assert (rule.min_positives, rule.min_negatives) == expected


def test_exit_rule_holds_is_a_pair_of_lower_bounds():
    rule = ExitRule(2, 3)
    table = {(p, n): p >= 2 and n >= 3 for p in range(5) for n in range(5)}
    assert {(p, n): rule.holds(p, n) for p in range(5) for n in range(5)} == table
    assert ExitRule(0, 0).holds(0, 0)


def test_exit_rule_rejects_unknown_strategy_and_negative_counts():
    with pytest.raises(ValueError, match="strategy"):
        ExitRule.for_strategy("greedy", 4)
    with pytest.raises(ValueError):
        ExitRule(-1, 0)
    with pytest.raises(ValueError):
        ExitRule(0, -1)
    with pytest.raises(ValueError):
        ExitRule.for_strategy("balanced", 4, min_negatives=-2)


def test_schedule_budget_and_validation():
    schedule = Schedule.from_strategy("balanced", 4, samples_per_round=3, max_rounds=2)
    assert schedule.budget == 6
    assert schedule.exit_rule == ExitRule(2, 2)
    assert schedule.positive_threshold == 0.5
    # uniform is plain GRPO: one round of exactly group_size, whatever else is asked
    uniform = Schedule.from_strategy("uniform", 5, samples_per_round=8, max_rounds=4)
    assert (uniform.samples_per_round, uniform.max_rounds, uniform.budget) == (5, 1, 5)
    with pytest.raises(ValueError, match="budget"):
        Schedule(4, 1, 3, ExitRule(0, 0))  # 3 < 4
    Schedule(4, 1, 4, ExitRule(0, 0))  # exactly enough
    for bad in [(0, 1, 1), (1, 0, 1), (1, 1, 0)]:
        with pytest.raises(ValueError):
            Schedule(*bad, ExitRule(0, 0))


# --------------------------------------------------------------------------------------------------------------------
# Scripted reward streams, worked by hand
# --------------------------------------------------------------------------------------------------------------------


def test_scripted_balanced_stream():
    """Balanced rule for n=4 is (2 pos, 2 neg); 2 samples per round, 4 rounds, budget 8; threshold 0.5.

    prompt 0: [1,0] [1,0]                 -> after round 1: 2p 2n, pool 4      -> exits after round 1
    prompt 1: [1,1] [1,1] [0,0]           -> 2p0n, 4p0n, 4p2n                  -> exits after round 2, pool 6
    prompt 2: [0,0] x4                    -> never 2 positives                 -> budget 8, unresolved
    prompt 3: [1,0] [0,0] [0,0] [1,1]     -> 1p1n, 1p3n, 1p5n, 3p5n            -> budget 8, rule holds: resolved
    prompt 4: [nan,1] [0,nan] [1,0]       -> 1p0n, 1p1n, 2p2n (pool 6)         -> exits after round 2
    Requests: round 0: 0..4, round 1: 0..4, round 2: 1..4, round 3: 2 and 3.
    """
    script = {
        0: [[1.0, 0.0], [1.0, 0.0]],
        1: [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]],
        2: [[0.0, 0.0]] * 4,
        3: [[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 1.0]],
        4: [[NAN, 1.0], [0.0, NAN], [1.0, 0.0]],
    }
    schedule = Schedule.from_strategy("balanced", 4, samples_per_round=2, max_rounds=4)
    s = Scripted(script)
    result = sample_adaptively(5, schedule, s.generate, s.score)

    assert result.rounds == 4
    assert s.requested() == [
        [(0, 2), (1, 2), (2, 2), (3, 2), (4, 2)],
        [(0, 2), (1, 2), (2, 2), (3, 2), (4, 2)],
        [(1, 2), (2, 2), (3, 2), (4, 2)],
        [(2, 2), (3, 2)],
    ]
    assert s.score_calls == 4
    assert [len(p) for p in result.pools] == [4, 6, 8, 8, 6]
    assert [p.resolved for p in result.pools] == [True, True, False, True, True]
    # pools hold exactly the scripted rewards, in order, with their round indices and handles
    for prompt, pool in enumerate(result.pools):
        flat = [r for batch in script[prompt][: len(pool) // 2] for r in batch]
        assert same_floats(pool.rewards, flat)
        assert pool.rounds == [k for k in range(len(pool) // 2) for _ in range(2)]
        assert pool.samples == [(prompt, k, j) for k in range(len(pool) // 2) for j in range(2)]
    assert [(p.num_positive, p.num_negative) for p in result.pools] == [(2, 2), (4, 2), (0, 8), (3, 5), (2, 2)]


def test_scripted_positive_stream_ends_early():
    """Positive rule (1, 0), n=4, 4 per round, 3 rounds. Every prompt has a positive by round 1, so only 2 rounds run.

    prompt 0: [0,0,1,0]               -> exits after round 0
    prompt 1: [0,0,0,0] [0,1,0,0]     -> exits after round 1
    """
    script = {0: [[0.0, 0.0, 1.0, 0.0]], 1: [[0.0] * 4, [0.0, 1.0, 0.0, 0.0]]}
    schedule = Schedule.from_strategy("positive", 4, samples_per_round=4, max_rounds=3)
    s = Scripted(script)
    result = sample_adaptively(2, schedule, s.generate, s.score)
    assert result.rounds == 2
    assert s.requested() == [[(0, 4), (1, 4)], [(1, 4)]]
    assert [len(p) for p in result.pools] == [4, 8]
    assert [p.resolved for p in result.pools] == [True, True]


def test_never_resolving_prompts_are_kept_with_their_full_budget():
    schedule = Schedule.from_strategy("positive", 4, samples_per_round=3, max_rounds=3)
    s = Scripted({0: [[0.0] * 3] * 3, 1: [[NAN] * 3] * 3})
    result = sample_adaptively(2, schedule, s.generate, s.score)
    assert result.rounds == 3
    assert [len(p) for p in result.pools] == [9, 9]
    assert [p.resolved for p in result.pools] == [False, False]
    assert s.requested() == [[(0, 3), (1, 3)]] * 3


def test_rule_that_holds_before_the_group_is_full_keeps_sampling():
    """(1 positive, 0 negatives) holds after the first 2 samples, but the group needs 4: a second round runs."""
    schedule = Schedule(4, 2, 4, ExitRule(1, 0))
    s = Scripted({0: [[1.0, 1.0], [0.0, 0.0]]})
    result = sample_adaptively(1, schedule, s.generate, s.score)
    assert result.rounds == 2
    assert s.requested() == [[(0, 2)], [(0, 2)]]
    assert len(result.pools[0]) == 4 and result.pools[0].resolved

    # with 3 per round the group is over-filled (6) before the prompt exits
    schedule = Schedule(4, 3, 4, ExitRule(1, 0))
    s = Scripted({0: [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]})
    result = sample_adaptively(1, schedule, s.generate, s.score)
    assert result.rounds == 2 and len(result.pools[0]) == 6


def test_uniform_strategy_is_one_round_of_group_size():
    schedule = Schedule.from_strategy("uniform", 4, samples_per_round=8, max_rounds=4)
    s = Scripted({0: [[0.0] * 4], 1: [[1.0, 0.0, 1.0, 0.0]]})
    result = sample_adaptively(2, schedule, s.generate, s.score)
    assert result.rounds == 1
    assert s.requested() == [[(0, 4), (1, 4)]]
    assert [p.resolved for p in result.pools] == [True, True]  # (0, 0) always holds


def test_other_process_still_active_forces_empty_rounds():
    """Locally everything resolves in round 0, but "another process" stays active for rounds 0-2: this process must
    keep calling generate (with no requests) so the collective calls line up."""
    remote_active = [True, True, True, False, False]
    seen = []

    def any_active(local: bool) -> bool:
        seen.append(local)
        return local or remote_active[len(seen) - 1]

    schedule = Schedule.from_strategy("positive", 4, samples_per_round=4, max_rounds=4)
    calls = []

    def generate(requests):
        calls.append(list(requests))
        return [1.0] * sum(r.num_samples for r in requests)

    def score(requests, handles):
        assert len(handles) == sum(r.num_samples for r in requests)
        return list(handles)

    result = sample_adaptively(2, schedule, generate, score, any_active)
    assert result.rounds == 3
    assert seen == [True, False, False, False]
    assert [[(r.prompt_index, r.num_samples) for r in c] for c in calls] == [[(0, 4), (1, 4)], [], []]
    assert [len(p) for p in result.pools] == [4, 4]
    assert all(p.resolved for p in result.pools)

    # a remote process that never finishes is still capped by max_rounds
    calls.clear()
    result = sample_adaptively(1, schedule, generate, score, lambda local: True)
    assert result.rounds == 4
    assert [len(c) for c in calls] == [1, 0, 0, 0]


def test_zero_prompts_runs_no_round():
    schedule = Schedule.from_strategy("balanced", 4)
    s = Scripted({})
    result = sample_adaptively(0, schedule, s.generate, s.score)
    assert result.rounds == 0 and result.pools == [] and s.calls == []


@pytest.mark.parametrize("mode", ["few_handles", "many_handles", "few_rewards", "many_rewards"])
def test_count_mismatch_raises(mode):
    schedule = Schedule.from_strategy("positive", 2, samples_per_round=2, max_rounds=2)

    def generate(requests):
        n = sum(r.num_samples for r in requests)
        n += {"few_handles": -1, "many_handles": 1}.get(mode, 0)
        return [0.0] * n

    def score(requests, handles):
        n = len(handles) + {"few_rewards": -1, "many_rewards": 1}.get(mode, 0)
        return [0.0] * n

    with pytest.raises(RuntimeError, match="requested 4"):
        sample_adaptively(2, schedule, generate, score)


def test_pool_add_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        Pool(0.5).add(["a", "b"], [1.0], 0)


# --------------------------------------------------------------------------------------------------------------------
# Pool statistics
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rewards",
    [
        [1.0, 0.0, NAN, 0.5, 1.0],
        [0.3, 0.9, 0.7, 0.71, NAN, NAN, -1.0],
        [2.0, 2.0, 2.0],
        [0.0, 1.0],
    ],
)
def test_pool_statistics_match_stdlib(rewards):
    threshold = 0.7
    pool = pool_of(rewards, threshold=threshold)
    scored = [r for r in rewards if not math.isnan(r)]
    assert pool.mean == pytest.approx(statistics.mean(scored), abs=1e-12)
    assert pool.std == pytest.approx(statistics.stdev(scored), abs=1e-12)
    positives = sum(r > threshold for r in scored)  # a reward equal to the threshold is negative
    assert pool.num_positive == positives
    assert pool.num_negative == len(scored) - positives
    assert pool.pass_rate == pytest.approx(positives / len(scored))
    assert len(pool) == len(rewards)


def test_pool_statistics_hand_worked_and_degenerate():
    pool = pool_of([1.0, 0.0, NAN, 0.7, 1.0], threshold=0.7)
    assert (pool.num_positive, pool.num_negative) == (2, 2)  # 0.7 is not > 0.7
    assert pool.pass_rate == 0.5
    assert pool.mean == pytest.approx(2.7 / 4)
    single = pool_of([1.0, NAN])
    assert single.mean == 1.0 and math.isnan(single.std) and single.pass_rate == 1.0
    nothing = pool_of([NAN, NAN])
    assert math.isnan(nothing.mean) and math.isnan(nothing.std) and math.isnan(nothing.pass_rate)
    assert (nothing.num_positive, nothing.num_negative) == (0, 0)
    empty = Pool(0.5)
    assert len(empty) == 0 and math.isnan(empty.pass_rate) and math.isnan(empty.mean)


@pytest.mark.parametrize(
    ("rewards", "rounds", "expected"),
    [
        ([1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1], True),  # round 0 all equal; later rounds do not count
        ([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], False),
        ([0.5, 0.5, 0.5], [0, 0, 0], True),
        ([1.0, NAN, 1.0], [0, 0, 0], True),  # NaN excluded
        ([1.0, NAN, 0.0], [0, 0, 0], False),
        ([NAN, NAN, 1.0], [0, 0, 1], True),  # nothing scorable in round 0: vacuously all-equal
    ],
)
def test_first_round_has_zero_std(rewards, rounds, expected):
    assert pool_of(rewards, rounds).first_round_has_zero_std() is expected


# --------------------------------------------------------------------------------------------------------------------
# Downsampling
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counts", "group_size", "expected"),
    [
        ((1, 10, 0), 4, (1, 3, 0)),
        ((10, 1, 0), 4, (3, 1, 0)),
        ((6, 6, 0), 4, (2, 2, 0)),
        ((6, 6, 0), 5, (2, 3, 0)),  # odd group: the extra slot is a negative
        ((1, 6, 0), 5, (1, 4, 0)),
        ((6, 1, 0), 5, (4, 1, 0)),
        ((0, 8, 0), 4, (0, 4, 0)),
        ((8, 0, 0), 4, (4, 0, 0)),
        ((1, 1, 5), 4, (1, 1, 2)),  # NaNs fill only what scorable ones cannot
        ((3, 0, 5), 4, (3, 0, 1)),
        ((2, 2, 5), 4, (2, 2, 0)),  # enough scorable: no NaN
        ((0, 0, 4), 4, (0, 0, 4)),
        ((2, 2, 0), 4, (2, 2, 0)),  # exact fit
    ],
)
def test_downsample_composition(counts, group_size, expected):
    for seed in range(5):
        pool = pool_with_counts(*counts, rng=random.Random(100 + seed))
        picked = downsample(pool, group_size, random.Random(seed))
        assert len(picked) == group_size == len(set(picked))
        assert all(0 <= i < len(pool) for i in picked)
        assert composition(pool.rewards, picked) == expected


def test_downsample_respects_the_threshold():
    pool = pool_of([0.2, 0.6, 0.7, 0.9, 0.71, 0.0], threshold=0.7)  # positives: 0.9, 0.71
    picked = downsample(pool, 4, random.Random(0))
    assert sorted(pool.rewards[i] > 0.7 for i in picked) == [False, False, True, True]


def test_downsample_too_small_pool_raises():
    with pytest.raises(ValueError):
        downsample(pool_with_counts(1, 1, 1), 4, random.Random(0))


def test_downsample_is_seeded():
    pool = pool_with_counts(7, 9, 2, rng=random.Random(3))
    first = downsample(pool, 6, random.Random(42))
    assert downsample(pool, 6, random.Random(42)) == first
    others = {tuple(downsample(pool, 6, random.Random(seed))) for seed in range(50)}
    assert len(others) > 1


def test_downsample_draw_is_uniform_among_positives_and_negatives():
    """6 positives + 6 negatives, group 4: 2 of each. Each positive is kept with probability 2/6 per draw, so over
    M draws its count is Binomial(M, 1/3); we allow 5 standard deviations. Every one of the C(6,2)=15 pairs of
    positives is equally likely: a chi-square statistic with 14 degrees of freedom stays below 50 (p ~ 1e-5)."""
    pool = pool_with_counts(6, 6, 0)
    positives = [i for i, r in enumerate(pool.rewards) if r > 0.5]
    negatives = [i for i, r in enumerate(pool.rewards) if r <= 0.5]
    draws = 6000
    item_counts = Counter()
    pair_counts = Counter()
    for seed in range(draws):
        picked = downsample(pool, 4, random.Random(seed))
        item_counts.update(picked)
        pair_counts[tuple(sorted(i for i in picked if i in positives))] += 1
    p = 2 / 6
    bound = 5 * math.sqrt(draws * p * (1 - p))
    for i in positives + negatives:
        assert abs(item_counts[i] - draws * p) <= bound, (i, item_counts[i])
    assert set(pair_counts) == set(combinations(positives, 2))
    expected = draws / 15
    chi2 = sum((pair_counts[pair] - expected) ** 2 / expected for pair in combinations(positives, 2))
    assert chi2 < 50, chi2


def test_downsample_single_positive_among_many_is_always_kept():
    pool = pool_with_counts(1, 10, 0, rng=random.Random(1))
    (positive,) = [i for i, r in enumerate(pool.rewards) if r > 0.5]
    for seed in range(100):
        assert positive in downsample(pool, 4, random.Random(seed))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    num_pos=st.integers(0, 12),
    num_neg=st.integers(0, 12),
    num_nan=st.integers(0, 6),
    group_size=st.integers(1, 10),
    seed=st.integers(0, 2**32 - 1),
)
def test_downsample_property(num_pos, num_neg, num_nan, group_size, seed):
    if num_pos + num_neg + num_nan < group_size:
        small = pool_with_counts(num_pos, num_neg, num_nan)
        if not small.samples or len(set(small.scored_rewards)) > 1:  # only a pilot's agreeing pool may be short
            with pytest.raises(ValueError):
                downsample(small, group_size, random.Random(seed))
            return
        uses = Counter(downsample(small, group_size, random.Random(seed)))  # every completion, in turn
        assert set(uses) == set(range(len(small))) and sum(uses.values()) == group_size
        assert set(uses.values()) <= {group_size // len(small), -(-group_size // len(small))}
        return
    rng = random.Random(seed)
    pool = pool_with_counts(num_pos, num_neg, num_nan, rng=rng)
    picked = downsample(pool, group_size, rng)
    assert len(picked) == group_size == len(set(picked))
    assert all(0 <= i < len(pool) for i in picked)
    pos, neg, nan = composition(pool.rewards, picked)
    # Independent spec: keep as many scorable completions as possible; among those, the number of positives is the
    # feasible value closest to group_size // 2.
    scorable = min(num_pos + num_neg, group_size)
    lo, hi = max(0, scorable - num_neg), min(num_pos, scorable)
    assert pos == min(hi, max(lo, group_size // 2))
    assert pos + neg == scorable and nan == group_size - scorable
    # and the same count in closed form
    assert pos == min(num_pos, max(group_size // 2, group_size - num_neg))


# --------------------------------------------------------------------------------------------------------------------
# Properties of the sampling loop over random configs and reward streams
# --------------------------------------------------------------------------------------------------------------------


@st.composite
def sampling_cases(draw):
    group_size = draw(st.integers(2, 8))
    samples_per_round = draw(st.integers(max(1, math.ceil(group_size / 5)), 8))
    max_rounds = draw(st.integers(math.ceil(group_size / samples_per_round), 5))
    strategy = draw(st.sampled_from(STRATEGIES))
    threshold = draw(st.sampled_from([0.0, 0.5, 0.7, 1.0]) | st.floats(-0.5, 1.5))
    min_positives = draw(st.none() | st.integers(0, group_size))
    min_negatives = draw(st.none() | st.integers(0, group_size))
    num_prompts = draw(st.integers(1, 6))
    pass_probs = draw(st.lists(st.floats(0, 1), min_size=num_prompts, max_size=num_prompts))
    nan_prob = draw(st.sampled_from([0.0, 0.0, 0.1, 0.3]))
    graded = draw(st.booleans())  # rewards in [0, 1) instead of {0, 1}
    seed = draw(st.integers(0, 2**32 - 1))
    return dict(
        group_size=group_size,
        samples_per_round=samples_per_round,
        max_rounds=max_rounds,
        strategy=strategy,
        threshold=threshold,
        min_positives=min_positives,
        min_negatives=min_negatives,
        pass_probs=pass_probs,
        nan_prob=nan_prob,
        graded=graded,
        seed=seed,
    )


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=sampling_cases())
def test_sampling_loop_properties(case):
    g = case["group_size"]
    t = case["threshold"]
    strategy = case["strategy"]
    schedule = Schedule.from_strategy(
        strategy,
        g,
        samples_per_round=case["samples_per_round"],
        max_rounds=case["max_rounds"],
        positive_threshold=t,
        min_positives=case["min_positives"],
        min_negatives=case["min_negatives"],
    )
    # the effective schedule and rule, from the spec
    spr, rounds_cap = (g, 1) if strategy == "uniform" else (case["samples_per_round"], case["max_rounds"])
    budget = spr * rounds_cap
    default_pos, default_neg = {"balanced": (g // 2, g - g // 2), "positive": (1, 0), "uniform": (0, 0)}[strategy]
    need_pos = default_pos if case["min_positives"] is None else case["min_positives"]
    need_neg = default_neg if case["min_negatives"] is None else case["min_negatives"]
    assert (schedule.samples_per_round, schedule.max_rounds) == (spr, rounds_cap)

    def counts(rewards):
        scored = [r for r in rewards if not math.isnan(r)]
        pos = sum(r > t for r in scored)
        return pos, len(scored) - pos

    def finished(rewards):
        pos, neg = counts(rewards)
        return len(rewards) >= budget or (len(rewards) >= g and pos >= need_pos and neg >= need_neg)

    rng = random.Random(case["seed"])
    probs = case["pass_probs"]
    num_prompts = len(probs)
    mine: list[list[float]] = [[] for _ in range(num_prompts)]  # the stream as this test saw it
    calls: list[list[Request]] = []

    def draw_reward(p):
        if rng.random() < case["nan_prob"]:
            return NAN
        if case["graded"]:
            return rng.random() * 2 * p  # mean p, spread over [0, 2p)
        return 1.0 if rng.random() < p else 0.0

    def generate(requests):
        # Before the round: exactly the unfinished prompts are requested, in order, each for a full round.
        assert [r.prompt_index for r in requests] == [i for i in range(num_prompts) if not finished(mine[i])]
        assert len(calls) < rounds_cap
        for r in requests:
            assert 1 <= r.num_samples <= spr
            assert len(mine[r.prompt_index]) + r.num_samples <= budget
        calls.append(list(requests))
        handles = []
        for r in requests:
            batch = [draw_reward(probs[r.prompt_index]) for _ in range(r.num_samples)]
            mine[r.prompt_index].extend(batch)
            handles.extend(batch)
        return handles

    def score(requests, handles):
        return list(handles)

    result = sample_adaptively(num_prompts, schedule, generate, score)

    assert result.rounds == len(calls) <= rounds_cap
    # the loop stops exactly when nothing is left or rounds are spent
    assert result.rounds == rounds_cap or all(finished(r) for r in mine)
    # a prompt that finished is never requested again
    for i in range(num_prompts):
        asked = [k for k, call in enumerate(calls) if any(r.prompt_index == i for r in call)]
        assert asked == list(range(len(asked)))  # requested in consecutive rounds from round 0 ...
        assert len(mine[i]) == len(asked) * spr  # ... a full round each time
    for i, pool in enumerate(result.pools):
        assert same_floats(pool.rewards, mine[i])
        assert g <= len(pool) <= budget
        pos, neg = counts(mine[i])
        assert (pool.num_positive, pool.num_negative) == (pos, neg)
        assert pool.resolved == (pos >= need_pos and neg >= need_neg)
        # the pool either has the full budget or it resolved
        assert len(pool) == budget or pool.resolved
        picked = downsample(pool, g, random.Random(i))
        assert len(picked) == g == len(set(picked)) and all(0 <= j < len(pool) for j in picked)
        kept_pos, kept_neg, _ = composition(pool.rewards, picked, t)
        if not any(math.isnan(r) for r in pool.rewards):
            assert kept_pos == min(pos, max(g // 2, g - neg))
        assert kept_pos + kept_neg == min(pos + neg, g)


# --------------------------------------------------------------------------------------------------------------------
# Tally
# --------------------------------------------------------------------------------------------------------------------


def _tally_pools():
    a = pool_of([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    a.resolved = True  # pass rate 3/4, first round mixed
    b = pool_of([0.0] * 6, [0, 0, 1, 1, 2, 2])  # pass rate 0, first round all-equal, unresolved
    c = pool_of([NAN] * 4)  # nothing scorable: no pass rate, first round vacuously all-equal
    return [a, b, c]


def test_tally_metrics_hand_worked():
    pools = _tally_pools()
    tally = Tally.of(pools, weights=[2.0, 0.5, 1.0])
    assert (tally.prompts, tally.samples, tally.max_samples, tally.resolved) == (3, 14, 6, 1)
    assert (tally.zero_std_first_round, tally.pass_rate_count) == (2, 2)
    assert tally.pass_rate_sum == pytest.approx(0.75)
    assert tally.weight_sum == pytest.approx(3.5)
    metrics = tally.metrics(rounds=3)
    assert metrics == pytest.approx(
        {
            "ada/rounds": 3.0,
            "ada/samples_per_prompt": 14 / 3,
            "ada/samples_per_prompt_max": 6.0,
            "ada/frac_resolved": 1 / 3,
            "ada/frac_zero_std_first_round": 2 / 3,
            "ada/pool_pass_rate": 0.375,  # mean over the two prompts with a pass rate
            "ada/difficulty_weight_mean": 3.5 / 3,
        }
    )
    assert Tally.of(pools).metrics(1)["ada/difficulty_weight_mean"] == 1.0  # no weights: weight 1 each


def test_empty_tally_metrics():
    metrics = Tally().metrics(rounds=0)
    assert metrics["ada/samples_per_prompt"] == 0.0 and metrics["ada/frac_resolved"] == 0.0
    assert math.isnan(metrics["ada/pool_pass_rate"])
    assert Tally.of([]) == Tally()


def test_tally_addition_equals_tally_of_concatenation():
    a, b, c = _tally_pools()
    left = Tally.of([a], weights=[2.0])
    right = Tally.of([b, c], weights=[0.5, 1.0])
    total = left + right
    assert (total.prompts, total.samples, total.resolved) == (3, 14, 1)
    assert total.max_samples == 6  # a max, not a sum (4 + 6)
    assert (total.zero_std_first_round, total.pass_rate_count) == (2, 2)
    assert total.pass_rate_sum == pytest.approx(0.75)
    assert total.weight_sum == pytest.approx(3.5)
    assert left + Tally() == left
    assert total.metrics(2) == pytest.approx(Tally.of([a, b, c], weights=[2.0, 0.5, 1.0]).metrics(2))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    split=st.integers(0, 8),
    rewards=st.lists(
        st.lists(st.sampled_from([0.0, 1.0, 0.5, NAN]), min_size=1, max_size=10),
        min_size=0,
        max_size=8,
    ),
)
def test_tally_addition_property(split, rewards):
    pools = [pool_of(r, [i % 3 for i in range(len(r))]) for r in rewards]
    for k, pool in enumerate(pools):
        pool.resolved = k % 2 == 0
    split = min(split, len(pools))
    total = Tally.of(pools[:split]) + Tally.of(pools[split:])
    assert total.prompts == len(pools)
    assert total.samples == sum(len(r) for r in rewards)
    assert total.max_samples == max((len(r) for r in rewards), default=0)
    assert total.resolved == (len(pools) + 1) // 2
    rates = [
        sum(x > 0.5 for x in r if not math.isnan(x)) / n for r in rewards if (n := sum(not math.isnan(x) for x in r))
    ]
    assert total.pass_rate_count == len(rates)
    assert total.pass_rate_sum == pytest.approx(sum(rates))


# --------------------------------------------------------------------------------------------------------------------
# Analytic expectations under Bernoulli rewards
# --------------------------------------------------------------------------------------------------------------------

PROMPTS_PER_P = 4000
ROUND = 8
ROUNDS = 4


def _simulate(strategy: str, probs: list[float], group_size: int, seed: int):
    """Run the engine on PROMPTS_PER_P prompts for each pass rate in `probs`; return per-p (samples, resolved)."""
    schedule = Schedule.from_strategy(strategy, group_size, samples_per_round=ROUND, max_rounds=ROUNDS)
    prompt_p = [p for p in probs for _ in range(PROMPTS_PER_P)]
    rng = random.Random(seed)

    def generate(requests):
        out = []
        for r in requests:
            p = prompt_p[r.prompt_index]
            out.extend(1.0 if rng.random() < p else 0.0 for _ in range(r.num_samples))
        return out

    result = sample_adaptively(len(prompt_p), schedule, generate, lambda requests, handles: handles)
    per_p = {}
    for k, p in enumerate(probs):
        pools = result.pools[k * PROMPTS_PER_P : (k + 1) * PROMPTS_PER_P]
        per_p[p] = ([len(pool) for pool in pools], [pool.resolved for pool in pools])
    return per_p


def _check_against(samples, resolved, rounds_dist: dict[int, float], p_resolved: float):
    """Compare the empirical mean samples and resolved fraction with the exact distribution, within 5 standard errors
    of the mean of PROMPTS_PER_P i.i.d. prompts (exact equality when the variance is zero)."""
    assert sum(rounds_dist.values()) == pytest.approx(1.0)
    mean = sum(ROUND * t * q for t, q in rounds_dist.items())
    var = sum((ROUND * t - mean) ** 2 * q for t, q in rounds_dist.items())
    se = math.sqrt(var / PROMPTS_PER_P)
    assert abs(statistics.mean(samples) - mean) <= 5 * se + 1e-9, (statistics.mean(samples), mean, se)
    se_res = math.sqrt(p_resolved * (1 - p_resolved) / PROMPTS_PER_P)
    assert abs(statistics.mean(resolved) - p_resolved) <= 5 * se_res + 1e-9, (statistics.mean(resolved), p_resolved)
    return mean


def test_positive_rule_matches_closed_form():
    """Positive rule, k = 8 per round, R = 4 rounds, group 4 (filled by round 1). With q = (1-p)^k the prompt stops
    after round t < R with probability q^(t-1) (1-q) and reaches round R with probability q^(R-1):
    E[samples] = k * sum_{r=0}^{R-1} q^r and P(resolved) = 1 - q^R."""
    probs = [0.0, 0.1, 0.5, 1.0]
    sims = _simulate("positive", probs, 4, seed=1234)
    for p in probs:
        q = (1 - p) ** ROUND
        dist = {t: q ** (t - 1) * (1 - q) for t in range(1, ROUNDS)}
        dist[ROUNDS] = q ** (ROUNDS - 1)
        samples, resolved = sims[p]
        mean = _check_against(samples, resolved, dist, 1 - q**ROUNDS)
        assert mean == pytest.approx(ROUND * sum(q**r for r in range(ROUNDS)))
    assert set(sims[0.0][0]) == {32} and not any(sims[0.0][1])
    assert set(sims[1.0][0]) == {8} and all(sims[1.0][1])


def _balanced_dp(p: float, need_pos: int, need_neg: int) -> tuple[dict[int, float], float]:
    """Exact distribution of the number of rounds for the balanced rule, by dynamic programming over the number of
    positives of still-active prompts (each round adds Binomial(ROUND, p) positives)."""
    pmf = [math.comb(ROUND, j) * p**j * (1 - p) ** (ROUND - j) for j in range(ROUND + 1)]
    active = {0: 1.0}  # positives -> probability mass of prompts still sampling
    rounds_dist: dict[int, float] = {}
    p_resolved = 0.0
    for t in range(1, ROUNDS + 1):
        after: dict[int, float] = {}
        for pos, mass in active.items():
            for j, q in enumerate(pmf):
                after[pos + j] = after.get(pos + j, 0.0) + mass * q
        drawn = ROUND * t
        done = {pos: m for pos, m in after.items() if pos >= need_pos and drawn - pos >= need_neg}
        p_resolved += sum(done.values())
        active = {pos: m for pos, m in after.items() if pos not in done}
        if t < ROUNDS:
            rounds_dist[t] = sum(done.values())
        else:
            rounds_dist[t] = sum(done.values()) + sum(active.values())
    return rounds_dist, p_resolved


def test_balanced_rule_matches_exact_dp():
    """Balanced rule for n = 4 (2 positives, 2 negatives), k = 8, R = 4, against an exact DP."""
    probs = [0.02, 0.1, 0.5, 0.95]
    sims = _simulate("balanced", probs, 4, seed=99)
    for p in probs:
        dist, p_resolved = _balanced_dp(p, 2, 2)
        # cross-check the DP with the direct formula: a prompt is active after r rounds iff Bin(8r, p) < 2 or > 8r-2
        for r in range(1, ROUNDS):
            n = ROUND * r
            fail = sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(n + 1) if j < 2 or n - j < 2)
            assert sum(q for t, q in dist.items() if t > r) == pytest.approx(fail, abs=1e-12)
        samples, resolved = sims[p]
        _check_against(samples, resolved, dist, p_resolved)


def test_pool_counts_follow_every_add():
    """Counts are kept incrementally: after each add they must equal a recount of all rewards so far."""
    rng = random.Random(7)
    pool = Pool(0.5)
    rewards = []
    for round_index in range(6):
        batch = [rng.choice([0.0, 1.0, 0.5, 0.7, NAN]) for _ in range(rng.randrange(0, 5))]
        pool.add(list(range(len(batch))), batch, round_index)
        rewards += batch
        assert pool.num_positive == sum(r > 0.5 for r in rewards if not math.isnan(r))
        assert pool.num_negative == sum(r <= 0.5 for r in rewards if not math.isnan(r))
