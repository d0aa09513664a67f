"""The memory baseline (`advantage_baseline="memory"`): hand-worked advantages, the exact expected update of a
one-parameter policy against autograd's gradient, the config's refusals, and two trainer steps worked by hand."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest
import torch
from test_trainer import keyed_dataset, logged_key, make_trainer

from trl_ada import ReinforceAdaConfig
from trl_ada.adapter.async_worker import AdaRolloutConfig
from trl_ada.core.advantages import memory_baselines, pool_advantages


def test_memory_baselines_are_uniform_prior_posterior_means():
    # (1 + N_pos) / (2 + N_total): never seen -> 1/2; 3 of 4 -> 4/6; decayed 0 of 8.1 -> 1/10.1.
    baselines = memory_baselines([(0.0, 0.0), (3.0, 4.0), (0.0, 8.1)])
    assert baselines.tolist() == pytest.approx([0.5, 4 / 6, 1 / 10.1])


def advantages(kept, counts, baseline="memory", scale_rewards="none"):
    group = len(kept[0])
    rewards = torch.tensor([[r] for row in kept for r in row], dtype=torch.float32)
    result, _ = pool_advantages(
        rewards,
        torch.ones(1),
        kept,
        [sum(row) / group for row in kept],
        [0.5] * len(kept),
        group_size=group,
        budget=group,
        baseline=baseline,
        scale_rewards=scale_rewards,
        memory_counts=counts,
    )
    return result.tolist()


def test_an_agreeing_group_trains_against_the_memory_but_not_against_its_own_mean():
    kept, counts = [[1.0, 1.0], [1.0, 0.0]], [(3.0, 4.0), (0.0, 0.0)]
    # Baselines 4/6 and 1/2, whatever this step's rewards are.
    assert advantages(kept, counts) == pytest.approx([1 / 3, 1 / 3, 0.5, -0.5])
    assert advantages(kept, counts, baseline="group") == pytest.approx([0.0, 0.0, 0.5, -0.5])
    # "batch": divided by the unbiased std of the four kept rewards (mean 3/4, variance (3/16 + 9/16) / 3 = 1/4).
    assert advantages(kept, counts, scale_rewards="batch") == pytest.approx(
        [a / (0.5 + 1e-4) for a in (1 / 3, 1 / 3, 0.5, -0.5)]
    )


def test_memory_baseline_refuses_what_it_cannot_compute():
    with pytest.raises(ValueError, match="memory_counts"):
        advantages([[1.0, 0.0]], None)
    with pytest.raises(ValueError, match="memory_counts"):
        advantages([[1.0, 0.0]], [(0.0, 0.0), (1.0, 1.0)])
    with pytest.raises(ValueError, match="scale_rewards"):
        advantages([[1.0, 0.0]], [(0.0, 0.0)], scale_rewards="group")


def expected_update(theta: float, group: int, baseline: float | None) -> float:
    """E[(1/n) sum_i (r_i - b_i) d/dtheta log pi(y_i)] for a policy right with probability sigmoid(theta), reward 1
    when right, enumerated over every group outcome; `baseline=None`: the group mean (GRPO's b_i)."""
    p = torch.sigmoid(torch.tensor(theta, dtype=torch.float64)).item()
    # d/dtheta log p = 1 - p (right), d/dtheta log(1 - p) = -p (wrong)
    total = 0.0
    for outcome in itertools.product((0, 1), repeat=group):
        probability = 1.0
        for y in outcome:
            probability *= p if y else 1 - p
        mean = sum(outcome) / group
        for y in outcome:
            b = mean if baseline is None else baseline
            total += probability * (y - b) * ((1 - p) if y else -p) / group
    return total


@pytest.mark.parametrize("theta", [-2.0, 0.0, 1.5])
@pytest.mark.parametrize("group", [2, 4])
def test_memory_baseline_ascends_the_pass_rate_unscaled(theta, group):
    """A baseline fixed before the draws leaves the expected update at d p / d theta (any value of it); the group
    mean shrinks it by (n - 1) / n, as the docstring of `memory_baselines` says."""
    t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    torch.sigmoid(t).backward()
    gradient = t.grad.item()
    for b in memory_baselines([(0.0, 0.0), (3.0, 4.0), (0.0, 8.1)]).tolist():
        assert expected_update(theta, group, b) == pytest.approx(gradient, rel=1e-12)
    assert expected_update(theta, group, None) == pytest.approx(gradient * (group - 1) / group, rel=1e-12)


def test_config_refuses_a_group_std_and_normalize_then_sum(tmp_path):
    common = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", advantage_baseline="memory")
    ReinforceAdaConfig(**common, scale_rewards="batch")  # accepted
    with pytest.raises(ValueError, match="scale_rewards='none' or 'batch'"):
        ReinforceAdaConfig(**common, scale_rewards="group")
    with pytest.raises(ValueError, match="normalize_then_sum"):
        ReinforceAdaConfig(**common, scale_rewards="none", multi_objective_aggregation="normalize_then_sum")


def test_config_refuses_a_weight_from_this_steps_pool_and_accepts_one_fixed_before_it(tmp_path):
    common = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", advantage_baseline="memory")
    for weighting in ("inv_sqrt_p", "inv_p"):
        with pytest.raises(ValueError, match=rf"difficulty_weighting='{weighting}'.*pool's pass rate this step"):
            ReinforceAdaConfig(**common, difficulty_weighting=weighting)
        ReinforceAdaConfig(**(common | {"advantage_baseline": "pool"}), difficulty_weighting=weighting)  # accepted
    ReinforceAdaConfig(**common, difficulty_weighting="odc", downsample="uniform")  # 1/p_hat: fixed before the step
    ReinforceAdaConfig(**common, difficulty_weighting="none")


def test_config_refuses_the_pilot(tmp_path):
    common = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", pilot_size=2)
    with pytest.raises(ValueError, match=r"pilot_size.*advantage_baseline='memory'.*bias"):
        ReinforceAdaConfig(**common, advantage_baseline="memory")
    ReinforceAdaConfig(**common, advantage_baseline="pool")  # accepted
    ReinforceAdaConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", advantage_baseline="memory")


def pilot_update(theta: float, baseline: float, stopped: str) -> float:
    """Like `expected_update`, for a group of 4 that draws a pilot of 2 and stops there whenever the pilot agrees
    (its stop rule holding); `stopped`: "repeat" trains the pilot twice over, "zero" gives it no update."""
    p = torch.sigmoid(torch.tensor(theta, dtype=torch.float64)).item()

    def term(y: int) -> float:
        return (y - baseline) * ((1 - p) if y else -p) / 4

    total = 0.0
    for outcome in itertools.product((0, 1), repeat=4):
        probability = 1.0
        for y in outcome:
            probability *= p if y else 1 - p
        pilot = outcome[:2]
        if pilot[0] != pilot[1]:
            total += probability * sum(term(y) for y in outcome)
        elif stopped == "repeat":  # the last two draws are never made: summing over them weighs the pilot as before
            total += probability * 2 * sum(term(y) for y in pilot)
    return total


@pytest.mark.parametrize("theta", [-2.0, 1.5])
def test_a_stopped_pilot_biases_the_memory_baseline_either_way(theta):
    """Why the config refuses the pilot with the memory baseline: stopping depends on the pilot's rewards, so neither
    repeating a stopped pilot nor zeroing it leaves the expected update at d p / d theta."""
    t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    torch.sigmoid(t).backward()
    gradient = t.grad.item()
    b = 4 / 6  # counts (3, 4)
    assert expected_update(theta, 4, b) == pytest.approx(gradient, rel=1e-12)  # no pilot: exact
    for stopped in ("repeat", "zero"):
        assert abs(pilot_update(theta, b, stopped) / gradient - 1) > 0.05


def test_the_async_worker_does_not_offer_it():
    with pytest.raises(ValueError, match="advantage_baseline='memory' is not one of"):
        AdaRolloutConfig(advantage_baseline="memory").validate(num_generations=4)


@pytest.mark.slow
def test_two_steps_subtract_the_memory_of_the_steps_before(toy_cold_dir, tmp_path):
    # Per prompt, the i-th scored completion's reward: "a" never right; "b" right on its first two, then wrong.
    calls = defaultdict(int)

    def scripted_reward(completions, key, **kwargs):
        rewards = []
        for k in key:
            rewards.append(float(k == "b" and calls[k] < 2))
            calls[k] += 1
        return rewards

    seen_rows = []
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        scripted_reward,
        keyed_dataset("ab"),
        per_device_train_batch_size=4,  # both prompts every step, 2 completions each
        num_generations=2,
        max_steps=2,
        sampling_strategy="uniform",
        advantage_baseline="memory",
        scale_rewards="none",
        prompt_id_column="key",
    )
    original = trainer._log_step

    def spy(step):
        seen_rows.append((sorted(step.memory_counts), sorted(step.advantages.tolist())))
        return original(step)

    trainer._log_step = spy
    trainer.train()
    assert dict(calls) == {"a": 4, "b": 4}
    # Step 1: nothing seen, baseline 1/2 for both (not the memory's own prior 1/17): a's two wrong rows -1/2, b's two
    # right rows +1/2, although each group agrees (the group mean would give 0).
    # Step 2: counts after step 1, a (0, 2) and b (2, 2): baselines 1/4 and 3/4; a's rows -1/4, b's wrong rows -3/4.
    (counts1, step1), (counts2, step2) = seen_rows
    assert counts1 == [(0.0, 0.0), (0.0, 0.0)] and counts2 == [(0.0, 2.0), (2.0, 2.0)]
    assert step1 == pytest.approx([-0.5, -0.5, 0.5, 0.5])
    assert step2 == pytest.approx([-0.75, -0.75, -0.25, -0.25])
    # The table TRL logs shows the advantages the loss used, per prompt.
    logged = zip(trainer._logs["prompt"], trainer._logs["advantages"], strict=True)
    by_key = sorted((logged_key(prompt), advantage) for prompt, advantage in logged)
    assert [k for k, _ in by_key] == ["a", "a", "b", "b"]
    assert [a for _, a in by_key] == pytest.approx([-0.25, -0.25, -0.75, -0.75])


def test_mismatch_is_named_for_several_functions_and_for_totals_other_than_0_and_1():
    from trl_ada.core.advantages import memory_baseline_mismatch

    assert memory_baseline_mismatch(1, [0.0, 1.0, float("nan"), 1.0]) is None  # one 0/1 reward (NaN: unscorable)
    assert memory_baseline_mismatch(1) is None
    several = memory_baseline_mismatch(2, [0.0, 1.0])
    assert "2 reward functions" in several and "pass rate" in several and "'pool'" in several
    assert "0.5, neither 0 nor 1" in memory_baseline_mismatch(1, [1.0, 0.5, 0.0])
    assert "-1, neither 0 nor 1" in memory_baseline_mismatch(1, [1.0, -1.0])  # a +-1 reward's mean is 2p - 1, not p


@pytest.mark.slow
def test_trainer_warns_for_several_functions_at_once_and_for_other_totals_when_seen(
    toy_cold_dir, tmp_path, monkeypatch
):
    from trl_ada.adapter import trainer as trainer_module

    warnings = []
    monkeypatch.setattr(trainer_module.logger, "warning", warnings.append)

    def right(completions, **kwargs):
        return [1.0] * len(completions)

    def ours(found):
        return [w for w in warnings if w.startswith(f"advantage_baseline='memory' with {found}")]

    common = dict(num_generations=2, per_device_train_batch_size=4, sampling_strategy="uniform")
    make_trainer(toy_cold_dir, tmp_path / "pool", [right, right], keyed_dataset("ab"), **common)
    assert warnings == []  # the pool baseline fits any reward
    make_trainer(
        toy_cold_dir, tmp_path / "several", [right, right], keyed_dataset("ab"), **common, advantage_baseline="memory"
    )
    assert len(ours("2 reward functions")) == 1 and len(warnings) == 1

    # One function, 0/1 in the first step, then a 0.5 in every later step: warned once, from the step that has it.
    warnings.clear()
    calls, warned_at = [], []

    def half_later(completions, **kwargs):
        calls.append(len(completions))
        return [0.5 if len(calls) > 1 and i == 0 else float(i % 2) for i in range(len(completions))]

    trainer = make_trainer(
        toy_cold_dir, tmp_path / "half", half_later, keyed_dataset("ab"), **common, max_steps=3,
        advantage_baseline="memory",
    )  # fmt: skip
    assert warnings == []
    original = trainer._log_step

    def spy(step):  # once per step, after its advantages (and the warning, if any)
        original(step)
        warned_at.append(len(warnings))

    trainer._log_step = spy
    trainer.train()
    assert len(calls) == 3 and warned_at == [0, 1, 1]
    (warning,) = warnings
    assert warning == ours("a weighted total reward of 0.5, neither 0 nor 1")[0]
