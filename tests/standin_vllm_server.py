"""A stand-in for `trl vllm-serve` in tests: an OpenAI-compatible completions server on 127.0.0.1 (aiohttp, in a
background thread) that streams scripted completions the way vLLM does, and records what it was asked and what
happened to each request.

Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/completions` (`n=1`, prompt `[[ids]]` or `[ids]`; anything
else gets HTTP 400), and `POST /standin/mode` (`{"mode": ...}`, for tests in other processes). A request with
`"stream": true` is streamed: each event is `data: {json}` whose `choices[0]` holds `text`, `logprobs` (`tokens` as
`"token_id:<id>"`, `token_logprobs`, `top_logprobs`) when the request asks for log-probs, `token_ids` when it sets
`return_token_ids` (unless `token_ids_in_events=False`), and `finish_reason` on the last event ("stop" when the
completion ends with a stop id, else "length"); the stream ends with `data: [DONE]`. Any other request (what TRL's
asynchronous GRPO worker sends) is answered in one JSON body once the whole completion is ready: one such choice
holding every token (and `prompt_token_ids` when `return_token_ids` is set), plus `usage`; while it waits, the
server watches the connection, and a client that leaves first makes the request "cancelled".

Generation is scripted: `script(prompt_ids, request_index) -> (completion_ids, seconds_per_token)`; tokens are sent
`tokens_per_event` at a time, with the delay before each event (a non-streamed answer waits the sum of them). The
sampled-token log-prob is `logprob(token_id)`.

Modes: `"answer"`; `"silent"` (reads the request, never sends anything); `"headers"` (sends the response headers,
then nothing; a non-streamed request is then treated as in `"silent"`). `fail(request_index)` may turn a request
into an HTTP error (an int status) or a connection dropped after half its tokens (`"drop"`; non-streamed: dropped
before the answer).

Also here: `VLLMGenerationStub` and `attach`, which put a trainer built with `use_transformers_continuous_batching`
into vLLM server mode against a stand-in (the `vllm` package, which `use_vllm=True` needs, is not installed in CI).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Script = Callable[[list[int], int], tuple[list[int], float]]
MODES = ("answer", "silent", "headers")
POLL = 0.02  # seconds between checks that a client is still connected while the server is not sending


def default_logprob(token_id: int) -> float:
    return -token_id / 1000


@dataclass
class Served:
    """One request the server received, and what became of it."""

    index: int
    request_id: str
    payload: dict
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)  # what the script decided (sent in full if finished)
    emitted: int = 0  # tokens written to the connection
    state: str = "running"  # "finished", "cancelled" (the client left before the end), "failed" (an injected fault)
    client_port: int = 0  # the client's side of the connection: requests on one reused connection share it


class StandInServer:
    def __init__(
        self,
        script: Script | None = None,
        *,
        mode: str = "answer",
        logprob: Callable[[int], float] = default_logprob,
        stop_ids: tuple[int, ...] = (2,),
        token_ids_in_events: bool = True,
        tokens_per_event: int = 1,
        fail: Callable[[int], int | str | None] | None = None,
        model: str = "stand-in/toy",
        keepalive_timeout: float = 75.0,
    ) -> None:
        self.script = script or (lambda prompt_ids, index: ([5, 6, 2], 0.0))
        self.mode = mode
        self.logprob = logprob
        self.stop_ids = stop_ids
        self.token_ids_in_events = token_ids_in_events
        self.tokens_per_event = tokens_per_event
        self.fail = fail
        self.model = model
        self.keepalive_timeout = keepalive_timeout  # seconds an idle connection stays open (vLLM's server: 5)
        self.served: list[Served] = []
        self.health_checks = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -------------------------------------------------------------------------------------- lifecycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StandInServer:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="standin-vllm", daemon=True)
        self._thread.start()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(512)
        self.port = sock.getsockname()[1]
        asyncio.run_coroutine_threadsafe(self._serve(sock), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._loop = None

    def __enter__(self) -> StandInServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, sock: socket.socket) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/standin/mode", self._set_mode)
        self._runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=0.5, keepalive_timeout=self.keepalive_timeout
        )
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    # -------------------------------------------------------------------------------------- what tests read
    @property
    def requests(self) -> list[dict]:
        """Every completion request's payload, in arrival order."""
        return [s.payload for s in self.served]

    def with_state(self, state: str) -> list[Served]:
        return [s for s in self.served if s.state == state]

    @property
    def cancelled_tokens(self) -> int:
        """Tokens sent to requests whose client disconnected before the end: the aborted work the server saw."""
        return sum(s.emitted for s in self.with_state("cancelled"))

    @property
    def emitted_tokens(self) -> int:
        return sum(s.emitted for s in self.served)

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until the server has seen the end of every request (finished, failed, or its client gone)."""
        deadline = time.monotonic() + timeout
        while any(s.state == "running" for s in self.served):
            if time.monotonic() > deadline:
                running = [s.request_id for s in self.served if s.state == "running"]
                raise AssertionError(f"Requests still running on the stand-in server after {timeout} s: {running}")
            time.sleep(POLL)

    # -------------------------------------------------------------------------------------- handlers
    async def _health(self, request: web.Request) -> web.Response:
        self.health_checks += 1
        return web.Response()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _set_mode(self, request: web.Request) -> web.Response:
        mode = (await request.json())["mode"]
        if mode not in MODES:
            return web.json_response({"error": {"message": f"unknown mode {mode!r}"}}, status=400)
        self.mode = mode
        return web.json_response({"mode": mode})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        with self._lock:
            peer = request.transport.get_extra_info("peername") if request.transport is not None else None
            served = Served(len(self.served), request.headers.get("X-Request-Id", ""), payload)
            served.client_port = peer[1] if peer else 0
            self.served.append(served)
        problem = _check_payload(payload)
        if problem is not None:
            served.state = "failed"
            return web.json_response({"error": {"message": problem, "code": 400}}, status=400)
        prompt = payload["prompt"]
        served.prompt_ids = list(prompt[0] if isinstance(prompt[0], list) else prompt)
        if self.mode == "silent":
            await self._until_gone(request, served)
            return web.Response()
        fault = self.fail(served.index) if self.fail is not None else None
        if isinstance(fault, int):
            served.state = "failed"
            return web.json_response({"error": {"message": "injected fault", "code": fault}}, status=fault)
        if payload.get("stream") is not True:
            return await self._answer_whole(request, served, payload, fault)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        try:
            await response.prepare(request)
        except ConnectionError:  # the client left before the headers
            served.state = "cancelled"
            return response
        if self.mode == "headers":
            await self._until_gone(request, served)
            return response
        completion, delay = self.script(served.prompt_ids, served.index)
        completion = list(completion)[: payload.get("max_tokens") or None]  # as vLLM stops at max_tokens
        served.completion_ids = completion
        stop_at = len(completion) // 2 if fault == "drop" else None
        try:
            step = max(1, self.tokens_per_event)
            for start in range(0, len(completion), step):
                if delay:
                    await asyncio.sleep(delay * len(completion[start : start + step]))
                if stop_at is not None and start >= stop_at:
                    served.state = "failed"
                    request.transport.close()
                    return response
                if _gone(request):
                    served.state = "cancelled"
                    return response
                tokens = completion[start : start + step]
                last = start + step >= len(completion)
                event = self._event(served, payload, tokens, start == 0, last)
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
                served.emitted += len(tokens)
            if not completion:  # an empty completion still ends with a finish reason
                await response.write(f"data: {json.dumps(self._event(served, payload, [], True, True))}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionError:  # the client left while a token was being written
            served.state = "cancelled"
            return response
        except asyncio.CancelledError:
            served.state = "cancelled"
            raise
        served.state = "finished"
        return response

    async def _answer_whole(self, request: web.Request, served: Served, payload: dict, fault: str | None) -> Any:
        """A non-streamed request: the whole completion in one body after its scripted time, unless the client left
        (or a `"drop"` fault closes the connection) first."""
        if self.mode != "answer":
            await self._until_gone(request, served)
            return web.Response()
        completion, delay = self.script(served.prompt_ids, served.index)
        served.completion_ids = list(completion)[: payload.get("max_tokens") or None]
        try:
            deadline = time.monotonic() + delay * len(served.completion_ids)
            while not _gone(request) and time.monotonic() < deadline:
                await asyncio.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
        except asyncio.CancelledError:
            served.state = "cancelled"
            raise
        if _gone(request):
            served.state = "cancelled"
            return web.Response()
        if fault == "drop":
            served.state = "failed"
            request.transport.close()
            return web.Response()
        body = self._event(served, payload, served.completion_ids, True, True)
        n = len(served.completion_ids)
        body["usage"] = {"prompt_tokens": len(served.prompt_ids), "completion_tokens": n}
        served.emitted, served.state = n, "finished"
        return web.json_response(body)

    def _event(self, served: Served, payload: dict, tokens: list[int], first: bool, last: bool) -> dict:
        finish = None
        if last:
            finish = "stop" if served.completion_ids and served.completion_ids[-1] in self.stop_ids else "length"
        choice: dict[str, Any] = {"index": 0, "text": "".join(f"<{t}>" for t in tokens)}
        if payload.get("logprobs") is not None:
            names = [f"token_id:{t}" for t in tokens]
            values = [self.logprob(t) for t in tokens]
            choice["logprobs"] = {
                "text_offset": list(range(len(tokens))),
                "token_logprobs": values,
                "tokens": names,
                "top_logprobs": [{n: v} for n, v in zip(names, values, strict=True)],
            }
        else:
            choice["logprobs"] = None
        choice["finish_reason"] = finish
        choice["stop_reason"] = None
        if payload.get("return_token_ids") and self.token_ids_in_events:
            choice["token_ids"] = list(tokens)
            if first:
                choice["prompt_token_ids"] = served.prompt_ids
        return {
            "id": f"cmpl-{served.request_id}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
        }

    async def _until_gone(self, request: web.Request, served: Served) -> None:
        while not _gone(request):
            await asyncio.sleep(POLL)
        served.state = "cancelled"


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _check_payload(payload: dict) -> str | None:
    if payload.get("n", 1) != 1:
        return f"n={payload.get('n')}; the clients under test send one request per completion"
    prompt = payload.get("prompt")
    ids = prompt[0] if isinstance(prompt, list) and prompt and isinstance(prompt[0], list) else prompt
    if isinstance(prompt, list) and len(prompt) > 1 and isinstance(prompt[0], list):
        return "one prompt per request"
    if not (isinstance(ids, list) and ids and all(isinstance(t, int) for t in ids)):
        return f"prompt must be token ids, got {prompt!r}"
    return None


# --------------------------------------------------------------------------------------------------------------------
# Putting a trainer in vLLM server mode against the stand-in
# --------------------------------------------------------------------------------------------------------------------


class VLLMGenerationStub:
    """Stands in for TRL's `VLLMGeneration` in server mode, on every process: holds the generation settings the
    streaming backend reads and counts weight syncs. Streaming never calls its `generate`."""

    def __init__(self, trainer: Any) -> None:
        self.repetition_penalty = trainer.repetition_penalty
        self.temperature = trainer.temperature
        self.top_p = trainer.top_p
        self.top_k = trainer.top_k
        self.min_p = trainer.min_p
        self.max_completion_length = trainer.max_completion_length
        self.logprobs = 0
        self.structured_outputs_regex = trainer.args.vllm_structured_outputs_regex
        self.generation_kwargs = trainer.args.generation_kwargs or {}
        self.syncs = 0

    def sync_weights(self) -> None:
        self.syncs += 1

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Streaming must not generate through VLLMGeneration.generate.")


def attach(trainer: Any, url: str, timeout: float | None = None, retries: int | None = None) -> VLLMGenerationStub:
    """Switch a trainer built with `use_transformers_continuous_batching=True, rollout_schedule="streaming"` to vLLM
    server mode against the server at `url`."""
    stub = VLLMGenerationStub(trainer)
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, stub, -1
    trainer.args.vllm_mode = "server"
    trainer.args.vllm_server_base_url = url
    if timeout is not None:
        trainer.args.vllm_request_timeout = timeout
    if retries is not None:
        trainer.args.vllm_request_retries = retries
    return stub
