"""Sampling K completions per prompt, with vLLM when it is installed and transformers ``generate`` otherwise.

Used by ``trl-ada prepare`` (pass-rate estimates) and ``trl-ada eval`` (avg@k). Prompts are conversations (lists of
``{"role", "content"}`` messages, rendered with the model's chat template) or plain strings (used as they are).
Sampling is plain ancestral sampling at ``temperature`` with nucleus ``top_p`` and no top-k, whatever the model's
own ``generation_config`` says, so both backends draw from the same distribution.

Only the transformers branch runs in this repository's tests; the vLLM branch follows vLLM's offline ``LLM`` API
(``LLM.chat`` / ``LLM.generate`` with one ``SamplingParams(n=K, ...)`` per prompt) and has not been run here.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Prompt = str | list[dict[str, str]]
Backend = Literal["auto", "vllm", "transformers"]


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample: ``num_samples`` completions per prompt of at most ``max_new_tokens`` tokens each."""

    num_samples: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {self.num_samples}.")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}.")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 (sampling, not greedy decoding), got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")


class Sampler(Protocol):
    def sample(self, prompts: Sequence[Prompt], settings: SamplingSettings, desc: str = ...) -> list[list[str]]:
        """``settings.num_samples`` completion texts for each prompt, in prompt order."""
        ...


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def _is_conversational(prompts: Sequence[Prompt]) -> bool:
    """True when the prompts are conversations, False when plain strings; mixed lists are rejected."""
    kinds = {isinstance(prompt, str) for prompt in prompts}
    if len(kinds) > 1:
        raise ValueError("Prompts must be all strings or all conversations (lists of messages), not a mix.")
    return kinds == {False}


class TransformersSampler:
    """Batched ``model.generate`` with left padding. ``batch_size`` counts sequences (prompt x sample), not prompts."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if tokenizer.pad_token is None:  # batches need one; any token works behind the attention mask
            tokenizer.pad_token = tokenizer.eos_token
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    @classmethod
    def from_pretrained(
        cls, model_name_or_path: str, batch_size: int = 64, dtype: str = "auto"
    ) -> TransformersSampler:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
        model = AutoModelForCausalLM.from_pretrained(model_name_or_path, dtype=dtype)
        if torch.cuda.is_available():
            model = model.to("cuda")
        return cls(model, tokenizer, batch_size)

    def _render(self, prompts: Sequence[Prompt]) -> list[str]:
        if not _is_conversational(prompts):
            return list(prompts)  # type: ignore[arg-type]
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError(
                "The tokenizer has no chat template, so conversational prompts cannot be rendered. Use a model "
                "whose tokenizer has one (instruct or Qwen2.5-Math checkpoints do), or set tokenizer.chat_template."
            )
        return self.tokenizer.apply_chat_template(list(prompts), add_generation_prompt=True, tokenize=False)

    def sample(
        self, prompts: Sequence[Prompt], settings: SamplingSettings, desc: str = "generating"
    ) -> list[list[str]]:
        import torch
        from tqdm.auto import tqdm
        from transformers import GenerationConfig

        if not prompts:
            return []
        texts = self._render(prompts)
        k = settings.num_samples
        # Longest prompts first, so each batch pads to similar lengths (and an out-of-memory error comes early).
        lengths = [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        order = sorted(range(len(texts)), key=lambda i: -lengths[i])
        rows = [i for i in order for _ in range(k)]  # each prompt's samples are contiguous
        eos = self.model.generation_config.eos_token_id
        config = GenerationConfig(
            do_sample=True,
            temperature=settings.temperature,
            top_p=settings.top_p,
            top_k=0,  # off: the model's generation_config may set one (transformers' default is 50)
            max_new_tokens=settings.max_new_tokens,
            eos_token_id=eos if eos is not None else self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        device = self.model.device
        results: list[list[str]] = [[] for _ in texts]
        was_training = self.model.training
        self.model.eval()
        devices = [device.index or 0] if device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices), torch.no_grad(), tqdm(total=len(rows), desc=desc) as bar:
                torch.manual_seed(settings.seed)
                for start in range(0, len(rows), self.batch_size):
                    batch_rows = rows[start : start + self.batch_size]
                    batch = self.tokenizer(
                        [texts[i] for i in batch_rows],
                        padding=True,
                        padding_side="left",  # decoder-only generation continues from the right edge
                        add_special_tokens=False,  # the chat template already placed every special token
                        return_tensors="pt",
                    ).to(device)
                    output = self.model.generate(**batch, generation_config=config)
                    decoded = self.tokenizer.batch_decode(
                        output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True
                    )
                    for i, text in zip(batch_rows, decoded, strict=True):
                        results[i].append(text)
                    bar.update(len(batch_rows))
        finally:
            self.model.train(was_training)
        return results


class VLLMSampler:
    """vLLM's offline engine; ``engine_kwargs`` go to ``vllm.LLM`` (``tensor_parallel_size``, ``max_model_len``...)."""

    def __init__(self, model_name_or_path: str, seed: int = 0, **engine_kwargs: Any) -> None:
        from vllm import LLM

        self.llm = LLM(model=model_name_or_path, seed=seed, **engine_kwargs)

    def sample(
        self, prompts: Sequence[Prompt], settings: SamplingSettings, desc: str = "generating"
    ) -> list[list[str]]:
        from vllm import SamplingParams

        conversational = _is_conversational(prompts)
        k = settings.num_samples
        # One seed per prompt: vLLM seeds the n samples of a request with seed, seed + 1, ..., so prompt i gets
        # seed + i*k onwards and no two samples share a random stream (a shared seed would correlate prompts).
        params = [
            SamplingParams(
                n=k,
                temperature=settings.temperature,
                top_p=settings.top_p,
                max_tokens=settings.max_new_tokens,
                seed=settings.seed + i * k,
            )
            for i in range(len(prompts))
        ]
        if conversational:
            outputs = self.llm.chat(list(prompts), params, use_tqdm=True, add_generation_prompt=True)
        else:
            outputs = self.llm.generate(list(prompts), params, use_tqdm=True)
        return [[completion.text for completion in output.outputs] for output in outputs]


def load_sampler(
    model_name_or_path: str,
    backend: Backend = "auto",
    batch_size: int = 64,
    dtype: str = "auto",
    seed: int = 0,
    **vllm_kwargs: Any,
) -> Sampler:
    """A sampler for ``model_name_or_path``: vLLM if ``backend`` is "vllm", or "auto" and vLLM is importable."""
    if backend not in ("auto", "vllm", "transformers"):
        raise ValueError(f"Unknown backend {backend!r}; use 'auto', 'vllm' or 'transformers'.")
    if backend == "vllm" and not vllm_available():
        raise ValueError(
            "backend='vllm' but vLLM is not installed: `pip install -e '.[vllm]'` in the trl-ada clone, or use 'auto'."
        )
    if backend == "vllm" or (backend == "auto" and vllm_available()):
        return VLLMSampler(model_name_or_path, seed=seed, dtype=dtype, **vllm_kwargs)
    return TransformersSampler.from_pretrained(model_name_or_path, batch_size=batch_size, dtype=dtype)


def add_generation_arguments(parser: Any, num_samples: int, max_new_tokens: int) -> None:
    """The model and sampling flags shared by ``trl-ada prepare`` and ``trl-ada eval``."""
    group = parser.add_argument_group("model and sampling")
    group.add_argument("--model", required=True, help="model name on the Hub or local folder")
    group.add_argument("--num-samples", "-k", type=int, default=num_samples, help="completions per prompt")
    group.add_argument("--temperature", type=float, default=1.0)
    group.add_argument("--top-p", type=float, default=1.0)
    group.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    group.add_argument("--seed", type=int, default=0)
    group.add_argument(
        "--backend", choices=("auto", "vllm", "transformers"), default="auto", help="auto: vLLM when installed"
    )
    group.add_argument("--dtype", default="auto", help="model dtype, e.g. bfloat16 (default: the checkpoint's)")
    group.add_argument("--batch-size", type=int, default=64, help="sequences per generate call (transformers)")
    group.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM only")
    group.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM only")


def sampler_from_args(args: Any, sampler: Sampler | None = None) -> tuple[Sampler, SamplingSettings]:
    """The sampler and settings chosen by :func:`add_generation_arguments`'s flags (settings are checked first).

    A given ``sampler`` is returned as is instead of loading ``args.model``.
    """
    settings = SamplingSettings(
        num_samples=args.num_samples,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )
    if sampler is None:
        sampler = load_sampler(
            args.model,
            backend=args.backend,
            batch_size=args.batch_size,
            dtype=args.dtype,
            seed=args.seed,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
        )
    return sampler, settings
