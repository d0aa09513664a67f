"""Streaming through the in-process vLLM engine of `vllm_mode="colocate"`.

GRPOTrainer's colocate mode builds one `vllm.LLM` per process (with `distributed_executor_backend=
"external_launcher"`, so the engine core runs in this process and `step()` is synchronous). Instead of one
`LLM.generate` call, streaming drives that engine directly: `add_request` when a draw is submitted, `step()` until
some requests finish, `abort_request` for the draws of a prompt that has stopped. Requests use
`RequestOutputKind.DELTA`, so every step reports the tokens each running request just generated: the count of an
aborted request is known, and the finished completion is the concatenation of its deltas.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ...core.engine import Draw, Finished
from .base import TokenBackend


def sampling_params(vllm_generation: Any) -> Any:
    """The `SamplingParams` GRPOTrainer's colocate mode uses (`VLLMGeneration.generate`), streaming deltas."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    kwargs = {
        "n": 1,
        "repetition_penalty": vllm_generation.repetition_penalty,
        "temperature": vllm_generation.temperature,
        "top_p": vllm_generation.top_p,
        "top_k": vllm_generation.top_k,
        "min_p": 0.0 if vllm_generation.min_p is None else vllm_generation.min_p,
        "max_tokens": vllm_generation.max_completion_length,
        "logprobs": vllm_generation.logprobs,
    }
    kwargs.update(vllm_generation.generation_kwargs)
    if vllm_generation.structured_outputs_regex is not None:
        kwargs["structured_outputs"] = StructuredOutputsParams(regex=vllm_generation.structured_outputs_regex)
    elif isinstance(kwargs.get("structured_outputs"), dict):
        kwargs["structured_outputs"] = StructuredOutputsParams(**kwargs["structured_outputs"])
    kwargs["output_kind"] = RequestOutputKind.DELTA
    return SamplingParams(**kwargs)


class VLLMColocateBackend(TokenBackend):
    """A `Backend` over a vLLM `LLMEngine`; request ids are `ada-<ticket>`."""

    def __init__(self, engine: Any, params: Any, prompt_ids: Sequence[list[int]]) -> None:
        super().__init__(prompt_ids)
        self.engine = engine
        self.params = params
        self.draws: dict[str, Draw] = {}  # in flight, by request id
        self.tokens: dict[str, list[int]] = {}  # generated so far
        self.logprobs: dict[str, list[float] | None] = {}

    def submit(self, draws: Sequence[Draw]) -> None:
        for draw in draws:
            request_id = f"ada-{draw.ticket}"
            self.draws[request_id] = draw
            self.tokens[request_id], self.logprobs[request_id] = [], []
            self.engine.add_request(request_id, {"prompt_token_ids": self.prompt_ids[draw.prompt_index]}, self.params)

    def wait(self) -> list[Finished]:
        finished: list[Finished] = []
        while self.draws and not finished:
            if not self.engine.has_unfinished_requests():
                raise RuntimeError(f"vLLM's engine has no request left with {len(self.draws)} draws in flight.")
            for output in self.engine.step():
                request_id = output.request_id
                if request_id not in self.draws:
                    continue  # aborted
                completion = output.outputs[0]
                self.tokens[request_id].extend(completion.token_ids)
                self._add_logprobs(request_id, completion)
                if output.finished:
                    draw = self.draws.pop(request_id)
                    tokens, logprobs = self.tokens.pop(request_id), self.logprobs.pop(request_id)
                    finished.append(self._finished(draw, tokens, logprobs))
        return finished

    def _add_logprobs(self, request_id: str, completion: Any) -> None:
        """Keep the sampled token's log-probability (NaN becomes None), as GRPOTrainer does; the completion gets
        None instead of a list when vLLM returned no log-probabilities."""
        kept = self.logprobs[request_id]
        if kept is None:
            return
        if completion.logprobs is None:
            self.logprobs[request_id] = None
            return
        for token_id, per_token in zip(completion.token_ids, completion.logprobs, strict=True):
            value = per_token[token_id].logprob
            kept.append(value if not math.isnan(value) else None)

    def abort(self, tickets: Sequence[int]) -> int:
        request_ids = [f"ada-{t}" for t in tickets if f"ada-{t}" in self.draws]
        for request_id in request_ids:
            del self.draws[request_id]
            self.logprobs.pop(request_id)
        if request_ids:
            self.engine.abort_request(request_ids)
        return sum(len(self.tokens.pop(request_id)) for request_id in request_ids)

    def close(self) -> None:
        self.abort([draw.ticket for draw in list(self.draws.values())])


@contextmanager
def vllm_colocate_backend(engine: Any, params: Any, prompt_ids: Sequence[list[int]]) -> Iterator[VLLMColocateBackend]:
    """A backend over an awake colocated engine (`vllm.LLM.llm_engine`) with `params` (`sampling_params`); every
    request still in flight is aborted on exit."""
    backend = VLLMColocateBackend(engine, params, prompt_ids)
    try:
        yield backend
    finally:
        backend.close()
