"""Torch threads for the toy model: one, unless ``OMP_NUM_THREADS`` says otherwise."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

# One torch thread for everything that trains or samples the toy model. Its matrices (hidden size 128, batches of
# tens of rows) are far too small to split across threads: OpenMP workers spin waiting for work, and when another
# process holds one of 2 cores a 2-thread run crawls (benchmarks/README.md#threads-for-the-toy-model).
TOY_NUM_THREADS = 1


def toy_num_threads() -> int:
    """Torch threads for the toy model: ``OMP_NUM_THREADS`` when it is set, else :data:`TOY_NUM_THREADS` (1)."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else TOY_NUM_THREADS


def use_toy_threads() -> int:
    """Set torch's intra-op threads for the toy model (see :func:`toy_num_threads`) and return the count."""
    threads = toy_num_threads()
    torch.set_num_threads(threads)
    return threads


@contextlib.contextmanager
def toy_threads() -> Iterator[int]:
    """Run a block on the toy model's thread count (:func:`toy_num_threads`), then restore the caller's count."""
    previous = torch.get_num_threads()
    try:
        yield use_toy_threads()
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def num_threads(n: int) -> Iterator[None]:
    """Run a block on ``n`` torch threads, then restore the caller's count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
