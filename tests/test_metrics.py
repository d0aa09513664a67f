"""Step metrics that mean what a TRL user reads into them: the pure functions, then the trainer's logs against
independent records kept by the reward function itself."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import pytest
import torch
from test_trainer import ada_logs, keyed_dataset, make_trainer
from trl.trainer.utils import nanstd

from trl_ada.core.metrics import Moments, length_metrics, reward_metrics, reward_moments

# --------------------------------------------------------------------------------------------------------------------
# Pure functions
# --------------------------------------------------------------------------------------------------------------------


def test_length_metrics_hand_worked():
    # Lengths 2, 5, 8 (8 clipped), 3: mean 4.5, terminated 2, 5, 3.
    values = length_metrics([2, 5, 8, 3], [True, True, False, True])
    assert values["completions/mean_length"] == 4.5
    assert (values["completions/min_length"], values["completions/max_length"]) == (2, 8)
    assert values["completions/clipped_ratio"] == 0.25
    assert values["completions/mean_terminated_length"] == pytest.approx(10 / 3)
    assert (values["completions/min_terminated_length"], values["completions/max_terminated_length"]) == (2, 5)
    clipped = length_metrics([4, 4], [False, False])  # none terminated: 0, as GRPOTrainer logs it
    assert clipped["completions/mean_terminated_length"] == 0 and clipped["completions/clipped_ratio"] == 1


def test_moments_add_up_across_processes_to_trls_nanstd():
    values = torch.tensor([0.0, 1.0, float("nan"), 1.0, 0.5, 1.0])
    split = Moments.of(values[:2]) + Moments.of(values[2:])
    assert split.mean == pytest.approx(torch.nanmean(values).item())
    assert split.std == pytest.approx(nanstd(values).item())
    assert math.isnan(Moments.of(torch.tensor([1.0])).std)


def test_reward_metrics_weigh_functions_as_trl_does():
    rewards = torch.tensor([[1.0, 0.0], [0.0, float("nan")], [float("nan"), float("nan")]])
    metrics = reward_metrics(reward_moments(rewards, torch.tensor([1.0, 2.0])), ["a", "b"], prefix="x/")
    # Totals: 1 + 0, 0 (b not scored), NaN (nothing scored): mean 0.5.
    assert metrics["x/reward"] == 0.5 and metrics["x/reward_std"] == pytest.approx(math.sqrt(0.5))
    assert metrics["x/rewards/a/mean"] == 0.5 and metrics["x/rewards/b/mean"] == 0.0


# --------------------------------------------------------------------------------------------------------------------
# The trainer: coin rewards of known pass rates
# --------------------------------------------------------------------------------------------------------------------

PASS_RATES = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.15}  # mean 0.1875: balanced downsampling keeps ~half positives


class CoinReward:
    """1 with the prompt's pass rate; records, per training step and prompt, every reward in the order scored and
    every completion length it saw."""

    __name__ = "coin"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.rewards: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.lengths: dict[int, list[int]] = defaultdict(list)

    def __call__(self, completions, key, completion_ids, trainer_state, **kwargs):
        step = trainer_state.global_step
        rewards = [float(self.rng.random() < PASS_RATES[k[0]]) for k in key]
        for k, reward, ids in zip(key, rewards, completion_ids, strict=True):
            self.rewards[step][k].append(reward)
            self.lengths[step].append(len(ids))
        return rewards


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "sizing"), [("balanced", "fixed"), ("positive", "fixed"), ("balanced", "posterior")]
)
def test_logged_reward_is_the_first_draws_and_kept_rows_move_to_their_own_name(
    toy_cold_dir, tmp_path, strategy, sizing
):
    reward = CoinReward()
    steps = 6
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        reward,
        keyed_dataset([f"{k}{i}" for i in range(steps) for k in PASS_RATES]),  # every row its own prompt
        per_device_train_batch_size=16,
        max_steps=steps,
        sampling_strategy=strategy,
        round_sizing=sizing,
        samples_per_round=4,
        max_rounds=4,
    )
    trainer.train()
    logs = ada_logs(trainer)
    assert len(logs) == steps
    first_draws = []
    for step, log in enumerate(logs):
        # Exactly the mean of each prompt's first 4 rewards this step.
        firsts = [r for per_key in reward.rewards[step].values() for r in per_key[:4]]
        assert log["reward"] == pytest.approx(sum(firsts) / len(firsts))
        assert log["rewards/coin/mean"] == pytest.approx(sum(firsts) / len(firsts))
        first_draws.extend(firsts)
        # Lengths over every completion of the step (all rounds), with true extremes.
        lengths = reward.lengths[step]
        assert log["completions/mean_length"] == pytest.approx(sum(lengths) / len(lengths))
        assert (log["completions/min_length"], log["completions/max_length"]) == (min(lengths), max(lengths))
    # Unbiased for the pass rates: within 4.5 standard errors of their mean over 96 first draws.
    mean_p = sum(PASS_RATES.values()) / len(PASS_RATES)
    bound = 4.5 * math.sqrt(mean_p * (1 - mean_p) / len(first_draws))
    assert abs(sum(first_draws) / len(first_draws) - mean_p) < bound
    kept = sum(log["ada/kept_reward"] for log in logs) / steps
    if strategy == "balanced":  # the kept rows are half positive wherever the pool allows: far above the policy
        assert kept > mean_p + 0.15
    else:  # one positive kept whenever found
        assert kept > mean_p
