"""The trainer's checkpoint and resume seams, a base class of `ReinforceAdaTrainer` (these are its methods, kept in a
module of their own): each checkpoint written under a temporary name and renamed once complete, with the pass-rate
memory, the side stream's position and a generation batch in flight (`trl_ada.adapter.checkpoints` holds what is
written and how); `train` checks `output_dir` and restores them on resume; `_get_train_sampler` positions a resumed
run's sampler at its epoch. Like `trainer.py`, it reads and overrides GRPOTrainer's private names
(`compat.py`'s seam list names them)."""

from __future__ import annotations

import os
from typing import Any

from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import TrainerState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, TrainOutput, get_last_checkpoint
from transformers.utils import logging
from trl import GRPOTrainer

from ..core.prompt_stream import save_stream_states
from .checkpoints import (
    EpochSeededSampler,
    StagedCheckpoint,
    load_generation_batch,
    missing_checkpoint_message,
    nothing_to_train_message,
    output_dir_problem,
    resume_problem,
    rotate_checkpoints,
    save_generation_batch,
    saved_step,
)
from .compat import TRANSFORMERS_VERSION, swapped

logger = logging.get_logger("trl_ada.adapter.trainer")  # the trainer's own logger: these are its methods
STREAM_STATE_MISSING = "refill and selection draw from a fresh stream."


class CheckpointSeams(GRPOTrainer):
    """`ReinforceAdaTrainer`'s `_save_checkpoint`, `train` and `_get_train_sampler` (see the module docstring). It
    reads the trainer's `ada_memory`, `ada_side_prompts` and `ada_collectives`, which `ReinforceAdaTrainer.__init__`
    sets."""

    def _get_train_sampler(self, dataset=None):
        """GRPOTrainer's sampler, which a resumed run positions at its epoch (`EpochSeededSampler`)."""
        return EpochSeededSampler(super()._get_train_sampler(dataset))

    def _save_checkpoint(self, model, trial) -> None:
        """Write the checkpoint under a temporary name and rename it once complete (`trl_ada.adapter.checkpoints`),
        with the pass-rate memory, the side stream's position on every process, and, when saved inside a generation
        batch, each process's buffer of that batch."""
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staged = StagedCheckpoint(self._get_output_dir(trial=trial), name)
        streams = None
        if self.ada_side_prompts is not None:  # every process calls this, so the gather is safe
            streams = self.ada_collectives.gather_objects([self.ada_side_prompts.stream.state_dict()])
        if self.args.should_save:
            staged.clear()
        self.accelerator.wait_for_everyone()  # nobody writes into the staging folder before it is cleared
        try:
            os.makedirs(staged.staged, exist_ok=True)
            if self.args.should_save:
                self.ada_memory.save(staged.staged)
                if streams is not None:
                    save_stream_states(staged.staged, streams)
            generate_every = self.args.steps_per_generation * self.num_iterations
            if self._step % generate_every and self._buffered_inputs is not None:  # inside GRPOTrainer's window
                index = self.accelerator.process_index
                save_generation_batch(staged.staged, index, self._step, generate_every, self._buffered_inputs)
            # The Trainer (and TRL after it) writes into the staging folder; the Hub push waits for the rename.
            self._get_output_dir = lambda trial=None: staged.root
            with swapped(self.args, "push_to_hub", False):
                super()._save_checkpoint(model, trial)
        except BaseException:
            if self.args.should_save:
                staged.clear()
            raise
        finally:
            self.__dict__.pop("_get_output_dir", None)
        self._publish_checkpoint(staged)

    def _publish_checkpoint(self, staged: StagedCheckpoint) -> None:
        """Rename a complete staged checkpoint once every process has written its files, then rotate and push as the
        Trainer's save would have. Every process returns once the checkpoint has its final name."""
        if self.state.best_model_checkpoint == staged.staged:  # the Trainer recorded the folder it wrote to
            self.state.best_model_checkpoint = staged.final
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            if self.state.best_model_checkpoint == staged.final:
                self.state.save_to_json(os.path.join(staged.staged, TRAINER_STATE_NAME))
            staged.publish()
            legacy = getattr(self, "_rotate_checkpoints", None)  # transformers releases before the function
            rotate_checkpoints(staged.run_dir, self.args.save_total_limit, self.state.best_model_checkpoint, legacy)
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_local_main_process and os.path.isdir(staged.staged):
            staged.publish()  # a node sharing no file system with a saving process keeps its files, as with Trainer
        if self.args.push_to_hub:
            self._push_from_checkpoint(staged.final)

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, ignore_keys_for_eval=None, **kwargs):
        """[`~transformers.Trainer.train`], after checking that `output_dir` can be written to (on every process: each
        writes its part of a checkpoint). When resuming, it first checks that the checkpoint is a folder and that
        Trainer can load it here (`resume_problem`); from a checkpoint already at `max_steps` it trains nothing
        (Trainer would train one step more) and says so in one line; else it restores the pass-rate memory, the side
        stream of refill and prompt selection, and the generation batch the checkpoint was saved inside, on every
        process. Done here rather than in `_load_from_checkpoint`, which DeepSpeed runs never call. A checkpoint
        written without the memory leaves it empty, with a warning."""
        self.ada_collectives.raise_everywhere(output_dir_problem(self.args.output_dir), OSError)
        checkpoint = resume_from_checkpoint
        if checkpoint is True:  # resolved as Trainer.train does; it raises its own error when there is none
            checkpoint = get_last_checkpoint(self.args.output_dir)
        if isinstance(checkpoint, str | os.PathLike):
            self.ada_collectives.raise_everywhere(missing_checkpoint_message(checkpoint), FileNotFoundError)
            problem = resume_problem(TRANSFORMERS_VERSION, self.args.world_size, self.args.device)
            self.ada_collectives.raise_everywhere(problem, RuntimeError)
            step = saved_step(checkpoint)
            done = None if step is None else nothing_to_train_message(checkpoint, step, self.args.max_steps)
            if done is not None:  # Trainer would train one step more: keep the checkpoint as it is, train none
                self._load_from_checkpoint(os.fspath(checkpoint))
                self.state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
                if self.accelerator.is_main_process:
                    logger.warning(done)
                return TrainOutput(self.state.global_step, 0.0, {})
            if not self.ada_memory.load(checkpoint):
                logger.warning(f"No pass-rate memory in {checkpoint}: every prompt starts again from the prior.")
            collectives = self.ada_collectives
            side, where = self.ada_side_prompts, (checkpoint, collectives.num_processes, collectives.process_index)
            if side is not None and not side.load_stream(*where):
                logger.warning(f"No prompt-stream state in {checkpoint}: {STREAM_STATE_MISSING}")
            self._load_generation_batch(load_generation_batch(*where, self.accelerator.device))
        return super().train(resume_from_checkpoint, trial, ignore_keys_for_eval, **kwargs)

    def _load_generation_batch(self, saved: dict[str, Any] | None) -> None:
        """Give GRPOTrainer back the generation batch a checkpoint was saved inside, and its micro-step count, so it
        trains the rest of that batch as the uninterrupted run did instead of generating it again."""
        if saved is None:
            return
        slices, generate_every = self.args.steps_per_generation, self.args.steps_per_generation * self.num_iterations
        if saved["generate_every"] != generate_every or len(saved["buffered_inputs"]) != slices:
            logger.warning(
                "The checkpoint was saved inside a generation batch made with other steps_per_generation or "
                "num_iterations: GRPOTrainer generates a new batch, and the pass-rate memory and the side stream take "
                "it on top of the saved one."
            )
            return
        self._step, self._buffered_inputs = saved["step"], saved["buffered_inputs"]
