"""The Reinforce-Ada rollout worker for TRL's AsyncGRPOTrainer, on CPU with no vLLM and no model.

The loops (TRL's `_AsyncRolloutLoop` and our `AdaRolloutLoop`) run in this process against a scripted completion
source that replaces the one method that talks to vLLM (`_generate_one_turn`): each prompt's k-th request returns a
scripted completion after a scripted delay, and cancelled requests are recorded. Everything above that method (the
conversation, the training rows, rewards, advantages, the pushed `RolloutSample`s) is the loops' own code.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from datasets import Dataset
from transformers import AutoTokenizer
from trl.chat_template_utils import qwen3_template
from trl.experimental.async_grpo.async_rollout_worker import RolloutSample, _AsyncRolloutLoop

from trl_ada.adapter.async_worker import AdaRolloutConfig, AdaRolloutLoop
from trl_ada.toy import toy_model_dir

RIGHT, WRONG = "4", "5"  # the scripted answers; the reward function scores the text


def exact_answer(completions: list[list[dict[str, str]]], **kwargs: Any) -> list[float]:
    """1 when the completion's text is the right answer, else 0 (a module-level function, as TRL requires)."""
    return [1.0 if completion[-1]["content"].strip() == RIGHT else 0.0 for completion in completions]


class Shared:
    """Stands in for an `mp.Value`: the loop reads and writes `.value`."""

    def __init__(self, value: float = 0) -> None:
        self.value = value


def child_channels(model_version: int = 0) -> dict[str, Any]:
    """The queues, values and event that TRL's worker hands the loop it builds in its child process."""
    return dict(
        rollout_buffer=queue.Queue(),
        model_version_value=Shared(model_version),
        heartbeat_value=Shared(0.0),
        failed_event=threading.Event(),
        exception_info_queue=queue.Queue(),
        metrics_queue=queue.Queue(),
    )


class Script:
    """The k-th request of each prompt (in dispatch order) answers `answers[prompt][k]` after `delays[prompt][k]`
    seconds; a prompt's later requests repeat its last entry. Records what was dispatched and cancelled."""

    def __init__(self, tokenizer: Any, answers: dict[str, str], delays: dict[str, list[float]] | None = None) -> None:
        self.tokenizer, self.answers, self.delays = tokenizer, answers, delays or {}
        self.dispatched: dict[str, int] = defaultdict(int)
        self.cancelled: dict[str, list[int]] = defaultdict(list)
        self.versions: dict[str, list[int]] = defaultdict(list)  # the model version seen at each dispatch
        self.on_dispatch: Any = None  # called with (question, k) at each dispatch (e.g. to bump the version)

    def question(self, prompt_ids: list[int]) -> str:
        text = self.tokenizer.decode(prompt_ids)
        return next(q for q in self.answers if q in text)

    async def turn(self, loop: Any, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        question = self.question(prompt_ids)
        k = self.dispatched[question]
        self.dispatched[question] += 1
        self.versions[question].append(loop.model_version)
        if self.on_dispatch is not None:
            self.on_dispatch(question, k)
        answers = self.answers[question]
        delays = self.delays.get(question, [0.0])
        try:
            await asyncio.sleep(delays[min(k, len(delays) - 1)])
        except asyncio.CancelledError:
            self.cancelled[question].append(k)
            raise
        ids = self.tokenizer.encode(answers[min(k, len(answers) - 1)], add_special_tokens=False)
        ids = [*ids, self.tokenizer.eos_token_id]
        return ids, [-0.25 * (i + 1) for i in range(len(ids))]


def scripted(cls: type) -> type:
    """`cls` with its vLLM request replaced by the test's script."""

    class Scripted(cls):
        script: Script

        async def _generate_one_turn(self, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
            return await self.script.turn(self, prompt_ids)

    return Scripted


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    # The loops log through accelerate, which needs its state (TRL's child process makes it the same way).
    from accelerate.state import PartialState

    PartialState()
    tok = AutoTokenizer.from_pretrained(toy_model_dir())
    # The toy model's ChatML template is not one TRL recognises; its assistant turns parse as Qwen3's do.
    tok.response_template = qwen3_template
    return tok


def eos_token_ids(tokenizer: Any) -> dict[str, Any]:
    """The loop's `eos_token_ids` argument, which TRL's loop takes from 1.15.0 on (1.14 has none)."""
    accepted = inspect.signature(_AsyncRolloutLoop.__init__).parameters
    return {"eos_token_ids": [tokenizer.eos_token_id]} if "eos_token_ids" in accepted else {}


def make_loop(cls: type, tokenizer: Any, questions: list[str], script: Script, **kwargs: Any) -> Any:
    loop_cls = scripted(cls)
    loop_cls.script = script
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": q}], "qid": i} for i, q in enumerate(questions)]
    )
    return loop_cls(
        model_name="toy",
        dataset=dataset,
        reward_funcs=kwargs.pop("reward_funcs", [exact_answer]),
        processing_class=tokenizer,
        **eos_token_ids(tokenizer),
        **child_channels(),
        **kwargs,
    )


@contextmanager
def running(loop: Any) -> Iterator[None]:
    """`loop` running in a thread for the block's duration; stopped (its requests closed) when the block ends."""
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        if not loop._loop.is_closed():
            loop._loop.call_soon_threadsafe(loop._stop_event.set)
        thread.join(timeout=30)
    assert not thread.is_alive()


def collect_until(
    loop: Any, done: Callable[[dict[int, list[RolloutSample]]], bool], timeout: float = 60.0
) -> dict[int, list[RolloutSample]]:
    """Every row a running `loop` pushes, by group id, until `done(groups)` holds (the loop keeps running)."""
    groups: dict[int, list[RolloutSample]] = defaultdict(list)
    deadline = time.monotonic() + timeout
    while not done(groups):
        if loop._failed_event.is_set():
            raise RuntimeError(loop._exception_info_queue.get_nowait())
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {dict((g, len(s)) for g, s in groups.items())} rows in {timeout}s")
        try:
            sample = loop.rollout_buffer.get(timeout=0.05)
        except queue.Empty:
            continue
        groups[sample.group_id].append(sample)
    return dict(groups)


def collect(loop: Any, num_groups: int, timeout: float = 60.0) -> dict[int, list[RolloutSample]]:
    """The rows of groups 0..num_groups-1 as a running `loop` pushes them (it keeps running)."""

    def whole(groups: dict[int, list[RolloutSample]]) -> bool:
        return all(len(groups.get(g, ())) >= loop.num_generations for g in range(num_groups))

    groups = collect_until(loop, whole, timeout)
    return {g: groups[g] for g in range(num_groups)}


def run_until(loop: Any, num_groups: int, timeout: float = 60.0) -> dict[int, list[RolloutSample]]:
    """Run `loop` in a thread until the rows of `num_groups` groups (ids 0..num_groups-1) are pushed; stop it and
    return those groups' samples."""
    with running(loop):
        return collect(loop, num_groups, timeout)


def metrics_of(loop: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = defaultdict(list)
    while True:
        try:
            payload = loop._metrics_queue.get_nowait()
        except queue.Empty:
            return out
        for key, value in payload.items():
            out[key].append(value)


def row_key(sample: RolloutSample) -> tuple:
    return (
        sample.group_id,
        tuple(np.asarray(sample.input_ids).tolist()),
        tuple(np.asarray(sample.completion_mask).tolist()),
        tuple(np.round(np.asarray(sample.old_log_probs, dtype=float), 6).tolist()),
    )


def uniform_ada(**kwargs: Any) -> AdaRolloutConfig:
    return AdaRolloutConfig(sampling_strategy="uniform", advantage_baseline="group", scale_rewards="none", **kwargs)


def test_a_fixed_group_pushes_the_rows_trl_pushes(tokenizer: Any) -> None:
    """With exactly num_generations per prompt, the Ada loop pushes the rows TRL's own loop pushes for the same
    completions: ids, masks, log-probs, group ids, versions and reward metrics. Advantages differ only in the
    normalisation: TRL divides r - mean by the population std (+1e-8); scale_rewards="none" does not."""
    questions = ["1+3", "2+2", "3+1"]
    answers = {"1+3": [RIGHT, WRONG, RIGHT, WRONG], "2+2": [RIGHT, RIGHT, RIGHT, WRONG], "3+1": [WRONG]}
    delays = {"1+3": [0.02, 0.0, 0.01, 0.0]}  # finish out of order
    trl_loop = make_loop(
        _AsyncRolloutLoop,
        tokenizer,
        questions,
        Script(tokenizer, answers, delays),
        num_generations=4,
        max_inflight_tasks=4,
    )
    ada_loop = make_loop(
        AdaRolloutLoop,
        tokenizer,
        questions,
        Script(tokenizer, answers, delays),
        num_generations=4,
        max_inflight_tasks=4,
        ada=uniform_ada(),
    )
    theirs, ours = run_until(trl_loop, 3), run_until(ada_loop, 3)
    for group_id in range(3):
        trl_rows = sorted(theirs[group_id], key=row_key)
        ada_rows = sorted(ours[group_id], key=row_key)
        assert [row_key(s) for s in ada_rows] == [row_key(s) for s in trl_rows]
        assert len(ada_rows) == 4
        for a, t in zip(ada_rows, trl_rows, strict=True):
            for name in ("input_ids", "completion_mask", "old_log_probs"):  # NumPy from TRL 1.16.0, lists in 1.14
                ours_column, theirs_column = getattr(a, name), getattr(t, name)
                assert type(ours_column) is type(theirs_column), name
                assert getattr(ours_column, "dtype", None) == getattr(theirs_column, "dtype", None), name
            assert (a.model_version, a.group_id) == (t.model_version, t.group_id)
            assert a.metrics.keys() == t.metrics.keys()
            assert a.metrics["reward"] == t.metrics["reward"]
            assert a.metrics["reward_std"] == pytest.approx(t.metrics["reward_std"])
        rewards = np.array([t.metrics["reward"] for t in trl_rows])
        expected = [(t.advantage * (rewards.std() + 1e-8)) for t in trl_rows]  # undo TRL's division
        assert [a.advantage for a in ada_rows] == pytest.approx(expected, abs=1e-6)
        assert [a.advantage for a in ada_rows] == pytest.approx(list(rewards - rewards.mean()), abs=1e-6)


def test_balanced_pool_downsampled_with_pool_advantages_and_memory(tokenizer: Any) -> None:
    """Hand-worked: requests answer W W W R W R ... one at a time (in-flight cap 1). The balanced rule for a group of
    4 (2 right, 2 wrong) first holds after 6 requests; the pool is those 6 (mean 1/3), the kept group is both
    rights and 2 of the 4 wrongs, advantages are r - 1/3, and the memory records 2 positives of 6."""
    q = "1+3"
    answers = {q: [WRONG, WRONG, WRONG, RIGHT, WRONG, RIGHT, RIGHT, RIGHT], "9+9": [WRONG]}
    script = Script(tokenizer, answers, {"9+9": [5.0]})  # the next prompt is still running when the test stops
    ada = AdaRolloutConfig(sampling_strategy="balanced", samples_per_round=1, max_rounds=8, prompt_id_column="qid")
    loop = make_loop(AdaRolloutLoop, tokenizer, [q, "9+9"], script, num_generations=4, max_inflight_tasks=1, ada=ada)
    rows = run_until(loop, 1)[0]
    assert sorted(s.metrics["reward"] for s in rows) == [0.0, 0.0, 1.0, 1.0]
    for s in rows:
        assert s.advantage == pytest.approx(s.metrics["reward"] - 1 / 3)
        mask = np.asarray(s.completion_mask)
        assert mask[-2:].tolist() == [1, 1] and not mask[:-2].any()  # the answer and EOS are trained
    metrics = metrics_of(loop)
    assert metrics["ada/samples_per_prompt"][0] == (6.0, 1.0)
    assert metrics["ada/pool_pass_rate"][0] == (2.0, 6.0)
    # Beta(1, 16) prior, decay 0.9 on empty counts: p_hat = (1 + 2) / (17 + 6).
    assert loop.ada_memory.p_hat("id:0") == pytest.approx(3 / 23)


def test_pool_is_a_request_order_prefix_not_the_first_to_finish(tokenizer: Any) -> None:
    """Request 0 (right) is slow; requests 1.. (wrong) finish first. A group of 2 under the `positive` rule (1 right)
    must stop at the prefix [request 0, request 1] once request 0 finishes: pool mean 1/2, advantages +-1/2. Taking
    the first to finish would have stopped on wrongs only, or on [W, W, R] had a later right come back."""
    q = "2+2"
    answers = {q: [RIGHT, WRONG, WRONG, RIGHT, WRONG, WRONG, WRONG, WRONG]}
    delays = {q: [0.3, 0.0]}
    script = Script(tokenizer, answers, delays)
    ada = AdaRolloutConfig(sampling_strategy="positive", samples_per_round=4, max_rounds=2)
    loop = make_loop(AdaRolloutLoop, tokenizer, [q], script, num_generations=2, max_inflight_tasks=4, ada=ada)
    rows = run_until(loop, 1)[0]
    assert sorted((s.metrics["reward"], s.advantage) for s in rows) == [(0.0, -0.5), (1.0, 0.5)]
    # Once this prompt has made its 8 requests, the next prompts (the dataset cycles: the same question, all wrong
    # from there on, so pools of 8) run in the slots it leaves and may report first.
    assert (2.0, 1.0) in metrics_of(loop)["ada/samples_per_prompt"]


def test_leftover_requests_are_aborted(tokenizer: Any) -> None:
    """Requests 0 and 1 (wrong, right) are fast, 2 and 3 slow: the `positive` rule holds on [0, 1], so 2 and 3,
    still in flight, are cancelled (their HTTP requests closed) and never trained on."""
    q = "3+1"
    script = Script(tokenizer, {q: [WRONG, RIGHT, RIGHT, RIGHT]}, {q: [0.0, 0.0, 2.0]})
    ada = AdaRolloutConfig(sampling_strategy="positive", samples_per_round=4, max_rounds=1)
    loop = make_loop(AdaRolloutLoop, tokenizer, [q], script, num_generations=2, max_inflight_tasks=4, ada=ada)
    rows = run_until(loop, 1)[0]
    assert sorted(s.metrics["reward"] for s in rows) == [0.0, 1.0]
    assert script.cancelled[q][:2] == [2, 3]
    assert metrics_of(loop)["ada/aborted_per_prompt"][0] == (2.0, 1.0)


def test_a_pool_spanning_versions_is_tagged_with_its_oldest_kept_completion(tokenizer: Any) -> None:
    """The policy version moves on after every request (request k is dispatched under version k). The balanced rule
    for 2 (1 right, 1 wrong) holds after W5 W6 W7 R (versions 0-3); the kept group is R (version 3) and one of the
    wrongs, so every row carries that wrong's version: the trainer drops the group whole or keeps it whole."""
    q = "1+3"
    wrongs = ["5", "6", "7"]
    script = Script(tokenizer, {q: [*wrongs, RIGHT, RIGHT]})
    ada = AdaRolloutConfig(sampling_strategy="balanced", samples_per_round=1, max_rounds=5, seed=3)
    loop = make_loop(AdaRolloutLoop, tokenizer, [q], script, num_generations=2, max_inflight_tasks=1, ada=ada)
    script.on_dispatch = lambda question, k: setattr(loop._model_version_value, "value", k + 1)
    rows = run_until(loop, 1)[0]
    assert script.versions[q][:4] == [0, 1, 2, 3]
    kept_wrong = next(s for s in rows if s.metrics["reward"] == 0.0)
    text = tokenizer.decode(np.asarray(kept_wrong.input_ids)[-2:-1])
    assert {s.model_version for s in rows} == {wrongs.index(text)}
    assert metrics_of(loop)["ada/pool_version_span_max"][0] == 3.0


def test_config_rejects_what_the_async_worker_cannot_do() -> None:
    with pytest.raises(ValueError, match="sampling_strategy='estimate'"):
        AdaRolloutConfig(sampling_strategy="estimate").validate(4)
    with pytest.raises(ValueError, match="scale_rewards='batch'"):
        AdaRolloutConfig(scale_rewards="batch").validate(4)
    with pytest.raises(ValueError, match="more than the 2 completions"):
        AdaRolloutConfig(min_positives=2, min_negatives=1).validate(2)
    with pytest.raises(ValueError, match="downsample='uniform'"):
        AdaRolloutConfig(difficulty_weighting="odc").validate(4)
    AdaRolloutConfig().validate(8)  # the defaults hold


def test_the_worker_spawns_our_loop_and_checks_settings_before_spawning(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL's worker refuses to build without the vllm package (the server is elsewhere; the child only speaks HTTP).
    With that check passed, our worker forwards `ada` to the loop it spawns, picklable, and rejects bad settings in
    the parent, before a child is spawned."""
    import pickle

    from trl.experimental.async_grpo import async_rollout_worker

    from trl_ada.adapter.async_worker import AdaRolloutWorker

    monkeypatch.setattr(async_rollout_worker, "is_vllm_available", lambda: True)
    ada = AdaRolloutConfig(sampling_strategy="positive")
    worker = AdaRolloutWorker(ada=ada, num_generations=4, reward_funcs=[exact_answer])
    assert worker._loop_cls is AdaRolloutLoop
    assert pickle.loads(pickle.dumps(worker._loop_kwargs))["ada"] == ada
    with pytest.raises(ValueError, match="more than the 4 completions"):
        AdaRolloutWorker(ada=AdaRolloutConfig(min_positives=3, min_negatives=2), num_generations=4)


def test_requests_in_flight_never_exceed_max_inflight_tasks_even_below_the_per_prompt_cap(tokenizer: Any) -> None:
    """Rounds of 8 (8 requests in flight per prompt by default) under max_inflight_tasks=3: one prompt at a time,
    with at most 3 of its requests in flight. Every request is slow and every answer wrong, so the prompt draws its
    whole budget, 3 at a time."""
    q = "2+2"
    script = Script(tokenizer, {q: ["5"]}, {q: [0.05]})
    ada = AdaRolloutConfig(sampling_strategy="balanced", samples_per_round=8, max_rounds=1)
    loop = make_loop(AdaRolloutLoop, tokenizer, [q], script, num_generations=4, max_inflight_tasks=3, ada=ada)
    assert loop.concurrent_prompts == 1
    finished_at_dispatch: list[int] = []
    original = script.turn

    async def counting_turn(loop_: Any, prompt_ids: list[int]) -> Any:
        finished_at_dispatch.append(len(finished))
        result = await original(loop_, prompt_ids)
        finished.append(1)
        return result

    finished: list[int] = []
    script.turn = counting_turn  # type: ignore[method-assign]
    run_until(loop, 1)
    # The k-th request (k from 0) is dispatched only once at least k - 2 earlier ones have finished.
    first_eight = list(enumerate(finished_at_dispatch))[:8]
    assert len(first_eight) == 8 and all(k - done <= 2 for k, done in first_eight)
    assert any(k - done == 2 for k, done in first_eight)  # and the cap is used, not undershot
