"""A model of a real model's shape, with random weights, and the workload the realistic-size step-time table runs.

Everything here is built locally, offline: no model hub, no dataset hub. `build_model` makes a `Qwen2ForCausalLM` of
one of `SHAPES` (Qwen2.5-0.5B's and 1.5B's layer counts, widths, heads and vocabulary; a small and a tiny shape for
CPU runs) with random weights from a seed, and `word_tokenizer` a word-level tokenizer with one token per id
(`t<id>`, plus `<pad>` and `<eos>`), passed to the trainer as an object.

A random model emits its end-of-sequence token about once in a vocabulary's worth of tokens, so its completions run
to the length limit. `build_model(mean_length=...)` gives them varied lengths instead: every token embedding gets
the same value in one coordinate, and the end-of-sequence token a larger one (the embeddings are tied to the output
layer, so this raises the end-of-sequence score at every position by about the same margin). The margin is set from
one forward pass over random prompts so that each token ends the completion with probability about
1 / `mean_length`: geometric lengths, cut at the limit. `mean_length=None` sets the margin very low instead: every
completion runs to the limit. Both check, on that forward pass, that the coordinate stays positive at every position
of the last hidden state, which is what makes the margin raise (or lower) the score everywhere.

The reward (`pass_rate_reward`) is a pass-rate reward with a U-shaped per-prompt pass rate: prompt i carries p_i
drawn from Beta(0.337, 0.298) (the fit to the paper's trained 1.5B model), and a completion earns 1 when a CRC32 of
its text, scaled to [0, 1), is below p_i.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PAPER_FIT = (0.3372, 0.2984)  # Beta parameters of the paper-fit pass-rate mix (benchmarks/sampler_efficiency.py)
PAD, EOS = 0, 1  # token ids of <pad> and <eos>; t<id> for every other id
BIAS_COORDINATE = 0  # the embedding coordinate that carries the end-of-sequence margin
# That coordinate's value in every token embedding (random init gives about 0.02). It must dominate the coordinate
# through every layer so that the last hidden state keeps it positive at every position: at 1.0 it did not in
# Qwen2.5-0.5B's 24 layers; at 10 and 50 it did.
BIAS_VALUE = 20.0
FIXED_MARGIN = -50.0  # the margin for completions that run to the limit: end-of-sequence never drawn


@dataclass(frozen=True)
class Shape:
    """The sizes of a Qwen2 model (`transformers.Qwen2Config` fields)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int

    def config(self) -> Any:
        """A `Qwen2Config` of this shape: tied embeddings, as the Qwen2.5 models of up to 3B parameters have."""
        from transformers import Qwen2Config

        return Qwen2Config(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=4096,
            rope_theta=1_000_000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            pad_token_id=PAD,
            eos_token_id=EOS,
            bos_token_id=None,
        )

    def parameters(self) -> int:
        """Parameter count: the tied embedding, then per layer the attention projections (with Qwen2's q, k and v
        biases), the MLP and two norms, then the final norm."""
        head_dim = self.hidden // self.heads
        kv = self.kv_heads * head_dim
        attention = self.hidden * (self.hidden + 2 * kv) + (self.hidden + 2 * kv) + self.hidden * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return self.vocab * self.hidden + self.layers * (attention + mlp + 2 * self.hidden) + self.hidden


SHAPES = {
    shape.name: shape
    for shape in (
        Shape("qwen2.5-0.5b", layers=24, hidden=896, heads=14, kv_heads=2, intermediate=4864, vocab=151_936),
        Shape("qwen2.5-1.5b", layers=28, hidden=1536, heads=12, kv_heads=2, intermediate=8960, vocab=151_936),
        Shape("small", layers=8, hidden=512, heads=8, kv_heads=2, intermediate=1536, vocab=16_384),  # CPU profile
        Shape("tiny", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=1_024),  # dry runs
    )
}


def word_tokenizer(vocab: int) -> Any:
    """A word-level fast tokenizer with one token per id: `<pad>` (0), `<eos>` (1), then `t2` ... `t<vocab - 1>`;
    text is split on whitespace and decoded with spaces between tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": PAD, "<eos>": EOS} | {f"t{i}": i for i in range(2, vocab)}
    core = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", model_max_length=4096)


def random_prompts(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """`count` prompts of `length` token ids drawn uniformly from the word tokens (never `<pad>` or `<eos>`)."""
    rng = random.Random(seed)
    return [[rng.randrange(2, vocab) for _ in range(length)] for _ in range(count)]


def prompt_dataset(count: int, length: int, vocab: int, seed: int) -> Any:
    """A `datasets.Dataset` of `count` random prompts (text, `length` words) with a `pass_rate` column drawn from the
    paper-fit Beta mix."""
    from datasets import Dataset

    rng = random.Random(seed + 1)
    prompts = random_prompts(count, length, vocab, seed)
    return Dataset.from_dict(
        {
            "prompt": [" ".join(f"t{i}" for i in ids) for ids in prompts],
            "pass_rate": [rng.betavariate(*PAPER_FIT) for _ in prompts],
        }
    )


def pass_rate_reward(completions: Sequence[Any], pass_rate: Sequence[float], **kwargs: Any) -> list[float]:
    """1 when a CRC32 of the completion's text, scaled to [0, 1), is below its prompt's pass rate, else 0."""
    texts = [c if isinstance(c, str) else str(c) for c in completions]
    return [float(zlib.crc32(text.encode()) / 2**32 < p) for text, p in zip(texts, pass_rate, strict=True)]


def build_model(shape: Shape, seed: int, mean_length: float | None, device: str, margin: float | None = None) -> Any:
    """A `Qwen2ForCausalLM` of `shape` with random weights from `seed`, built on `device` in float32, its end-of-
    sequence margin set for completions of about `mean_length` tokens (None: as long as the limit allows). Returns
    the model; `model.eos_margin` holds the margin used, which `margin` reuses without the calibration pass."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(shape.config())
    model.generation_config.eos_token_id = EOS
    model.generation_config.pad_token_id = PAD
    model.generation_config.bos_token_id = None
    embedding = model.get_input_embeddings().weight
    with torch.no_grad():
        embedding[:, BIAS_COORDINATE] = BIAS_VALUE
        if margin is None:
            margin = eos_margin(model, shape, None if mean_length is None else 1.0 / mean_length, seed)
        embedding[EOS, BIAS_COORDINATE] = BIAS_VALUE + margin
    model.eos_margin = margin
    return model


def eos_margin(model: Any, shape: Shape, rate: float | None, seed: int, prompts: int = 4, length: int = 64) -> float:
    """The end-of-sequence margin (added to the end-of-sequence token's bias coordinate) at which the model's mean
    probability of ending, over every position of `prompts` random prompts of `length` tokens, is `rate`
    (`FIXED_MARGIN` for None). One forward pass, then bisection on the margin: the last hidden states do not depend on
    it (no input holds `<eos>`), and the end-of-sequence logit moves by margin x the hidden state's bias coordinate,
    which must be positive at every position (else the margin would lower the score at some and raise it at others:
    an error, not a silent workload)."""
    import torch

    ids = torch.tensor(random_prompts(prompts, length, shape.vocab, seed + 2), device=model.device)
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state.reshape(-1, shape.hidden).float()
        lever = hidden[:, BIAS_COORDINATE]
        if float(lever.min()) <= 0:
            raise RuntimeError(
                f"{shape.name}: the last hidden state's bias coordinate is not positive everywhere (min "
                f"{float(lever.min()):.3g}); raise trl_ada.tools.sized_model.BIAS_VALUE ({BIAS_VALUE})"
            )
        if rate is None:
            return FIXED_MARGIN
        logits = hidden @ model.get_input_embeddings().weight.float().T
        others = torch.cat([logits[:, :EOS], logits[:, EOS + 1 :]], dim=1).logsumexp(dim=1)
        eos = logits[:, EOS]

        def mean_rate(margin: float) -> float:
            return float(torch.sigmoid(eos + margin * lever - others).mean())

        low, high = -50.0, 50.0
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if mean_rate(middle) < rate else (low, middle)
    return (low + high) / 2
