"""What a Reinforce-Ada checkpoint holds beyond a Trainer's, and how it is written.

**The generation batch in flight.** GRPOTrainer generates once every `steps_per_generation * num_iterations`
training micro-steps and trains the micro-steps in between on its buffer of that batch. A Trainer checkpoint saved
inside that window does not hold the buffer, and GRPOTrainer's micro-step counter starts again at 0 on resume: the
resumed run generates the batch again and trains on the new one for a whole window, which shifts every later
generation. For Reinforce-Ada that would also put the batch's counts into the pass-rate memory twice and draw its
refills from the side stream twice. So a checkpoint saved inside a window also holds each process's buffered batch and
its micro-step count (`generation_batch_<process>.pt`), and a resumed run trains on that buffer as the uninterrupted
run did, without generating.

**Atomic saves.** A checkpoint is written under `_tmp-checkpoint-N/checkpoint-N` and renamed to `checkpoint-N` once
every process has written its part: a save that fails half-way (a full disk, an exception in `save_pretrained`, a
killed process) leaves no `checkpoint-N` for `get_last_checkpoint` or `resume_from_checkpoint=True` to pick, and the
previous checkpoint stays the latest. The leading underscore keeps the staging folder out of the Hub uploads of
`output_dir` (Trainer's push ignores `_*`) and out of checkpoint rotation (`checkpoint-*`).

**The epoch's shuffle.** GRPOTrainer's `RepeatSampler` draws each epoch's permutation from one generator seeded
once, and has no `set_epoch`. On resume, Transformers 5's Trainer skips the batches already trained in the current
epoch and relies on `set_epoch` for that epoch's shuffle: a run resumed in epoch `e > 0` would shuffle as in epoch 0
and train other prompts than the uninterrupted run (plain GRPOTrainer too). `EpochSeededSampler` adds it:
`set_epoch(e)` puts the generator where it is after `e` epochs.

**A writable `output_dir`**, checked before training starts (`output_dir_problem`).

**A checkpoint there is something to resume from**: a folder that exists (`missing_checkpoint_message`), saved before
`max_steps` (`nothing_to_train_message`: otherwise nothing is trained, where Trainer would train one step more).

**A resume Trainer can load.** transformers before 5.18 loads a several-process run's optimizer state onto
`args.device`, which on CPU is the indexed device `cpu:0`, and torch cannot restore storages there: such a resume
fails inside Trainer, with plain GRPOTrainer too. `resume_problem` says so, with the fix, before anything is loaded.

Plain values in, plain values out: the trainer passes paths, process numbers and its buffer, and writes back what is
loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import send_to_device
from packaging.version import Version
from torch.utils.data import Sampler
from transformers.trainer import TRAINER_STATE_NAME

GENERATION_BATCH_FILE = "generation_batch_{}.pt"  # one per process, by process index
STAGING_PREFIX = "_tmp-"


def output_dir_problem(output_dir: str | os.PathLike[str]) -> str | None:
    """Why training could not write into `output_dir` (it cannot be created, or a file cannot be written in it), or
    None. It tries for real: creates the folder if needed, then writes and removes an empty file, so read-only mounts,
    permissions and a path below a regular file are all caught, as root too."""
    path = os.fspath(output_dir)
    try:
        os.makedirs(path, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=path, prefix=".trl-ada-write-check-")
        os.close(handle)
        os.remove(probe)
    except OSError as error:
        reason = error.strerror or str(error)
        return (
            f"output_dir {path!r} cannot be written to ({reason}). Checkpoints, the trainer state and the model card "
            "are saved there: pass a folder you can write to (output_dir=... or --output_dir), before training starts "
            "rather than at the first save."
        )
    return None


# The first transformers whose Trainer loads a several-process CPU run's optimizer state onto plain "cpu".
CPU_RESUME_FIXED_IN = Version("5.18.0")


def resume_problem(transformers_version: Version, world_size: int, device: torch.device) -> str | None:
    """Why Trainer cannot resume a run on this setup, or None: several CPU processes under a transformers older than
    `CPU_RESUME_FIXED_IN`, which maps the optimizer state to `device` (`args.device`), when that is an indexed CPU
    device (`cpu:0`, as accelerate gives each CPU process) that torch cannot restore to."""
    indexed_cpu = device.type == "cpu" and device.index is not None
    if world_size > 1 and indexed_cpu and transformers_version < CPU_RESUME_FIXED_IN:
        return (
            f"transformers {transformers_version} cannot resume a run on {world_size} CPU processes: its Trainer "
            f"loads the optimizer state onto {device}, which torch cannot restore to, so the resume would fail inside "
            f"Trainer (plain GRPOTrainer too). Install transformers>={CPU_RESUME_FIXED_IN} "
            f"(pip install 'transformers>={CPU_RESUME_FIXED_IN}'); runs on GPUs, and on one CPU process, resume with "
            "this one."
        )
    return None


def missing_checkpoint_message(checkpoint: str | os.PathLike[str]) -> str | None:
    """The error for resuming from a folder that is not there, before anything is read from it (the pass-rate memory
    would otherwise warn that it found none, and Trainer fail after it); None when it is a folder."""
    if os.path.isdir(checkpoint):
        return None
    return (
        f"resume_from_checkpoint={os.fspath(checkpoint)!r}: no such folder. Pass a checkpoint-N folder a run saved in "
        "its output_dir, or resume_from_checkpoint=True for the latest one in args.output_dir."
    )


def saved_step(checkpoint: str | os.PathLike[str]) -> int | None:
    """The optimizer step a checkpoint was saved at (its `trainer_state.json`), None when that cannot be read."""
    try:
        with open(os.path.join(checkpoint, TRAINER_STATE_NAME)) as file:
            return int(json.load(file)["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def nothing_to_train_message(checkpoint: str | os.PathLike[str], step: int, max_steps: int) -> str | None:
    """The line a resume whose checkpoint is already at (or past) `max_steps` ends with, instead of training. Trainer
    checks `max_steps` only after a step, so it would train one step past it (plain GRPOTrainer too). None when
    there is something to train (or `max_steps` does not bound the run)."""
    if max_steps <= 0 or step < max_steps:
        return None
    return (
        f"Nothing to train: {os.fspath(checkpoint)} was saved at step {step} and max_steps is {max_steps}; the model "
        "and trainer state are the checkpoint's. Raise max_steps to train on from it."
    )


@dataclass(frozen=True)
class StagedCheckpoint:
    """The folders of one checkpoint save: `staged` (`run_dir/_tmp-checkpoint-N/checkpoint-N`), written first, and
    `final` (`run_dir/checkpoint-N`), what it becomes once complete."""

    run_dir: str
    name: str  # checkpoint-N

    @property
    def root(self) -> str:
        """What the Trainer's save code takes for the run folder while it writes."""
        return os.path.join(self.run_dir, STAGING_PREFIX + self.name)

    @property
    def staged(self) -> str:
        return os.path.join(self.root, self.name)

    @property
    def final(self) -> str:
        return os.path.join(self.run_dir, self.name)

    def clear(self) -> None:
        """Remove the staging folder: what a failed or killed save of the same step left there."""
        shutil.rmtree(self.root, ignore_errors=True)

    def publish(self) -> None:
        """Rename the complete staged checkpoint to its final name, replacing a checkpoint of the same step written
        earlier (by an earlier run in the same folder), then remove the staging folder. One process per file system
        calls this, after every process has written its files."""
        if os.path.isdir(self.final):  # os.replace cannot replace a folder that holds files: set it aside first
            os.replace(self.final, os.path.join(self.root, "replaced"))
        os.replace(self.staged, self.final)
        self.clear()


def rotate_checkpoints(
    run_dir: str,
    save_total_limit: int | None,
    best_model_checkpoint: str | None,
    legacy_rotate: Callable[..., None] | None = None,
) -> None:
    """Delete the oldest checkpoints beyond `save_total_limit` as the Trainer's save does (by modification time),
    keeping the newest and the best. `legacy_rotate` is the Trainer's own `_rotate_checkpoints` method where the
    installed transformers has one (5.0 does); later releases (5.17 on) have the module-level function instead."""
    if legacy_rotate is not None:
        legacy_rotate(use_mtime=True, output_dir=run_dir)
        return
    from transformers.trainer_utils import rotate_checkpoints as rotate

    rotate(
        output_dir=run_dir,
        save_total_limit=save_total_limit,
        best_model_checkpoint=best_model_checkpoint,
        use_mtime=True,
    )


def save_generation_batch(
    directory: str | os.PathLike[str], process_index: int, step: int, generate_every: int, buffered: list[dict]
) -> None:
    """Write this process's buffered generation batch (GRPOTrainer's `_buffered_inputs`: one dict of tensors per
    micro-step slice) and its micro-step count `step` into a checkpoint folder."""
    state = {"step": step, "generate_every": generate_every, "buffered_inputs": buffered}
    torch.save(state, os.path.join(directory, GENERATION_BATCH_FILE.format(process_index)))


def load_generation_batch(
    checkpoint: str | os.PathLike[str], num_processes: int, process_index: int, device: torch.device | str
) -> dict[str, Any] | None:
    """What `save_generation_batch` wrote for this process (tensors on `device`), or None when the checkpoint was
    saved between generation batches. Raises when another number of processes wrote it: each process's buffer holds
    its own rows."""
    found = [name for name in os.listdir(checkpoint) if _is_generation_batch_file(name)]
    if not found:
        return None
    if len(found) != num_processes:
        raise ValueError(
            f"{checkpoint} was saved inside a generation batch by {len(found)} processes; this run has "
            f"{num_processes}. Resume with as many processes as wrote the checkpoint (each holds its own rows of the "
            "batch), or from a checkpoint saved between generation batches."
        )
    path = os.path.join(checkpoint, GENERATION_BATCH_FILE.format(process_index))
    # Loaded on the CPU first: torch.load cannot map to an indexed CPU device ("cpu:0", accelerate's on gloo).
    return send_to_device(torch.load(path, map_location="cpu", weights_only=True), device)


def _is_generation_batch_file(name: str) -> bool:
    prefix, suffix = GENERATION_BATCH_FILE.split("{}")
    return name.startswith(prefix) and name.endswith(suffix) and name[len(prefix) : -len(suffix)].isdigit()


class EpochSeededSampler(Sampler):
    """GRPOTrainer's training sampler (`RepeatSampler`) with a `set_epoch`, which Trainer calls (through accelerate)
    before every epoch, on resume too: it reseeds the sampler's generator with the run's seed and draws the
    permutations of the epochs before `epoch`, so epoch `e` shuffles the same whether the run got there uninterrupted
    or resumed into it. In an uninterrupted run that is the state the generator already had: nothing changes."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[int]:
        return iter(self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)

    def __getattr__(self, name: str) -> Any:  # `generator`, `shuffle`, ...: accelerate reads the sampler's generator
        if name == "sampler":
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def set_epoch(self, epoch: int) -> None:
        sampler = self.sampler
        if not getattr(sampler, "shuffle", False) or getattr(sampler, "seed", None) is None:
            return  # in order, or seeded by chance: nothing to reproduce
        sampler.generator.manual_seed(sampler.seed)
        for _ in range(epoch):  # one permutation per epoch, as RepeatSampler.__iter__ draws them
            torch.randperm(sampler.num_samples, generator=sampler.generator)
