"""ReinforceAdaTrainer on the offline toy model: real `trainer.train()` runs, checked against hand-worked numbers."""

import math
import random
import re
from collections import defaultdict
from collections.abc import Callable

import pytest
import torch
from datasets import Dataset
from mp_common import cpu_config
from transformers import AutoTokenizer
from trl import GRPOTrainer

from trl_ada import ReinforceAdaTrainer

pytestmark = pytest.mark.slow


def keyed_dataset(keys):
    return Dataset.from_list([{"prompt": [{"role": "user", "content": f"{k}?"}], "key": k} for k in keys])


def make_trainer(model_dir, tmp_path, reward_funcs, dataset, trainer_cls=ReinforceAdaTrainer, tools=None, **overrides):
    settings = dict(per_device_train_batch_size=8, max_completion_length=3, max_steps=2, seed=0)
    args = cpu_config(str(tmp_path), **(settings | overrides))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return trainer_cls(
        str(model_dir), reward_funcs, args=args, train_dataset=dataset, processing_class=tokenizer, tools=tools
    )


def bernoulli_reward(probabilities, seed=0):
    """A reward that ignores the completion: 1 with the probability of the row's key."""
    rng = random.Random(seed)

    def reward(completions, key, **kwargs):
        return [float(rng.random() < probabilities[k]) for k in key]

    return reward


def ada_logs(trainer):
    return [row for row in trainer.state.log_history if "ada/rounds" in row]


# -------------------------------------------------------------------------------------------------------------------
# A scripted step, worked out by hand
# -------------------------------------------------------------------------------------------------------------------

# Rewards handed out per prompt, in the order its completions are scored (8 per round).
SCRIPT = {
    # round 1: 1 positive; round 2: 1 more -> 2 positives, 14 negatives: balanced rule met after 16 samples
    "a": [1, 0, 0, 0, 0, 0, 0, 0] * 2,
    # round 1: 6 positives, 2 negatives: met after 8 samples
    "b": [1, 1, 0, 0, 1, 1, 1, 1],
    # never right: budget (8 x 4 = 32) spent, unresolved but kept
    "c": [0] * 32,
}
POOL_MEAN = {"a": 2 / 16, "b": 6 / 8, "c": 0.0}


def script_reward(script: dict[str, list]) -> tuple[Callable, defaultdict]:
    """A reward that hands out `script[key]` in order, per prompt key, and the count it served of each key."""
    served = defaultdict(int)

    def scripted_reward(completions, key, **kwargs):
        rewards = []
        for k in key:
            rewards.append(float(script[k][served[k]]))
            served[k] += 1
        return rewards

    return scripted_reward, served


@pytest.fixture
def scripted(toy_cold_dir, tmp_path):
    scripted_reward, calls = script_reward(SCRIPT)

    def run(**overrides):
        trainer = make_trainer(
            toy_cold_dir,
            tmp_path,
            scripted_reward,
            keyed_dataset("abc"),
            per_device_train_batch_size=12,
            max_steps=1,
            **overrides,
        )
        trainer.train()
        return trainer, calls

    return run


def logged_key(prompt):
    """The key of a prompt in TRL's completions table: TRL >= 1.15 logs the messages, 1.14 the decoded chat text
    (`"user\nb?\nassistant\n"`)."""
    text = prompt[-1]["content"] if isinstance(prompt, list) else prompt
    return re.search(r"(\w+)\?", text).group(1)


def kept_rows(trainer):
    """(key, reward, advantage) of every row handed to the loss, from the completions table TRL keeps."""
    prompts = [logged_key(p) for p in trainer._logs["prompt"]]
    rewards = list(trainer._logs["rewards"]["scripted_reward"])
    return list(zip(prompts, rewards, trainer._logs["advantages"], strict=True))


def test_scripted_step_rounds_metrics_and_pool_advantages(scripted):
    trainer, calls = scripted()
    # Each completion scored exactly once: 16 + 8 + 32, nothing re-scored for the kept rows.
    assert dict(calls) == {"a": 16, "b": 8, "c": 32}
    (log,) = ada_logs(trainer)
    assert log["ada/rounds"] == 4  # "c" keeps sampling to the end of its budget
    assert log["ada/samples_per_prompt"] == pytest.approx((16 + 8 + 32) / 3)
    assert log["ada/samples_per_prompt_max"] == 32
    assert log["ada/frac_resolved"] == pytest.approx(2 / 3)
    assert log["ada/frac_zero_std_first_round"] == pytest.approx(1 / 3)  # only "c" was all-equal in round 1
    assert log["ada/pool_pass_rate"] == pytest.approx((2 / 16 + 6 / 8 + 0) / 3)
    assert log["ada/difficulty_weight_mean"] == 1.0
    assert log["frac_reward_zero_std"] == pytest.approx(1 / 3)  # TRL's own metric on the final groups

    rows = kept_rows(trainer)
    assert len(rows) == 12
    for key in "abc":
        mine = [(r, a) for k, r, a in rows if k == key]
        assert len(mine) == 4
        positives = sum(r == 1.0 for r, _ in mine)
        assert positives == {"a": 2, "b": 2, "c": 0}[key]  # half positive where the pool allows
        for reward, advantage in mine:
            # Default: the authors' recipe A = r - pool mean, no std.
            assert advantage == pytest.approx(reward - POOL_MEAN[key], abs=1e-6)


def test_scripted_step_difficulty_weight_and_pool_std(scripted):
    trainer, _ = scripted(difficulty_weighting="inv_sqrt_p", scale_rewards="group")
    # Pool std (unbiased): "a" has 2 ones in 16 -> var = (2 * .875^2 + 14 * .125^2) / 15; "b" 6 in 8.
    std = {"a": math.sqrt((2 * 0.875**2 + 14 * 0.125**2) / 15), "b": math.sqrt((6 * 0.25**2 + 2 * 0.75**2) / 7)}
    # Weight 1/sqrt(p), p clamped at 1/16 so the weight never exceeds 4 ("c" has p = 0).
    weight = {"a": 1 / math.sqrt(0.125), "b": 1 / math.sqrt(0.75), "c": 4.0}
    (log,) = ada_logs(trainer)
    assert log["ada/difficulty_weight_mean"] == pytest.approx(sum(weight.values()) / 3)
    for key, reward, advantage in kept_rows(trainer):
        if key == "c":
            assert advantage == 0.0  # all-equal pool: zero advantage whatever the weight
        else:
            expected = weight[key] * (reward - POOL_MEAN[key]) / (std[key] + 1e-4)
            assert advantage == pytest.approx(expected, rel=1e-5)


def test_scripted_step_group_baseline(scripted):
    trainer, _ = scripted(advantage_baseline="group")
    for key, reward, advantage in kept_rows(trainer):
        # Kept groups are 2 right / 2 wrong for "a" and "b": group mean 0.5.
        expected = 0.0 if key == "c" else reward - 0.5
        assert advantage == pytest.approx(expected, abs=1e-6)


# -------------------------------------------------------------------------------------------------------------------
# Equivalence with GRPOTrainer, strategies, LoRA
# -------------------------------------------------------------------------------------------------------------------


def test_one_round_group_baseline_matches_grpo_advantages(toy_cold_dir, tmp_path, monkeypatch):
    parent_advantages, our_advantages = [], []
    parent = GRPOTrainer._generate_and_score_completions

    def spy_parent(self, inputs):
        output = parent(self, inputs)
        parent_advantages.append(output["advantages"].clone())  # what GRPOTrainer computed on our rows
        return output

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", spy_parent)

    class Spy(ReinforceAdaTrainer):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            our_advantages.append(output["advantages"].clone())
            return output

    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        bernoulli_reward(dict.fromkeys("abcdefgh", 0.5)),
        keyed_dataset("abcdefgh"),
        trainer_cls=Spy,
        per_device_train_batch_size=16,
        max_rounds=1,
        samples_per_round=4,
        advantage_baseline="group",
        scale_rewards="group",
        max_steps=3,
    )
    trainer.train()
    assert len(our_advantages) == len(parent_advantages) == 3
    assert any(a.abs().sum() > 0 for a in our_advantages)  # the comparison is not between zeros
    for ours, theirs in zip(our_advantages, parent_advantages, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("strategy", ["balanced", "positive", "uniform"])
def test_train_each_strategy(toy_cold_dir, tmp_path, strategy):
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        bernoulli_reward({"a": 0.3, "b": 0.9}),
        keyed_dataset("ab"),
        sampling_strategy=strategy,
        learning_rate=1e-2,
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    logs = ada_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        if strategy == "uniform":
            assert log["ada/rounds"] == 1 and log["ada/samples_per_prompt"] == 4
            # One round of num_generations is the final group: our zero-std count must equal TRL's.
            assert log["ada/frac_zero_std_first_round"] == log["frac_reward_zero_std"]
        else:
            assert 1 <= log["ada/rounds"] <= 4
            assert 8 <= log["ada/samples_per_prompt"] <= log["ada/samples_per_prompt_max"] <= 32
    changed = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert changed, "no parameter moved: the loss never saw a non-zero advantage"


def test_train_with_lora(toy_cold_dir, tmp_path):
    from peft import LoraConfig

    tokenizer = AutoTokenizer.from_pretrained(toy_cold_dir)
    args = cpu_config(
        str(tmp_path), per_device_train_batch_size=8, max_completion_length=3, max_steps=2, learning_rate=1e-2
    )
    trainer = ReinforceAdaTrainer(
        str(toy_cold_dir),
        bernoulli_reward({"a": 0.5, "b": 0.5}),
        args=args,
        train_dataset=keyed_dataset("ab"),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    params = dict(trainer.model.named_parameters())
    lora = {n: p.detach().clone() for n, p in params.items() if "lora_B" in n}
    base = {n: p.detach().clone() for n, p in params.items() if "lora_" not in n}
    assert lora and all(not params[n].requires_grad for n in base)
    trainer.train()
    params = dict(trainer.model.named_parameters())
    assert any(not torch.equal(lora[n], params[n]) for n in lora), "LoRA weights did not train"
    assert all(torch.equal(base[n], params[n]) for n in base), "base weights moved under LoRA"
    assert len(ada_logs(trainer)) == 2


def test_eval_mode_is_plain_grpo(toy_cold_dir, tmp_path):
    scored = []
    reward = bernoulli_reward({"a": 0.5, "b": 0.5})

    def counting_reward(completions, key, **kwargs):
        scored.append(len(completions))
        return reward(completions, key)

    trainer = make_trainer(toy_cold_dir, tmp_path, counting_reward, keyed_dataset("ab"), per_device_eval_batch_size=8)
    metrics = trainer.evaluate(keyed_dataset("ab"))
    # One generation of num_generations per prompt, scored once, no rounds and no Ada metrics.
    assert scored == [8]
    assert "eval_reward" in metrics
    assert not any("ada/" in k for k in metrics)


# -------------------------------------------------------------------------------------------------------------------
# Statistics of the logged metrics against the closed form
# -------------------------------------------------------------------------------------------------------------------


def positive_rule_distribution(p, round_size=8, rounds=4):
    """Samples drawn under "stop at the first positive", in rounds: {samples: probability}, resolved probability."""
    miss_round = (1 - p) ** round_size
    dist = {round_size * r: miss_round ** (r - 1) * (1 - miss_round) for r in range(1, rounds)}
    dist[round_size * rounds] = miss_round ** (rounds - 1)
    return dist, 1 - miss_round**rounds


def test_logged_samples_and_resolution_match_closed_form(toy_cold_dir, tmp_path):
    probabilities = {"a": 0.0, "b": 0.1, "c": 0.5, "d": 1.0}
    steps = 30
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        bernoulli_reward(probabilities, seed=1),
        keyed_dataset("abcd"),
        sampling_strategy="positive",
        per_device_train_batch_size=16,  # one of each prompt per step
        max_completion_length=2,
        max_steps=steps,
        learning_rate=0.0,
    )
    trainer.train()
    logs = ada_logs(trainer)
    assert len(logs) == steps

    mean_samples = var_samples = mean_resolved = var_resolved = 0.0
    for p in probabilities.values():
        dist, resolved = positive_rule_distribution(p)
        mean = sum(n * q for n, q in dist.items())
        mean_samples += mean / 4
        var_samples += sum((n - mean) ** 2 * q for n, q in dist.items()) / 16
        mean_resolved += resolved / 4
        var_resolved += resolved * (1 - resolved) / 16
    # Each step logs the mean over 4 independent prompts; average over the steps, allow 5 standard errors.
    observed_samples = sum(log["ada/samples_per_prompt"] for log in logs) / steps
    observed_resolved = sum(log["ada/frac_resolved"] for log in logs) / steps
    assert abs(observed_samples - mean_samples) <= 5 * math.sqrt(var_samples / steps) + 1e-9
    assert abs(observed_resolved - mean_resolved) <= 5 * math.sqrt(var_resolved / steps) + 1e-9
    # Prompts that can never resolve spend the whole budget in every step.
    assert all(log["ada/samples_per_prompt_max"] == 32 for log in logs)


# -------------------------------------------------------------------------------------------------------------------
# Row bookkeeping with a backend that returns sampling log-probs (as vLLM does)
# -------------------------------------------------------------------------------------------------------------------


def test_kept_rows_keep_their_completion_reward_and_sampling_logprobs(toy_cold_dir, tmp_path, monkeypatch):
    """Replace the backend by one that tags each completion's log-probs with its token ids, as vLLM returns
    log-probs: every row handed to the loss must carry its own completion, reward and log-probs."""
    rng = random.Random(0)

    def fake_backend(self, prompts):
        prompt_ids = self._tokenize_prompts(prompts)[0]
        completion_ids = [[rng.randrange(30, 90) for _ in range(rng.randrange(1, 4))] for _ in prompts]
        logprobs = [[-token / 1000 for token in ids] for ids in completion_ids]
        texts = self.processing_class.batch_decode(completion_ids)
        completions = [[{"role": "assistant", "content": text}] for text in texts]
        return prompt_ids, completion_ids, None, completions, logprobs, {}, None, []

    monkeypatch.setattr(GRPOTrainer, "_generate", fake_backend)

    def even_first_token(completion_ids, **kwargs):
        return [float(ids[0] % 2 == 0) for ids in completion_ids]

    outputs = []

    class Spy(ReinforceAdaTrainer):
        def _generate_and_score_completions(self, inputs):
            outputs.append(super()._generate_and_score_completions(inputs))
            return outputs[-1]

    trainer = make_trainer(
        toy_cold_dir, tmp_path, even_first_token, keyed_dataset("abcd"), trainer_cls=Spy, per_device_train_batch_size=8
    )
    trainer.train()
    assert outputs
    for output in outputs:
        ids, mask = output["completion_ids"], output["completion_mask"].bool()
        logps = output["sampling_per_token_logps"]
        torch.testing.assert_close(logps[mask], -ids[mask].float() / 1000)
        rewards = (ids[:, 0] % 2 == 0).float().view(-1, 4)
        advantages = output["advantages"].view(-1, 4)
        for group_rewards, group_advantages in zip(rewards, advantages, strict=True):
            if 0 < group_rewards.sum() < 4:  # mixed group: right answers above the pool mean, wrong ones below
                assert torch.all((group_advantages > 0) == (group_rewards == 1))


class FakeVLLMServer:
    """Stands in for TRL's `VLLMGeneration` in server mode, on one process. Like the real one, it generates only for
    every `num_generations`-th prompt and returns `num_generations` completions of each, so the rows it is handed
    must be runs of identical prompts; it checks that they are."""

    def __init__(self):
        self.rng = random.Random(0)
        self.calls, self.syncs = [], 0

    def sync_weights(self):
        self.syncs += 1

    def generate(self, prompts, images, num_generations, profiler=None):
        unique = prompts[::num_generations]
        for i, prompt in enumerate(unique):
            run = prompts[i * num_generations : (i + 1) * num_generations]
            assert all(p == prompt for p in run), "a run of rows mixes prompts: the server would mislabel them"
        self.calls.append((len(prompts), num_generations))
        completion_ids = [[self.rng.randrange(30, 90), 2] for _ in range(len(prompts))]
        logprobs = [[[-token / 1000] for token in ids] for ids in completion_ids]  # top-1 log-prob per token
        return [p for p in unique for _ in range(num_generations)], completion_ids, logprobs, None


def test_vllm_server_generation_path_with_rounds(toy_cold_dir, tmp_path):
    """GRPOTrainer's vLLM branch (weight sync once per step, stride de-duplication, sampling log-probs and the
    importance-sampling correction) driven by the rounds, with the server replaced by a stand-in."""
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        bernoulli_reward({"a": 0.0, "b": 0.5}),
        keyed_dataset("ab"),
        sampling_strategy="positive",
        max_steps=2,
    )
    server = FakeVLLMServer()
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, server, -1
    trainer.train()
    logs = ada_logs(trainer)
    assert [log["ada/rounds"] for log in logs] == [4, 4]  # "a" never resolves
    # A round is one run of samples_per_round = 8 copies per active prompt, with n = 8: two runs in round 1, then
    # one or two (while "b" has no positive yet).
    assert all(n == 8 and rows in (8, 16) for rows, n in server.calls)
    assert len(server.calls) == 8
    assert server.syncs == 2  # once per optimizer step, not once per round
    is_ratio = [row for row in trainer.state.log_history if "sampling/importance_sampling_ratio/mean" in row]
    assert len(is_ratio) == 2


# -------------------------------------------------------------------------------------------------------------------
# Clear errors
# -------------------------------------------------------------------------------------------------------------------


def test_rejects_a_plain_grpo_config(toy_cold_dir, tmp_path):
    from trl import GRPOConfig

    grpo_args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    with pytest.raises(TypeError, match="ReinforceAdaConfig"):
        ReinforceAdaTrainer(str(toy_cold_dir), bernoulli_reward({"a": 1.0}), args=grpo_args)


def test_rows_must_hold_whole_prompt_groups():
    from trl_ada.adapter.checks import group_starts

    prompt = [{"role": "user", "content": "1+1"}]
    other = [{"role": "user", "content": "2+2"}]
    assert group_starts([prompt] * 4 + [other] * 4, 4) == [0, 4]
    with pytest.raises(ValueError, match="not whole groups"):
        group_starts([prompt] * 6, 4)
    with pytest.raises(ValueError, match="not one prompt repeated"):
        group_starts([prompt] * 3 + [other] * 5, 4)


# -------------------------------------------------------------------------------------------------------------------
# Posterior-sized rounds, and the completion-token count
# -------------------------------------------------------------------------------------------------------------------

POSTERIOR_SCRIPT = {
    "a": [1, 0, 0, 0, 0, 1, 0, 0] + [0] * 24,  # 1 positive in round 1, a second one in round 2
    "b": [1, 1, 0, 0, 1] + [0] * 27,  # 3 positives, 2 negatives: resolved by round 1 if it draws at least 4
    "c": [0] * 32,  # never right: spends the whole budget
}


def test_posterior_round_sizes_reach_generation_and_tokens_are_counted(toy_cold_dir, tmp_path, monkeypatch):
    from trl_ada.core.engine import posterior_round_size

    calls = []
    parent = GRPOTrainer._generate

    def recording_generate(self, prompts):
        output = parent(self, prompts)
        if self.model.training:
            keys = [p[-1]["content"].rstrip("?") for p in prompts]
            calls.append((keys, self.num_generations, sum(len(ids) for ids in output[1])))
        return output

    monkeypatch.setattr(GRPOTrainer, "_generate", recording_generate)

    scripted_reward, served = script_reward(POSTERIOR_SCRIPT)
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        scripted_reward,
        keyed_dataset("abc"),
        per_device_train_batch_size=12,
        max_steps=1,
        round_sizing="posterior",
    )
    trainer.train()

    # Replay the scripts through the engine's sizing rule (tested against brute force in test_posterior.py).
    schedule = trainer.ada_schedule

    def finished(key, n):
        pos = sum(POSTERIOR_SCRIPT[key][:n])
        return n >= schedule.budget or (n >= 4 and schedule.exit_rule.holds(pos, n - pos))

    drawn, expected_calls, active = dict.fromkeys("abc", 0), [], list("abc")
    for round_index in range(schedule.max_rounds):
        sizes = {}
        for k in active:
            pos = sum(POSTERIOR_SCRIPT[k][: drawn[k]])
            sizes[k] = posterior_round_size(pos, drawn[k] - pos, drawn[k], schedule.max_rounds - round_index, schedule)
            drawn[k] += sizes[k]
        expected_calls.append(sizes)
        active = [k for k in active if not finished(k, drawn[k])]
        if not active:
            break
    assert set(expected_calls[0]) == set("abc") and len(set(expected_calls[1].values())) == 2  # unequal sizes
    assert drawn["c"] == 32 and drawn["b"] < 8 and finished("a", drawn["a"])

    assert len(calls) == len(expected_calls)
    order = list(dict.fromkeys(calls[0][0]))  # the batch's prompt order (the sampler shuffles)
    assert sorted(order) == list("abc")
    for (keys, run, _), sizes in zip(calls, expected_calls, strict=True):
        assert keys == [k for k in order if k in sizes for _ in range(sizes[k])]  # rows grouped per prompt, in order
        # Unequal sizes in one call: runs of 1, so vLLM server mode's stride de-duplication keeps every row.
        assert run == (next(iter(sizes.values())) if len(set(sizes.values())) == 1 else 1)
    assert dict(served) == drawn  # every completion scored once, and the pools hold what the rounds drew
    (log,) = ada_logs(trainer)
    assert log["ada/rounds"] == len(expected_calls)
    assert log["ada/samples_per_prompt"] == pytest.approx(sum(drawn.values()) / 3)
    assert log["ada/frac_resolved"] == pytest.approx(2 / 3)
    assert trainer.num_generations == 4  # restored after the rounds
    # Every generated completion token, kept or not, from the backend's own output.
    assert log["ada/completion_tokens"] == sum(tokens for _, _, tokens in calls)
    assert log["ada/completion_tokens"] > 12 * 3  # more than the 12 kept rows of at most 3 tokens could hold


def test_generate_outside_a_training_step_is_grpotrainers_own():
    """TRL's rollout dispatch test builds a trainer without __init__ and calls `_generate`: it must reach
    GRPOTrainer's checks (here, a rollout_func that leaves out a required key), not fail on our own state."""
    from types import SimpleNamespace
    from unittest.mock import MagicMock

    trainer = object.__new__(ReinforceAdaTrainer)
    trainer.accelerator = SimpleNamespace(device=torch.device("cpu"), is_main_process=True)
    trainer.args = SimpleNamespace(report_to=[])
    trainer.model = SimpleNamespace(training=True)
    trainer.state = SimpleNamespace(global_step=2)
    trainer._last_loaded_step = 1
    trainer.use_vllm = False
    trainer.vllm_generation = SimpleNamespace(sync_weights=MagicMock())
    trainer.rollout_func = MagicMock(return_value={"prompt_ids": [[1]], "completion_ids": [[2]]})
    with pytest.raises(ValueError, match="rollout_func must return keys"):
        trainer._generate(["prompt"])
    trainer.rollout_func.assert_called_once()


def test_generation_batches_within_an_optimizer_step_are_numbered(toy_cold_dir, tmp_path):
    """With gradient_accumulation_steps=2 and steps_per_generation=1 an optimizer step generates twice: the second
    batch must get its own selection/refill/downsampling RNG, not the first one's again."""
    seen = []

    class Spy(ReinforceAdaTrainer):
        def _rng(self, purpose=None):
            if purpose is None:  # downsampling's
                seen.append(self._ada_batch)
            return super()._rng(purpose)

    reward = bernoulli_reward({"a": 0.5, "b": 0.5})
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        reward,
        keyed_dataset(["a", "b"] * 4),
        trainer_cls=Spy,
        gradient_accumulation_steps=2,
        steps_per_generation=1,
        per_device_train_batch_size=4,
        samples_per_round=4,
        max_rounds=2,
    )
    trainer.train()
    assert seen == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize("baseline", ["pool", "group"])
def test_normalize_then_sum_uses_pool_statistics_per_function(toy_cold_dir, tmp_path, baseline):
    """Two reward functions with weights: the trainer's advantages against numpy on what sampling recorded."""
    import numpy as np

    captured = []

    class Spy(ReinforceAdaTrainer):
        def _log_step(self, step):
            captured.append((step.kept_rewards_per_func.clone(), step.pool_rewards_per_func, step.advantages.clone()))
            return super()._log_step(step)

    coin = bernoulli_reward({"a": 0.3, "b": 0.6, "c": 0.5, "d": 0.2})
    rng = random.Random(1)

    def graded(completions, key, **kwargs):  # a second objective on another scale
        return [rng.choice([0.0, 2.0, 5.0]) for _ in key]

    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        [coin, graded],
        keyed_dataset(["a", "b", "c", "d"] * 2),
        trainer_cls=Spy,
        per_device_train_batch_size=16,
        reward_weights=[1.0, 0.5],
        multi_objective_aggregation="normalize_then_sum",
        advantage_baseline=baseline,
        samples_per_round=4,
        max_rounds=2,
    )
    trainer.train()
    weights = np.array([1.0, 0.5])
    for kept, pools, advantages in captured:
        kept = kept.numpy().reshape(4, 4, 2)
        sums = []
        for prompt in range(4):
            reference = pools[prompt].numpy() if baseline == "pool" else kept[prompt]
            mean, std = reference.mean(axis=0), reference.std(axis=0, ddof=1)
            sums.append((((kept[prompt] - mean) / (std + 1e-4)) * weights).sum(axis=1))
        sums = np.concatenate(sums)
        expected = (sums - sums.mean()) / (sums.std(ddof=1) + 1e-4)
        assert advantages.numpy() == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("mask", [True, False])
def test_truncated_completions_count_as_neither_when_masked(toy_cold_dir, tmp_path, monkeypatch, mask):
    """With mask_truncated_completions=True GRPOTrainer masks truncated completions out of the loss; the exit rule,
    the pass rate and the pool baseline leave them out too (otherwise a prompt could stop on masked negatives)."""
    import trl_ada.adapter.trainer as trainer_module

    captured = []
    original = trainer_module.sample_in_rounds

    def spy(*args, **kwargs):
        result, rollouts = original(*args, **kwargs)
        captured.append((result, rollouts))
        return result, rollouts

    monkeypatch.setattr(trainer_module, "sample_in_rounds", spy)
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        bernoulli_reward({"a": 0.0, "b": 0.0}),  # every completion is negative
        keyed_dataset(["a", "b"]),
        max_steps=1,
        max_completion_length=2,  # most of the untrained model's completions are cut
        sampling_strategy="balanced",
        samples_per_round=4,
        max_rounds=3,
        mask_truncated_completions=mask,
    )
    trainer.train()
    ((result, rollouts),) = captured
    tokenizer = trainer.processing_class
    ends = {tokenizer.eos_token_id, tokenizer.pad_token_id, *getattr(trainer, "eos_token_ids", [])}
    truncated_seen = 0
    for pool in result.pools:
        truncated = [rollouts.columns["completion_ids"][h][-1] not in ends for h in pool.samples]
        truncated_seen += sum(truncated)
        for cut, reward in zip(truncated, pool.rewards, strict=True):
            assert math.isnan(reward) == (mask and cut)  # masked truncation: neither positive nor negative
        assert pool.num_negative == (len(pool) - sum(truncated) if mask else len(pool))
    assert truncated_seen > 0  # the setting did cut completions
