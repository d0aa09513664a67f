"""A tiny Qwen2-VL model and processor built offline, for vision-language training tests on CPU.

The tokenizer is the toy task's byte-level BPE (`trl_ada.toy.build_toy_tokenizer`) with Qwen2-VL's vision tokens
added and a ChatML template that renders an image content part as `<|vision_start|><|image_pad|><|vision_end|>`. The
image processor resizes every image to 28x28 pixels: a 2x2 grid of 14-pixel patches that the vision tower merges
into a single `<|image_pad|>` token.

Transformers 5 cannot build or load a `Qwen2VLProcessor` without torchvision (its video processor needs it, even
for image-only inputs), and the test environment has none. `ImageOnlyQwen2VLProcessor` is Qwen2VLProcessor without
the video processor; importing this module registers it with `AutoProcessor`, so a folder written by
`save_tiny_vlm` loads the way TRL loads a model name (`AutoModelForImageTextToText` and
`AutoProcessor.from_pretrained(folder)`), e.g. when the folder is passed to a trainer as a string.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import transformers
from transformers import (
    AutoProcessor,
    PretrainedConfig,
    ProcessorMixin,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessorPil,
    Qwen2VLProcessor,
)

from trl_ada.toy import build_toy_tokenizer

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]

# Qwen2-VL's template, reduced: string or content-part messages, image and video parts as their placeholder tokens.
VLM_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'video' %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
    """Qwen2VLProcessor with an image processor and a tokenizer only: no video processor, hence no torchvision."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token, self.video_token = "<|image_pad|>", "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)


class _ImageOnlyQwen2VLKey(PretrainedConfig):
    """Only a key to register the processor under: AutoProcessor finds it by the class name the folder records."""

    model_type = "image_only_qwen2_vl"


AutoProcessor.register(_ImageOnlyQwen2VLKey, ImageOnlyQwen2VLProcessor, exist_ok=True)

_PATCH = 14
_MERGE = 2
_SIDE = _PATCH * _MERGE  # every image is resized to 28x28: one merged image token


def build_tiny_vlm_processor() -> ImageOnlyQwen2VLProcessor:
    """The toy tokenizer with Qwen2-VL's vision tokens and template, and an image processor sized for 28x28."""
    tokenizer = build_toy_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *VISION_TOKENS]})
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    tokenizer.model_max_length = 256
    image_processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": _SIDE * _SIDE, "longest_edge": _SIDE * _SIDE},
        patch_size=_PATCH,
        merge_size=_MERGE,
        temporal_patch_size=2,
    )
    return ImageOnlyQwen2VLProcessor(image_processor, tokenizer, chat_template=VLM_CHAT_TEMPLATE)


def build_tiny_vlm(processor: ImageOnlyQwen2VLProcessor, seed: int = 0) -> Qwen2VLForConditionalGeneration:
    """A randomly initialised Qwen2-VL (2 text layers of width 64, head_dim 16, one vision block of width 32)."""
    tokenizer = processor.tokenizer
    token_id = tokenizer.convert_tokens_to_ids
    head_dim = 16
    text_config = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": head_dim,
        "max_position_embeddings": 256,
        # Multimodal rotary sections (temporal, height, width) split the head_dim / 2 frequencies.
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        "bos_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "tie_word_embeddings": True,
    }
    assert sum(text_config["rope_parameters"]["mrope_section"]) * 2 == head_dim
    vision_config = {
        "depth": 1,
        "embed_dim": 32,
        "hidden_size": text_config["hidden_size"],  # the merger's output width: the text model's
        "num_heads": 2,
        "mlp_ratio": 2,
        "patch_size": _PATCH,
        "spatial_merge_size": _MERGE,
        "temporal_patch_size": 2,
    }
    config = Qwen2VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=token_id("<|image_pad|>"),
        video_token_id=token_id("<|video_pad|>"),
        vision_start_token_id=token_id("<|vision_start|>"),
        vision_end_token_id=token_id("<|vision_end|>"),
        tie_word_embeddings=True,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.pad_token_id
    return model


def save_tiny_vlm(folder: str | os.PathLike[str], seed: int = 0) -> Path:
    """Build the model and processor and save both to `folder`; returns it."""
    folder = Path(folder)
    processor = build_tiny_vlm_processor()
    build_tiny_vlm(processor, seed).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def load_tiny_vlm(folder: str | os.PathLike[str]) -> tuple[transformers.PreTrainedModel, transformers.ProcessorMixin]:
    """Load a saved folder as TRL does from a model name."""
    model = transformers.AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32)
    processor = transformers.AutoProcessor.from_pretrained(folder, padding_side="left", truncation_side="left")
    return model, processor
