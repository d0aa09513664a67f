"""What a toy task is (:class:`ToyTask`): its reward, completion budget, warm-up, shipped warm model and datasets. The
task modules build one; the registry (:mod:`.registry`) finds them by name."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from dataclasses import dataclass

import datasets
import transformers


@dataclass(frozen=True)
class ToyTask:
    """A toy task: its reward, completion budget, warm-up, shipped warm model and benchmark datasets.

    ``train_rows(rows, seed)`` gives a benchmark's ``rows`` training rows for a seed (the order the trainer sees them
    in is TRL's seeded shuffle of these); ``heldout(n)`` the held-out prompts, the same for every seed and never
    trained on. ``folder`` names the cached model folders (with the seed and warm/cold after it).
    """

    name: str
    version: str
    folder: str
    reward: Callable[..., list[float]]
    max_completion_length: int
    warmup: Callable[[transformers.Qwen2ForCausalLM, transformers.PreTrainedTokenizerBase, int], dict]
    target_accuracy: float
    shipped_dir: pathlib.Path
    train_rows: Callable[[int, int], datasets.Dataset]
    heldout: Callable[[int], datasets.Dataset]
    # What the learning benchmark measures of a start model beyond `sample_properties`: (model, tokenizer, prompts)
    # -> a dict, for a task built as an instrument (the "columns" tasks); None for the others.
    instrument: Callable[..., dict] | None = None
    # When the warm-up stops, in words, for a task whose warm-up stops on more than `target_accuracy`.
    warmup_stop: str | None = None
    # (expressions, completion texts, completion ids) -> each sample's chain verdict ("correct" or its first error),
    # for a task whose completions work a chain a checker can follow (the "columns" tasks); None for the others.
    chain_verdicts: Callable[..., list[str]] | None = None
