"""GRPOTrainer's options under ReinforceAdaTrainer: the same settings TRL's own GRPO tests train with
(tests/test_grpo_trainer.py in TRL's repository), each run for two adaptive steps on the offline toy model.

Each case checks that training ran through the adaptive rounds (two `ada/*` logs, pools larger than a group on
the hard prompts), that the loss is finite and the weights moved, and whatever the option itself promises to log.
"""

import math

import pytest
import torch
from test_trainer import ada_logs, bernoulli_reward, keyed_dataset, make_trainer

pytestmark = pytest.mark.slow

PASS_RATES = {"a": 0.1, "b": 0.5, "c": 0.9, "d": 0.3}

CASES = {
    # loss formulations
    **{f"loss_type={name}": {"loss_type": name} for name in ("grpo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo")},
    # KL to a reference model, its refresh and its bias correction
    "beta": {"beta": 0.1},
    "sync_ref_model": {"beta": 0.1, "sync_ref_model": True, "ref_model_sync_steps": 1, "ref_model_mixup_alpha": 0.5},
    "use_bias_correction_kl": {"beta": 0.1, "use_bias_correction_kl": True},
    # several optimizer steps per generation, clipping variants, sequence-level importance sampling
    "num_iterations": {"num_iterations": 2},
    "steps_per_generation": {"steps_per_generation": 2, "gradient_accumulation_steps": 2},
    "delta": {"delta": 2.0},
    "epsilon_high": {"epsilon_high": 0.28},
    "importance_sampling_level=sequence": {"importance_sampling_level": "sequence"},
    "off_policy_mask_threshold": {"off_policy_mask_threshold": 0.5},
    # entropy: the high-entropy token filter and the entropy bonus
    "top_entropy_quantile": {"top_entropy_quantile": 0.2},
    "entropy_coef": {"entropy_coef": 0.01},
    # advantage scaling, padding and generation settings
    "scale_rewards=group": {"scale_rewards": "group"},
    "scale_rewards=batch": {"scale_rewards": "batch"},
    "pad_to_multiple_of": {"pad_to_multiple_of": 8},
    "generation_kwargs": {"generation_kwargs": {"top_k": 20}},
    "cast_lm_head_to_fp32": {"cast_lm_head_to_fp32": True},
}


@pytest.mark.parametrize("overrides", list(CASES.values()), ids=list(CASES))
def test_grpo_option_trains_under_adaptive_rounds(toy_cold_dir, tmp_path, overrides):
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        bernoulli_reward(PASS_RATES),
        keyed_dataset("abcd"),
        learning_rate=1e-2,
        **overrides,
    )
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    logs = ada_logs(trainer)
    assert len(logs) == 2 // overrides.get("num_iterations", 1)  # one generation serves num_iterations steps
    assert not any(key.startswith("tools/") for row in trainer.state.log_history for key in row)  # no tools here
    assert max(row["ada/samples_per_prompt_max"] for row in logs) > trainer.num_generations  # rounds went on
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    assert losses and all(math.isfinite(loss) for loss in losses)
    assert any(not torch.equal(p, trainer.model.get_parameter(name)) for name, p in before.items())
    if overrides.get("beta"):
        assert all(row["kl"] >= 0 for row in trainer.state.log_history if "kl" in row)
        assert any("kl" in row for row in trainer.state.log_history)


def test_iterable_training_set_trains(toy_cold_dir, tmp_path):
    """TRL streams an IterableDataset in the sampler's order; rounds only see the rows it yields."""
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        bernoulli_reward(PASS_RATES),
        keyed_dataset("abcd").to_iterable_dataset(),
        learning_rate=1e-2,
    )
    trainer.train()
    logs = ada_logs(trainer)
    assert len(logs) == 2 and len(trainer.ada_memory) == 2 * 2  # two steps of two prompts each, all distinct


def test_evaluation_with_its_own_group_size(toy_cold_dir, tmp_path):
    """`num_generations_eval`: evaluation is GRPOTrainer's, one group per prompt of that size, no rounds."""
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        bernoulli_reward(PASS_RATES),
        keyed_dataset("abcd"),
        num_generations_eval=2,
        per_device_eval_batch_size=4,
    )
    trainer.eval_dataset = keyed_dataset("ab")
    metrics = trainer.evaluate()
    assert "eval_reward" in metrics and not ada_logs(trainer)
    assert len(trainer.ada_memory) == 0  # evaluation never updates the pass-rate memory
