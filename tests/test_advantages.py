"""Tests of the pure advantage functions (`trl_ada.core.advantages`) against hand-computed values and the stdlib."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ada.core.advantages import EPS, difficulty_weights, nan_mean_std, normalized_advantages

NAN = math.nan


def t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def assert_close(actual: torch.Tensor, expected, **kw):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), equal_nan=True, **kw)


# --------------------------------------------------------------------------------------------------------------------
# normalized_advantages
# --------------------------------------------------------------------------------------------------------------------

REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]]


def test_pool_baseline_without_std():
    # the pool pass rates 0.25 and 0.1 are baselines different from the kept groups' means (0.5 and 0.25)
    advantages = normalized_advantages(t(REWARDS), t([0.25, 0.1]))
    assert_close(advantages, [[0.75, -0.25, -0.25, 0.75], [-0.1, -0.1, -0.1, 0.9]])


def test_with_std_exact_and_default_eps():
    advantages = normalized_advantages(t(REWARDS), t([0.25, 0.1]), scale=t([0.5, 2.0]), eps=0.0)
    assert_close(advantages, [[1.5, -0.5, -0.5, 1.5], [-0.05, -0.05, -0.05, 0.45]])
    # default eps is TRL's 1e-4, added to the scale
    assert EPS == 1e-4
    advantages = normalized_advantages(t(REWARDS), t([0.25, 0.1]), scale=t([0.5, 2.0]))
    assert_close(
        advantages,
        [[0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, 0.75 / 0.5001], [-0.1 / 2.0001] * 3 + [0.9 / 2.0001]],
    )


def test_with_weights():
    advantages = normalized_advantages(t(REWARDS), t([0.25, 0.1]), weights=t([2.0, 0.5]))
    assert_close(advantages, [[1.5, -0.5, -0.5, 1.5], [-0.05, -0.05, -0.05, 0.45]])
    # weights and scale together: w * (r - b) / s
    advantages = normalized_advantages(t(REWARDS), t([0.25, 0.1]), scale=t([0.5, 0.5]), weights=t([2.0, 4.0]), eps=0)
    assert_close(advantages, [[3.0, -1.0, -1.0, 3.0], [-0.8, -0.8, -0.8, 7.2]])


def test_nan_rewards_and_undefined_scale_give_zero():
    rewards = t([[1.0, NAN, 0.0], [NAN, NAN, NAN], [1.0, 1.0, 0.0]])
    advantages = normalized_advantages(rewards, t([0.5, NAN, 0.5]), scale=t([0.5, NAN, NAN]), eps=0.0)
    assert_close(advantages, [[1.0, 0.0, -1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert not torch.isnan(advantages).any()


def test_scalar_scale_and_baseline():
    advantages = normalized_advantages(t(REWARDS), t([0.25, 0.1]), scale=torch.tensor(2.0), eps=0.0)
    assert_close(advantages, [[0.375, -0.125, -0.125, 0.375], [-0.05, -0.05, -0.05, 0.45]])
    advantages = normalized_advantages(t(REWARDS), 0.5, scale=4.0, eps=0.0)
    assert_close(advantages, [[0.125, -0.125, -0.125, 0.125], [-0.125, -0.125, -0.125, 0.125]])


def test_dtype_and_shape_follow_the_rewards():
    rewards = torch.tensor(REWARDS, dtype=torch.float32)
    advantages = normalized_advantages(rewards, torch.tensor([0.25, 0.1], dtype=torch.float64))
    assert advantages.dtype == torch.float32 and advantages.shape == (2, 4)
    assert_close(advantages, [[0.75, -0.25, -0.25, 0.75], [-0.1, -0.1, -0.1, 0.9]])


# --------------------------------------------------------------------------------------------------------------------
# nan_mean_std
# --------------------------------------------------------------------------------------------------------------------


def test_nan_mean_std_matches_statistics():
    rows = [
        [1.0, 0.0, NAN, 0.5, 1.0],
        [0.3, NAN, NAN, 0.9, 0.2],
        [2.0, 2.0, 2.0, 2.0, 2.0],
        [-1.0, 4.0, 0.25, NAN, 7.5],
    ]
    mean, std = nan_mean_std(t(rows))
    for k, row in enumerate(rows):
        scored = [x for x in row if not math.isnan(x)]
        assert mean[k].item() == pytest.approx(statistics.mean(scored), abs=1e-12)
        assert std[k].item() == pytest.approx(statistics.stdev(scored), abs=1e-12)


def test_nan_mean_std_degenerate_rows():
    mean, std = nan_mean_std(t([[NAN, NAN, NAN], [NAN, 3.0, NAN], [1.0, NAN, 3.0]]))
    assert math.isnan(mean[0]) and math.isnan(std[0])  # nothing present
    assert mean[1].item() == 3.0 and math.isnan(std[1])  # one value: no unbiased std
    assert mean[2].item() == 2.0 and std[2].item() == pytest.approx(math.sqrt(2.0))


def test_nan_mean_std_matches_torch_on_nan_free_data():
    values = torch.randn(5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mean, std = nan_mean_std(values)
    assert_close(mean, values.mean(dim=-1))
    assert_close(std, values.std(dim=-1, unbiased=True))
    mean0, std0 = nan_mean_std(values, dim=0)
    assert_close(mean0, values.mean(dim=0))
    assert_close(std0, values.std(dim=0, unbiased=True))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    st.lists(
        st.lists(st.floats(-10, 10) | st.just(NAN), min_size=3, max_size=3),
        min_size=1,
        max_size=5,
    )
)
def test_nan_mean_std_property(rows):
    mean, std = nan_mean_std(t(rows))
    for k, row in enumerate(rows):
        scored = [x for x in row if not math.isnan(x)]
        if scored:
            assert mean[k].item() == pytest.approx(statistics.fmean(scored), abs=1e-9)
        else:
            assert math.isnan(mean[k])
        if len(scored) >= 2:
            assert std[k].item() == pytest.approx(statistics.stdev(scored), abs=1e-9)
        else:
            assert math.isnan(std[k])


# --------------------------------------------------------------------------------------------------------------------
# difficulty_weights
# --------------------------------------------------------------------------------------------------------------------

PASS_RATES = [0.0, 1 / 64, 1 / 16, 0.25, 0.5, 1.0, NAN]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_difficulty_weights_hand_computed(dtype):
    p = t(PASS_RATES, dtype)
    # 1/sqrt(p) capped at 4: 1/sqrt(1/64) = 8 -> 4, 1/sqrt(1/16) = 4, 1/sqrt(1/4) = 2, 1/sqrt(1/2) = sqrt(2)
    assert_close(difficulty_weights(p, "inv_sqrt_p", 4.0), [4.0, 4.0, 4.0, 2.0, math.sqrt(2), 1.0, 1.0])
    # 1/p capped at 4: 64 -> 4, 16 -> 4, 4, 2
    assert_close(difficulty_weights(p, "inv_p", 4.0), [4.0, 4.0, 4.0, 4.0, 2.0, 1.0, 1.0])
    assert_close(difficulty_weights(p, "none"), [1.0] * 7)
    # another cap: 2
    assert_close(difficulty_weights(p, "inv_sqrt_p", 2.0), [2.0, 2.0, 2.0, 2.0, math.sqrt(2), 1.0, 1.0])
    assert_close(difficulty_weights(p, "inv_p", 2.0), [2.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0])


def test_difficulty_weights_unknown_scheme_raises():
    with pytest.raises(ValueError, match="inv_q"):
        difficulty_weights(t([0.5]), "inv_q")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    rates=st.lists(st.floats(0, 1) | st.just(NAN), min_size=1, max_size=8),
    max_weight=st.floats(1, 100) | st.sampled_from([1.0, 3.0, 7.0, 1.1, 2.2, 9.1]),
    scheme=st.sampled_from(["inv_sqrt_p", "inv_p"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_difficulty_weight_cap_is_never_exceeded(rates, max_weight, scheme, dtype):
    weights = difficulty_weights(t(rates, dtype), scheme, max_weight)
    # the cap as the weights' dtype can hold it (1.1 is 1.10000002 in float32)
    cap = torch.tensor(max_weight, dtype=dtype)
    assert (weights <= cap).all(), (weights, cap)
    for p, w in zip(rates, weights.tolist(), strict=True):
        if math.isnan(p):
            assert w == 1.0
            continue
        assert w >= 1.0 - 1e-6
        raw = math.inf if p == 0 else (1 / math.sqrt(p) if scheme == "inv_sqrt_p" else 1 / p)
        assert w == pytest.approx(min(raw, max_weight), rel=1e-5)


def test_normalize_then_sum_hand_worked():
    from trl_ada.core.advantages import normalize_then_sum

    nan = float("nan")
    # One prompt; its pool of 3: function a gives 1, 0, 1 (mean 2/3, std sqrt(1/3)); function b gives 0.5, 0.5 and
    # could not score the third (mean 0.5, std 0). Kept: the first two. Weights a = 1, b = 2.
    reference = torch.tensor([[[1.0, 0.5], [0.0, 0.5], [1.0, nan]]])
    kept = reference[:, :2]
    summed = normalize_then_sum(kept, reference, torch.tensor([1.0, 2.0]))
    std_a = (1 / 3) ** 0.5
    expected = [(1 - 2 / 3) / (std_a + 1e-4) + 2 * 0.0, (0 - 2 / 3) / (std_a + 1e-4) + 2 * 0.0]
    assert summed[0].tolist() == pytest.approx(expected)
    # A row no function scored stays NaN (TRL then gives it advantage 0).
    unscored = torch.tensor([[[nan, nan], [1.0, 0.5]]])
    assert torch.isnan(normalize_then_sum(unscored, unscored, torch.ones(2))[0, 0])
