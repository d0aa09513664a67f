"""Tools and environments (TRL's `tools` and `environment_factory`) under adaptive rounds, offline.

A toy tool task: "What is a*b?" with a calculator tool. The policy is scripted (`model.generate` patched, as TRL's own
tool tests do): on a first turn it calls the tool with probability p (the prompt's pass rate) and otherwise guesses
wrong; after a tool response it answers with the number the tool returned. So every prompt's reward is a coin of
known p that only the tool loop can turn up, and everything the trainer counts can be counted independently here.
"""

import math
import os
import random
import re
from unittest.mock import patch

import pytest
import torch
from datasets import Dataset
from mp_common import cpu_config
from transformers import AutoTokenizer
from trl import GRPOTrainer

from trl_ada import ReinforceAdaTrainer
from trl_ada.adapter.compat import prepare_rollouts

pytestmark = pytest.mark.slow

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

PASS_RATE = {"3*4": 0.25, "5*6": 0.75, "2*9": 0.5}
TOOL_RESPONSE = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)


def multiply(a: int, b: int) -> int:
    """
    Multiply two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product.
    """
    return a * b


class ScriptedPolicy:
    """Stands in for `model.generate`. Counts first turns, tool calls it emitted and calls that must fail."""

    def __init__(self, tokenizer, tool: str = "multiply", bad_call_rate: float = 0.0, seed: int = 0):
        self.tokenizer, self.tool, self.bad_call_rate = tokenizer, tool, bad_call_rate
        self.rng = random.Random(seed)
        self.first_turns = self.calls = self.bad_calls = 0

    def turn(self, text: str) -> str:
        results = TOOL_RESPONSE.findall(text)
        if results:  # after the tool: answer with what it returned
            return f"{results[-1].strip()}<|im_end|>"
        a, b = re.findall(r"(\d+)\*(\d+)", text)[-1]
        self.first_turns += 1
        if self.rng.random() >= PASS_RATE[f"{a}*{b}"]:
            return "7<|im_end|>"
        self.calls += 1
        arguments = f'"a": {a}, "b": {b}'
        if self.rng.random() < self.bad_call_rate:  # a wrong argument name: the call fails inside TRL's loop
            self.bad_calls += 1
            arguments = f'"a": {a}, "c": {b}'
        return f'<tool_call>\n{{"name": "{self.tool}", "arguments": {{{arguments}}}}}\n</tool_call><|im_end|>'

    def __call__(self, input_ids, **kwargs):
        rows = [
            self.tokenizer(self.turn(self.tokenizer.decode(ids)), add_special_tokens=False).input_ids
            for ids in input_ids
        ]
        width = max(map(len, rows))
        padded = [row + [self.tokenizer.pad_token_id] * (width - len(row)) for row in rows]
        return torch.cat([input_ids, torch.tensor(padded, dtype=input_ids.dtype)], dim=1)


def answer_reward(completions, answer, **kwargs):
    return [
        float(completion[-1]["content"].strip() == str(a)) for completion, a in zip(completions, answer, strict=True)
    ]


def product(key: str) -> str:
    a, b = key.split("*")
    return str(int(a) * int(b))


def tool_dataset(keys=tuple(PASS_RATE)):
    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"What is {k}?"}], "answer": product(k), "key": k} for k in keys]
    )


def config(tmp_path, **overrides):
    settings = dict(per_device_train_batch_size=12, max_completion_length=200, max_steps=2, learning_rate=0.1, seed=0)
    return cpu_config(str(tmp_path), **(settings | overrides))


def per_step_tool_logs(trainer):
    return [row for row in trainer.state.log_history if "tools/call_frequency" in row]


class StepRecorder:
    """Wraps the trainer's `_generate` (what GRPOTrainer's step receives) and its counts per step."""

    def __init__(self, trainer, policy):
        self.trainer, self.policy, self.steps = trainer, policy, []
        self.inner = trainer._generate

    def __call__(self, prompts):
        before = (self.policy.first_turns, self.policy.calls, self.policy.bad_calls)
        output = self.inner(prompts)
        after = (self.policy.first_turns, self.policy.calls, self.policy.bad_calls)
        self.steps.append({"counts": [b - a for a, b in zip(before, after, strict=True)], "output": output})
        return output


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # the paper's default: Seq-balanced, fixed rounds
        {"sampling_strategy": "positive", "samples_per_round": 4, "max_rounds": 3},
        {"round_sizing": "posterior"},
        {"sampling_strategy": "estimate"},
    ],
    ids=["balanced", "positive", "posterior", "estimate"],
)
def test_tool_task_trains_through_trls_tool_loop_every_round(tool_model_dir, tmp_path, overrides):
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    args = config(tmp_path, **overrides)
    trainer = ReinforceAdaTrainer(
        str(tool_model_dir),
        answer_reward,
        args=args,
        train_dataset=tool_dataset(),
        processing_class=tokenizer,
        tools=[multiply],
    )
    policy = ScriptedPolicy(tokenizer, bad_call_rate=0.3)
    recorder = StepRecorder(trainer, policy)
    before = {name: p.clone() for name, p in trainer.model.named_parameters()}
    with patch.object(trainer.model, "generate", side_effect=policy), patch.object(trainer, "_generate", recorder):
        trainer.train()

    logs = per_step_tool_logs(trainer)
    assert len(logs) == len(recorder.steps) == 2
    for log, step in zip(logs, recorder.steps, strict=True):
        first_turns, calls, bad_calls = step["counts"]
        # One entry per step, over every rollout of every round (not a mean of per-round ratios).
        assert log["tools/call_frequency"] == pytest.approx(calls / first_turns)
        assert log["tools/failure_frequency"] == pytest.approx(bad_calls / calls if calls else 0.0)
        assert log["ada/samples_per_prompt"] * 3 == first_turns  # every rollout drawn went through the tool loop

        # Kept rows carry their own tool masks: zeros exactly over the tool response, ones over the model's tokens.
        _, completion_ids, tool_mask, completions, *_ = step["output"]
        assert len(completion_ids) == 12
        for ids, mask, completion in zip(completion_ids, tool_mask, completions, strict=True):
            assert len(mask) == len(ids)
            called = any(message["role"] == "tool" for message in completion)
            assert (0 in mask) == called
            if called:  # one call: the model's call, the tool response (masked), the model's answer
                runs = [value for i, value in enumerate(mask) if i == 0 or mask[i - 1] != value]
                assert runs == [1, 0, 1]
    assert all(not torch.equal(p, trainer.model.get_parameter(name)) for name, p in before.items())


def test_kept_rows_are_scored_on_their_final_answer(tool_model_dir, tmp_path):
    """The exit rule and the loss see the reward of a rollout's last turn: each kept row's reward is its final
    answer's, recomputed here from the completion the step hands to the loss."""
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    trainer = ReinforceAdaTrainer(
        str(tool_model_dir),
        answer_reward,
        args=config(tmp_path, max_steps=1),
        train_dataset=tool_dataset(),
        processing_class=tokenizer,
        tools=[multiply],
    )
    policy = ScriptedPolicy(tokenizer)
    seen = {}
    inner_rewards = trainer._calculate_rewards

    def spy_rewards(inputs, prompts, completions, completion_ids_list):
        rewards = inner_rewards(inputs, prompts, completions, completion_ids_list)
        seen["expected"] = answer_reward(completions, [row["answer"] for row in inputs])
        seen["rewards"] = rewards[:, 0].tolist()
        return rewards

    with (
        patch.object(trainer.model, "generate", side_effect=policy),
        patch.object(trainer, "_calculate_rewards", spy_rewards),
    ):
        trainer.train()
    assert seen["rewards"] == seen["expected"]
    assert 0 < sum(seen["rewards"]) < len(seen["rewards"])  # balanced downsampling kept both kinds


# -------------------------------------------------------------------------------------------------------------------
# Environments
# -------------------------------------------------------------------------------------------------------------------


class Calculator:
    """Holds one problem per rollout (the row's `key`, or a random one); the model submits its factors through the
    `submit` tool."""

    def __init__(self):
        self.problem, self.submitted = None, None

    def reset(self, **row):
        self.problem, self.submitted = row.get("key") or random.choice(list(PASS_RATE)), None
        return f"Compute {self.problem}."

    def submit(self, a: int, b: int) -> int:
        """
        Submit the two factors of the problem; returns their product.

        Args:
            a: The first factor.
            b: The second factor.

        Returns:
            The product.
        """
        self.submitted = f"{a}*{b}"
        return a * b


class CalculatorEnvironment(Calculator):
    """A calculator that owns the reward: 1 when the submitted factors are the problem's."""

    def get_reward(self) -> float:
        return float(self.submitted == self.problem)


def submitted_factors(completion) -> str | None:
    for message in completion:
        for call in message.get("tool_calls") or []:
            arguments = call["function"]["arguments"]
            return f"{arguments['a']}*{arguments['b']}"
    return None


def consistency_reward(log):
    """A second reward that checks, per rollout, that the environment it is handed is the one its completion talked
    to: its problem is the one in the rollout's prompt, and what it recorded is what the completion submitted."""

    def check(prompts, completions, environments, **kwargs):
        for prompt, completion, environment in zip(prompts, completions, environments, strict=True):
            shown = re.findall(r"Compute (\d+\*\d+)\.", prompt[-1]["content"])[-1]
            log.append(shown == environment.problem and submitted_factors(completion) == environment.submitted)
        return [0.0] * len(completions)

    return check


@pytest.mark.parametrize("overrides", [{}, {"round_sizing": "posterior"}, {"sampling_strategy": "estimate"}])
def test_environment_owned_reward_follows_each_rollout(tool_model_dir, tmp_path, overrides):
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    checks = []
    trainer = ReinforceAdaTrainer(
        str(tool_model_dir),
        consistency_reward(checks),
        args=config(tmp_path, **overrides),
        train_dataset=tool_dataset(),
        processing_class=tokenizer,
        environment_factory=CalculatorEnvironment,
    )
    assert trainer.reward_func_names == ["check", "CalculatorEnvironment"]
    policy = ScriptedPolicy(tokenizer, tool="submit")
    with patch.object(trainer.model, "generate", side_effect=policy):
        trainer.train()
    assert len(checks) == policy.first_turns > 24  # every rollout of every round was scored, once
    assert all(checks)
    logs = [row for row in trainer.state.log_history if "ada/rounds" in row]
    # The environment's reward is a coin of the prompt's p: the exit rule saw it, and the memory counted it per row.
    assert all(0 < row["ada/pool_pass_rate"] < 1 for row in logs)
    assert len(trainer.ada_memory) == 3


def test_environment_owned_data_without_a_dataset(tool_model_dir, tmp_path):
    """No train_dataset: every row is TRL's placeholder and each rollout's reset draws its own problem, so the copies
    of one row hold different prompts. Rounds still group them by row, and each reward belongs to its rollout."""
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    checks = []
    random.seed(0)
    trainer = ReinforceAdaTrainer(
        str(tool_model_dir),
        consistency_reward(checks),
        args=config(tmp_path, sampling_strategy="positive"),
        processing_class=tokenizer,
        environment_factory=CalculatorEnvironment,
    )
    policy = ScriptedPolicy(tokenizer, tool="submit")
    with patch.object(trainer.model, "generate", side_effect=policy):
        trainer.train()
    assert checks and all(checks)
    assert (
        len(trainer.ada_memory) == 1
    )  # identical placeholder rows: one task, one pass rate (prompt_id_column splits)


def test_multiple_environments_route_each_row(tool_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)

    class OtherCalculator(CalculatorEnvironment):
        pass

    checks = []
    rows = [{"key": k, "environment": name} for k in PASS_RATE for name in ("calc", "other")]
    trainer = ReinforceAdaTrainer(
        str(tool_model_dir),
        consistency_reward(checks),
        args=config(tmp_path, per_device_train_batch_size=24),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        environment_factory={"calc": CalculatorEnvironment, "other": OtherCalculator},
    )
    seen_types = []
    policy = ScriptedPolicy(tokenizer, tool="submit")
    parent_rewards = GRPOTrainer._calculate_rewards

    def spy(self, inputs, prompts, completions, completion_ids_list):
        seen_types.extend(
            (row["environment"], type(env).__name__) for row, env in zip(inputs, self.environments, strict=True)
        )
        return parent_rewards(self, inputs, prompts, completions, completion_ids_list)

    with (
        patch.object(trainer.model, "generate", side_effect=policy),
        patch.object(GRPOTrainer, "_calculate_rewards", spy),
    ):
        trainer.train()
    assert all(checks) and len(trainer.ada_memory) == 6  # the environment is part of a row's identity
    names = {"calc": "CalculatorEnvironment", "other": "OtherCalculator"}
    assert seen_types and all(names[row] == env for row, env in seen_types)


def test_trls_environment_errors_are_kept(tool_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    reward = consistency_reward([])
    with pytest.raises(ValueError, match="max_steps"):
        ReinforceAdaTrainer(
            str(tool_model_dir),
            reward,
            args=config(tmp_path, max_steps=-1),
            processing_class=tokenizer,
            environment_factory=CalculatorEnvironment,
        )
    with pytest.raises(ValueError, match="requires a `train_dataset`"):
        ReinforceAdaTrainer(
            str(tool_model_dir),
            reward,
            args=config(tmp_path),
            processing_class=tokenizer,
            environment_factory={"a": CalculatorEnvironment, "b": CalculatorEnvironment},
        )
    unknown = Dataset.from_list([{"key": "3*4", "environment": "unknown"}] * 3)
    trainer = ReinforceAdaTrainer(
        str(tool_model_dir),
        reward,
        args=config(tmp_path),
        train_dataset=unknown,
        processing_class=tokenizer,
        environment_factory={"calc": CalculatorEnvironment},
    )
    with pytest.raises(ValueError, match="not among the environments"):
        trainer.train()


def test_streaming_refuses_tools_and_environments_with_the_reason(tool_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    args = config(tmp_path, rollout_schedule="streaming", use_transformers_continuous_batching=True)
    with pytest.raises(NotImplementedError, match="rollout_schedule='rounds'"):
        ReinforceAdaTrainer(
            str(tool_model_dir),
            answer_reward,
            args=args,
            train_dataset=tool_dataset(),
            processing_class=tokenizer,
            tools=[multiply],
        )
    with pytest.raises(NotImplementedError, match="environment_factory"):
        ReinforceAdaTrainer(
            str(tool_model_dir),
            answer_reward,
            args=args,
            train_dataset=tool_dataset(),
            processing_class=tokenizer,
            environment_factory=CalculatorEnvironment,
        )


# -------------------------------------------------------------------------------------------------------------------
# rollout_func (TRL's custom rollouts): one call per round
# -------------------------------------------------------------------------------------------------------------------


def test_rollout_func_runs_once_per_round_with_that_rounds_prompts(toy_cold_dir, tmp_path):
    """A custom rollout is called once per round with exactly the active prompts' rows; its extra fields reach the
    reward functions row by row, and the kept rows are the ones it returned."""
    tokenizer = AutoTokenizer.from_pretrained(toy_cold_dir)
    rng = random.Random(0)
    calls = []

    def rollout_func(prompts, trainer):
        calls.append([prompt[-1]["content"] for prompt in prompts])
        prompt_ids = tokenizer.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True)["input_ids"]
        # Each completion is one digit: "1" with the prompt's pass rate, else "0"; `drawn` tags it for the reward.
        digits = [str(int(rng.random() < PASS_RATE[p[-1]["content"].split()[-1][:-1]])) for p in prompts]
        completion_ids = [tokenizer(d + "<|im_end|>", add_special_tokens=False).input_ids for d in digits]
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": [[0.0] * len(ids) for ids in completion_ids],
            "drawn": digits,
        }

    def digit_reward(completions, drawn, **kwargs):
        assert [c[-1]["content"] for c in completions] == drawn  # the extra field belongs to its own row
        return [float(d == "1") for d in drawn]

    args = config(tmp_path, max_completion_length=4, samples_per_round=4, max_rounds=4)
    trainer = ReinforceAdaTrainer(
        str(toy_cold_dir),
        digit_reward,
        args=args,
        train_dataset=tool_dataset(),
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )
    trainer.train()
    logs = [row for row in trainer.state.log_history if "ada/rounds" in row]
    assert sum(row["ada/rounds"] for row in logs) == len(calls)  # one call per round, none for scoring
    assert len(calls[0]) == 12  # round 1: every prompt, samples_per_round=4 rows each
    assert all(len(rows) % 4 == 0 and len(rows) <= 12 for rows in calls)  # later rounds: only the active ones
    assert sum(len(rows) for rows in calls) == sum(row["ada/samples_per_prompt"] * 3 for row in logs)


def test_rollout_func_missing_keys_raise_trls_error_in_training(toy_cold_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(toy_cold_dir)

    def incomplete(prompts, trainer):
        return {"prompt_ids": [[1]] * len(prompts), "completion_ids": [[2]] * len(prompts)}

    trainer = ReinforceAdaTrainer(
        str(toy_cold_dir),
        answer_reward,
        args=config(tmp_path),
        train_dataset=tool_dataset(),
        processing_class=tokenizer,
        rollout_func=incomplete,
    )
    with pytest.raises(ValueError, match="rollout_func must return keys"):
        trainer.train()


def test_environment_owned_reward_beside_reward_funcs_and_an_environment_without_one(tool_model_dir, tmp_path):
    """TRL appends one reward column per environment class that owns its reward (weight 1, after `reward_funcs`);
    rollouts of an environment without `get_reward` get None there, which the exit rule leaves out of the total."""
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)

    def submitted_reward(completions, **kwargs):  # 1 when the rollout called the tool at all
        return [float(submitted_factors(completion) is not None) for completion in completions]

    rows = [{"key": k, "environment": name} for k in PASS_RATE for name in ("scored", "plain")]
    args = config(tmp_path, per_device_train_batch_size=24, reward_weights=[0.5])
    trainer = ReinforceAdaTrainer(
        str(tool_model_dir),
        submitted_reward,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        environment_factory={"scored": CalculatorEnvironment, "plain": Calculator},  # Calculator: no get_reward
    )
    assert trainer.reward_func_names == ["submitted_reward", "CalculatorEnvironment"]
    assert trainer.reward_weights.tolist() == [0.5, 1.0]
    scored = []
    inner = trainer._calculate_rewards

    def spy(inputs, prompts, completions, completion_ids_list):
        rewards = inner(inputs, prompts, completions, completion_ids_list)
        scored.extend(zip([row["environment"] for row in inputs], rewards[:, 1].tolist(), strict=True))
        return rewards

    policy = ScriptedPolicy(tokenizer, tool="submit")
    with patch.object(trainer.model, "generate", side_effect=policy), patch.object(trainer, "_calculate_rewards", spy):
        trainer.train()
    assert {name for name, _ in scored} == {"scored", "plain"}
    assert all(math.isnan(value) for name, value in scored if name == "plain")
    assert all(value in (0.0, 1.0) for name, value in scored if name == "scored")
    logs = [row for row in trainer.state.log_history if "ada/rounds" in row]
    assert all(math.isfinite(row["rewards/CalculatorEnvironment/mean"]) for row in logs)


def test_prepared_rollouts_are_the_ones_grpo_trainer_prepares_for_its_batch(tool_model_dir, tmp_path):
    """The seam `compat.prepare_rollouts` relies on: GRPOTrainer's step prepares its rows (environment reset,
    observation, tool dicts) and then calls `_generate` with their prompts. Run on the step's own rows, it must hand
    back exactly the prompts GRPOTrainer built, with one freshly reset environment and one tool dict per row."""
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    trainer = ReinforceAdaTrainer(
        str(tool_model_dir),
        consistency_reward([]),
        args=config(tmp_path, max_steps=1),
        train_dataset=tool_dataset(),
        processing_class=tokenizer,
        environment_factory=CalculatorEnvironment,
    )
    compared = []
    inner = trainer._generate

    def compare(prompts):
        rows = list(trainer._ada_inputs)
        prepared = prepare_rollouts(trainer, rows)
        compared.append(prepared == prompts)
        assert [env.problem for env in trainer.environments] == [row["key"] for row in rows]
        assert len(trainer._sync_tool_dicts) == len(rows) and all("submit" in d for d in trainer._sync_tool_dicts)
        return inner(prompts)

    with (
        patch.object(trainer.model, "generate", side_effect=ScriptedPolicy(tokenizer, tool="submit")),
        patch.object(trainer, "_generate", compare),
    ):
        trainer.train()
    assert compared == [True]


class MalformedPolicy(ScriptedPolicy):
    """Opens a tool call whose JSON never closes, as an untrained model does."""

    def turn(self, text: str) -> str:
        if TOOL_RESPONSE.findall(text):
            return super().turn(text)
        self.first_turns += 1
        return '<tool_call>\n{"name": "multiply", "arguments": {"a": 3,\n</tool_call><|im_end|>'


def test_malformed_tool_calls_train_and_score_as_answers(tool_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    trainer = ReinforceAdaTrainer(
        str(tool_model_dir),
        answer_reward,
        args=config(tmp_path, sampling_strategy="positive"),
        train_dataset=tool_dataset(),
        processing_class=tokenizer,
        tools=[multiply],
    )
    policy = MalformedPolicy(tokenizer)
    with patch.object(trainer.model, "generate", side_effect=policy):
        trainer.train()
    logs = per_step_tool_logs(trainer)
    assert len(logs) == 2 and all(math.isfinite(row["loss"]) for row in logs)
    # Nothing parsed as a call, so no tool ran; every rollout was wrong and spent the budget (positive rule).
    assert all(row["tools/call_frequency"] == 0.0 and row["reward"] == 0.0 for row in logs)
    assert policy.first_turns == 2 * 3 * trainer.ada_schedule.budget
