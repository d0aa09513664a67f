"""What the engine exchanges with its caller: requests and draws going out, finished completions coming back, the
callables it is given (`generate`, `score`, `refill`, a refill's signal test), the `Backend` protocol every generation
engine implements (submit / wait / abort), and `RoundsBackend`, a blocking `generate` call seen as one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .pool import Pool


@dataclass(frozen=True)
class Request:
    """Draw `num_samples` completions of prompt number `prompt_index`."""

    prompt_index: int
    num_samples: int


GenerateFn = Callable[[list[Request]], list[Any]]
ScoreFn = Callable[[list[Request], list[Any]], Sequence[float]]
# refill(prompt_index) -> the index of a fresh prompt to take over that prompt's slot (the next index: the caller has
# just appended it), or None for no more refills. Called once per pool that ends with no signal.
RefillFn = Callable[[int], "int | None"]
# signal(pool) -> whether refill keeps the pool (default `has_signal`: any two total rewards differ).
SignalFn = Callable[["Pool"], bool]


@dataclass(frozen=True)
class Draw:
    """One completion requested for prompt `prompt_index`; `ticket` numbers the step's draws in request order."""

    prompt_index: int
    ticket: int


@dataclass(frozen=True)
class Finished:
    """A completion the backend has finished: its draw's ticket, the caller's handle, and the tokens it generated."""

    ticket: int
    handle: Any
    num_tokens: int = 0


class Backend(Protocol):
    """A generation engine seen as events: draws go in, finished completions come out, in-flight draws can be aborted.
    The trainer's streaming engines (`trl_ada.adapter.engines`) and the step-time benchmark's emulated engine
    implement it."""

    def submit(self, draws: Sequence[Draw]) -> None:
        """Start generating one completion per draw (`draws` may be empty)."""

    def wait(self) -> list[Finished]:
        """Block until at least one submitted draw that was not aborted has finished; return every finished draw not
        returned before. Return `[]` only when nothing is in flight."""

    def abort(self, tickets: Sequence[int]) -> int:
        """Stop these in-flight draws (they must never be returned by `wait`); return the tokens they had generated,
        as far as the backend knows (0 when it cannot tell)."""


class RoundsBackend:
    """A blocking `generate(requests) -> handles` call as a `Backend`: `wait` generates everything submitted since the
    last call, in one call (grouped into one `Request` per run of draws of the same prompt), and returns it all.

    It calls `generate` on every `wait`, even with nothing submitted: under rounds, every process must make the same
    number of generation calls (vLLM server mode and ZeRO-3 generation are collective). `num_tokens(handle)`, when
    given, reports each completion's generated tokens."""

    def __init__(self, generate: GenerateFn, num_tokens: Callable[[Any], int] | None = None) -> None:
        self._generate = generate
        self._num_tokens = num_tokens
        self._pending: list[Draw] = []

    def submit(self, draws: Sequence[Draw]) -> None:
        self._pending.extend(draws)

    def wait(self) -> list[Finished]:
        draws, self._pending = self._pending, []
        requests: list[Request] = []
        for draw in draws:
            if requests and requests[-1].prompt_index == draw.prompt_index:
                requests[-1] = Request(draw.prompt_index, requests[-1].num_samples + 1)
            else:
                requests.append(Request(draw.prompt_index, 1))
        handles = self._generate(requests)
        if len(handles) != len(draws):
            raise RuntimeError(f"generate: requested {len(draws)} completions, got {len(handles)}.")
        count = self._num_tokens or (lambda handle: 0)
        return [Finished(d.ticket, h, count(h)) for d, h in zip(draws, handles, strict=True)]

    def abort(self, tickets: Sequence[int]) -> int:
        raise RuntimeError("A blocking generate call has nothing in flight to abort.")


def _refilled(refill: RefillFn, index: int, num_pools: int) -> int | None:
    """Ask `refill` for a prompt to replace prompt `index`; check it is the next prompt index."""
    new = refill(index)
    if new is not None and new != num_pools:
        raise ValueError(f"refill must return the next prompt index, {num_pools}, or None; got {new!r}.")
    return new
