"""Reinforce-Ada-Est in the trainer on the offline toy model: allocation, memory and ODC weights worked by hand."""

import math
from collections import defaultdict

import pytest
from test_trainer import keyed_dataset, logged_key, make_trainer
from transformers import HfArgumentParser

from trl_ada import ReinforceAdaConfig
from trl_ada.core.memory import prompt_key, prompt_text_key


def alternating_script():
    """Per prompt, the i-th scored completion's reward: "a" always right, "b" right on even i, "c" never."""
    calls = defaultdict(int)

    def scripted_reward(completions, key, **kwargs):
        rewards = []
        for k in key:
            i = calls[k]
            rewards.append({"a": 1.0, "b": float(i % 2 == 0), "c": 0.0}[k])
            calls[k] += 1
        return rewards

    return scripted_reward, calls


def est_logs(trainer):
    return [row for row in trainer.state.log_history if "ada/alloc_mean" in row]


@pytest.mark.slow
def test_two_estimate_steps_allocation_and_memory_by_hand(toy_cold_dir, tmp_path):
    reward, calls = alternating_script()
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        reward,
        keyed_dataset("abc"),
        per_device_train_batch_size=12,  # every step holds the three prompts
        max_steps=2,
        sampling_strategy="estimate",
        samples_per_prompt_mean=8,
        min_samples_per_prompt=4,
        max_samples_per_prompt=12,
        prompt_id_column="key",
    )
    trainer.train()
    step1, step2 = est_logs(trainer)

    # Step 1: nothing seen, every p_hat is the prior 1/17, so the budget 3 x 8 splits evenly.
    assert step1["ada/p_hat_mean"] == pytest.approx(1 / 17)
    assert (step1["ada/alloc_min"], step1["ada/alloc_mean"], step1["ada/alloc_max"]) == (8, 8, 8)
    # Memory after step 1 (a: 8 of 8, b: 4 of 8, c: 0 of 8): p_hat = (1 + N_pos) / (17 + N_total).
    p1 = {"a": 9 / 25, "b": 5 / 25, "c": 1 / 25}
    assert step2["ada/p_hat_mean"] == pytest.approx(sum(p1.values()) / 3)
    # Step 2, inv_sqrt_p: scores 1/sqrt(p) = 5/3, sqrt(5), 5. Unclipped, c would get 24 * 5 / (5/3 + sqrt(5) + 5)
    # = 13.5 > 12, so c is held at 12 and a, b split the other 12 in proportion 5/3 : sqrt(5), i.e. 5.12 and 6.88;
    # largest remainder rounds b up: 5, 7, 12.
    share_a = 12 * (5 / 3) / (5 / 3 + math.sqrt(5))
    assert 5 < share_a < 5.5
    assert (step2["ada/alloc_min"], step2["ada/alloc_mean"], step2["ada/alloc_max"]) == (5, 8, 12)
    assert dict(calls) == {"a": 8 + 5, "b": 8 + 7, "c": 8 + 12}  # one scoring per completion, nothing re-scored
    for log in (step1, step2):
        assert log["ada/rounds"] == 1  # one generation call per step
        assert log["ada/samples_per_prompt"] == pytest.approx(8.0)
        assert log["ada/memory_size"] == 3

    # Memory after step 2, decay 0.9: b's draws 8..14 hold 4 even indices of 7.
    memory = trainer.ada_memory
    expected = {"a": (0.9 * 8 + 5, 0.9 * 8 + 5), "b": (0.9 * 4 + 4, 0.9 * 8 + 7), "c": (0.0, 0.9 * 8 + 12)}
    for key, (n_pos, n_total) in expected.items():
        assert memory.counts(prompt_key(key)) == pytest.approx((n_pos, n_total))
        assert memory.p_hat(prompt_key(key)) == pytest.approx((1 + n_pos) / (17 + n_total))


@pytest.mark.slow
def test_odc_weights_come_from_the_memory_before_the_update(toy_cold_dir, tmp_path):
    reward, _ = alternating_script()
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        reward,
        keyed_dataset("abc"),
        per_device_train_batch_size=12,
        max_steps=2,
        sampling_strategy="estimate",
        samples_per_prompt_mean=8,
        min_samples_per_prompt=4,
        max_samples_per_prompt=12,
        difficulty_weighting="odc",
        downsample="uniform",
        max_difficulty_weight=4.0,
    )
    trainer.train()
    step1, step2 = est_logs(trainer)
    # Step 1: p_hat = 1/17 for all, weight 17 capped at 4. Step 2: 1/p_hat from the memory after step 1 only
    # (a: 25/9, b: 5, c: 25), capped at 4; had this step's rewards been counted they would be different.
    assert step1["ada/difficulty_weight_mean"] == pytest.approx(4.0)
    assert step2["ada/difficulty_weight_mean"] == pytest.approx((25 / 9 + 4 + 4) / 3, rel=1e-6)
    # Without an id column the prompts are keyed by their messages.
    keys = {prompt_text_key([{"role": "user", "content": f"{k}?"}]) for k in "abc"}
    assert set(trainer.ada_memory.state_dict()["records"][i][0] for i in range(3)) == keys
    # b's kept rows: advantage = 5 capped to 4, times (r - pool mean 4/7); uniform downsample keeps 4 of its 7.
    logs = trainer._logs
    rows = zip(logs["prompt"], logs["rewards"]["scripted_reward"], logs["advantages"], strict=True)
    b_rows = [(r, a) for p, r, a in rows if logged_key(p) == "b"]
    assert len(b_rows) == 4
    for r, a in b_rows:
        assert a == pytest.approx(4.0 * (r - 4 / 7), abs=1e-5)


@pytest.mark.slow
def test_seq_strategies_keep_the_memory_too(toy_cold_dir, tmp_path):
    reward, calls = alternating_script()
    trainer = make_trainer(
        toy_cold_dir, tmp_path, reward, keyed_dataset("abc"), per_device_train_batch_size=12, max_steps=1,
        prompt_id_column="key",
    )  # fmt: skip
    trainer.train()
    # Balanced 8 x 4: a never resolves (32 right), b resolves after one round (4 of 8), c never (32 wrong).
    assert dict(calls) == {"a": 32, "b": 8, "c": 32}
    memory = trainer.ada_memory
    assert memory.counts(prompt_key("a")) == (32.0, 32.0)
    assert memory.counts(prompt_key("b")) == (4.0, 8.0)
    assert memory.counts(prompt_key("c")) == (0.0, 32.0)
    (log,) = [row for row in trainer.state.log_history if "ada/alloc_mean" in row]
    assert (log["ada/alloc_min"], log["ada/alloc_max"]) == (8, 32)
    assert log["ada/alloc_mean"] == pytest.approx(72 / 3)


def est_config(**overrides):
    settings = dict(
        output_dir="unused", use_cpu=True, report_to="none", per_device_train_batch_size=8, num_generations=4,
        sampling_strategy="estimate",
    )  # fmt: skip
    settings.update(overrides)
    return ReinforceAdaConfig(**settings)


def test_estimate_defaults_and_bad_settings():
    assert est_config().samples_per_prompt_bounds == (8, 4, 32)  # 2 x group, group, Seq's budget 8 x 4
    assert est_config(samples_per_round=4, max_rounds=2).samples_per_prompt_bounds == (8, 4, 8)
    with pytest.raises(ValueError, match="below num_generations"):
        est_config(min_samples_per_prompt=3)
    with pytest.raises(ValueError, match="must lie between"):
        est_config(samples_per_prompt_mean=40)
    with pytest.raises(ValueError, match="allocation_rule"):
        est_config(allocation_rule="inv_p2")
    with pytest.raises(ValueError, match="decay"):
        est_config(pass_rate_decay=1.5)
    with pytest.raises(ValueError, match="downsample='uniform'"):
        est_config(difficulty_weighting="odc")
    # Plain GRPO downsamples nothing, so ODC needs no uniform downsample there.
    est_config(sampling_strategy="uniform", difficulty_weighting="odc")
    est_config(difficulty_weighting="odc", downsample="uniform")


def test_command_line_accepts_the_new_choices():
    """`trl-ada train` and TRL scripts build the config with HfArgumentParser, which enforces the fields' choices."""
    argv = "--output_dir x --use_cpu --num_generations 4 --per_device_train_batch_size 8 --sampling_strategy estimate "
    argv += "--allocation_rule variance_optimal --difficulty_weighting odc --downsample uniform --pass_rate_beta 8"
    (args,) = HfArgumentParser(ReinforceAdaConfig).parse_args_into_dataclasses(argv.split())
    assert (args.sampling_strategy, args.allocation_rule, args.difficulty_weighting) == (
        "estimate",
        "variance_optimal",
        "odc",
    )
    assert args.pass_rate_memory().prior_mean == pytest.approx(1 / 9)
