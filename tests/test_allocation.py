"""Tests of the budget allocation (`trl_ada.core.allocation`): hand-worked examples and properties against an
independent continuous solution (bisection on the water level)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ada.core.allocation import ALLOCATION_RULES, allocate, allocation_scores


def reference_score(p: float, rule: str) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return {"inv_sqrt_p": p**-0.5, "inv_p": 1 / p, "variance_optimal": ((1 - p) / p) ** 0.5}[rule]


def reference_shares(p_hat: list[float], total: int, lo: int, hi: int, rule: str) -> list[float]:
    """The continuous allocation clip(lam * score, lo, hi) summing to total, with lam found by bisection."""
    scores = [reference_score(p, rule) for p in p_hat]

    def fill(lam: float) -> float:
        return sum(min(max(lam * s, lo), hi) for s in scores)

    low, high = 0.0, hi / min(scores) + 1.0  # fill(high) = n * hi >= total
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if fill(middle) < total else (low, middle)
    return [min(max(high * s, lo), hi) for s in scores]


# --------------------------------------------------------------------------------------------------------------------
# Hand-worked examples
# --------------------------------------------------------------------------------------------------------------------


def test_scores_of_each_rule():
    assert allocation_scores([0.25, 1 / 9], "inv_sqrt_p") == pytest.approx([2.0, 3.0])
    assert allocation_scores([0.25, 1 / 9], "inv_p") == pytest.approx([4.0, 9.0])
    assert allocation_scores([0.25, 0.5], "variance_optimal") == pytest.approx([math.sqrt(3), 1.0])
    # p is clipped into [1e-6, 1 - 1e-6]: finite at 0, positive at 1
    assert allocation_scores([0.0, 1.0], "inv_p") == pytest.approx([1e6, 1 / (1 - 1e-6)])
    assert allocation_scores([1.0], "variance_optimal")[0] == pytest.approx(1e-3, rel=1e-3)


def test_proportional_when_no_bound_binds():
    # variance_optimal scores 2, 1, 0.5 -> 8 : 4 : 2 of 14
    assert allocate([0.2, 0.5, 0.8], 14, 2, 8, "variance_optimal") == [8, 4, 2]


def test_clipped_at_max_and_redistributed():
    # inv_sqrt_p scores 10, 5, 2, 1 (sum 18). 40 / 18 would give the first 22.2 > 16: it takes 16 and the other
    # 24 go to scores 5, 2, 1 -> 15, 6, 3, all inside [2, 16].
    assert allocate([0.01, 0.04, 0.25, 1.0], 40, 2, 16) == [16, 15, 6, 3]


def test_clipped_at_both_bounds():
    # Same scores, 32 samples in [4, 16]: lam = 1.6 gives 16, 8, 3.2 -> 4, 1.6 -> 4, which sum to 32.
    assert allocate([0.01, 0.04, 0.25, 1.0], 32, 4, 16) == [16, 8, 4, 4]


def test_largest_remainder_rounding():
    # inv_p scores 10, 5, 10/3 (sum 55/3): shares 60/11, 30/11, 20/11 = 5.45, 2.73, 1.82.
    # Floors 5, 2, 1 leave 2 samples for the largest fractions .82 and .73.
    assert allocate([0.1, 0.2, 0.3], 10, 1, 10, "inv_p") == [5, 3, 2]


def test_multiple_of():
    # In units of 4: 10 units in [1, 4], scores 10, 5, 2, 1. lam = 5/7 gives 4, 25/7, 10/7, 1 (clipped up from 5/7).
    # Floors 4, 3, 1, 1 leave one unit for the larger fraction 4/7 (second prompt).
    assert allocate([0.01, 0.04, 0.25, 1.0], 40, 4, 16, multiple_of=4) == [16, 16, 4, 4]


def test_equal_shares_round_up_in_index_order():
    assert allocate([0.5, 0.5, 0.5], 10, 0, 10) == [4, 3, 3]


def test_numpy_integers_are_accepted():
    assert allocate([0.2, 0.5, 0.8], np.int64(14), np.int32(2), np.int64(8), "variance_optimal") == [8, 4, 2]


def test_degenerate_budgets():
    assert allocate([], 0, 2, 8) == []
    assert allocate([0.1, 0.9], 4, 2, 8) == [2, 2]  # total at n * min
    assert allocate([0.1, 0.9], 16, 2, 8) == [8, 8]  # total at n * max
    assert allocate([0.1, 0.9], 6, 3, 3) == [3, 3]


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (([0.5, 0.5], 3, 2, 8), {}, r"must lie in \[4, 16\]"),
        (([0.5, 0.5], 17, 2, 8), {}, r"must lie in \[4, 16\]"),
        (([0.5], 4, 5, 3), {}, "exceeds max_samples"),
        (([0.5], 6, 2, 8), {"multiple_of": 4}, "total=6 is not a multiple"),
        (([0.5], 8, 2, 8), {"multiple_of": 4}, "min_samples=2 is not a multiple"),
        (([0.5], 8, 0, 8), {"multiple_of": 0}, "multiple_of must be a positive"),
        (([0.5], 8.0, 0, 8), {}, "total must be a non-negative integer"),
        (([0.5], -1, 0, 8), {}, "total must be a non-negative integer"),
        (([0.5], 8, 0, 8), {"rule": "sqrt_p"}, "Unknown allocation rule"),
        (([math.nan], 8, 0, 8), {}, "NaN pass rate"),
    ],
)
def test_bad_input_is_rejected(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        allocate(*args, **kwargs)


# --------------------------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------------------------

pass_rates = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=24)


@st.composite
def problems(draw):
    p_hat = draw(pass_rates)
    unit = draw(st.sampled_from([1, 1, 2, 4]))
    lo = unit * draw(st.integers(0, 4))
    hi = lo + unit * draw(st.integers(0, 16))
    total = unit * draw(st.integers(len(p_hat) * lo // unit, len(p_hat) * hi // unit))
    rule = draw(st.sampled_from(ALLOCATION_RULES))
    return p_hat, total, lo, hi, rule, unit


@settings(max_examples=300, deadline=None)
@given(problems())
def test_sum_bounds_and_multiples(problem):
    p_hat, total, lo, hi, rule, unit = problem
    counts = allocate(p_hat, total, lo, hi, rule, multiple_of=unit)
    assert len(counts) == len(p_hat)
    assert sum(counts) == total
    assert all(lo <= n <= hi and n % unit == 0 for n in counts)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_within_one_unit_of_the_continuous_water_filling(problem):
    p_hat, total, lo, hi, rule, unit = problem
    counts = allocate(p_hat, total, lo, hi, rule, multiple_of=unit)
    shares = reference_shares(p_hat, total // unit, lo // unit, hi // unit, rule)
    assert all(abs(n / unit - x) < 1 + 1e-6 for n, x in zip(counts, shares, strict=True))


@settings(max_examples=300, deadline=None)
@given(pass_rates, st.sampled_from(ALLOCATION_RULES), st.integers(0, 200))
def test_exactly_proportional_without_bounds(p_hat, rule, total):
    counts = allocate(p_hat, total, 0, total, rule)
    scores = [reference_score(p, rule) for p in p_hat]
    assert all(abs(n - total * s / sum(scores)) < 1 + 1e-6 for n, s in zip(counts, scores, strict=True))


@settings(max_examples=300, deadline=None)
@given(problems())
def test_harder_prompts_never_get_fewer_samples(problem):
    # All three rules decrease in p; rounding may cost at most one unit.
    p_hat, total, lo, hi, rule, unit = problem
    counts = allocate(p_hat, total, lo, hi, rule, multiple_of=unit)
    for p_i, n_i in zip(p_hat, counts, strict=True):
        for p_j, n_j in zip(p_hat, counts, strict=True):
            if p_i < p_j:
                assert n_i >= n_j - unit


@settings(max_examples=300, deadline=None)
@given(problems(), st.randoms(use_true_random=False))
def test_permuting_prompts_permutes_the_allocation(problem, rng):
    p_hat, total, lo, hi, rule, unit = problem
    order = list(range(len(p_hat)))
    rng.shuffle(order)
    counts = allocate(p_hat, total, lo, hi, rule, multiple_of=unit)
    permuted = allocate([p_hat[i] for i in order], total, lo, hi, rule, multiple_of=unit)
    # Equal scores (equal pass rates, or both clipped near 0 or 1) may swap their rounding, as ties go by index: so
    # compare (score, count) multisets; with distinct scores this is exact equivariance.
    scores = allocation_scores(p_hat, rule)
    assert sorted(zip(scores, counts, strict=True)) == sorted(zip([scores[i] for i in order], permuted, strict=True))
    if len(set(scores)) == len(scores):
        assert permuted == [counts[i] for i in order]
