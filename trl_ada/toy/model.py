"""The toy model and tokenizer every toy task shares: a byte-level BPE tokenizer with a ChatML template (every digit
one token) and a ~0.53M-parameter Qwen2, both built locally (no model hub)."""

from __future__ import annotations

import random

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from .arithmetic import sample_problem

TOY_SYSTEM = None  # no system prompt: shorter prompts, and nothing for the tiny model to attend past

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

# Qwen2's pre-tokenizer regex. transformers 5 reloads any qwen2 model's tokenizer as Qwen2Tokenizer, which rebuilds
# this exact pipeline (Split on the regex, then ByteLevel without its own regex) around the saved vocab and merges.
# Training with the same pipeline keeps the in-memory and the reloaded tokenizer identical, and its `\p{N}` branch
# isolates every digit, so no merge can ever join two digits.
_QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Qwen-style ChatML (system messages are rendered if given, but none is added by default).
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

_MAX_POSITIONS = 128


def build_toy_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """Train a tiny byte-level BPE tokenizer offline and wrap it with ChatML special tokens and chat template.

    The vocabulary is the 256 byte symbols, the three special tokens and a handful of merges (role names): about
    270 tokens. Digits are always single tokens. ``<|im_end|>`` is the EOS token and ``<|endoftext|>`` the padding.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()

    # The corpus is the chat-formatted task text with the special tokens left out: the BPE trainer would otherwise
    # spend merges on fragments such as "<|" and "_start" that never occur outside the (atomic) special tokens.
    rng = random.Random(12345)
    corpus = []
    for _ in range(400):
        level = rng.choice((1, 2, 3))
        expression, answer = sample_problem(rng, level)
        corpus.append(f"system\nuser\n{expression}\nassistant\n{answer}\n")
    trainer = trainers.BpeTrainer(
        vocab_size=512,  # an upper bound: the corpus only supports a few merges
        min_frequency=2,
        special_tokens=[PAD_TOKEN, IM_START, IM_END],  # ids 0, 1, 2
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, so any text round-trips
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)

    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        additional_special_tokens=[IM_START],
        chat_template=CHATML_TEMPLATE,
        model_max_length=_MAX_POSITIONS,
    )


def build_toy_model(tokenizer: transformers.PreTrainedTokenizerBase, seed: int = 0) -> transformers.Qwen2ForCausalLM:
    """Build a randomly initialised ~0.53M-parameter Qwen2 model sized to ``tokenizer`` (float32).

    head_dim is 32 because vLLM's CPU attention rejects smaller head sizes, so the same folder also loads there.
    The global torch RNG of the caller is left untouched.
    """
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        head_dim=32,
        num_key_value_heads=2,
        intermediate_size=512,
        tie_word_embeddings=True,
        max_position_embeddings=_MAX_POSITIONS,
        # Qwen has no BOS token in the text; like Qwen's configs, point bos at <|endoftext|>.
        bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = config.bos_token_id
    return model
