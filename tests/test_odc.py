"""Oversample-Downsample-Correct (`trl_ada.core.advantages.odc_weights`): the expected weighted update, enumerated
exactly for a one-parameter Bernoulli policy, against the gradient of each documented objective (from autograd).

Policy: a prompt is answered correctly with probability p = sigmoid(theta); reward 1 if correct. A step draws a pool
of N completions, keeps K of them and updates with (1/K) * sum_i A_i * d/dtheta log pi(y_i). Every pool outcome and
every kept subset is enumerated, so the expectations are exact.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from itertools import combinations, product

import pytest
import torch

from trl_ada.core.advantages import difficulty_weights, normalized_advantages, odc_weights
from trl_ada.core.engine import Pool, downsample

POOL, KEPT = 6, 3


def gradient(objective: Callable[[torch.Tensor], torch.Tensor], theta: float) -> float:
    """d/dtheta of objective(p), p = sigmoid(theta), by autograd."""
    t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    objective(torch.sigmoid(t)).backward()
    return t.grad.item()


def score(y: int, theta: float) -> float:
    """d/dtheta log pi(y), by autograd."""
    return gradient(lambda p: torch.log(p if y else 1 - p), theta)


def expected_update(
    theta: float,
    weight: torch.Tensor | None,
    baseline: str,
    keep: Callable[[tuple[int, ...], int], list[list[int]]],
    pool_size: int = POOL,
    kept: int = KEPT,
) -> float:
    """E[(1/K) sum_i A_i score(y_i)] over pools and kept subsets; `keep(pool, kept)` lists equally likely kept
    subsets."""
    p = torch.sigmoid(torch.tensor(theta, dtype=torch.float64)).item()
    scores = {y: score(y, theta) for y in (0, 1)}
    total = 0.0
    for pool in product((0, 1), repeat=pool_size):
        pool_probability = math.prod(p if y else 1 - p for y in pool)
        subsets = keep(pool, kept)
        for subset in subsets:
            rewards = torch.tensor([[float(pool[i]) for i in subset]], dtype=torch.float64)
            base = torch.tensor([p if baseline == "memory" else sum(pool) / pool_size], dtype=torch.float64)
            advantages = normalized_advantages(rewards, base, None, weight)[0]
            update = sum(a * scores[pool[i]] for a, i in zip(advantages.tolist(), subset, strict=True)) / kept
            total += pool_probability * update / len(subsets)
    return total


def uniform(pool: tuple[int, ...], kept: int) -> list[list[int]]:
    return [list(subset) for subset in combinations(range(len(pool)), kept)]


def balanced(pool: tuple[int, ...], kept: int) -> list[list[int]]:
    # With a Bernoulli policy the update depends on the kept rewards only, so one draw stands for all of them.
    drawn = Pool(positive_threshold=0.5)
    drawn.add(list(range(len(pool))), [float(y) for y in pool], round_index=0)
    return [downsample(drawn, kept, random.Random(0))]


def theta_of(p: float) -> float:
    return math.log(p / (1 - p))


def test_odc_weights_hand_values():
    weights = odc_weights([0.5, 0.25, 0.1, math.nan, 1.0], max_weight=4.0)
    torch.testing.assert_close(weights, torch.tensor([2.0, 4.0, 4.0, 1.0, 1.0], dtype=torch.float64))
    assert odc_weights(torch.tensor([0.2], dtype=torch.float32), max_weight=10.0).dtype == torch.float32


@pytest.mark.parametrize("p", [0.3, 0.5, 0.8])
def test_odc_is_unbiased_for_the_log_objective(p):
    theta = theta_of(p)
    update = expected_update(theta, odc_weights([p], max_weight=4.0), "memory", uniform)
    assert update == pytest.approx(gradient(torch.log, theta), rel=1e-9)


@pytest.mark.parametrize("p", [0.3, 0.8])
def test_pool_mean_baseline_scales_by_n_minus_one_over_n(p):
    theta = theta_of(p)
    update = expected_update(theta, odc_weights([p], max_weight=4.0), "pool", uniform)
    assert update == pytest.approx((POOL - 1) / POOL * gradient(torch.log, theta), rel=1e-9)


def test_the_cap_targets_a_clipped_objective():
    # p = 0.1 < 1/4: the weight is 4, so the update follows grad(4 p), not grad(log p) = grad(10 p) here.
    theta = theta_of(0.1)
    update = expected_update(theta, odc_weights([0.1], max_weight=4.0), "memory", uniform)
    assert update == pytest.approx(gradient(lambda p: 4 * p, theta), rel=1e-9)
    assert update < 0.5 * gradient(torch.log, theta)


@pytest.mark.parametrize("p", [0.2, 0.7])
def test_objectives_of_the_other_weightings(p):
    theta = theta_of(p)
    plain = expected_update(theta, None, "memory", uniform)
    assert plain == pytest.approx(gradient(lambda q: q, theta), rel=1e-9)  # E[p]
    sqrt_weight = difficulty_weights(torch.tensor([p], dtype=torch.float64), "inv_sqrt_p", max_weight=4.0)
    weighted = expected_update(theta, sqrt_weight, "memory", uniform)
    assert weighted == pytest.approx(gradient(lambda q: 2 * q.sqrt(), theta), rel=1e-9)  # E[2 sqrt p]


def test_balanced_downsample_breaks_the_guarantee():
    # The balanced downsample keeps more positives of a hard prompt than a uniform draw would: 1/p on top of it
    # overshoots grad log p, which is why ODC pairs with a uniform downsample (or training on the whole pool).
    # Pool of 12, keep 2 + 2: a uniform draw would give grad log p exactly (first test); this gives 1.8 times it.
    theta = theta_of(0.2)
    update = expected_update(theta, odc_weights([0.2], max_weight=8.0), "memory", balanced, pool_size=12, kept=4)
    assert update > 1.5 * gradient(torch.log, theta)


def expected_update_factor(p: float, pool_size: int, weighting: str, group_size: int = 4) -> float:
    """Exact enumeration of the trainer's own advantage functions (defaults: pool-mean baseline, no std scaling,
    `max_difficulty_weight=4`) over every outcome of a pool of `pool_size` draws at pass rate `p` and every uniformly
    drawn kept group: the expected update is this factor times grad p. A kept completion's score is, given its
    reward, grad p / p (right) or -grad p / (1 - p) (wrong), whatever selected it."""
    import itertools

    from trl_ada.core.advantages import difficulty_weights, normalized_advantages

    total = 0.0
    subsets = list(itertools.combinations(range(pool_size), group_size))
    for outcome in itertools.product((0.0, 1.0), repeat=pool_size):
        positives = sum(outcome)
        probability = p**positives * (1 - p) ** (pool_size - positives)
        pass_rate = torch.tensor([positives / pool_size], dtype=torch.float64)
        weight = difficulty_weights(pass_rate, weighting, 4.0)
        kept = torch.tensor([[outcome[i] for i in subset] for subset in subsets], dtype=torch.float64)
        advantages = normalized_advantages(kept, pass_rate.expand(len(subsets)), None, weight.expand(len(subsets)))
        scores = torch.where(kept == 1.0, 1 / p, -1 / (1 - p))
        total += probability * float((advantages * scores).sum(dim=1).mean())
    return total


@pytest.mark.parametrize(
    ("p", "pool_size", "ratio"),
    [(0.1, 8, 0.757), (0.2, 8, 0.924), (0.5, 8, 1.045), (0.1, 12, 0.842), (0.5, 12, 1.031)],
)
def test_inv_sqrt_p_ascends_sqrt_p_only_approximately_as_documented(p, pool_size, ratio):
    # The E[2 sqrt p] gradient would be grad p / sqrt(p), times the (N - 1)/N every pool-mean baseline carries.
    ideal = 4 * (pool_size - 1) / pool_size / math.sqrt(p)
    assert expected_update_factor(p, pool_size, "inv_sqrt_p") / ideal == pytest.approx(ratio, abs=5e-4)


@pytest.mark.parametrize("pool_size", [4, 8])
def test_pool_baseline_scales_each_prompt_by_n_minus_1_over_n(pool_size):
    for p in (0.1, 0.3, 0.8):
        assert expected_update_factor(p, pool_size, "none") == pytest.approx(4 * (pool_size - 1) / pool_size)


def test_odc_weight_of_a_prompt_never_seen_is_the_cap_under_the_default_prior(tmp_path):
    from trl_ada import ReinforceAdaConfig
    from trl_ada.core.advantages import odc_weights

    config = ReinforceAdaConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, num_generations=4)
    prior = config.pass_rate_memory().p_hat("never seen")
    assert prior == pytest.approx(1 / 17)
    assert odc_weights([prior], config.max_difficulty_weight).item() == config.max_difficulty_weight == 4.0


# -------------------------------------------------------------------------------------------------------------------
# The full default process: Seq-balance rounds, balanced downsample, pool baseline (the trainer's own defaults)
# -------------------------------------------------------------------------------------------------------------------


def default_config(tmp_path, **overrides):
    from trl_ada import ReinforceAdaConfig

    return ReinforceAdaConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **overrides)


def default_process_factor(p: float, config) -> float:
    """E[(1/G) sum_i A_i score(y_i)] / grad p for one prompt of pass rate p under `config`'s whole process, exactly:
    every round's number of positives (binomial) is enumerated, the schedule's own exit rule decides when the pool
    stops, `downsample` picks the kept group's composition, and the trainer's advantage functions weight it. A kept
    completion's score given its reward is grad p / p or -grad p / (1 - p), whatever selected it."""
    schedule, group = config.schedule(), config.num_generations
    total = 0.0
    frontier = [((), 1.0)]  # (rewards drawn so far, in order, one per completion; probability)
    while frontier:
        rewards, probability = frontier.pop()
        pool = Pool(schedule.positive_threshold)
        pool.add(list(range(len(rewards))), list(rewards), round_index=0)
        round_index = len(rewards) // schedule.samples_per_round  # fixed sizing: every round is samples_per_round
        if rewards and (
            schedule.exit_rule.holds(pool.num_positive, pool.num_negative) or len(pool) >= schedule.budget
        ):
            kept = [rewards[i] for i in downsample(pool, group, random.Random(0), config.downsample)]
            pass_rate = torch.tensor([pool.mean], dtype=torch.float64)
            weight = difficulty_weights(pass_rate, config.difficulty_weighting, config.max_difficulty_weight)
            baseline = pass_rate if config.advantage_baseline == "pool" else torch.tensor([sum(kept) / group])
            advantages = normalized_advantages(torch.tensor([kept], dtype=torch.float64), baseline, None, weight)[0]
            scores = [1 / p if r == 1.0 else -1 / (1 - p) for r in kept]
            total += probability * sum(a * s for a, s in zip(advantages.tolist(), scores, strict=True)) / group
            continue
        size = schedule.round_size(pool, round_index)
        for positives in range(size + 1):  # the order within a round does not matter: only counts are read
            outcome = (1.0,) * positives + (0.0,) * (size - positives)
            chance = math.comb(size, positives) * p**positives * (1 - p) ** (size - positives)
            frontier.append((rewards + outcome, probability * chance))
    return total


# Expected update per prompt, as a multiple of grad p (GRPO's objective E[p]), under the trainer's defaults
# (sampling_strategy="balanced", 8 per round x 4 rounds, num_generations=8, balanced downsample, pool baseline,
# scale_rewards="none"); the table "Under the defaults" in docs/theory.md lists the same numbers.
DEFAULT_FACTORS = {
    "none": {0.05: 3.65, 0.1: 3.148, 0.2: 1.999, 0.5: 1.0, 0.8: 1.999, 0.9: 3.148},
    "inv_sqrt_p": {0.05: 13.015, 0.1: 9.439, 0.2: 4.51, 0.5: 1.444, 0.8: 2.283, 0.9: 3.38},
}


@pytest.mark.parametrize("weighting", ["none", "inv_sqrt_p"])
def test_expected_update_under_the_full_default_process(tmp_path, weighting):
    config = default_config(tmp_path, difficulty_weighting=weighting)
    assert (config.sampling_strategy, config.downsample, config.advantage_baseline, config.scale_rewards) == (
        "balanced",
        "balanced",
        "pool",
        "none",
    )
    factors = {p: round(default_process_factor(p, config), 3) for p in DEFAULT_FACTORS[weighting]}
    assert factors == DEFAULT_FACTORS[weighting]


def test_enumeration_of_one_uniform_round_gives_n_minus_1_over_n(tmp_path):
    config = default_config(tmp_path, sampling_strategy="uniform")  # one round of num_generations = 8, kept whole
    assert default_process_factor(0.3, config) == pytest.approx(7 / 8)


def test_default_process_enumeration_matches_the_engine(tmp_path):
    """The enumeration above against the engine itself: 4000 prompts at p = 0.2 sampled by `engine.sample` with
    Bernoulli rewards, each kept group's update averaged; within 4 standard errors."""
    from trl_ada.core.engine import RoundsBackend, sample

    config, p = default_config(tmp_path), 0.2
    rng = random.Random(0)
    result = sample(
        4000,
        config.schedule(),
        RoundsBackend(lambda requests: [float(rng.random() < p) for r in requests for _ in range(r.num_samples)]),
        lambda requests, handles: list(handles),
    )
    updates = []
    for pool in result.pools:
        kept = [pool.rewards[i] for i in downsample(pool, config.num_generations, rng)]
        baseline = pool.mean
        updates.append(sum((r - baseline) * (1 / p if r == 1.0 else -1 / (1 - p)) for r in kept) / len(kept))
    mean = sum(updates) / len(updates)
    se = (sum((u - mean) ** 2 for u in updates) / (len(updates) - 1) / len(updates)) ** 0.5
    assert abs(mean - default_process_factor(p, config)) < 4 * se
