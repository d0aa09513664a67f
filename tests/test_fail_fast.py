"""Fail fast and say what to do: checks at construction, one-time warnings in training, honest reward-side metrics."""

import math
import random
import time
import warnings
from pathlib import Path

import pytest
from datasets import Dataset
from mp_common import cpu_config
from test_trainer import ada_logs, keyed_dataset, make_trainer
from trl import GRPOConfig, GRPOTrainer

from trl_ada import ReinforceAdaConfig, ReinforceAdaTrainer
from trl_ada.adapter import trainer as trainer_module
from trl_ada.adapter.checks import SignalWatch
from trl_ada.core.engine import ExitRule

# -------------------------------------------------------------------------------------------------------------------
# SignalWatch: hand-worked sequences
# -------------------------------------------------------------------------------------------------------------------


def test_signal_watch_warns_after_three_batches_then_after_6_12_24_naming_the_highest_reward_and_threshold():
    watch = SignalWatch(ExitRule(1, 0), positive_threshold=0.7, budget=32)
    assert watch.update(0.5, 0) == [] and watch.update(0.25, 0) == []  # two batches: too early to say
    (warning,) = watch.update(-math.inf, 0)  # a batch where nothing was scorable leaves the highest at 0.5
    assert "positive_threshold=0.7" in warning and "highest reward: 0.5" in warning and "3 generation" in warning
    assert "budget of 32" in warning and "(next: after 6)" in warning
    assert "No completion has earned any reward" not in warning  # 0.5 was earned: the threshold is the problem
    due = [batch for batch in range(4, 50) if watch.update(0.5, 0)]
    assert due == [6, 12, 24, 48]  # backing off: 3 x 2, 3 x 4, 3 x 8, 3 x 16


def test_signal_watch_stops_warning_once_a_completion_passes_the_threshold():
    watch = SignalWatch(ExitRule(1, 0), positive_threshold=0.7, budget=32)
    assert [len(watch.update(0.5, 0)) for _ in range(3)] == [0, 0, 1]
    watch.update(1.0, 1)  # batch 4: a positive, a prompt resolved
    assert [watch.update(0.0, 0) for _ in range(4, 30)] == [[]] * 26


@pytest.mark.parametrize(
    ("rule", "highest", "shown"),
    [
        (ExitRule(1, 0), 0.0, "0"),  # Seq-pos, every reward 0
        (ExitRule(0, 0), 0.0, "0"),  # uniform sampling: nothing learns either
        (ExitRule(2, 2), -1.0, "-1"),  # only penalties
        (ExitRule(1, 0), -math.inf, "no reward scored"),  # nothing scorable
    ],
)
def test_signal_watch_says_no_reward_at_all_is_a_format_problem_not_a_threshold_one(rule, highest, shown):
    watch = SignalWatch(rule, positive_threshold=0.7, budget=8)
    assert watch.update(highest, 0) == [] and watch.update(highest, 0) == []
    (warning,) = watch.update(highest, 0)
    assert warning.startswith(
        f"No completion has earned any reward in 3 generation batches (highest reward: {shown}), so there is "
        "nothing to learn from (ada/frac_batches_no_reward is 1). Lowering positive_threshold will not help."
    )
    for cause in ("the prompt format, conversational", "plain string", "chat template", "the reward function"):
        assert cause in warning, cause
    assert "given the plain string '47-8' it returns empty completions" in warning  # the toy model's case
    assert "set it below your reward's success value" not in warning
    assert [batch for batch in range(4, 13) if watch.update(highest, 0)] == [6, 12]


def test_signal_watch_warns_when_nothing_resolves_although_rewards_pass_the_threshold():
    # Balanced 2+2: every group all right, so positives abound but no prompt ever gets its 2 negatives.
    watch = SignalWatch(ExitRule(2, 2), positive_threshold=0.5, budget=16)
    warnings_seen = [watch.update(1.0, 0) for _ in range(4)]
    assert warnings_seen[:2] == [[], []] and warnings_seen[3] == []
    (warning,) = warnings_seen[2]
    assert "frac_resolved is 0" in warning and "needs 2 completion(s) above" in warning and "2 at or below" in warning


@pytest.mark.parametrize(
    ("rule", "highest", "resolved"),
    [
        (ExitRule(1, 0), 1.0, 1),  # a positive seen and a prompt resolved: all is well
        (ExitRule(0, 0), 0.25, 0),  # uniform sampling: no exit rule, the threshold does not matter
        (ExitRule(0, 1), 0.25, 3),  # a rule that needs no positives, met
    ],
)
def test_signal_watch_is_silent_when_the_rule_can_be_met(rule, highest, resolved):
    watch = SignalWatch(rule, positive_threshold=0.5, budget=8)
    assert [watch.update(highest, resolved) for _ in range(5)] == [[]] * 5


def half_reward(completions, **kwargs):
    """A 0/0.5 reward (half credit for a right answer): never above the default positive_threshold of 0.7."""
    return [0.5 * (i % 2) for i in range(len(completions))]


def test_a_reward_that_never_passes_the_threshold_warns_once_in_training(toy_cold_dir, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(trainer_module.logger, "warning", lambda message, *args: seen.append(message))
    trainer = make_trainer(
        toy_cold_dir, tmp_path, half_reward, keyed_dataset("abcd"), max_steps=4, logging_steps=1,
        sampling_strategy="positive", samples_per_round=4, max_rounds=2,
    )  # fmt: skip
    trainer.train()
    threshold = [m for m in seen if "positive_threshold" in m]
    assert len(threshold) == 1, seen
    assert f"positive_threshold={trainer.args.positive_threshold:g}" in threshold[0]
    assert "highest reward: 0.5" in threshold[0]
    assert all(row["ada/frac_resolved"] == 0 and row["ada/samples_per_prompt"] == 8 for row in ada_logs(trainer))
    # Every batch had rewards (0.5) but none above the threshold.
    rows = ada_logs(trainer)
    assert [(row["ada/frac_batches_no_reward"], row["ada/frac_batches_no_positive"]) for row in rows] == [(0, 1)] * 4


def zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


def test_no_reward_at_all_warns_on_its_own_line_with_back_off_and_shows_in_the_metrics(
    toy_cold_dir, tmp_path, monkeypatch
):
    seen = []
    monkeypatch.setattr(trainer_module.logger, "warning", lambda message, *args: seen.append(message))
    trainer = make_trainer(
        toy_cold_dir, tmp_path, zero_reward, keyed_dataset("ab"), max_steps=7, logging_steps=1,
        per_device_train_batch_size=4, num_generations=2, sampling_strategy="positive", samples_per_round=2,
        max_rounds=2,
    )  # fmt: skip
    trainer.train()
    no_reward = [m for m in seen if "No completion has earned any reward" in m]
    # One generation batch per step: warned after batches 3 and 6, not 7; each on a line of its own.
    assert [m.split(" generation batches")[0].rsplit(" ", 1)[1] for m in no_reward] == ["3", "6"], seen
    assert all(m.startswith("\nNo completion has earned any reward") for m in no_reward)
    assert not [m for m in seen if "set it below your reward's success value" in m]
    rows = ada_logs(trainer)
    assert [(row["ada/frac_batches_no_reward"], row["ada/frac_batches_no_positive"]) for row in rows] == [(1, 1)] * 7


def test_signal_metrics_on_hand_worked_highest_rewards():
    from trl_ada.core.metrics import signal_metrics

    expected = {0.0: (1, 1), -math.inf: (1, 1), -0.5: (1, 1), 0.5: (0, 1), 0.7: (0, 1), 1.0: (0, 0)}
    for highest, (no_reward, no_positive) in expected.items():
        assert signal_metrics(highest, 0.7) == {
            "ada/frac_batches_no_reward": no_reward,
            "ada/frac_batches_no_positive": no_positive,
        }, highest


# -------------------------------------------------------------------------------------------------------------------
# Construction: models given as paths, datasets without a prompt column, a config given to GRPOTrainer
# -------------------------------------------------------------------------------------------------------------------


def cpu_args(tmp_path, config_cls=ReinforceAdaConfig, **kwargs):
    settings = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", save_strategy="no")
    return config_cls(**(settings | dict(per_device_train_batch_size=8, num_generations=4, max_steps=1) | kwargs))


def test_a_pathlike_model_is_accepted(toy_cold_dir, tmp_path):
    assert isinstance(toy_cold_dir, Path)
    trainer = ReinforceAdaTrainer(
        toy_cold_dir, half_reward, args=cpu_args(tmp_path), train_dataset=keyed_dataset("ab")
    )
    assert trainer.model.config.name_or_path == str(toy_cold_dir)


def test_a_dataset_without_a_prompt_column_fails_at_construction_naming_its_columns(tmp_path):
    dataset = Dataset.from_list([{"question": "1+1?", "answer": "2"}])
    # Checked before any model is loaded: a model name that does not exist must not be reached.
    with pytest.raises(ValueError) as info:
        ReinforceAdaTrainer("no/such-model", half_reward, args=cpu_args(tmp_path), train_dataset=dataset)
    message = str(info.value)
    assert "train split has no 'prompt' column" in message and "['question', 'answer']" in message
    assert "trl-ada prepare" in message
    with pytest.raises(ValueError, match="holdout split has no 'prompt' column"):
        ReinforceAdaTrainer(
            "no/such-model", half_reward, args=cpu_args(tmp_path), train_dataset=keyed_dataset("a"),
            eval_dataset={"holdout": dataset},
        )  # fmt: skip


def no_kwargs_reward(prompts, completions, key):  # no **kwargs: GRPOTrainer passes more than these
    return [0.0] * len(completions)


def test_a_reward_function_without_kwargs_fails_at_construction_naming_what_trl_would_pass(toy_cold_dir, tmp_path):
    # What GRPOTrainer really passes, recorded from one step of plain GRPO.
    passed = set()

    def spy(**kwargs):
        passed.update(kwargs)
        return [0.0] * len(kwargs["completions"])

    settings = dict(per_device_train_batch_size=8, max_completion_length=3, max_steps=1)
    args = cpu_config(str(tmp_path / "spy"), config_cls=GRPOConfig, num_generations=4, **settings)
    GRPOTrainer(str(toy_cold_dir), spy, args=args, train_dataset=keyed_dataset("ab")).train()
    with pytest.raises(TypeError) as info:  # before any model loads: the name does not exist
        ReinforceAdaTrainer(
            "no/such-model", no_kwargs_reward, args=cpu_args(tmp_path), train_dataset=keyed_dataset("ab")
        )
    message = str(info.value)
    assert message.startswith("Reward function 'no_kwargs_reward' does not accept the keyword argument(s) ")
    assert f"argument(s) {sorted(passed - {'prompts', 'completions', 'key'})}, which GRPOTrainer passes" in message
    assert "Accept **kwargs: `def no_kwargs_reward(completions, **kwargs)`" in message


def test_reward_callables_that_take_everything_and_reward_models_pass_construction(
    toy_cold_dir, tmp_path, grpo_init_unreached
):
    class Scorer:  # a callable object with **kwargs
        def __call__(self, completions, **kwargs):
            return [0.0] * len(completions)

    def every_keyword(prompts, completions, completion_ids, trainer_state, log_extra, log_metric, key):
        return [0.0] * len(completions)

    for reward in (Scorer(), every_keyword, half_reward, str(toy_cold_dir)):  # the last: a reward model's name
        with pytest.raises(Reached):  # past the checks, to where GRPOTrainer would load the model
            ReinforceAdaTrainer(toy_cold_dir, reward, args=cpu_args(tmp_path), train_dataset=keyed_dataset("a"))


def test_reinforce_ada_config_given_to_plain_grpo_trainer_warns(toy_cold_dir, tmp_path):
    with pytest.warns(UserWarning, match="ReinforceAdaConfig was passed to GRPOTrainer, which ignores"):
        GRPOTrainer(str(toy_cold_dir), half_reward, args=cpu_args(tmp_path), train_dataset=keyed_dataset("ab"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        try:
            ReinforceAdaTrainer(
                str(toy_cold_dir), half_reward, args=cpu_args(tmp_path), train_dataset=keyed_dataset("ab")
            )
        except UserWarning as warning:  # other UserWarnings (TRL's, torch's) are not ours to judge
            assert "ReinforceAdaConfig was passed" not in str(warning)


# -------------------------------------------------------------------------------------------------------------------
# A reward function's log_metric and the time spent scoring
# -------------------------------------------------------------------------------------------------------------------


def test_log_metric_is_weighted_by_the_completions_each_call_scored(toy_cold_dir, tmp_path):
    rng, calls = random.Random(0), []

    def coin_reward(completions, log_metric, **kwargs):
        rewards = [float(rng.random() < 0.3) for _ in completions]
        calls.append(rewards)
        log_metric("coin_mean", sum(rewards) / len(rewards))  # this call's mean, as a user would log it
        return rewards

    trainer = make_trainer(
        toy_cold_dir, tmp_path, coin_reward, keyed_dataset("abcd"), max_steps=1, logging_steps=1,
        sampling_strategy="balanced", samples_per_round=4, max_rounds=4,
    )  # fmt: skip
    trainer.train()
    sizes = [len(rewards) for rewards in calls]
    assert len(set(sizes)) > 1, sizes  # rounds of different sizes: the unweighted mean would differ
    every_completion = [r for rewards in calls for r in rewards]
    expected = sum(every_completion) / len(every_completion)
    unweighted = sum(sum(r) / len(r) for r in calls) / len(calls)
    assert abs(expected - unweighted) > 1e-3
    (logged,) = [row["coin_mean"] for row in trainer.state.log_history if "coin_mean" in row]
    assert logged == pytest.approx(expected, abs=1e-6)


def test_reward_seconds_holds_the_time_in_reward_functions(toy_cold_dir, tmp_path):
    calls = []

    def slow_reward(completions, **kwargs):
        calls.append(len(completions))
        time.sleep(0.05)
        return [float(i % 2) for i in range(len(completions))]

    trainer = make_trainer(
        toy_cold_dir, tmp_path, slow_reward, keyed_dataset("ab"), max_steps=1, logging_steps=1,
        sampling_strategy="balanced", samples_per_round=4, max_rounds=2,
    )  # fmt: skip
    trainer.train()
    (row,) = ada_logs(trainer)
    assert 0.05 * len(calls) <= row["ada/reward_seconds"] < 0.05 * len(calls) + 1.0
    assert 0 < row["ada/generation_seconds"]


# -------------------------------------------------------------------------------------------------------------------
# Refill filtering on a named reward (DAPO filters on accuracy)
# -------------------------------------------------------------------------------------------------------------------


def test_step_io_refill_signal_reads_the_named_column_and_skips_what_the_exit_rules_skip():
    import torch

    from trl_ada.adapter.step_io import StepIO
    from trl_ada.core.engine import Pool

    table = torch.tensor([[1.0, 0.1], [1.0, 0.2], [0.0, 0.3], [float("nan"), 0.4]])  # (handle, function)
    io = StepIO(*([None] * 17), refill_filter_column=0)
    signal = io.refill_signal(lambda handles: table[handles])
    pool = Pool(0.5)
    pool.add([0, 1], [1.1, 1.2], 0)
    assert not signal(pool)  # correctness 1, 1: no signal although the totals differ
    pool.add([3], [0.4], 1)
    assert not signal(pool)  # an unscored correctness value is left out
    pool.add([2], [float("nan")], 2)
    assert not signal(pool)  # a completion left out of the exit rules (NaN total) is left out here too
    pool.add([2], [0.3], 3)
    assert signal(pool)
    assert StepIO(*([None] * 17)).refill_signal(lambda handles: table[handles]) is None  # the engine's default


def test_refill_filter_reward_must_name_a_reward_function_and_needs_refill(toy_cold_dir, tmp_path):
    with pytest.raises(ValueError, match="needs refill=True"):
        cpu_args(tmp_path, refill_filter_reward="half_reward")
    with pytest.raises(ValueError, match=r"names no reward function; the trainer's are \['half_reward'\]"):
        ReinforceAdaTrainer(
            str(toy_cold_dir), half_reward, args=cpu_args(tmp_path, refill=True, refill_filter_reward="accuracy"),
            train_dataset=keyed_dataset("ab"),
        )  # fmt: skip


def test_refill_filters_on_the_named_reward_in_training(toy_cold_dir, tmp_path):
    # `correct` gives every completion 1 (every group all right); `bonus` makes every total differ. Filtering on the
    # total, nothing is refilled; filtering on `correct`, every slot is refilled up to the per-process limit.
    def correct(completions, **kwargs):
        return [1.0] * len(completions)

    noise = random.Random(0)

    def bonus(completions, **kwargs):
        return [noise.random() for _ in completions]

    def refills(**overrides):
        trainer = make_trainer(
            toy_cold_dir, tmp_path, [correct, bonus], keyed_dataset("abcd"), max_steps=1, logging_steps=1,
            sampling_strategy="uniform", refill=True, max_refills_per_step=3, **overrides,
        )  # fmt: skip
        trainer.train()
        (row,) = ada_logs(trainer)
        return row["ada/refills"]

    assert refills() == 0
    assert refills(refill_filter_reward="correct") == 3


# -------------------------------------------------------------------------------------------------------------------
# The model name, checked before TRL loads anything (the CLI's checks, from the Python API)
# -------------------------------------------------------------------------------------------------------------------


class Reached(Exception):
    """Raised in place of GRPOTrainer.__init__: the trainer got as far as loading the model."""


@pytest.fixture
def grpo_init_unreached(monkeypatch):
    def reached(self, *args, **kwargs):
        raise Reached

    monkeypatch.setattr(GRPOTrainer, "__init__", reached)


def test_a_missing_model_folder_is_one_line_before_trl_loads_anything(tmp_path, grpo_init_unreached):
    from trl_ada.adapter.errors import UsageError

    missing = tmp_path / "runs" / "no-such-model"
    with pytest.raises(UsageError) as info:
        ReinforceAdaTrainer(str(missing), half_reward, args=cpu_args(tmp_path), train_dataset=keyed_dataset("ab"))
    assert str(info.value) == f"model {missing}: no such folder."  # not transformers' "Repo id must be in the form"
    assert isinstance(info.value, ValueError)


def test_a_hub_id_offline_and_not_cached_is_one_line_before_trl_loads_anything(
    tmp_path, grpo_init_unreached, monkeypatch
):
    from huggingface_hub import constants

    from trl_ada.adapter.errors import RunError

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    started = time.perf_counter()
    with pytest.raises(RunError) as info:
        ReinforceAdaTrainer(
            "someone/not-a-cached-model", half_reward, args=cpu_args(tmp_path), train_dataset=keyed_dataset("ab")
        )
    assert time.perf_counter() - started < 10  # huggingface_hub's retries took 26 s
    message = str(info.value)
    assert message.startswith(
        "model someone/not-a-cached-model: not a local folder, and not in the Hugging Face cache"
    )
    assert "HF_HUB_OFFLINE is set, so it cannot be downloaded" in message
    assert "`hf download someone/not-a-cached-model`" in message and "\n" not in message
    # A folder that exists goes on to TRL.
    with pytest.raises(Reached):
        ReinforceAdaTrainer(
            str(tmp_path_with_config(tmp_path)), half_reward, args=cpu_args(tmp_path), train_dataset=keyed_dataset("a")
        )


def tmp_path_with_config(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


# -------------------------------------------------------------------------------------------------------------------
# The toy model with plain-string prompts
# -------------------------------------------------------------------------------------------------------------------


def test_the_toy_model_with_plain_string_prompts_warns_at_construction(toy_cold_dir, tmp_path, grpo_init_unreached):
    plain = Dataset.from_list([{"prompt": "47-8", "answer": "39"}])
    with pytest.warns(UserWarning) as caught, pytest.raises(Reached):
        ReinforceAdaTrainer(str(toy_cold_dir), half_reward, args=cpu_args(tmp_path), train_dataset=plain)
    (message,) = [str(w.message) for w in caught if "toy model" in str(w.message)]
    assert message == (
        f"{toy_cold_dir} is a trl-ada toy model (it holds toy_info.json), which answers only through its chat "
        "template, and the training set's prompts are plain strings ('47-8'): it gives them empty completions, so "
        "every reward is 0 and nothing is learned. Give each prompt as a conversation, "
        "[{'role': 'user', 'content': '47-8'}], as trl_ada.toy's datasets do."
    )
    with warnings.catch_warnings(record=True) as caught, pytest.raises(Reached):
        warnings.simplefilter("always")
        ReinforceAdaTrainer(str(toy_cold_dir), half_reward, args=cpu_args(tmp_path), train_dataset=keyed_dataset("a"))
    assert not [w for w in caught if "toy model" in str(w.message)]


def test_plain_string_prompts_to_a_model_that_is_not_a_toy_say_nothing(tmp_path):
    from trl_ada.adapter.checks import toy_plain_prompt_message

    plain = Dataset.from_list([{"prompt": "47-8", "answer": "39"}])
    folder = tmp_path_with_config(tmp_path)
    assert toy_plain_prompt_message(str(folder), plain) is None  # any other model: plain strings may be right
    (folder / "toy_info.json").write_text("{}")
    assert "plain strings ('47-8')" in toy_plain_prompt_message(str(folder), plain)
    assert toy_plain_prompt_message(str(folder), plain.select([])) is None  # nothing to look at
    assert toy_plain_prompt_message(str(folder), None) is None
    assert toy_plain_prompt_message(str(folder), plain.to_iterable_dataset()) is None  # not read: no length


def test_trl_s_all_rewards_none_warning_is_dropped_only_after_a_reward_function_failed(caplog):
    """GRPOTrainer logs it through accelerate's adapter ("[RANK 0] All reward functions returned None ..."); after a
    guarded failure it would come before the real error and blame the values."""
    from accelerate import PartialState
    from trl.trainer import grpo_trainer

    from trl_ada.adapter.compat import quiet_all_none_warning

    PartialState()  # accelerate's logger needs its state
    failed = False
    with caplog.at_level("WARNING"), quiet_all_none_warning(lambda: failed):
        grpo_trainer.logger.warning("All reward functions returned None for the following kwargs: {}")
        assert "All reward functions returned None" in caplog.text  # a None returned on purpose: still warned
        caplog.clear()
        failed = True
        grpo_trainer.logger.warning("All reward functions returned None for the following kwargs: {}")
        grpo_trainer.logger.warning("another warning")
    assert "All reward functions returned None" not in caplog.text and "another warning" in caplog.text
