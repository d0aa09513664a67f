"""Streaming through a vLLM server (`use_vllm=True, vllm_mode="server"`, e.g. started with `trl vllm-serve`).

Every process sends its own requests, one per completion (`n=1`), to the server's OpenAI-compatible
`/v1/completions` endpoint with `"stream": true`: tokens come back as server-sent events while they are generated,
and closing a request's connection makes vLLM abort it, so a draw can be stopped at any moment. The requests run on
an asyncio event loop (aiohttp) in a background thread; finished completions reach the trainer's thread through a
queue.

The payload is the one TRL's `VLLMClient.generate` builds (same sampling parameters, token-id prompt, token ids
returned as `"token_id:<id>"`), with `n=1` and `stream=true`. Everything that depends on the server's event format
is in `parse_event`.

Failures: a request that cannot connect, gets an HTTP 5xx or an error event, ends early, or receives no data for
`vllm_request_timeout` seconds is sent again (from scratch) up to `vllm_request_retries` times; then `wait` raises
`VLLMServerError`, naming the server, the request and those two settings. Tokens streamed by an attempt that failed
and was retried are counted in `retried_tokens` (and logged), not in the engine's token counts. An HTTP 4xx (a
request the server rejects, e.g. a prompt longer than its context) fails at once.
"""

from __future__ import annotations

import asyncio
import json
import math
import queue
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import aclosing, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from transformers.utils import logging

from ...core.engine import Draw, Finished
from .base import TokenBackend

logger = logging.get_logger(__name__)

POLL_SECONDS = 1.0  # how often `wait` checks that the event loop is alive and that requests make progress
MAX_CONNECTIONS = 512  # per process (under the usual 1024 open files); more requests wait here, with no timeout
BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0)  # pause before retry k (the last one repeats)
END_OF_BODY_SECONDS = 1.0  # how long to wait for the end of a response body after its `[DONE]`
# vLLM's server (uvicorn) closes a connection idle for 5 s; aiohttp would keep it pooled for 15 s, and a request sent
# on it just as the server closes it fails and is retried. Drop idle connections before the server does.
KEEPALIVE_SECONDS = 2.0
CONTROL_TIMEOUT = 30.0  # seconds for the backend's own calls into its event loop (open, abort, close)


class VLLMServerError(RuntimeError):
    """A streaming request to the vLLM server failed for good (its retries are spent, or the server rejected it)."""


class _Retryable(Exception):
    """A failed attempt that may succeed if sent again."""


class _Fatal(Exception):
    """A failed attempt that would fail again (a rejected request, an event the parser does not understand)."""


# --------------------------------------------------------------------------------------------------------------------
# The server's event format
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class StreamEvent:
    """What one server-sent event of a streamed completion carries: the tokens it adds (with their sampling
    log-probs, or `None` when the server sent none), the finish reason on the last one, an error, or the end."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float | None] | None = None
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False  # `data: [DONE]`, the end of the stream


def parse_event(data: str) -> StreamEvent:
    """Parse the `data:` payload of one server-sent event of vLLM's streamed `/v1/completions`.

    Each event is `{"choices": [{"text", "logprobs", "token_ids", "finish_reason", ...}], ...}` for the tokens
    generated since the previous one (usually one). `token_ids` is there when the request sets `return_token_ids`;
    otherwise the ids are read from `logprobs.tokens`, which are `"token_id:<id>"` strings under
    `return_tokens_as_token_ids`. `logprobs.token_logprobs` holds the sampled tokens' log-probs. A usage event has no
    choices; an error event is `{"error": {...}}` (or `{"object": "error", "message": ...}`); the stream ends with
    `[DONE]`. Raises `ValueError` on anything else.
    """
    data = data.strip()
    if data == "[DONE]":
        return StreamEvent(done=True)
    event = json.loads(data)
    if not isinstance(event, dict):
        raise ValueError(f"expected a JSON object, got {clip_text(data)}")
    if "error" in event or event.get("object") == "error":
        error = event.get("error", event)
        message = error.get("message", error) if isinstance(error, dict) else error
        return StreamEvent(error=str(message))
    choices = event.get("choices") or []
    if not choices:
        return StreamEvent()  # e.g. the usage summary
    choice = choices[0]
    token_ids = choice.get("token_ids")
    logprobs = choice.get("logprobs")
    values = None
    if logprobs is not None:
        tokens = logprobs.get("tokens") or []
        values = logprobs.get("token_logprobs")
        values = [None] * len(tokens) if values is None else list(values)
        if len(values) != len(tokens):
            raise ValueError(f"{len(tokens)} logprobs.tokens but {len(values)} token_logprobs in {clip_text(data)}")
        if token_ids is None:
            token_ids = [_token_id(token, data) for token in tokens]
    if token_ids is None:
        if choice.get("text"):
            raise ValueError(
                f"an event with text but neither token_ids nor logprobs: {clip_text(data)} (the request asks for "
                "return_token_ids and return_tokens_as_token_ids)"
            )
        token_ids = []
    token_ids = [int(t) for t in token_ids]
    if values is not None and len(values) != len(token_ids):
        raise ValueError(f"{len(token_ids)} token_ids but {len(values)} log-probs in {clip_text(data)}")
    if values is not None:
        values = [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]
    return StreamEvent(token_ids, values, choice.get("finish_reason"))


def _token_id(token: str, data: str) -> int:
    if not isinstance(token, str) or not token.startswith("token_id:"):
        raise ValueError(
            f"logprobs.tokens holds {token!r}, not 'token_id:<id>' (the request sets return_tokens_as_token_ids) "
            f"in {clip_text(data)}"
        )
    return int(token.removeprefix("token_id:"))


def clip_text(text: str, limit: int = 300) -> str:
    """`text` cut to `limit` characters ('...' marks a cut), as a quoted `repr` for an error message."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _parse_streamed(data: str) -> StreamEvent:
    """`parse_event`, failing the request for good (not retried) on an event it cannot read."""
    try:
        return parse_event(data)
    except (ValueError, TypeError, AttributeError) as error:
        raise _Fatal(f"could not parse a streamed event ({error}): {clip_text(data)}") from None


FINISHED = ("stop", "length")  # the finish reasons of a complete completion; "abort" and "error" are failures


# --------------------------------------------------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class _Request:
    """One draw's request, owned by the event loop. `token_ids` / `logprobs` are the current attempt's."""

    draw: Draw
    task: asyncio.Task | None = None
    request_id: str = ""
    attempts: int = 0
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    has_logprobs: bool = True

    def add(self, event: StreamEvent) -> None:
        """Append a streamed event's tokens; the log-probs stay only while every event with tokens carried them."""
        self.token_ids.extend(event.token_ids)
        if event.logprobs is None or None in event.logprobs:
            self.has_logprobs = self.has_logprobs and not event.token_ids
        else:
            self.logprobs.extend(event.logprobs)


class VLLMServerBackend(TokenBackend):
    """A `Backend` over a vLLM server's streamed `/v1/completions`, one HTTP request per draw.

    `sampling` holds the payload's sampling fields (see `sampling_payload`); `model` is the served model's id (read
    from `GET /v1/models` when `None`). `name` prefixes the request ids (header `X-Request-Id`), which vLLM uses in
    its logs.
    """

    def __init__(
        self,
        base_url: str,
        prompt_ids: Sequence[list[int]],
        sampling: dict[str, Any],
        request_timeout: float,
        request_retries: int,
        model: str | None = None,
        name: str = "trl-ada",
    ) -> None:
        import aiohttp  # optional dependency (the `vllm` extra)

        super().__init__(prompt_ids)
        self._aiohttp = aiohttp
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/v1/completions"
        self.sampling = dict(sampling)
        self.request_timeout = float(request_timeout)
        self.request_retries = int(request_retries)
        self.name = name
        self.retries = 0  # attempts that failed and were sent again
        self.retried_tokens = 0  # streamed by those attempts
        self._live: dict[int, Draw] = {}  # submitted, neither returned by `wait` nor aborted (trainer's thread)
        self._requests: dict[int, _Request] = {}  # by ticket (event loop's thread)
        self._results: queue.SimpleQueue = queue.SimpleQueue()  # (ticket, token_ids, logprobs, error)
        self._last_activity = time.monotonic()
        self._closed = False
        self._session = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="trl-ada-vllm-server", daemon=True)
        self._thread.start()
        try:
            self._call(self._open(), CONTROL_TIMEOUT)
            self.model = model if model is not None else self._call(self._model_id(), None)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------------------------------- Backend protocol
    def submit(self, draws: Sequence[Draw]) -> None:
        draws = list(draws)
        if not draws:
            return
        if self._closed:
            raise RuntimeError("This vLLM server backend is closed.")
        for draw in draws:
            self._live[draw.ticket] = draw
        self._loop.call_soon_threadsafe(self._start, draws)

    def wait(self) -> list[Finished]:
        finished: list[Finished] = []
        while self._live:
            try:
                item = self._results.get(timeout=POLL_SECONDS) if not finished else self._results.get_nowait()
            except queue.Empty:
                if finished:
                    return finished
                self._check_progress()
                continue
            ticket, token_ids, logprobs, error = item
            draw = self._live.get(ticket)
            if draw is None:
                continue  # aborted after it finished or failed
            if error is not None:
                raise error
            del self._live[ticket]
            finished.append(self._finished(draw, token_ids, logprobs))
        return finished

    def abort(self, tickets: Sequence[int]) -> int:
        tickets = [ticket for ticket in tickets if self._live.pop(ticket, None) is not None]
        if not tickets:
            return 0
        return self._call(self._cancel(tickets), CONTROL_TIMEOUT)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._live.clear()
        shut_down = False
        if self._loop.is_running():
            with suppress(Exception):
                self._call(self._shutdown(), CONTROL_TIMEOUT)
                shut_down = True
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=CONTROL_TIMEOUT)
        if not self._thread.is_alive():
            if not shut_down:  # the loop had stopped with requests in flight: cancel them and close the session here
                with suppress(Exception):
                    self._loop.run_until_complete(self._shutdown())
            self._loop.close()

    # ---------------------------------------------------------------------------------------- trainer's thread
    def _call(self, coroutine, timeout: float | None) -> Any:
        """Run a coroutine on the event loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def _check_progress(self) -> None:
        """`wait`'s guard against blocking forever: the event loop must be alive, and something must happen at least
        every (2 x vllm_request_timeout + the longest pause between retries + a margin). Each attempt connects and
        then receives data within vllm_request_timeout or fails, so only a bug can trip the second check."""
        if not self._thread.is_alive():
            raise RuntimeError("The vLLM server backend's event loop stopped with requests in flight.")
        quiet = time.monotonic() - self._last_activity
        limit = 2 * self.request_timeout + BACKOFF_SECONDS[-1] + 30.0
        if quiet > limit:
            raise VLLMServerError(
                f"No progress for {quiet:.0f} s on {len(self._live)} streaming requests to the vLLM server at "
                f"{self.url} (vllm_request_timeout={self.request_timeout} s, vllm_request_retries="
                f"{self.request_retries}): nothing was received and no request failed. This is a bug; please "
                "report it."
            )

    # ---------------------------------------------------------------------------------------- event loop's thread
    async def _open(self) -> None:
        aiohttp = self._aiohttp
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS, keepalive_timeout=KEEPALIVE_SECONDS),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=None, sock_connect=self.request_timeout, sock_read=self.request_timeout
            ),
        )

    async def _shutdown(self) -> None:
        tasks = [r.task for r in self._requests.values() if r.task is not None and not r.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CONTROL_TIMEOUT / 2)
        self._requests.clear()
        if self._session is not None:
            await self._session.close()

    async def _model_id(self) -> str:
        """The served model's id, as TRL's `VLLMClient` reads it, with the requests' timeout and retries."""
        url = f"{self.base_url}/v1/models"
        for attempt in range(self.request_retries + 1):
            try:
                async with self._session.get(url) as response:
                    if response.status != 200:
                        text = await response.text()
                        error: Exception = (_Retryable if response.status >= 500 else _Fatal)(
                            f"HTTP {response.status}: {clip_text(text)}"
                        )
                    else:
                        return (await response.json())["data"][0]["id"]
            except (self._aiohttp.ClientError, TimeoutError, OSError) as failure:
                error = _Retryable(_describe(failure, self.request_timeout))
            except (KeyError, IndexError, TypeError, ValueError) as failure:
                error = _Fatal(f"unexpected answer: {failure!r}")
            if isinstance(error, _Fatal) or attempt == self.request_retries:
                raise VLLMServerError(f"GET {url} failed {attempt + 1} time(s): {error}. {self._advice()}") from None
            await asyncio.sleep(_backoff(attempt))
        raise AssertionError("unreachable")

    def _start(self, draws: list[Draw]) -> None:
        for draw in draws:
            request = _Request(draw)
            self._requests[draw.ticket] = request
            request.task = self._loop.create_task(self._run(request))

    async def _cancel(self, tickets: list[int]) -> int:
        tokens, tasks = 0, []
        for ticket in tickets:
            request = self._requests.pop(ticket, None)
            if request is None:
                continue
            tokens += len(request.token_ids)  # all of them when it had finished but was not yet returned
            if request.task is not None and not request.task.done():
                request.task.cancel()
                tasks.append(request.task)
        if tasks:  # closing each connection is what makes vLLM abort the request; let it happen now
            await asyncio.wait(tasks, timeout=CONTROL_TIMEOUT / 2)
        return tokens

    async def _run(self, request: _Request) -> None:
        """One draw: attempts until one finishes, the retries are spent, or the task is cancelled (aborted)."""
        while True:
            request.attempts += 1
            request.token_ids, request.logprobs, request.has_logprobs = [], [], True
            request.request_id = f"{self.name}-{request.draw.ticket}-{uuid.uuid4().hex[:12]}"
            try:
                await self._stream(request)
            except asyncio.CancelledError:
                raise
            except _Retryable as error:
                if request.attempts > self.request_retries:
                    self._fail(request, error)
                    return
                discarded, request.token_ids = len(request.token_ids), []  # not counted again if aborted now
                self.retried_tokens += discarded
                self.retries += 1
                (logger.warning if self.retries == 1 else logger.info)(  # one warning a step; the rest at info level
                    f"Streaming request {request.request_id} to {self.url} failed ({error}); sending it again "
                    f"(retry {request.attempts} of vllm_request_retries={self.request_retries}), discarding the "
                    f"{discarded} tokens it had streamed."
                )
                self._last_activity = time.monotonic()
                await asyncio.sleep(_backoff(request.attempts - 1))
                continue
            except _Fatal as error:
                self._fail(request, error)
                return
            except Exception as error:  # a bug: report it rather than leave `wait` waiting
                self._fail(request, _Fatal(f"{type(error).__name__}: {error}"))
                return
            logprobs = list(request.logprobs) if request.has_logprobs and request.token_ids else None
            self._results.put((request.draw.ticket, list(request.token_ids), logprobs, None))
            self._last_activity = time.monotonic()
            return

    async def _stream(self, request: _Request) -> None:
        """One attempt: post the request and read its events until the completion finishes."""
        aiohttp = self._aiohttp
        payload = self.payload(self.prompt_ids[request.draw.prompt_index])
        headers = {"X-Request-Id": request.request_id, "Accept": "text/event-stream"}
        self._last_activity = time.monotonic()
        try:
            response = await self._session.post(self.url, json=payload, headers=headers)
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise _Retryable(_describe(error, self.request_timeout)) from None
        reusable = False
        try:
            self._last_activity = time.monotonic()
            if response.status != 200:
                try:
                    text = await response.text()
                except (aiohttp.ClientError, TimeoutError, OSError):
                    text = ""
                message = f"HTTP {response.status}: {clip_text(text)}"
                raise _Retryable(message) if response.status >= 500 else _Fatal(message)
            finish_reason, reusable = await self._read_events(request, response)
            if finish_reason is None:
                reusable = False
                raise _Retryable(f"the stream ended after {len(request.token_ids)} tokens without a finish reason")
            if finish_reason not in FINISHED:
                reusable = False
                raise _Retryable(f"the server ended the completion with finish_reason={finish_reason!r}")
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise _Retryable(_describe(error, self.request_timeout)) from None
        finally:
            # A finished stream's connection goes back to the pool; any other is closed, which is what tells vLLM
            # to abort the request.
            if reusable:
                response.release()
            else:
                response.close()

    async def _read_events(self, request: _Request, response: Any) -> tuple[str | None, bool]:
        """Read server-sent events until `[DONE]` or the end of the body. Return the finish reason (None if the
        stream had none) and whether the body was read to its end (then the connection can be reused)."""
        aiohttp = self._aiohttp
        finish_reason, done = None, False
        try:
            async with aclosing(self._event_data(response)) as payloads:
                async for data in payloads:
                    event = _parse_streamed(data)
                    if event.done:
                        done = True
                        break
                    if finish_reason is not None:
                        continue  # e.g. a usage summary
                    if event.error is not None:
                        raise _Retryable(f"the server reported an error: {event.error}")
                    request.add(event)
                    finish_reason = event.finish_reason
        except (aiohttp.ClientError, TimeoutError, OSError):
            if finish_reason is None:
                raise
            return finish_reason, False  # the completion was complete; only its connection is lost
        if not done:
            return finish_reason, True
        try:  # the body ends right after [DONE]: read that end, briefly, so that the connection can be reused
            async with asyncio.timeout(END_OF_BODY_SECONDS):
                while await response.content.readany():
                    pass
        except (aiohttp.ClientError, TimeoutError, OSError):
            return finish_reason, False
        return finish_reason, True

    async def _event_data(self, response: Any) -> AsyncIterator[str]:
        """The `data:` payload of each server-sent event in the response body, as its lines arrive (several `data:`
        lines of one event joined by newlines; comments (":...") and other fields ignored)."""
        buffer, data_lines = b"", []
        async for chunk in response.content.iter_any():
            self._last_activity = time.monotonic()
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                line = raw.rstrip(b"\r").decode("utf-8")
                if line.startswith("data:"):
                    data_lines.append(line[5:].removeprefix(" "))
                elif not line and data_lines:  # a blank line ends the event
                    data, data_lines = "\n".join(data_lines), []
                    yield data

    def _fail(self, request: _Request, error: Exception) -> None:
        prompt = self.prompt_ids[request.draw.prompt_index]
        attempts = f"{request.attempts} attempt(s)"
        message = (
            f"A streaming completion request to the vLLM server at {self.url} failed after {attempts} "
            f"(request {request.request_id}, prompt {request.draw.prompt_index} of the step, {len(prompt)} prompt "
            f"tokens): {error}. "
        )
        if isinstance(error, _Fatal):
            message += "The server rejected it or answered in a form this backend does not read; not retried."
        else:
            message += self._advice()
        self._results.put((request.draw.ticket, None, None, VLLMServerError(message)))
        self._last_activity = time.monotonic()

    def _advice(self) -> str:
        return (
            f"A request fails when it cannot connect, gets a server error, or receives no data for "
            f"vllm_request_timeout={self.request_timeout} s, and is retried vllm_request_retries="
            f"{self.request_retries} times. Check that the server is up (`curl {self.base_url}/health`) and read its "
            "log; if it is only slow or overloaded, raise vllm_request_timeout or vllm_request_retries."
        )

    # ---------------------------------------------------------------------------------------- the request
    def payload(self, prompt_ids: list[int]) -> dict[str, Any]:
        """The JSON body of one draw's request: TRL's `VLLMClient.generate` payload for one prompt, streamed."""
        return {
            "model": self.model,
            "prompt": [list(prompt_ids)],
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            **self.sampling,
            "n": 1,
            "stream": True,
        }


def _backoff(attempt: int) -> float:
    return BACKOFF_SECONDS[min(attempt, len(BACKOFF_SECONDS) - 1)]


def _describe(error: BaseException, timeout: float) -> str:
    if isinstance(error, TimeoutError):  # aiohttp's read and connect timeouts are TimeoutErrors
        return f"no data for vllm_request_timeout={timeout} s ({type(error).__name__})"
    return f"{type(error).__name__}: {error}"


# --------------------------------------------------------------------------------------------------------------------
# The trainer's side
# --------------------------------------------------------------------------------------------------------------------


def server_base_url(args: Any) -> str:
    """The server's base URL, as TRL's `VLLMGeneration` derives it from the config (on every process)."""
    if getattr(args, "vllm_server_base_url", None):
        return args.vllm_server_base_url.rstrip("/")
    return f"http://{args.vllm_server_host}:{args.vllm_server_port}"


def sampling_payload(generation: Any, args: Any) -> dict[str, Any]:
    """The sampling fields of TRL's server-mode request, from `generation` as `VLLMGeneration.generate` passes them
    to `VLLMClient.generate`. The trainer passes its `vllm_generation` (or, a stand-in without one, itself: it has the
    same sampling values); the structured-outputs regex and `generation_kwargs` fall back to the config `args`."""

    def value(name: str, fallback_name: str) -> Any:
        if hasattr(generation, name):
            return getattr(generation, name)
        return getattr(args, fallback_name, None)

    min_p = getattr(generation, "min_p", None)
    sampling = {
        "repetition_penalty": getattr(generation, "repetition_penalty", None),
        "temperature": getattr(generation, "temperature", None),
        "top_p": getattr(generation, "top_p", None),
        "top_k": getattr(generation, "top_k", None),
        "min_p": 0.0 if min_p is None else min_p,
        "max_tokens": getattr(generation, "max_completion_length", None),
        "logprobs": getattr(generation, "logprobs", 0),  # GRPOTrainer asks for 0: the sampled tokens' log-probs
    }
    regex = value("structured_outputs_regex", "vllm_structured_outputs_regex")
    if regex is not None:
        sampling["structured_outputs"] = {"regex": regex}
    sampling.update(value("generation_kwargs", "generation_kwargs") or {})
    return sampling


@contextmanager
def vllm_server_backend(
    args: Any, prompt_ids: Sequence[list[int]], sampling: dict[str, Any], process_index: int
) -> Iterator[VLLMServerBackend]:
    """This process's streaming backend for one step, against the server the config `args` names, sending the
    `sampling` fields (`sampling_payload`); closed on exit (every request still in flight is cancelled, so the server
    aborts it)."""
    backend = VLLMServerBackend(
        server_base_url(args),
        prompt_ids,
        sampling,
        request_timeout=args.vllm_request_timeout,
        request_retries=args.vllm_request_retries,
        name=f"trl-ada-p{process_index}",
    )
    try:
        yield backend
    finally:
        backend.close()
        if backend.retries > 1:
            logger.warning(
                f"{backend.retries} streaming requests to {backend.url} failed and were sent again this step, "
                f"discarding {backend.retried_tokens} streamed tokens (not counted in ada/completion_tokens)."
            )
