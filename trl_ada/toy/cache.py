"""The toy model folders: the warm models shipped with the package, and the ones built and cached on first use."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import torch

from .model import build_toy_model, build_toy_tokenizer
from .registry import toy_task
from .threads import num_threads
from .warmup import _WARMUP_NUM_THREADS, _log

# The shipped warm models are for this seed (each task's ToyTask.shipped_dir).
SHIPPED_WARM_SEED = 0

_MARKER = "toy_info.json"  # written last: its presence means the folder is complete


def _cache_root(cache_dir: str | os.PathLike | None) -> pathlib.Path:
    if cache_dir is not None:
        return pathlib.Path(cache_dir)
    if os.environ.get("TRL_ADA_CACHE"):
        return pathlib.Path(os.environ["TRL_ADA_CACHE"])
    return pathlib.Path.home() / ".cache" / "trl_ada"


@contextlib.contextmanager
def _file_lock(path: pathlib.Path) -> Iterator[None]:
    """Serialise builders of the same folder across processes, so concurrent callers train once, not N times.

    Correctness does not depend on it (the folder appears atomically); without fcntl (Windows) it is a no-op.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def toy_model_dir(
    cache_dir: str | os.PathLike | None = None,
    warmup: bool = True,
    seed: int = 0,
    prebuilt: bool = True,
    task: str = "arithmetic",
) -> str:
    """Return the path (a ``str``) of a folder holding the saved toy model and tokenizer for ``task``, building it on
    first use.

    The folder loads with ``AutoModelForCausalLM.from_pretrained(path)`` and ``AutoTokenizer.from_pretrained(path)``,
    and the path goes wherever a model name goes: ``GRPOTrainer(toy_model_dir(), ...)`` (TRL's trainer takes a ``str``
    or a model, not a ``pathlib.Path``), ``--model_name_or_path``. Wrap it in ``pathlib.Path`` to look inside.
    ``warmup=False`` gives the untrained random model; ``warmup=True`` the task's supervised warm-up, which stops at
    the first check whose sampled held-out accuracy reaches the task's target (0.40 for "arithmetic"). For
    ``warmup=True, seed=0`` that is the folder shipped with the package (the task's ``shipped_dir``:
    ``trl_ada/toy_warm`` for "arithmetic"; read-only, the same on every machine) unless ``prebuilt=False``.

    Built folders live under ``cache_dir``, else ``$TRL_ADA_CACHE``, else ``~/.cache/trl_ada``, and are named after
    the task's version, the seed and the warm-up flag (e.g. ``toy-v2-seed0-warm``, ``toy-columns-c1-seed3-warm``).
    A folder is written to a temporary sibling and renamed into place with the completion marker already inside, so
    concurrent processes and interrupted runs never see a half-written folder.
    """
    return str(_toy_model_path(cache_dir, warmup, seed, prebuilt, task))


def _toy_model_path(
    cache_dir: str | os.PathLike | None, warmup: bool, seed: int, prebuilt: bool, task: str
) -> pathlib.Path:
    spec = toy_task(task)
    if warmup and seed == SHIPPED_WARM_SEED and prebuilt:
        if not (spec.shipped_dir / _MARKER).is_file():
            raise FileNotFoundError(
                f"the shipped warm toy model is missing from {spec.shipped_dir}: reinstall trl-ada, or build it with "
                f"toy_model_dir(prebuilt=False, task={task!r})"
            )
        return spec.shipped_dir
    root = _cache_root(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"{spec.folder}-seed{seed}-{'warm' if warmup else 'cold'}"
    if (target / _MARKER).is_file():
        return target

    with _file_lock(root / f".{target.name}.lock"):
        if (target / _MARKER).is_file():  # another process finished while we waited for the lock
            return target
        if target.exists():  # incomplete leftover (not produced by this code's atomic rename): replace it
            shutil.rmtree(target)

        start = time.perf_counter()
        tokenizer = build_toy_tokenizer()
        model = build_toy_model(tokenizer, seed=seed)
        info: dict[str, Any] = {"version": spec.version, "seed": seed, "warmup": warmup}
        if task != "arithmetic":
            info["task"] = task
        if warmup:
            stops = spec.warmup_stop or f"accuracy >= {spec.target_accuracy}"
            _log(f"building {target} (supervised warm-up, stops at {stops})")
            with num_threads(_WARMUP_NUM_THREADS), torch.random.fork_rng(devices=[]):
                info |= spec.warmup(model, tokenizer, seed)
            _log(f"warm-up done: {info['steps']} steps, accuracy {info['check_accuracy']:.3f}, {info['seconds']:.0f}s")

        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=root))
        try:
            tmp.chmod(0o755)  # mkdtemp creates it private; the cache may be shared
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            info["build_seconds"] = round(time.perf_counter() - start, 2)
            (tmp / _MARKER).write_text(json.dumps(info, indent=2) + "\n")
            os.replace(tmp, target)  # atomic; fails if target exists (another process won a race the lock missed)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (target / _MARKER).is_file():
                raise
    return target
