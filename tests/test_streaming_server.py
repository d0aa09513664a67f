"""Streaming in vLLM server mode (`trl_ada.adapter.engines.vllm_server`) against a stand-in server
(`standin_vllm_server`): the backend on its own (event format, aborts, retries, timeouts), then real `trainer.train()`
runs on the toy model on one and two processes."""

import functools
import importlib
import json
import math
import random
import re
import socket
import time

import pytest
import torch
from standin_vllm_server import StandInServer, attach
from test_multiprocess import launch_two_processes, rank_outputs
from test_trainer import ada_logs, keyed_dataset, make_trainer

from trl_ada import ReinforceAdaTrainer
from trl_ada.adapter.engines.vllm_server import (
    KEEPALIVE_SECONDS,
    VLLMServerBackend,
    VLLMServerError,
    parse_event,
    sampling_payload,
)
from trl_ada.core.engine import Draw

EOS = 2  # the toy tokenizer's <|im_end|>
RIGHT = 40  # a completion is right when it starts with this token


def logprob(token_id: int) -> float:
    return -token_id / 1000  # the stand-in's sampled-token log-prob: the kept rows must carry exactly these


def right_first(completion_ids, **kwargs):
    return [float(bool(ids) and ids[0] == RIGHT) for ids in completion_ids]


def wrong_is_slow(p_right: float, seed: int = 0, fast: float = 0.001, slow: float = 0.01):
    """Right answers (RIGHT, x, EOS) w.p. `p_right`, sent at `fast` s/token; wrong ones 6 random tokens and EOS at
    `slow` s/token, so they finish long after the right ones."""
    rng = random.Random(seed)

    def script(prompt_ids, index):
        if rng.random() < p_right:
            return [RIGHT, rng.randrange(50, 90), EOS], fast
        return [rng.randrange(50, 90) for _ in range(6)] + [EOS], slow

    return script


def streaming_trainer(model_dir, tmp_path, dataset, reward=right_first, **overrides):
    settings = dict(
        use_transformers_continuous_batching=True,  # replaced by the stand-in server below: vLLM is not installed
        rollout_schedule="streaming",
        max_completion_length=8,
        per_device_train_batch_size=4 * len(dataset),
        sampling_strategy="positive",
        samples_per_round=4,
        max_rounds=4,
        max_steps=1,
    )
    settings.update(overrides)
    trainer_cls = settings.pop("trainer_cls", ReinforceAdaTrainer)
    return make_trainer(model_dir, tmp_path, reward, dataset, trainer_cls=trainer_cls, **settings)


def backend(server, prompt_ids, timeout=5.0, retries=1, **sampling):
    return VLLMServerBackend(server.url, prompt_ids, {"max_tokens": 16, "logprobs": 0, **sampling}, timeout, retries)


def wait_for(backend, count):
    finished = []
    while len(finished) < count:
        batch = backend.wait()
        assert batch, "wait returned nothing with draws in flight"
        finished += batch
    return finished


class ClientRecord:
    """What the backend's requests read from their streams, kept beside the backend's own counts to check them: the
    tokens each request parsed (by request id, one id per attempt) and the requests whose completions `wait` returned.
    The server sees what it wrote; this sees what the client read, so the two can be compared without assuming how
    many events were still in transit when a request was aborted."""

    def __init__(self, monkeypatch):
        from trl_ada.adapter.engines import vllm_server

        self.parsed: dict[str, list[int]] = {}
        self.returned: set[str] = set()
        add, wait = vllm_server._Request.add, VLLMServerBackend.wait

        def recording_add(request, event):
            self.parsed.setdefault(request.request_id, []).extend(event.token_ids)
            add(request, event)

        def recording_wait(backend):
            finished = wait(backend)
            self.returned.update(backend._requests[f.ticket].request_id for f in finished)
            return finished

        monkeypatch.setattr(vllm_server._Request, "add", recording_add)
        monkeypatch.setattr(VLLMServerBackend, "wait", recording_wait)

    def tokens(self, request_ids) -> int:
        return sum(len(self.parsed.get(request_id, [])) for request_id in request_ids)


@pytest.fixture
def client_record(monkeypatch):
    return ClientRecord(monkeypatch)


def assert_read_what_was_sent(server, record: ClientRecord) -> None:
    """Each request read a prefix of what the server sent it, and a returned request read its whole completion."""
    assert set(record.parsed) <= {s.request_id for s in server.served}
    for s in server.served:
        read = record.parsed.get(s.request_id, [])
        assert len(read) <= s.emitted and read == s.completion_ids[: len(read)]
        if s.request_id in record.returned:
            assert s.state == "finished" and read == s.completion_ids


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------------------------------------------------
# The event format
# --------------------------------------------------------------------------------------------------------------------


def test_parse_event_reads_tokens_logprobs_and_the_end():
    lp = {"tokens": ["token_id:7", "token_id:9"], "token_logprobs": [-0.5, -1.5], "top_logprobs": [{}, {}]}
    event = parse_event(json.dumps({"choices": [{"text": "ab", "logprobs": lp, "finish_reason": None}]}))
    assert (event.token_ids, event.logprobs, event.finish_reason) == ([7, 9], [-0.5, -1.5], None)
    # token_ids, when present, are the ids; the log-probs still come from logprobs
    event = parse_event(json.dumps({"choices": [{"token_ids": [7, 9], "logprobs": lp, "finish_reason": "stop"}]}))
    assert (event.token_ids, event.logprobs, event.finish_reason) == ([7, 9], [-0.5, -1.5], "stop")
    event = parse_event(json.dumps({"choices": [{"text": "a", "token_ids": [3], "logprobs": None}]}))
    assert (event.token_ids, event.logprobs) == ([3], None)
    assert parse_event("[DONE]").done
    assert parse_event(json.dumps({"choices": [], "usage": {"completion_tokens": 2}})).token_ids == []
    assert parse_event(json.dumps({"error": {"message": "engine dead", "code": 500}})).error == "engine dead"
    assert parse_event(json.dumps({"object": "error", "message": "boom"})).error == "boom"
    with pytest.raises(ValueError, match="token_id"):
        parse_event(json.dumps({"choices": [{"text": "a", "logprobs": {**lp, "tokens": ["a", "b"]}}]}))
    with pytest.raises(ValueError, match="neither token_ids nor logprobs"):
        parse_event(json.dumps({"choices": [{"text": "a", "logprobs": None}]}))
    with pytest.raises(ValueError, match="log-probs"):
        parse_event(json.dumps({"choices": [{"token_ids": [1, 2, 3], "logprobs": lp}]}))


# --------------------------------------------------------------------------------------------------------------------
# The backend against the stand-in server
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token_ids_in_events", "tokens_per_event", "logprobs"),
    [(True, 1, 0), (False, 1, 0), (True, 3, 0), (False, 2, 0), (True, 1, None)],
)
def test_backend_streams_completions_and_logprobs(token_ids_in_events, tokens_per_event, logprobs):
    rng = random.Random(0)

    def script(prompt_ids, index):
        return [rng.randrange(30, 90) for _ in range(rng.randrange(0, 7))] + [EOS], 0.0

    server = StandInServer(
        script, logprob=logprob, token_ids_in_events=token_ids_in_events, tokens_per_event=tokens_per_event
    )
    prompts = [[11, 12, 13], [14, 15]]
    with server:
        opened = backend(server, prompts, logprobs=logprobs, temperature=0.7, top_k=5)
        try:
            opened.submit([Draw(i % 2, i) for i in range(12)])
            finished = wait_for(opened, 12)
        finally:
            opened.close()
    assert sorted(f.ticket for f in finished) == list(range(12))
    by_request = {s.request_id.split("-")[-2]: s for s in server.served}  # request ids: <name>-<ticket>-<uuid>
    for f in finished:
        served, completion = by_request[str(f.ticket)], opened.completions[f.handle]
        assert served.state == "finished" and served.prompt_ids == prompts[f.ticket % 2]
        assert completion.prompt_index == f.ticket % 2
        assert completion.completion_ids == served.completion_ids and f.num_tokens == len(served.completion_ids)
        expected = [logprob(t) for t in served.completion_ids] if logprobs is not None else None
        assert completion.logprobs == expected
    payload = server.requests[0]
    assert payload["model"] == "stand-in/toy" and payload["n"] == 1 and payload["stream"] is True
    assert payload["return_token_ids"] and payload["return_tokens_as_token_ids"]
    assert (payload["temperature"], payload["top_k"], payload["max_tokens"], payload["logprobs"]) == (
        0.7,
        5,
        16,
        logprobs,
    )


def test_abort_cancels_the_requests_on_the_server_and_counts_their_tokens(client_record):
    def script(prompt_ids, index):  # the first two requests finish at once, the others stream slowly
        return ([5, EOS], 0.0) if index < 2 else ([*range(30, 60), EOS], 0.02)

    with StandInServer(script) as server:
        opened = backend(server, [[1, 2]])
        try:
            opened.submit([Draw(0, 0), Draw(0, 1)])
            assert len(wait_for(opened, 2)) == 2
            opened.submit([Draw(0, t) for t in range(2, 6)])
            time.sleep(0.15)  # a few tokens each
            tokens = opened.abort([2, 3, 4, 5])
            assert opened.abort([2]) == 0  # already aborted
            assert opened.wait() == []  # nothing in flight
        finally:
            opened.close()
        server.settle()
    cancelled = server.with_state("cancelled")
    assert len(cancelled) == 4 and all(s.emitted < 31 for s in cancelled) and tokens > 0
    # The abort counts exactly the tokens the aborted requests had read; what they read is what the server sent them,
    # less the events still in transit.
    assert_read_what_was_sent(server, client_record)
    assert tokens == client_record.tokens(s.request_id for s in cancelled)
    assert len(client_record.returned) == 2


def test_close_cancels_everything_in_flight():
    with StandInServer(lambda prompt_ids, index: (list(range(30, 90)), 0.02)) as server:
        opened = backend(server, [[1, 2]])
        opened.submit([Draw(0, t) for t in range(5)])
        time.sleep(0.1)
        opened.close()
        opened.close()  # safe twice
        server.settle(timeout=5)
    assert [s.state for s in server.served] == ["cancelled"] * 5


def test_idle_connections_are_dropped_before_the_server_closes_them():
    """vLLM's server (uvicorn) closes a connection idle for 5 s. A client that keeps it pooled longer sends the next
    request on a connection the server is closing, and that attempt fails and is retried (seen on vLLM-CPU: dozens
    of retries per step with pauses of 4.95-5 s between waves). The backend must drop idle connections first: a wave
    sent right after another reuses its connections, a wave sent after the backend's idle limit opens new ones."""
    assert KEEPALIVE_SECONDS < 5.0  # vLLM's server closes idle connections after 5 s
    server = StandInServer()  # keeps idle connections for 75 s: only the client can be the one that drops them
    with server:
        opened = backend(server, [[11, 12, 13]])
        try:
            ports = []
            for ticket, pause in ((0, 0.0), (4, KEEPALIVE_SECONDS + 1.0), (8, 0.0)):
                time.sleep(pause)
                opened.submit([Draw(0, ticket + i) for i in range(4)])
                wait_for(opened, 4)
                ports.append({s.client_port for s in server.served[ticket : ticket + 4]})
        finally:
            opened.close()
    assert opened.retries == 0 and all(0 not in wave for wave in ports)
    assert not ports[1] & ports[0]  # idle longer than the limit: new connections
    assert ports[2] & ports[1]  # right after a wave: its connections are reused


def test_failed_attempts_are_retried_from_scratch():
    faults = {0: 503, 1: "drop"}  # a server error, then a connection dropped mid-stream
    with StandInServer(lambda p, i: ([7, 8, 9, EOS], 0.0), fail=faults.get, logprob=logprob) as server:
        opened = backend(server, [[1, 2]], retries=2)
        try:
            opened.submit([Draw(0, 0)])
            (finished,) = wait_for(opened, 1)
        finally:
            opened.close()
    assert [s.state for s in server.served] == ["failed", "failed", "finished"]
    assert opened.completions[finished.handle].completion_ids == [7, 8, 9, EOS]
    assert opened.completions[finished.handle].logprobs == [logprob(t) for t in [7, 8, 9, EOS]]
    assert opened.retried_tokens == 2  # the dropped attempt streamed half its tokens; they were discarded


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["silent", "headers"])
def test_a_server_that_never_answers_fails_the_wait_with_a_named_error(mode):
    with StandInServer(mode=mode) as server:
        opened = backend(server, [[1, 2]], timeout=0.5, retries=1)
        started = time.monotonic()
        try:
            opened.submit([Draw(0, 0), Draw(0, 1)])
            with pytest.raises(VLLMServerError) as error:
                opened.wait()
        finally:
            opened.close()
        seconds = time.monotonic() - started
        server.settle()
    message = str(error.value)
    for part in (server.url, "vllm_request_timeout=0.5", "vllm_request_retries=1", "after 2 attempt(s)", "trl-ada"):
        assert part in message
    assert 1.0 < seconds < 5  # two attempts of 0.5 s and a pause
    assert len(server.served) == 4 and {s.state for s in server.served} == {"cancelled"}


@pytest.mark.timeout(30)
def test_wait_never_blocks_forever():
    with StandInServer(mode="silent") as server:
        opened = backend(server, [[1, 2]], timeout=60.0)
        try:
            opened.submit([Draw(0, 0)])
            time.sleep(0.3)  # the request is sent, and the server stays silent
            opened._last_activity -= 1000  # as if nothing had happened for a long time: a bug, reported as one
            with pytest.raises(VLLMServerError, match="No progress"):
                opened.wait()
            opened._loop.call_soon_threadsafe(opened._loop.stop)  # the event loop's thread dies
            with pytest.raises(RuntimeError, match="event loop stopped"):
                opened.wait()
            tasks = [request.task for request in opened._requests.values()]
        finally:
            opened.close()
        # Closing still cleans up after the dead loop: the request is cancelled and the HTTP session closed.
        assert len(tasks) == 1 and tasks[0].cancelled() and opened._session.closed
        server.settle(timeout=5)
    assert [s.state for s in server.served] == ["cancelled"]


def test_a_rejected_request_fails_at_once():
    with StandInServer(fail=lambda index: 400) as server:
        opened = backend(server, [[1, 2]], retries=3)
        try:
            opened.submit([Draw(0, 0)])
            with pytest.raises(VLLMServerError, match=r"HTTP 400.*not retried"):
                opened.wait()
        finally:
            opened.close()
    assert len(server.served) == 1


def test_an_unreachable_server_fails_when_the_step_opens_the_backend():
    url = f"http://127.0.0.1:{unused_port()}"
    with pytest.raises(VLLMServerError, match=re.escape(f"GET {url}/v1/models failed 2 time")) as error:
        VLLMServerBackend(url, [[1]], {}, 1.0, 1)
    assert "vllm_request_retries=1" in str(error.value)


def test_sampling_payload_mirrors_trl_server_mode():
    class Generation:
        repetition_penalty, temperature, top_p, top_k, min_p = 1.1, 0.9, 0.95, 20, None
        max_completion_length, logprobs, structured_outputs_regex = 64, 0, r"\d+"
        generation_kwargs = {"seed": 3, "temperature": 0.5}  # overrides, as in VLLMClient.generate

    assert sampling_payload(Generation(), args=None) == {
        "repetition_penalty": 1.1,
        "temperature": 0.5,
        "top_p": 0.95,
        "top_k": 20,
        "min_p": 0.0,
        "max_tokens": 64,
        "logprobs": 0,
        "structured_outputs": {"regex": r"\d+"},
        "seed": 3,
    }

    class Config:  # the regex and generation_kwargs fall back to the config when the generation object has none
        vllm_structured_outputs_regex, generation_kwargs = r"[0-9]", {"seed": 5}

    fallback = sampling_payload(object(), Config())
    assert fallback["structured_outputs"] == {"regex": "[0-9]"} and fallback["seed"] == 5 and fallback["logprobs"] == 0
    with StandInServer() as server:
        opened = VLLMServerBackend(server.url, [[1]], {"n": 4, "stream": False}, 1.0, 0)
        opened.close()
    assert opened.payload([1, 2])["n"] == 1 and opened.payload([1, 2])["stream"] is True


# --------------------------------------------------------------------------------------------------------------------
# The trainer, one process
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_trainer_streams_aborts_and_keeps_rows_with_their_completions(toy_cold_dir, tmp_path, client_record):
    outputs = []

    class Spy(ReinforceAdaTrainer):
        def _generate_and_score_completions(self, inputs):
            outputs.append(super()._generate_and_score_completions(inputs))
            return outputs[-1]

    with StandInServer(wrong_is_slow(0.5), logprob=logprob) as server:
        trainer = streaming_trainer(
            toy_cold_dir, tmp_path, keyed_dataset("abcdef"), trainer_cls=Spy, samples_per_round=8, max_steps=2
        )
        stub = attach(trainer, server.url)
        trainer.train()
        server.settle()

    logs = ada_logs(trainer)
    assert len(logs) == 2 and stub.syncs == 2  # one weight sync per step
    # Requests: TRL's server-mode payload, one completion each, ids naming the process and the draw.
    for payload in server.requests:
        assert payload["n"] == 1 and payload["stream"] and payload["max_tokens"] == 8 and payload["logprobs"] == 0
        assert payload["temperature"] == trainer.temperature and payload["model"] == server.model
    assert all(s.request_id.startswith("trl-ada-p0-") for s in server.served)

    # Prompts resolved while others were streaming: the server saw the disconnects.
    cancelled = server.with_state("cancelled")
    assert any(s.emitted < len(s.completion_ids) for s in cancelled)
    assert sum(log["ada/aborted_tokens"] for log in logs) > 0
    # ada/completion_tokens is every token the requests read, aborted ones included; ada/aborted_tokens is those read
    # by requests whose completions never reached a pool: every request `wait` never returned (cut short, or aborted
    # just as it finished), and returned ones the engine dropped (their prompt had retired). Tokens the server sent
    # that no request read (in transit at an abort; how many depends on timing) are in neither.
    assert_read_what_was_sent(server, client_record)
    generated = sum(log["ada/completion_tokens"] for log in logs)
    aborted = sum(log["ada/aborted_tokens"] for log in logs)
    assert generated == client_record.tokens(client_record.parsed) <= server.emitted_tokens
    assert not client_record.returned & {s.request_id for s in cancelled}
    never_returned = client_record.tokens(set(client_record.parsed) - client_record.returned)
    kept = sum(int(output["completion_mask"].sum()) for output in outputs)
    assert never_returned <= aborted <= generated - kept

    # Kept rows: each is a completion the server finished for that very prompt, with its own log-probs and reward.
    finished = {(tuple(s.prompt_ids), tuple(s.completion_ids)) for s in server.with_state("finished")}
    for output in outputs:
        mask = output["completion_mask"].bool()
        for prompt, prompt_mask, ids, row_mask in zip(
            output["prompt_ids"], output["prompt_mask"].bool(), output["completion_ids"], mask, strict=True
        ):
            assert (tuple(prompt[prompt_mask].tolist()), tuple(ids[row_mask].tolist())) in finished
        ids = output["completion_ids"]
        torch.testing.assert_close(output["sampling_per_token_logps"][mask], -ids[mask].float() / 1000)
        rewards = (ids[:, 0] == RIGHT).float().view(-1, 4)
        advantages = output["advantages"].view(-1, 4)
        for group_rewards, group_advantages in zip(rewards, advantages, strict=True):
            assert group_rewards.sum() >= 1  # positive rule, p = 0.5, budget 32: every prompt found a right answer
            if group_rewards.sum() < 4:
                assert torch.all((group_advantages > 0) == (group_rewards == 1))
    # The rewards the loss saw (TRL's completions table keeps the last step's) are those of the kept completions.
    last = outputs[-1]["completion_ids"]
    assert list(trainer._logs["rewards"]["right_first"]) == (last[:, 0] == RIGHT).float().tolist()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["balanced", "positive"])
@pytest.mark.parametrize("round_sizing", ["fixed", "posterior"])
def test_training_steps_under_each_rule_and_sizing(toy_cold_dir, tmp_path, strategy, round_sizing):
    with StandInServer(wrong_is_slow(0.4, seed=1), logprob=logprob) as server:
        trainer = streaming_trainer(
            toy_cold_dir,
            tmp_path,
            keyed_dataset("abcd"),
            sampling_strategy=strategy,
            round_sizing=round_sizing,
            max_steps=2,
        )
        attach(trainer, server.url)
        trainer.train()
        server.settle()
    logs = ada_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        assert 4 <= log["ada/samples_per_prompt"] <= log["ada/samples_per_prompt_max"] <= 16
        assert log["ada/completion_tokens"] > 0
    drawn = sum(log["ada/samples_per_prompt"] * 4 for log in logs)
    assert drawn <= len(server.with_state("finished"))  # pools hold finished completions only
    assert all(math.isfinite(row["loss"]) for row in trainer.state.log_history if "loss" in row)


def streaming_sample_caller():
    """The module whose `sample` (trl_ada.core.engine's) the trainer's streaming schedule calls."""
    for name in ("trl_ada.adapter.schedules.streaming", "trl_ada.adapter.trainer"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "sample"):
            return module
    raise AssertionError("No module of the trainer's streaming imports trl_ada.core.engine.sample.")


def sequential_pass_rate(p: float, group_size: int, budget: int, min_pos: int, min_neg: int) -> tuple[float, float]:
    """Mean and standard deviation of a pool's pass rate in the sequential limit: draw one completion at a time
    (right w.p. p), stop once the pool holds `group_size` and the exit rule holds, or at the budget."""

    @functools.cache
    def moments(n: int, k: int) -> tuple[float, float]:
        if n >= budget or (n >= group_size and k >= min_pos and n - k >= min_neg):
            return k / n, (k / n) ** 2
        right, wrong = moments(n + 1, k + 1), moments(n + 1, k)
        return p * right[0] + (1 - p) * wrong[0], p * right[1] + (1 - p) * wrong[1]

    mean, square = moments(0, 0)
    return mean, math.sqrt(square - mean**2)


@pytest.mark.slow
@pytest.mark.parametrize("pool_order", ["request", "finish_order_biased"])
def test_slow_wrong_answers_do_not_bias_the_pool_pass_rate(toy_cold_dir, tmp_path, monkeypatch, pool_order):
    """Wrong answers take 23x longer on the server. Pools built in request order keep the sequential limit's pass
    rate; pools of the first completions to finish (the engine's `finish_order_biased` variant, run here to show
    that the check has power) are far above it."""
    caller = streaming_sample_caller()
    monkeypatch.setattr(caller, "sample", functools.partial(caller.sample, pool_order=pool_order))
    p, prompts = 0.25, 48
    with StandInServer(wrong_is_slow(p, seed=2, fast=0.002, slow=0.02)) as server:
        trainer = streaming_trainer(
            toy_cold_dir,
            tmp_path,
            keyed_dataset(range(prompts)),
            num_generations=2,
            per_device_train_batch_size=2 * prompts,
            samples_per_round=8,
        )
        attach(trainer, server.url)
        trainer.train()
    mean, std = sequential_pass_rate(p, group_size=2, budget=32, min_pos=1, min_neg=0)
    (log,) = ada_logs(trainer)
    bound = 4 * std / math.sqrt(prompts)
    if pool_order == "request":
        assert abs(log["ada/pool_pass_rate"] - mean) < bound, (log["ada/pool_pass_rate"], mean, bound)
    else:
        assert log["ada/pool_pass_rate"] > mean + bound, (log["ada/pool_pass_rate"], mean, bound)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_server_that_never_answers_fails_the_step_quickly(toy_cold_dir, tmp_path):
    with StandInServer(mode="silent") as server:
        trainer = streaming_trainer(toy_cold_dir, tmp_path, keyed_dataset("ab"))
        attach(trainer, server.url, timeout=1.0, retries=1)
        started = time.monotonic()
        with pytest.raises(VLLMServerError) as error:
            trainer.train()
        seconds = time.monotonic() - started
        server.settle()
    message = str(error.value)
    for part in (f"{server.url}/v1/completions", "vllm_request_timeout=1.0", "vllm_request_retries=1"):
        assert part in message
    assert seconds < 15
    assert {s.state for s in server.served} == {"cancelled"}  # every request was closed, none left on the server


# --------------------------------------------------------------------------------------------------------------------
# The trainer, two processes
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_two_processes_stream_a_step_then_both_fail_when_the_server_stops_answering(toy_cold_dir, tmp_path):
    """Step 1 trains on both processes against an answering server; then the server goes silent, and step 2 fails
    on both processes with the timeout error (each streams on its own, so each times out on its own), no hang."""
    with StandInServer(wrong_is_slow(0.5), logprob=logprob) as server:
        result = launch_two_processes("mp_streaming_server.py", tmp_path, toy_cold_dir, server.url, timeout=200)
        server.settle()
    assert result.returncode != 0
    ranks = rank_outputs(tmp_path)
    for rank in ranks:
        assert rank["steps"] == 1 and len(rank["logs"]) == 1, result.stderr[-4000:]
        assert rank["error"].startswith("VLLMServerError: On process "), rank["error"]
        for part in (server.url, "vllm_request_timeout=1.0", "vllm_request_retries=1"):
            assert part in rank["error"]
        assert rank["seconds_in_failed_step"] < 30
    assert ranks[0]["logs"] == ranks[1]["logs"]  # global metrics of step 1, the same on both processes
    (log,) = ranks[0]["logs"]
    assert log["ada/samples_per_prompt"] >= 4
    # Both processes sent their own requests, in both steps; none was left open on the server.
    senders = {s.request_id.split("-")[2] for s in server.served}
    assert senders == {"p0", "p1"}
    assert server.with_state("cancelled") and not server.with_state("running")
