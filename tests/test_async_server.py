"""The Reinforce-Ada rollout worker's loop over HTTP, against the stand-in vLLM server (`standin_vllm_server`).

TRL's asynchronous loop asks vLLM for one completion per request: `POST /v1/completions`, not streamed, with the
prompt as token ids, `n=1`, `logprobs=0` and `return_token_ids=true`, and reads `choices[0].token_ids` and
`choices[0].logprobs.token_logprobs` from the one JSON body (`_AsyncRolloutLoop._generate_one_turn`). Here both
loops, TRL's `_AsyncRolloutLoop` and our `AdaRolloutLoop`, make those requests for real (aiohttp, loopback) to the
stand-in, which answers each prompt's k-th request with a scripted completion after a scripted delay, and records
whether each request finished or its client left first.

The only thing added to the loops is an ordering gate in front of the request (`ordered`): a prompt's k-th request
is sent once the server has received its k-1 earlier ones, so the server's per-prompt count is the request order the
engine sees (concurrent connections could otherwise arrive in any order). What is checked is computed by hand: the
rows from the prompt ids the server received and the completion it sent, the advantages from the scripted rewards.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from datasets import Dataset
from standin_vllm_server import StandInServer
from test_async_worker import (
    RIGHT,
    WRONG,
    child_channels,
    collect,
    eos_token_ids,
    exact_answer,
    metrics_of,
    row_key,
    run_until,
    running,
)
from test_async_worker import tokenizer as tokenizer  # the module-scoped fixture
from trl.experimental.async_grpo.async_rollout_worker import RolloutSample, _AsyncRolloutLoop

from trl_ada.adapter.async_worker import AdaRolloutConfig, AdaRolloutLoop

MODEL = "stand-in/toy"
HANG = 60.0  # seconds per token: a request that only ends when its client leaves


def logprob(token_id: int) -> float:
    return -token_id / 1000  # the stand-in's sampled-token log-prob (its default), recomputed here by hand


class PromptScript:
    """The stand-in's script: the k-th request (in arrival order) whose prompt holds question q gets the text
    `answers[q][k]` and EOS, at `delays[q][k]` seconds per token; later requests repeat the last entries."""

    def __init__(self, tokenizer: Any, answers: dict[str, list[str]], delays: dict[str, list[float]] | None = None):
        self.tokenizer, self.answers, self.delays = tokenizer, answers, delays or {}
        self.arrived: dict[str, int] = defaultdict(int)

    def question(self, prompt_ids: list[int]) -> str:
        text = self.tokenizer.decode(prompt_ids)
        return next(q for q in self.answers if q in text)

    def __call__(self, prompt_ids: list[int], index: int) -> tuple[list[int], float]:
        q = self.question(prompt_ids)
        k = self.arrived[q]
        self.arrived[q] += 1
        answers, delays = self.answers[q], self.delays.get(q, [0.0])
        ids = self.tokenizer.encode(answers[min(k, len(answers) - 1)], add_special_tokens=False)
        return [*ids, self.tokenizer.eos_token_id], delays[min(k, len(delays) - 1)]


@pytest.fixture
def serve(tokenizer: Any) -> Iterator[Any]:
    """`serve(answers, delays)`: a stand-in server on a free loopback port with that script; stopped afterwards."""
    servers = []

    def start(answers: dict[str, list[str]], delays: dict[str, list[float]] | None = None) -> StandInServer:
        server = StandInServer(PromptScript(tokenizer, answers, delays), logprob=logprob, model=MODEL)
        servers.append(server.start())
        return server

    yield start
    for server in servers:
        server.stop()


def ordered(cls: type, server: StandInServer) -> type:
    """`cls` whose requests of one prompt reach `server` in the order the loop dispatches them."""

    class Ordered(cls):
        dispatched: dict[tuple[int, ...], int] = defaultdict(int)

        async def _generate_one_turn(self, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
            key = tuple(prompt_ids)
            k = self.dispatched[key]  # tasks start in the order they were created: the engine's ticket order
            self.dispatched[key] += 1
            while sum(1 for s in list(server.served) if s.payload.get("prompt") == list(key)) < k:
                await asyncio.sleep(0.002)
            return await super()._generate_one_turn(prompt_ids)

    return Ordered


def http_loop(cls: type, tokenizer: Any, questions: list[str], server: StandInServer, **kwargs: Any) -> Any:
    """`cls` (a rollout loop) built as TRL's worker builds it in its child, talking to `server`."""
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": q}]} for q in questions])
    settings = dict(max_tokens=16, request_timeout=30)
    settings.update(kwargs)
    return ordered(cls, server)(
        model_name=MODEL,
        dataset=dataset,
        reward_funcs=[exact_answer],
        processing_class=tokenizer,
        **eos_token_ids(tokenizer),
        **child_channels(settings.pop("model_version", 0)),
        vllm_server_url=server.url,
        **settings,
    )


def wait_for(condition: Callable[[], bool], what: str | Callable[[], str], timeout: float = 10.0) -> None:
    """Wait until `condition()` holds; else fail with `what` (or what it returns then)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what() if callable(what) else what}")
        time.sleep(0.02)


def states(server: StandInServer, tokenizer: Any, question: str) -> list[str]:
    return [s.state for s in served_for(server, tokenizer, question)]


def prompt_ids_of(tokenizer: Any, question: str) -> list[int]:
    messages = [{"role": "user", "content": question}]
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False))


def answer_ids(tokenizer: Any, text: str) -> list[int]:
    return [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]


def served_for(server: StandInServer, tokenizer: Any, question: str) -> list[Any]:
    """The server's records of `question`'s requests, in arrival order."""
    ids = prompt_ids_of(tokenizer, question)
    return [s for s in server.served if s.prompt_ids == ids]


def expected_row(tokenizer: Any, question: str, text: str) -> tuple[list[int], list[int], list[float]]:
    """The training row of a one-turn conversation, by hand: prompt then completion; only the completion is
    trained; the old log-probs are the server's sampled-token ones on the completion and 0 on the prompt."""
    prompt, completion = prompt_ids_of(tokenizer, question), answer_ids(tokenizer, text)
    return (
        prompt + completion,
        [0] * len(prompt) + [1] * len(completion),
        [0.0] * len(prompt) + [logprob(t) for t in completion],
    )


def check_row(sample: RolloutSample, row: tuple[list[int], list[int], list[float]]) -> None:
    input_ids, mask, old = row
    assert np.asarray(sample.input_ids).tolist() == input_ids
    assert np.asarray(sample.completion_mask).tolist() == mask
    np.testing.assert_allclose(np.asarray(sample.old_log_probs, dtype=float), old, rtol=0, atol=1e-7)


def text_of(tokenizer: Any, sample: RolloutSample) -> str:
    """The completion's text (the tokens the mask trains, less EOS)."""
    ids, mask = np.asarray(sample.input_ids), np.asarray(sample.completion_mask).astype(bool)
    return tokenizer.decode(ids[mask][:-1])


def test_ada_loop_over_http_pushes_hand_checked_rows_and_aborts_the_rest(tokenizer: Any, serve: Any) -> None:
    """Balanced rule for a group of 4, 4 requests in flight per prompt, budget 8. "1+3": requests 0-3 answer
    W R W R, request 0 slowly; 1-3 finish first and their places go to requests 4-6, which never answer. When
    request 0 finishes, the prefix W R W R holds the rule: the pool is those 4, requests 4-6 are aborted and the
    server sees their connections close. "2+2" runs beside it (R R W W, all fast), then "9+9" (which hangs).
    Advantages with the group baseline and group scaling: (r - 1/2) / (sqrt(1/3) + 1e-4), the unbiased std of
    {0, 1, 0, 1}."""
    answers = {"1+3": [WRONG, RIGHT, WRONG, RIGHT, WRONG], "2+2": [RIGHT, RIGHT, WRONG, WRONG, WRONG], "9+9": [WRONG]}
    # "9+9" (group 2) hangs, so "1+3" comes round again (group 3) only once group 0 has ended.
    delays = {"1+3": [0.3, 0.0, 0.0, 0.0, HANG], "2+2": [0.0], "9+9": [HANG]}
    server = serve(answers, delays)
    ada = AdaRolloutConfig(
        sampling_strategy="balanced",
        samples_per_round=4,
        max_rounds=2,
        advantage_baseline="group",
        scale_rewards="group",
    )
    loop = http_loop(
        AdaRolloutLoop,
        tokenizer,
        ["1+3", "2+2", "9+9"],
        server,
        num_generations=4,
        max_inflight_tasks=8,
        ada=ada,
        model_version=3,
    )
    with running(loop):
        groups = collect(loop, 2)
        # While the loop runs on: the exit rule, not the loop's shutdown, closed requests 4-6.
        first = ["finished"] * 4 + ["cancelled"] * 3
        wait_for(
            lambda: states(server, tokenizer, "1+3")[:7] == first,
            lambda: f"1+3's requests 4-6 closed: {states(server, tokenizer, '1+3')}, {metrics_of(loop)}",
        )
    server.settle()

    # What TRL's loop sent, as vLLM's /v1/completions reads it.
    for payload in server.requests:
        assert payload["model"] == MODEL and payload["n"] == 1 and payload.get("stream") is None
        assert payload["max_tokens"] == 16 and payload["logprobs"] == 0 and payload["return_token_ids"] is True

    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    for group_id, question in enumerate(["1+3", "2+2"]):
        rows = groups[group_id]
        assert len(rows) == 4
        assert sorted(text_of(tokenizer, s) for s in rows) == [RIGHT, RIGHT, WRONG, WRONG]
        for s in rows:
            text = text_of(tokenizer, s)
            check_row(s, expected_row(tokenizer, question, text))
            assert s.advantage == pytest.approx(a if text == RIGHT else -a, abs=1e-9)
            assert (s.group_id, s.model_version) == (group_id, 3)
            assert s.metrics["reward"] == (1.0 if text == RIGHT else 0.0)
            assert s.metrics["reward_std"] == pytest.approx(0.5)  # TRL's: the population std of the group
            assert isinstance(s.input_ids, type(s.old_log_probs))

    # "1+3"'s first 7 requests are group 0's; later ones are its next epoch's (group 3), stopped with the loop.
    slow = served_for(server, tokenizer, "1+3")
    assert [s.state for s in slow[:7]] == ["finished"] * 4 + ["cancelled"] * 3
    assert [s.emitted for s in slow[:7]] == [2, 2, 2, 2, 0, 0, 0]
    assert all(s.state == "cancelled" for s in slow[7:])
    metrics = metrics_of(loop)
    assert metrics["ada/samples_per_prompt"][:2] == [(4.0, 1.0), (4.0, 1.0)]
    assert (3.0, 1.0) in metrics["ada/aborted_per_prompt"][:2]
    # "2+2"'s requests all answer at once: whatever it drew past its first 4 finished or was cancelled, none is left
    # running on the server, and none is in its pool (checked above: W W R R, its first four).
    assert all(s.state in ("finished", "cancelled") for s in server.served)


def trl_advantages(rewards: list[float]) -> list[float]:
    """TRL's async worker: (r - mean) / (population std + 1e-8)."""
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (std + 1e-8) for r in rewards]


def ada_group_advantages(rewards: list[float]) -> list[float]:
    """Reinforce-Ada's group baseline with group scaling: (r - mean) / (unbiased std + 1e-4)."""
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    return [(r - mean) / (std + 1e-4) for r in rewards]


def test_fixed_groups_over_http_push_the_rows_trl_pushes(tokenizer: Any, serve: Any) -> None:
    """Exactly num_generations requests per prompt (`sampling_strategy="uniform"`): both loops, each against its own
    server with the same script, push the same rows for the same completions, field by field. Advantages: each against
    its formula, worked from the scripted rewards."""
    questions = ["1+3", "2+2", "3+1"]
    answers = {"1+3": [RIGHT, WRONG, RIGHT, WRONG], "2+2": [RIGHT, RIGHT, RIGHT, WRONG], "3+1": [WRONG]}
    delays = {"1+3": [0.02, 0.0, 0.01, 0.0]}  # finishes out of order
    rewards = {q: [1.0 if a == RIGHT else 0.0 for a in (answers[q] * 4)[:4]] for q in questions}
    settings = dict(num_generations=4, max_inflight_tasks=4, model_version=1)
    trl_server, ada_server = serve(answers, delays), serve(answers, delays)
    trl_loop = http_loop(_AsyncRolloutLoop, tokenizer, questions, trl_server, **settings)
    ada = AdaRolloutConfig(sampling_strategy="uniform", advantage_baseline="group", scale_rewards="group")
    ada_loop = http_loop(AdaRolloutLoop, tokenizer, questions, ada_server, ada=ada, **settings)
    theirs, ours = run_until(trl_loop, 3), run_until(ada_loop, 3)
    trl_server.settle()
    ada_server.settle()

    for group_id, question in enumerate(questions):
        trl_rows, ada_rows = sorted(theirs[group_id], key=row_key), sorted(ours[group_id], key=row_key)
        assert len(ada_rows) == len(trl_rows) == 4
        assert [row_key(s) for s in ada_rows] == [row_key(s) for s in trl_rows]
        for a, t in zip(ada_rows, trl_rows, strict=True):
            assert a.prompt == t.prompt and a.completion == t.completion
            for name in ("input_ids", "completion_mask", "old_log_probs"):
                ours_column, theirs_column = getattr(a, name), getattr(t, name)
                assert type(ours_column) is type(theirs_column), name
                assert getattr(ours_column, "dtype", None) == getattr(theirs_column, "dtype", None), name
                np.testing.assert_array_equal(np.asarray(ours_column), np.asarray(theirs_column))
            assert (a.model_version, a.group_id) == (t.model_version, t.group_id) == (1, group_id)
            assert a.metrics == pytest.approx(t.metrics)
            check_row(a, expected_row(tokenizer, question, text_of(tokenizer, a)))
        scripted = sorted(rewards[question])
        assert sorted(t.metrics["reward"] for t in trl_rows) == scripted
        expected_trl = dict(zip(rewards[question], trl_advantages(rewards[question]), strict=True))
        expected_ada = dict(zip(rewards[question], ada_group_advantages(rewards[question]), strict=True))
        for t in trl_rows:
            assert t.advantage == pytest.approx(expected_trl[t.metrics["reward"]], abs=1e-6)
        for a in ada_rows:
            assert a.advantage == pytest.approx(expected_ada[a.metrics["reward"]], abs=1e-9)
    # Hand-worked, for the record: "1+3" (1, 0, 1, 0): TRL +-1, ours +-0.5 / (sqrt(1/3) + 1e-4); "3+1" all wrong: 0.
    assert {round(s.advantage, 6) for s in theirs[0]} == {1.0, -1.0}
    assert {round(s.advantage, 4) for s in ours[0]} == {0.8659, -0.8659}
    assert {s.advantage for s in theirs[2]} == {s.advantage for s in ours[2]} == {0.0}
    for server in (trl_server, ada_server):
        assert [len(served_for(server, tokenizer, q)) >= 4 for q in questions] == [True] * 3
        assert all(s.state == "finished" for s in server.served[:12])


def test_an_early_exit_closes_its_other_requests_on_the_server(tokenizer: Any, serve: Any) -> None:
    """Positive rule for a group of 2, 4 requests at once: requests 0 and 1 answer W and R in 0.2 s, 2 and 3
    would take minutes. The rule holds on [W, R]; the loop pushes that group and closes the connections of 2 and 3,
    which the server sees within seconds while the loop runs on. Then the loop is stopped while "9+9"'s requests hang:
    those are closed too."""
    answers = {"3+1": [WRONG, RIGHT, RIGHT], "9+9": [WRONG]}
    delays = {"3+1": [0.1, 0.1, HANG], "9+9": [HANG]}  # 0.2 s for 0 and 1: time for all 4 to reach the server
    server = serve(answers, delays)
    ada = AdaRolloutConfig(sampling_strategy="positive", samples_per_round=4, max_rounds=1)
    loop = http_loop(
        AdaRolloutLoop, tokenizer, ["3+1", "9+9"], server, num_generations=2, max_inflight_tasks=8, ada=ada
    )
    expected = ["finished", "finished", "cancelled", "cancelled"]
    with running(loop):
        rows = collect(loop, 1)[0]
        assert sorted(text_of(tokenizer, s) for s in rows) == [RIGHT, WRONG]
        # Closed by the early exit, while the loop (and "9+9"'s requests) still run.
        wait_for(lambda: states(server, tokenizer, "3+1")[:4] == expected, "3+1's requests 2 and 3 closed")
        assert "running" in states(server, tokenizer, "9+9")
    assert metrics_of(loop)["ada/aborted_per_prompt"][0] == (2.0, 1.0)
    server.settle(timeout=10)
    # The stop closed the rest: "9+9"'s requests and those of "3+1"'s next epoch (group 2).
    assert set(states(server, tokenizer, "9+9")) == {"cancelled"}
    assert set(states(server, tokenizer, "3+1")[4:]) <= {"cancelled"}
