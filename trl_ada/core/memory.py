"""Per-prompt pass-rate memory across training steps, for Reinforce-Ada-Est.

Each prompt keeps two decayed counts, `N_pos` (positive completions) and `N_total` (scored completions). Every time
the prompt is sampled, both decay and take in the new counts, `N <- decay * N + new`, and the estimate is the mean of
the Beta(alpha + N_pos, beta + N_total - N_pos) posterior:

    p_hat = (alpha + N_pos) / (alpha + beta + N_total)

Defaults follow the authors' code: alpha=1, beta=16 (a prompt never seen is assumed hard, p_hat = 1/17) and
decay=0.9. Decay is applied per update of that prompt, not per training step: a prompt that is not drawn for a while
keeps its counts, as in the authors' code.

Growth: one record (a short string key and two floats) per distinct prompt ever updated. With `max_prompts` set, the
least recently *updated* prompt is evicted when a new one would exceed the cap, and an evicted prompt falls back to
the prior.

Multi-process: there is no merge. Every rank holds a full copy and must apply the same updates in the same order
(gather each step's counts from all ranks, then call `update_many` with the gathered list everywhere); reads
(`p_hat`, `p_hat_many`) never change the state, so ranks reading different prompts stay identical.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

_KEY_DIGEST_BYTES = 16
STATE_FILE = "pass_rate_memory.json"


def prompt_key(prompt: Sequence[int] | np.ndarray | torch.Tensor | str | int) -> str:
    """A stable identity for a prompt: a dataset id (`str` or `int`) or the prompt's token ids.

    Token ids (a list, a NumPy array or a 1-D torch tensor, *without* padding) are hashed with BLAKE2b over their
    little-endian int64 bytes, so the key is the same across processes, machines and Python runs (unlike `hash()`).
    The kinds live in separate namespaces (`"id:..."`, `"tok:..."`, and `"txt:..."` for `prompt_text_key`), so an id
    never collides with a digest.
    """
    if isinstance(prompt, bool):
        raise TypeError("prompt_key got a bool; pass a dataset id (str or int) or a sequence of token ids.")
    if isinstance(prompt, str | int):
        return f"id:{prompt}"
    if hasattr(prompt, "detach"):  # torch tensor, without importing torch here
        prompt = prompt.detach().cpu().numpy()
    ids = np.asarray(prompt)
    if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
        raise TypeError(
            f"prompt_key expects a dataset id or a 1-D sequence of integer token ids, got shape {ids.shape} and "
            f"dtype {ids.dtype}. Pass one prompt's unpadded ids."
        )
    digest = hashlib.blake2b(ids.astype("<i8").tobytes(), digest_size=_KEY_DIGEST_BYTES).hexdigest()
    return f"tok:{digest}"


def prompt_text_key(prompt: str | list[dict[str, Any]]) -> str:
    """A stable identity for a prompt as the trainer sees it before tokenisation: a string, or a conversation (a
    list of `{"role": ..., "content": ...}` messages). BLAKE2b of its canonical JSON (sorted keys, UTF-8), so the
    key is independent of dict order, process and Python run. Use it when the dataset has no id column; with a fixed
    chat template it identifies the same prompts as their token ids would.

    Values JSON cannot write count by their content (see `_json_fallback`): an image part of a vision-language
    prompt (`{"type": "image", "image": <PIL.Image>}`) by its pixels, so the same text with another image is another
    prompt, and the same pixels in another image object are the same one. Prompts made only of JSON values keep the
    key they always had.
    """
    try:
        text = json.dumps(prompt, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_json_fallback)
    except TypeError as error:
        raise TypeError(f"prompt_text_key needs a string or JSON-like messages: {error}") from error
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=_KEY_DIGEST_BYTES).hexdigest()
    return f"txt:{digest}"


def memory_key(prompt: Any, row: dict[str, Any], id_column: str | None = None, by_row: bool = False) -> str:
    """A training prompt's identity in the memory: its `id_column` value when the config names one, else its whole
    dataset row when `by_row` (an environment's `reset` gets the row, so the row names the task), else its prompt."""
    if id_column is not None:
        return prompt_key(row[id_column])
    return prompt_text_key(row if by_row else prompt)


def memory_updates(keys: Sequence[str], pools: Sequence[Any]) -> list[tuple[str, int, int]]:
    """`update_many`'s `(key, positives, scored)` for each sampled pool (`trl_ada.core.engine.Pool`)."""
    return [
        (key, pool.num_positive, pool.num_positive + pool.num_negative) for key, pool in zip(keys, pools, strict=True)
    ]


def _json_fallback(value: Any) -> Any:
    """A stand-in for a value `json` cannot write, the same in every process and run: a PIL image is a SHA-256 of
    its mode, size, palette and pixels; an array, a tensor or bytes a SHA-256 of its contents; a NumPy scalar its
    value; a set its sorted members; anything else its type and `repr`, unless that `repr` is `object`'s own, which
    holds a memory address (then TypeError)."""
    if isinstance(value, np.generic):
        return value.item()
    if all(hasattr(value, name) for name in ("mode", "size", "tobytes")):  # a PIL image, without importing PIL
        palette = bytes(value.getpalette() or []) if value.mode in ("P", "PA") else b""
        header = f"image:{value.mode}:{value.size[0]}x{value.size[1]}:".encode()
        return {"__sha256__": hashlib.sha256(header + palette + value.tobytes()).hexdigest()}
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        header = f"array:{value.dtype.str}:{value.shape}:".encode()
        return {"__sha256__": hashlib.sha256(header + np.ascontiguousarray(value).tobytes()).hexdigest()}
    if isinstance(value, bytes | bytearray):
        return {"__sha256__": hashlib.sha256(b"bytes:" + bytes(value)).hexdigest()}
    if isinstance(value, set | frozenset):
        return {"__set__": sorted(json.dumps(v, sort_keys=True, default=_json_fallback) for v in value)}
    if type(value).__repr__ is object.__repr__:
        raise TypeError(f"{type(value).__name__} has no content to key it by (its repr is a memory address)")
    return {"__repr__": f"{type(value).__module__}.{type(value).__qualname__}:{value!r}"}


class PassRateMemory:
    """Decayed positive/total counts per prompt key, with a Beta(alpha, beta) prior on the pass rate.

    Args:
        alpha: Prior pseudo-count of positives (> 0).
        beta: Prior pseudo-count of negatives (> 0).
        decay: Factor in [0, 1] applied to a prompt's counts each time it is updated; 1 never forgets, 0 keeps only
            the latest step.
        max_prompts: Keep at most this many prompts, evicting the least recently updated; `None` for no cap.
    """

    def __init__(self, alpha: float = 1.0, beta: float = 16.0, decay: float = 0.9, max_prompts: int | None = None):
        if not (alpha > 0 and beta > 0 and math.isfinite(alpha) and math.isfinite(beta)):
            raise ValueError(f"alpha and beta must be finite and > 0 (Beta prior pseudo-counts), got {alpha}, {beta}.")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1] (1 keeps all history), got {decay}.")
        if max_prompts is not None and (isinstance(max_prompts, bool) or not max_prompts >= 1):
            raise ValueError(f"max_prompts must be a positive integer or None (no cap), got {max_prompts!r}.")
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.decay = float(decay)
        self.max_prompts = max_prompts
        # key -> [N_pos, N_total], oldest update first
        self._counts: OrderedDict[str, list[float]] = OrderedDict()

    @property
    def prior_mean(self) -> float:
        """The estimate for a prompt never seen: alpha / (alpha + beta)."""
        return self.alpha / (self.alpha + self.beta)

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, key: str) -> bool:
        return key in self._counts

    def counts(self, key: str) -> tuple[float, float]:
        """The decayed `(N_pos, N_total)` of a prompt; `(0.0, 0.0)` if never seen (or evicted)."""
        n_pos, n_total = self._counts.get(key, (0.0, 0.0))
        return n_pos, n_total

    def records(self) -> list[tuple[float, float]]:
        """Every prompt's decayed `(N_pos, N_total)`, oldest update first."""
        return [(n_pos, n_total) for n_pos, n_total in self._counts.values()]

    def p_hat(self, key: str) -> float:
        """Posterior-mean pass rate `(alpha + N_pos) / (alpha + beta + N_total)`. Does not change the state."""
        n_pos, n_total = self.counts(key)
        return (self.alpha + n_pos) / (self.alpha + self.beta + n_total)

    def p_hat_many(self, keys: Iterable[str]) -> list[float]:
        """`p_hat` of each key, in order."""
        return [self.p_hat(key) for key in keys]

    def update(self, key: str, num_positive: float, num_total: float) -> None:
        """Record one sampling of a prompt: `N <- decay * N + new` for both counts, and mark it most recently used.

        `num_total` counts the *scored* completions drawn for the prompt (leave out those no reward could score);
        an update with `num_total == 0` carries no evidence and changes nothing.
        """
        _check_counts(key, num_positive, num_total)
        if num_total == 0:
            return
        n_pos, n_total = self._counts.pop(key, (0.0, 0.0))
        self._counts[key] = [self.decay * n_pos + float(num_positive), self.decay * n_total + float(num_total)]
        if self.max_prompts is not None and len(self._counts) > self.max_prompts:
            self._counts.popitem(last=False)

    def update_many(self, updates: Iterable[tuple[str, float, float]]) -> None:
        """Apply one step's `(key, num_positive, num_total)` records.

        Records that share a key are summed first, so a prompt decays once per step however many times (or on
        however many ranks) it was drawn; distinct keys are applied in order of first appearance, which fixes the
        eviction order.
        """
        merged: dict[str, list[float]] = {}
        for key, num_positive, num_total in updates:
            _check_counts(key, num_positive, num_total)
            total = merged.setdefault(key, [0.0, 0.0])
            total[0] += num_positive
            total[1] += num_total
        for key, (num_positive, num_total) in merged.items():
            self.update(key, num_positive, num_total)

    def state_dict(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot: the records, oldest update first. Floats survive `json` exactly."""
        return {"records": [[key, n_pos, n_total] for key, (n_pos, n_total) in self._counts.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the records with those of `state_dict()`. The prior, decay and cap stay those of this object (the
        counts do not depend on the prior); if the cap is smaller than the saved memory, the oldest are evicted."""
        if not isinstance(state, dict) or "records" not in state:
            raise ValueError("PassRateMemory state must be a dict with a 'records' list, as made by state_dict().")
        counts: OrderedDict[str, list[float]] = OrderedDict()
        for record in state["records"]:
            if len(record) != 3:
                raise ValueError(f"A memory record must be [key, N_pos, N_total], got {record!r}.")
            key, n_pos, n_total = record
            _check_counts(key, n_pos, n_total)
            if key in counts:
                raise ValueError(f"Duplicate key {key!r} in the memory state.")
            counts[key] = [float(n_pos), float(n_total)]
        while self.max_prompts is not None and len(counts) > self.max_prompts:
            counts.popitem(last=False)
        self._counts = counts

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write `state_dict()` as `directory/pass_rate_memory.json` (e.g. a Trainer checkpoint folder)."""
        path = Path(directory) / STATE_FILE
        path.write_text(json.dumps(self.state_dict()))
        return path

    def load(self, directory: str | os.PathLike[str]) -> bool:
        """Load what `save` wrote to `directory`. Returns False, leaving the memory as is, if there is no such file
        (a checkpoint written without the memory)."""
        path = Path(directory) / STATE_FILE
        if not path.is_file():
            return False
        self.load_state_dict(json.loads(path.read_text()))
        return True

    def __repr__(self) -> str:
        return (
            f"PassRateMemory(alpha={self.alpha}, beta={self.beta}, decay={self.decay}, "
            f"max_prompts={self.max_prompts}, prompts={len(self)})"
        )


def _check_counts(key: Any, num_positive: float, num_total: float) -> None:
    if not isinstance(key, str):
        raise TypeError(f"Memory keys are strings (see prompt_key), got {type(key).__name__}: {key!r}.")
    if not (math.isfinite(num_positive) and math.isfinite(num_total) and 0 <= num_positive <= num_total):
        raise ValueError(
            f"Counts for {key!r} must satisfy 0 <= num_positive <= num_total (finite), got {num_positive}, "
            f"{num_total}. Count only completions a reward could score."
        )
