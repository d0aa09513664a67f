"""rollout_schedule="streaming" through transformers' continuous batching, on the offline toy model: real streaming
(requests added and cancelled while the manager generates in its thread) inside real `trainer.train()` runs."""

import contextlib
import math

import pytest
import torch
from test_trainer import ada_logs, bernoulli_reward, keyed_dataset, make_trainer
from transformers.generation.continuous_batching.continuous_api import ContinuousBatchingManager

import trl_ada.adapter.schedules.streaming as streaming_module
from trl_ada import ReinforceAdaConfig
from trl_ada.adapter.compat import continuous_batching_cache
from trl_ada.adapter.engines.continuous_batching import ContinuousBatchingBackend
from trl_ada.core.engine import Schedule, expected_remaining_draws

pytestmark = pytest.mark.slow

# A KV cache sized for the toy model: transformers' default sizes it from free memory, which on a CPU machine means
# zero-filling gigabytes every step (about 20 s for 64 toy requests, against 0.04 s with this).
SMALL_CACHE = continuous_batching_cache(num_blocks=64, page_size=32, max_batch_tokens=256)


def streaming_trainer(model_dir, tmp_path, reward, keys, **overrides):
    settings = dict(
        rollout_schedule="streaming",
        use_transformers_continuous_batching=True,
        transformers_continuous_batching_config=SMALL_CACHE,
        per_device_train_batch_size=4 * len(keys),
    )
    settings.update(overrides)
    return make_trainer(model_dir, tmp_path, reward, keyed_dataset(keys), **settings)


class CancelSpy:
    """Counts the cancellations that reach transformers' manager (its own `cancel_request`, unchanged), the tokens
    of every request the manager finished, the engine's results, and the backends (whose `let_finish` counts the
    aborted draws that were not cancelled because they had finished, or were about to, in the manager)."""

    def __init__(self, monkeypatch):
        self.cancelled: list[str] = []
        self.finished_tokens: list[int] = []
        self.results = []
        self.backends: list[ContinuousBatchingBackend] = []
        init = ContinuousBatchingBackend.__init__

        def spy_init(backend, *args, **kwargs):
            init(backend, *args, **kwargs)
            self.backends.append(backend)

        monkeypatch.setattr(ContinuousBatchingBackend, "__init__", spy_init)
        cancel, get_result, sample = (
            ContinuousBatchingManager.cancel_request,
            ContinuousBatchingManager.get_result,
            (streaming_module.sample),
        )

        def spy_cancel(manager, request_id):
            self.cancelled.append(request_id)
            return cancel(manager, request_id)

        def spy_get_result(manager, request_id=None, timeout=None):
            output = get_result(manager, request_id, timeout)
            # a request can finish in the manager just as it is cancelled: the backend counted it as aborted
            if output is not None and output.is_finished() and output.request_id not in self.cancelled:
                self.finished_tokens.append(len(output.generated_tokens))
            return output

        def spy_sample(*args, **kwargs):
            self.results.append(sample(*args, **kwargs))
            return self.results[-1]

        monkeypatch.setattr(ContinuousBatchingManager, "cancel_request", spy_cancel)
        monkeypatch.setattr(ContinuousBatchingManager, "get_result", spy_get_result)
        monkeypatch.setattr(streaming_module, "sample", spy_sample)

    @property
    def let_finish(self) -> int:
        return sum(backend.let_finish for backend in self.backends)


@pytest.mark.parametrize("round_sizing", ["fixed", "posterior"])
def test_positive_rule_streams_and_stops_each_prompt_on_its_own(toy_cold_dir, tmp_path, monkeypatch, round_sizing):
    """Positive rule (1 right answer, group of 4), budget 8 x 4. "a" is never right: it draws its whole budget of 32.
    "b" is always right: its first 4 completions in request order settle it, so its pool is exactly 4, whatever the
    finish order, and whatever else was requested for it is cancelled in the manager or dropped."""
    spy = CancelSpy(monkeypatch)
    trainer = streaming_trainer(
        toy_cold_dir,
        tmp_path,
        bernoulli_reward({"a": 0.0, "b": 1.0}),
        "ab",
        sampling_strategy="positive",
        round_sizing=round_sizing,
        max_steps=2,
        # a few prompt tokens per engine step: requests start one after another, so some are still queued or
        # running when "b" resolves, and must be cancelled
        transformers_continuous_batching_config={**SMALL_CACHE, "max_batch_tokens": 32},
    )
    trainer.train()
    logs = ada_logs(trainer)
    assert len(logs) == 2 == len(spy.results)
    schedule = Schedule.from_strategy("positive", 4, 8, 4, round_sizing=round_sizing)
    # posterior sizing: the expected draws still needed, from nothing seen yet, capped at samples_per_round
    first_round = 8 if round_sizing == "fixed" else min(8, math.ceil(expected_remaining_draws(0, 0, 0, schedule)))
    for log, result in zip(logs, spy.results, strict=True):
        assert sorted(len(pool) for pool in result.pools) == [4, 32]  # the sampler shuffles the prompts
        assert log["ada/samples_per_prompt"] == (32 + 4) / 2
        assert log["ada/samples_per_prompt_max"] == 32
        assert log["ada/frac_resolved"] == 0.5
        assert log["ada/pool_pass_rate"] == 0.5  # mean of 0 and 1
        assert log["ada/generation_seconds"] > 0
        # both prompts' first waves go out together; "a" alone can add up to the rest of its budget on top
        assert 2 * first_round <= log["ada/in_flight_max"] <= 32 + first_round
        if round_sizing == "fixed":
            assert log["ada/in_flight_max"] == 16  # at most 8 outstanding per prompt
    # every draw the engine aborted reached the manager as a cancellation, unless it had finished or was about to
    # there (`let_finish`), and nothing else did
    assert len(spy.cancelled) + spy.let_finish == sum(result.aborted for result in spy.results)
    assert spy.let_finish == sum(backend.let_finish for backend in spy.backends) and len(spy.backends) == 2
    assert len(set(spy.cancelled)) == len(spy.cancelled)
    if round_sizing == "fixed":  # "b" asked for 8 and needed 4: some were still queued or running when it resolved,
        # and were aborted: cancelled in the manager, or, as close to their 3-token limit as the steps under way
        # take them, let finish there (which of the two depends on timing; tests/test_cb_backend.py pins the rule)
        assert sum(result.aborted for result in spy.results) > 0


def never_always_coin_trainer(toy_cold_dir, tmp_path, **options):
    """Prompts "a" (never right), "b" (always right) and "c" (a fair coin), one step (request ids restart every step:
    the spy tells requests apart within one), a cache small enough that requests queue."""
    return streaming_trainer(
        toy_cold_dir,
        tmp_path,
        bernoulli_reward({"a": 0.0, "b": 1.0, "c": 0.5}),
        "abc",
        max_steps=1,
        transformers_continuous_batching_config={**SMALL_CACHE, "max_batch_tokens": 32},
        **options,
    )


def test_balanced_rule_trains_and_counts_every_token(toy_cold_dir, tmp_path, monkeypatch):
    """Balanced rule: "a" (p = 0) and "b" (p = 1) can never hold both a right and a wrong answer, so both spend the
    whole budget; "c" (p = 0.5) stops early. `ada/completion_tokens` counts every token the manager generated: the
    requests it finished (kept, discarded or dropped after their prompt stopped) plus what cancelled ones had
    generated, at most `max_completion_length` each, and aborted ones let finish in the manager counted at most at
    `max_completion_length` each."""
    spy = CancelSpy(monkeypatch)
    trainer = never_always_coin_trainer(toy_cold_dir, tmp_path)
    trainer.train()
    (log,) = ada_logs(trainer)
    (result,) = spy.results
    sizes = sorted(len(pool) for pool in result.pools)  # the sampler shuffles the prompts
    assert sizes[1:] == [32, 32] and 4 <= sizes[0] <= 32
    assert log["ada/samples_per_prompt"] == sum(len(pool) for pool in result.pools) / 3
    assert log["ada/frac_resolved"] == 1 / 3  # "c" fails only if 32 fair coins hold fewer than 2 of a kind
    cancelled_tokens = log["ada/completion_tokens"] - sum(spy.finished_tokens)
    assert 0 <= cancelled_tokens <= (len(spy.cancelled) + spy.let_finish) * trainer.max_completion_length
    assert log["ada/aborted_tokens"] >= cancelled_tokens
    assert len(spy.cancelled) + spy.let_finish == result.aborted


def test_kept_rows_carry_their_own_completion_and_reward(toy_cold_dir, tmp_path):
    """The reward reads the completion's tokens; the rows handed to the loss must pair each completion with its own
    reward, and the pool advantages must rank right answers above wrong ones within every mixed group."""

    def even_first_token(completion_ids, **kwargs):
        return [float(len(ids) > 0 and ids[0] % 2 == 0) for ids in completion_ids]

    outputs = []
    trainer = streaming_trainer(toy_cold_dir, tmp_path, even_first_token, "abcd", max_steps=2)
    original = trainer._generate_and_score_completions

    def spy(inputs):
        outputs.append(original(inputs))
        return outputs[-1]

    trainer._generate_and_score_completions = spy
    trainer.train()
    assert len(outputs) == 2
    for output in outputs:
        ids, mask = output["completion_ids"], output["completion_mask"].bool()
        first = ids[:, 0].masked_fill(~mask[:, 0], 1)
        rewards = (first % 2 == 0).float().view(-1, 4)
        advantages = output["advantages"].view(-1, 4)
        for group_rewards, group_advantages in zip(rewards, advantages, strict=True):
            if 0 < group_rewards.sum() < 4:
                assert torch.all((group_advantages > 0) == (group_rewards == 1))


def test_streaming_needs_an_engine_that_streams():
    common = dict(output_dir="unused", use_cpu=True, bf16=False, rollout_schedule="streaming")
    with pytest.raises(ValueError, match="use_transformers_continuous_batching=True"):
        ReinforceAdaConfig(**common)
    with pytest.raises(ValueError, match="nothing to stream"):
        ReinforceAdaConfig(**common, use_transformers_continuous_batching=True, sampling_strategy="estimate")
    with pytest.raises(ValueError, match="vllm_tensor_parallel_size=1"):
        ReinforceAdaConfig(**common, use_vllm=True, vllm_mode="colocate", vllm_tensor_parallel_size=2)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_in_flight"):
            ReinforceAdaConfig(**common, use_transformers_continuous_batching=True, max_in_flight=bad)
    with pytest.raises(ValueError, match="rollout_schedule"):
        ReinforceAdaConfig(output_dir="unused", use_cpu=True, bf16=False, rollout_schedule="stream")


def test_a_failing_reward_stops_the_step_with_the_prompt_named(toy_cold_dir, tmp_path, monkeypatch):
    """A reward that raises while streaming: the backend is closed (nothing left running) and the step fails with
    the same error as under rounds, naming the function and the prompt."""
    from trl_ada.adapter.checks import RewardFunctionError

    def broken(completions, key, **kwargs):
        if "b" in key:
            raise KeyError("no answer for b")
        return [0.0] * len(key)

    closed = []
    trainer = streaming_trainer(toy_cold_dir, tmp_path, broken, "ab", max_steps=1)
    import trl_ada.adapter.trainer as trainer_module

    open_backend = trainer_module.open_streaming_engine

    def tracking(trainer, prompt_ids):
        context = open_backend(trainer, prompt_ids)
        backend = context.__enter__()
        try:
            yield backend
        finally:
            context.__exit__(None, None, None)
            closed.append(not backend.manager.is_running())

    monkeypatch.setattr(trainer_module, "open_streaming_engine", contextlib.contextmanager(tracking))
    with pytest.raises(RewardFunctionError, match=r"'broken' failed on prompt .*b\?.*KeyError"):
        trainer.train()
    assert closed == [True]


def test_the_benchmark_counter_counts_every_token_the_engine_generated(toy_cold_dir, tmp_path, monkeypatch):
    """`trl_ada.tools.demo.count_generated_tokens` under streaming: every finished request the manager returned counts
    (kept in a pool or dropped after its prompt stopped) as a completion unless it was an aborted draw let finish
    there, and cancelled ones add what they had generated."""
    from trl_ada.tools.demo import count_generated_tokens

    spy = CancelSpy(monkeypatch)
    trainer = never_always_coin_trainer(toy_cold_dir, tmp_path, sampling_strategy="positive")
    counter = count_generated_tokens(trainer)
    trainer.train()
    # every finished request the manager returned is a completion, or an aborted draw let finish there
    assert counter.calls == 1 and counter.completions <= len(spy.finished_tokens)
    assert len(spy.finished_tokens) <= counter.completions + spy.let_finish
    cancelled_tokens = counter.completion_tokens - sum(spy.finished_tokens)
    assert 0 <= cancelled_tokens <= (len(spy.cancelled) + spy.let_finish) * trainer.max_completion_length
    assert counter.completion_tokens == sum(log["ada/completion_tokens"] for log in ada_logs(trainer))
