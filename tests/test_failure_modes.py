"""The failure-mode catalogue (docs/failure-modes.md): one test per case, each checking what the user sees.

Either a clear error that names the cause and the fix, or a documented fallback whose numbers are worked out by hand.
The multi-process cases are in test_multiprocess_faults.py, resume in test_resume.py.
"""

import math
import random
from collections import defaultdict

import pytest
import torch
from datasets import Dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trainer import ada_logs, keyed_dataset, make_trainer
from trl import GRPOTrainer

from trl_ada import ReinforceAdaConfig, ReinforceAdaTrainer
from trl_ada.adapter.checks import RewardFunctionError
from trl_ada.core.engine import STRATEGIES, Schedule, sample_adaptively

# -------------------------------------------------------------------------------------------------------------------
# Config: rejected at construction, naming the knob
# -------------------------------------------------------------------------------------------------------------------


def config(tmp_path, **kwargs):
    settings = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    settings.update(per_device_train_batch_size=8, num_generations=4)
    settings.update(kwargs)
    return ReinforceAdaConfig(**settings)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        pytest.param({"min_positives": 3, "min_negatives": 2}, ["min_positives", "num_generations"], id="counts"),
        pytest.param({"samples_per_round": 1, "max_rounds": 2}, ["samples_per_round", "max_rounds"], id="budget"),
        pytest.param({"samples_per_round": 0}, ["samples_per_round"], id="zero_round_size"),
        pytest.param({"max_rounds": -1}, ["max_rounds"], id="negative_rounds"),
        pytest.param({"min_negatives": -1}, ["min_negatives"], id="negative_count"),
        pytest.param({"sampling_strategy": "seq"}, ["sampling_strategy", "balanced"], id="unknown_strategy"),
        pytest.param({"round_sizing": "bayes"}, ["round_sizing", "posterior"], id="unknown_round_sizing"),
        pytest.param({"positive_threshold": math.inf}, ["positive_threshold", "finite"], id="infinite_threshold"),
        pytest.param(
            {"sampling_strategy": "estimate", "min_samples_per_prompt": 2},
            ["min_samples_per_prompt", "num_generations"],
            id="estimate_minimum_below_group",
        ),
        pytest.param(
            {"sampling_strategy": "estimate", "samples_per_prompt_mean": 64},
            ["samples_per_prompt_mean", "max_samples_per_prompt"],
            id="estimate_mean_outside_bounds",
        ),
        pytest.param({"allocation_rule": "greedy"}, ["allocation_rule"], id="estimate_unknown_allocation_rule"),
    ],
)
def test_config_invalid_knob_is_rejected_naming_it(tmp_path, kwargs, named):
    with pytest.raises(ValueError) as info:
        config(tmp_path, **kwargs)
    for word in named:
        assert word in str(info.value), (word, str(info.value))


def test_config_generation_batch_split_across_processes_must_hold_whole_groups(tmp_path, monkeypatch):
    # 2 processes x 2 rows = 4 rows per generation batch: divisible by num_generations=4 globally (TRL's check
    # passes), but each process would hold half a group.
    monkeypatch.setattr(ReinforceAdaConfig, "world_size", property(lambda self: 2))
    with pytest.raises(ValueError, match=r"2 rows .* 2 processes\) is not a multiple of num_generations=4"):
        config(tmp_path, per_device_train_batch_size=2, steps_per_generation=1)


def test_config_vllm_sleep_mode_with_rounds_is_accepted(tmp_path):
    # Safe: after each round TRL's colocated engine sleeps (level 2) and re-pushes the weights before the next
    # generate call, so every round samples the current policy; the cost is one weight push per round.
    args = config(tmp_path, use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=True, max_rounds=4)
    assert args.schedule().max_rounds == 4


# -------------------------------------------------------------------------------------------------------------------
# Rewards
# -------------------------------------------------------------------------------------------------------------------


def scripted(script):
    """A reward that hands out `script[key]` in the order the key's completions are scored."""
    served = defaultdict(int)

    def scripted_reward(completions, key, **kwargs):
        rewards = []
        for k in key:
            rewards.append(script[k][served[k] % len(script[k])])
            served[k] += 1
        return rewards

    return scripted_reward


def train_one_step(toy_cold_dir, tmp_path, reward_funcs, dataset=None, trainer_cls=ReinforceAdaTrainer, **overrides):
    dataset = keyed_dataset("ab") if dataset is None else dataset
    settings = dict(max_steps=1, per_device_train_batch_size=4 * len(dataset))
    settings.update(overrides)
    trainer = make_trainer(toy_cold_dir, tmp_path, reward_funcs, dataset, trainer_cls=trainer_cls, **settings)
    trainer.train()
    return trainer


def raising_on_b(completions, key, **kwargs):
    if "b" in key:
        raise KeyError("no reference answer for 'b'")
    return [1.0] * len(completions)


@pytest.mark.slow
def test_reward_raising_names_function_and_prompt(toy_cold_dir, tmp_path):
    with pytest.raises(RewardFunctionError) as info:
        train_one_step(toy_cold_dir, tmp_path, raising_on_b)
    message = str(info.value)
    assert "'raising_on_b'" in message and "KeyError" in message and "no reference answer" in message
    # The row is found by re-scoring one row at a time; the prompt is the batch's 'b' one, whatever its position.
    assert "'b?'" in message and "training step 1" in message
    assert isinstance(info.value.__cause__, KeyError)


@pytest.mark.slow
@pytest.mark.parametrize("unscorable", [None, math.nan], ids=["none", "nan"])
def test_reward_none_or_nan_is_unscorable_and_left_out_of_pool_statistics(toy_cold_dir, tmp_path, unscorable):
    # Round 1 (8 completions per prompt): 2 positives, 2 negatives, 4 unscorable. The balanced rule (2 + 2) holds.
    script = [unscorable, 1.0, unscorable, 0.0, unscorable, 1.0, unscorable, 0.0]
    trainer = train_one_step(toy_cold_dir, tmp_path, scripted({"a": script, "b": script}))
    (log,) = ada_logs(trainer)
    assert log["ada/rounds"] == 1 and log["ada/samples_per_prompt"] == 8 and log["ada/frac_resolved"] == 1
    # Pass rate over scorable completions: 2 / 4 (it would be 2 / 8 if unscorable counted as wrong).
    assert log["ada/pool_pass_rate"] == pytest.approx(0.5)
    # Pool baseline = mean of the 4 scorable rewards = 0.5; the kept group is 2 positives + 2 negatives.
    assert sorted(trainer._logs["advantages"]) == pytest.approx([-0.5] * 4 + [0.5] * 4)


@pytest.mark.slow
def test_reward_infinite_names_function_and_prompt(toy_cold_dir, tmp_path):
    def infinite_on_b(completions, key, **kwargs):
        return [math.inf if k == "b" else 1.0 for k in key]

    with pytest.raises(RewardFunctionError, match=r"'infinite_on_b' failed on prompt \d .*'b\?'.*returned inf"):
        train_one_step(toy_cold_dir, tmp_path, infinite_on_b)


@pytest.mark.slow
def test_reward_wrong_length_names_function_and_counts(toy_cold_dir, tmp_path):
    def one_short(completions, **kwargs):
        return [1.0] * (len(completions) - 1)

    # Round 1: 2 prompts x 8 completions.
    with pytest.raises(RewardFunctionError, match=r"'one_short' failed .*returned 15 rewards for 16 completions"):
        train_one_step(toy_cold_dir, tmp_path, one_short)


@pytest.mark.slow
def test_reward_non_numeric_names_function_and_value(toy_cold_dir, tmp_path):
    def as_text(completions, **kwargs):
        return ["1.0"] * len(completions)

    with pytest.raises(RewardFunctionError, match=r"'as_text' failed on prompt 0 .*returned '1.0' \(str\), not a num"):
        train_one_step(toy_cold_dir, tmp_path, as_text)


def test_async_reward_failure_is_recorded_not_raised():
    import asyncio

    from trl.trainer.utils import is_async_callable

    from trl_ada.adapter.checks import RewardGuard

    async def remote_grader(prompts, completions, **kwargs):
        raise TimeoutError("grader did not answer")

    guard = RewardGuard(["remote_grader"])
    (wrapped,) = guard.wrap([remote_grader])
    assert is_async_callable(wrapped)  # GRPOTrainer must still await it
    # The call returns unscorable rewards so the process reaches its gather; the caller then raises everywhere.
    assert asyncio.run(wrapped(prompts=["p", "q"], completions=["a", "b"])) == [None, None]
    assert guard.failure.function == "remote_grader" and "TimeoutError: grader did not answer" in guard.failure.problem


@pytest.mark.slow
def test_reward_outside_unit_interval_is_classified_by_the_threshold_on_its_scale(toy_cold_dir, tmp_path):
    script = [3.0, -1.0] * 4  # round 1: 4 above the threshold of 1, 4 below
    trainer = train_one_step(toy_cold_dir, tmp_path, scripted({"a": script, "b": script}), positive_threshold=1.0)
    (log,) = ada_logs(trainer)
    assert log["ada/frac_resolved"] == 1 and log["ada/pool_pass_rate"] == pytest.approx(0.5)
    # Pool mean 1.0: advantages 3 - 1 and -1 - 1.
    assert sorted(trainer._logs["advantages"]) == pytest.approx([-2.0] * 4 + [2.0] * 4)


@pytest.mark.slow
def test_multiple_reward_functions_are_weighted_before_the_threshold(toy_cold_dir, tmp_path):
    always = scripted({"a": [1.0], "b": [1.0]})
    always.__name__ = "always"
    half = scripted({"a": [1.0, 0.0], "b": [1.0, 0.0]})
    half.__name__ = "half"
    # Totals 0.4 * 1 + 0.6 * {1, 0} = 1.0 or 0.4: positive above 0.7 only when `half` gives 1.
    trainer = train_one_step(toy_cold_dir, tmp_path, [always, half], reward_weights=[0.4, 0.6])
    (log,) = ada_logs(trainer)
    assert log["ada/samples_per_prompt"] == 8 and log["ada/pool_pass_rate"] == pytest.approx(0.5)
    # Pool mean of the totals is 0.7: advantages 1.0 - 0.7 and 0.4 - 0.7.
    assert sorted(trainer._logs["advantages"]) == pytest.approx([-0.3] * 4 + [0.3] * 4)


# -------------------------------------------------------------------------------------------------------------------
# Data
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_reward_needing_a_missing_column_lists_the_available_columns(toy_cold_dir, tmp_path):
    def needs_answer(completions, answer, **kwargs):
        return [1.0] * len(completions)

    with pytest.raises(ValueError, match=r"'needs_answer' needs \['answer'\].*\['completion_ids', 'completions'"):
        make_trainer(toy_cold_dir, tmp_path, needs_answer, keyed_dataset("ab"))
    with pytest.raises(ValueError, match=r"'key'"):  # the dataset's own columns are listed too
        make_trainer(toy_cold_dir, tmp_path, needs_answer, keyed_dataset("ab"))


@pytest.mark.slow
def test_empty_text_prompt_is_rejected_naming_the_prompt(toy_cold_dir, tmp_path):
    dataset = Dataset.from_list([{"prompt": "", "key": "a"}, {"prompt": "1+1=", "key": "b"}])
    with pytest.raises(ValueError, match=r"Prompt \d of this process's batch is empty or blank \(''\).*filter"):
        train_one_step(toy_cold_dir, tmp_path, scripted({"a": [1.0], "b": [1.0]}), dataset)


@pytest.mark.slow
def test_empty_chat_prompt_still_trains(toy_cold_dir, tmp_path):
    # An empty message still has the chat template's tokens: generation works, nothing to reject.
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": ""}], "key": k} for k in "ab"])
    trainer = train_one_step(toy_cold_dir, tmp_path, scripted({"a": [1.0, 0.0], "b": [1.0, 0.0]}), dataset)
    (log,) = ada_logs(trainer)
    assert log["ada/frac_resolved"] == 1 and log["ada/samples_per_prompt"] == 8


@pytest.mark.slow
def test_duplicate_prompts_in_one_batch_keep_separate_pools(toy_cold_dir, tmp_path):
    same = [{"role": "user", "content": "1+1"}]
    dataset = Dataset.from_list([{"prompt": same, "key": "a"}, {"prompt": same, "key": "b"}])
    # Same text, different rows: 'a' is always right and 'b' never, under the positive rule (budget 32).
    reward = scripted({"a": [1.0], "b": [0.0]})
    trainer = train_one_step(toy_cold_dir, tmp_path, reward, dataset, sampling_strategy="positive")
    (log,) = ada_logs(trainer)
    # Separate pools: 'a' resolves after 8, 'b' spends 32. One shared pool would have resolved both together.
    assert log["ada/samples_per_prompt"] == pytest.approx((8 + 32) / 2)
    assert log["ada/frac_resolved"] == pytest.approx(0.5) and log["ada/pool_pass_rate"] == pytest.approx(0.5)


@pytest.mark.slow
def test_prompt_beyond_model_context_warns_once_and_trains(toy_cold_dir, tmp_path, monkeypatch):
    from trl_ada.adapter import trainer as trainer_module

    warnings = []
    monkeypatch.setattr(trainer_module.logger, "warning", warnings.append)
    # The toy model has 128 positions; 50 x "1+1" is over 112 tokens, leaving less than 16 to complete.
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": text}], "key": k} for text, k in [("1+1" * 50, "a"), ("2+2", "b")]]
    )
    trainer = train_one_step(
        toy_cold_dir, tmp_path, scripted({"a": [1.0, 0.0], "b": [1.0, 0.0]}), dataset, max_completion_length=16
    )
    assert len(ada_logs(trainer)) == 1
    (warning,) = warnings  # once, though every round generated from that prompt
    assert "128-token context" in warning and "max_completion_length=16" in warning and "'1+11+1" in warning


# -------------------------------------------------------------------------------------------------------------------
# Generation
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_empty_completions_are_scored_and_trained(toy_cold_dir, tmp_path, monkeypatch):
    def backend_with_empty_completions(self, prompts):
        prompt_ids = self._tokenize_prompts(prompts)[0]
        completion_ids = [[] if i % 2 else [40, 41] for i in range(len(prompts))]
        completions = [[{"role": "assistant", "content": self.processing_class.decode(ids)}] for ids in completion_ids]
        return prompt_ids, completion_ids, None, completions, None, {}, None, []

    monkeypatch.setattr(GRPOTrainer, "_generate", backend_with_empty_completions)

    def nonempty(completions, **kwargs):
        return [float(bool(c[0]["content"])) for c in completions]

    trainer = train_one_step(toy_cold_dir, tmp_path, nonempty)
    (log,) = ada_logs(trainer)
    # Every round is half empty: 4 + 4 after round 1, so both prompts resolve with pass rate 1/2.
    assert log["ada/frac_resolved"] == 1 and log["ada/pool_pass_rate"] == pytest.approx(0.5)
    assert log["ada/completion_tokens"] == 2 * 8 / 2 * 2  # prompts x samples x half non-empty x 2 tokens


@pytest.mark.slow
def test_truncated_completions_are_masked_with_mask_truncated_completions(toy_cold_dir, tmp_path):
    outputs = []

    class Spy(ReinforceAdaTrainer):
        def _generate_and_score_completions(self, inputs):
            outputs.append(super()._generate_and_score_completions(inputs))
            return outputs[-1]

    reward = scripted({"a": [1.0, 0.0], "b": [1.0, 0.0]})
    trainer = train_one_step(
        toy_cold_dir, tmp_path, reward, trainer_cls=Spy, mask_truncated_completions=True, max_completion_length=4
    )
    assert len(ada_logs(trainer)) == 1
    (output,) = outputs
    eos, pad = trainer.processing_class.eos_token_id, trainer.processing_class.pad_token_id
    ids, mask = output["completion_ids"], output["completion_mask"]
    for row_ids, row_mask in zip(ids.tolist(), mask.tolist(), strict=True):
        # GRPOTrainer counts a completion as ended when its last token is EOS or pad (rows are right-padded).
        finished = eos in row_ids or row_ids[-1] == pad
        # A completion that never ended is truncated: masked out of the loss entirely.
        assert (sum(row_mask) == 0) == (not finished)
    assert any(eos not in row for row in ids.tolist())  # the toy model rarely stops within 4 tokens


def test_unreachable_vllm_server_names_the_url_and_how_to_start_it(toy_cold_dir, tmp_path, monkeypatch):
    import socket

    import trl.generation.vllm_client as client
    import trl.generation.vllm_generation as generation

    # vLLM is not installed here; the server path needs only HTTP, so let TRL go as far as connecting.
    monkeypatch.setattr(client, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(generation, "is_vllm_available", lambda *a, **k: True)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(ConnectionError) as info:
        make_trainer(
            toy_cold_dir,
            tmp_path,
            scripted({"a": [1.0]}),
            keyed_dataset("ab"),
            use_vllm=True,
            vllm_mode="server",
            vllm_server_base_url=url,
            vllm_server_timeout=0.0,
        )
    message = str(info.value)
    assert url in message and "trl vllm-serve --model" in message and "vllm_server_timeout=0.0" in message


# -------------------------------------------------------------------------------------------------------------------
# Budget
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("reward", [0.0, 1.0], ids=["all_wrong", "all_right"])
def test_batch_with_no_prompt_resolving_spends_the_budget_and_completes(toy_cold_dir, tmp_path, reward):
    # Balanced rule: all-right prompts never see a negative, all-wrong ones never a positive.
    trainer = train_one_step(toy_cold_dir, tmp_path, scripted({"a": [reward], "b": [reward]}))
    (log,) = ada_logs(trainer)
    assert log["ada/rounds"] == 4 and log["ada/samples_per_prompt"] == log["ada/samples_per_prompt_max"] == 32
    assert log["ada/frac_resolved"] == 0 and log["ada/frac_zero_std_first_round"] == 1
    assert log["ada/pool_pass_rate"] == reward
    assert trainer._logs["advantages"] and all(a == 0 for a in trainer._logs["advantages"])  # nothing to learn


@st.composite
def budget_cases(draw):
    group_size = draw(st.integers(2, 6))
    samples_per_round = draw(st.integers(math.ceil(group_size / 5), 6))  # a budget of 5 rounds fills a group
    max_rounds = draw(st.integers(math.ceil(group_size / samples_per_round), 5))
    schedule = Schedule.from_strategy(
        draw(st.sampled_from(STRATEGIES)),
        group_size,
        samples_per_round=samples_per_round,
        max_rounds=max_rounds,
        round_sizing=draw(st.sampled_from(["fixed", "posterior"])),
    )
    rates = draw(st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), min_size=1, max_size=5))
    return schedule, rates, draw(st.integers(0, 2**16)), draw(st.sampled_from([0.0, 0.3]))


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=budget_cases())
def test_budget_is_never_exceeded_even_when_another_process_forces_extra_rounds(case):
    # test_engine / test_posterior check the budget for one process; here another process stays active for every
    # round, so this one keeps calling generate after its own prompts are done.
    schedule, rates, seed, nan_prob = case
    rng = random.Random(seed)
    drawn = [0] * len(rates)

    def generate(requests):
        for r in requests:
            drawn[r.prompt_index] += r.num_samples
            assert drawn[r.prompt_index] <= schedule.budget
        return [
            math.nan if rng.random() < nan_prob else float(rng.random() < rates[r.prompt_index])
            for r in requests
            for _ in range(r.num_samples)
        ]

    result = sample_adaptively(len(rates), schedule, generate, lambda requests, h: h, any_active=lambda local: True)
    assert result.rounds == schedule.max_rounds  # the other process kept everyone going
    for pool, count in zip(result.pools, drawn, strict=True):
        assert len(pool) == count and schedule.group_size <= count <= schedule.budget
        assert pool.resolved or count == schedule.budget


# -------------------------------------------------------------------------------------------------------------------
# Command line (`trl-ada train` inputs are in test_train_cli.py: unknown recipe keys, unknown reward, missing
# dataset file, no prompt column, precision on a machine without a GPU)
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["nosuch"], "unknown command 'nosuch'", id="unknown_command"),
        pytest.param(
            ["eval", "--benchmark", "x=/nonexistent/bench.jsonl"], "No such file or folder", id="eval_missing_file"
        ),
        pytest.param(
            ["eval", "--benchmark", "x=tests/data/toy_bench_easy.jsonl", "--reward", "nope"],
            "Unknown reward function 'nope'",
            id="eval_unknown_reward",
        ),
        pytest.param(
            ["simulate", "--group-size", "8", "--samples-per-round", "1", "--max-rounds", "2"],
            "--samples-per-round x --max-rounds = 1 x 2 = 2 is below --group-size 8: a prompt could never fill its "
            "group. Raise --max-rounds to 8 or --samples-per-round to 4, or lower --group-size to 2.",
            id="simulate_budget_below_group",
        ),
    ],
)
def test_cli_bad_input_fails_with_the_cause_and_no_traceback(toy_cold_dir, tmp_path, capsys, argv, message):
    from trl_ada.tools.cli import main

    if argv[0] == "eval":
        argv = [*argv, "--model", str(toy_cold_dir), "--output-dir", str(tmp_path)]
    assert main(argv) != 0
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err + captured.out


# -------------------------------------------------------------------------------------------------------------------
# Memory
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pools_hold_row_numbers_and_rollouts_hold_token_ids_and_text(toy_cold_dir, tmp_path, monkeypatch):
    from trl_ada.adapter import trainer as trainer_module
    from trl_ada.adapter.schedules.rounds import Rollouts

    seen = []
    select = Rollouts.select

    def spy_select(self, rows):
        seen.append(self)
        return select(self, rows)

    monkeypatch.setattr(Rollouts, "select", spy_select)
    steps, make_step = [], trainer_module.compose_step
    monkeypatch.setattr(
        trainer_module, "compose_step", lambda *args, **kw: steps.append(args) or make_step(*args, **kw)
    )
    train_one_step(toy_cold_dir, tmp_path, scripted({"a": [0.0], "b": [0.0]}))  # every prompt draws all 32
    (rollouts,) = seen
    assert rollouts.size == 64
    # Engine pools: row numbers only.
    result = steps[0][1]  # compose_step(settings, result, ...)
    assert all(isinstance(handle, int) for pool in result.pools for handle in pool.samples)
    # Rollouts: token ids (lists of ints), the decoded completion, and one reward vector per row; no logits or
    # hidden states (sampling log-probs only come from vLLM, None here).
    assert all(isinstance(t, int) for ids in rollouts.columns["completion_ids"] for t in ids)
    assert all(isinstance(t, int) for ids in rollouts.columns["prompt_ids"] for t in ids)
    assert all(v is None for v in rollouts.columns["logprobs"])
    assert set(rollouts.columns) == {
        "prompt_ids",
        "completion_ids",
        "tool_mask",
        "completions",
        "logprobs",
        "images",
        "tool_images",
    }
    assert all(r.shape == (1,) and r.dtype == torch.float32 for r in rollouts.rewards)
