from __future__ import annotations

import json
import os
import random
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import gather, gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
from transformers.utils import logging
from trl import GRPOTrainer
from trl.trainer.utils import get_config_model_id

from .advantages import (
    difficulty_weights,
    nan_mean_std,
    normalize_then_sum,
    normalized_advantages,
    odc_weights,
    total_reward,
)
from .allocation import allocate
from .backends.base import TokenBackend
from .backends.rounds import sample_in_rounds
from .backends.scoring import TOOL_METRICS, log_step_tool_calls, metric_marks
from .backends.streaming import sample_streaming
from .checks import RewardFunctionError, RewardGuard, check_reward_columns, excerpt
from .config import ReinforceAdaConfig
from .engine import Pool, RefillFn, Request, SamplingResult, Tally, downsample, has_signal
from .memory import prompt_key, prompt_text_key
from .metrics import Moments, reward_metrics, reward_moments
from .prompt_stream import PromptStream, SidePrompts

STREAM_STATE_FILE = "prompt_stream.json"

logger = logging.get_logger(__name__)


class ReinforceAdaTrainer(GRPOTrainer):
    """
    Trainer for Reinforce-Ada (https://huggingface.co/papers/2510.04996): GRPO with adaptive sampling.

    Instead of `num_generations` completions per prompt, each training step samples in rounds: every round draws
    `samples_per_round` more completions (or, with `round_sizing="posterior"`, a number sized from each prompt's
    counts so far) for the prompts still *active*, scores them, and retires a prompt once its exit rule holds or its
    budget is spent. Each prompt's pool is then downsampled to `num_generations` completions (half positive where it
    can) and the advantages use the whole pool's statistics. With `sampling_strategy="estimate"` (Reinforce-Ada-Est)
    there is one round per step instead, its per-prompt sizes split from a budget by each prompt's pass rate in a
    memory kept across steps (`ada_memory`, identical on every process, saved in every checkpoint and restored by
    `train(resume_from_checkpoint=...)`). The memory is updated under every strategy.

    Differences from [`~trl.GRPOTrainer`], all in training mode (evaluation is unchanged):

    - `_generate` runs the rounds, each through GRPOTrainer's own `_generate` (transformers, vLLM colocate or vLLM
      server), or, with `rollout_schedule="streaming"`, streams through an engine with continuous batching
      (`trl_ada.backends`), and returns exactly `num_generations` rows per prompt, in the original row order. With
      `prompt_selection` or `refill`, a group of rows may end up holding another prompt of the training set, drawn
      from a side stream (`trl_ada.prompt_stream`); `_generate` then rewrites that group's entries in the step's
      prompts and inputs (the lists GRPOTrainer goes on to log and to hand to reward functions).
    - With `tools` or `environment_factory`, each round first rebuilds GRPOTrainer's per-rollout state (environment
      instances and their `reset`, tool dicts) for that round's rollouts (`_prepare_rollouts`), so TRL's tool loop
      runs on every rollout; `_tool_call_loop` only counts its calls, for one `tools/*` entry per step.
    - `_generate_single_turn` hands streamed completions to GRPOTrainer's `_generate` for decoding and logging.
    - `_calculate_rewards` returns the rewards already computed during sampling: nothing is scored twice.
    - `_generate_and_score_completions` replaces the group advantages with pool-level ones and logs `ada/*` metrics.
    """

    _tag_names = ["trl", "grpo", "reinforce-ada"]
    _name = "Reinforce-Ada"
    _paper = {
        "title": "Reinforce-Ada: An Adaptive Sampling Framework for Reinforce-Style LLM Training",
        "id": "2510.04996",
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @article{xiong2025reinforceada,
                title        = {{Reinforce-Ada: An Adaptive Sampling Framework for Reinforce-Style LLM Training}},
                author       = {Wei Xiong and Chenlu Ye and Baohao Liao and Hanze Dong and Xinxing Xu and
                                Christof Monz and Jiang Bian and Nan Jiang and Tong Zhang},
                year         = 2025,
                eprint       = {arXiv:2510.04996},
            }"""),
    }

    def __init__(self, model, reward_funcs=None, args: ReinforceAdaConfig | None = None, **kwargs):
        if args is None:
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = ReinforceAdaConfig(f"{model_name.split('/')[-1]}-Reinforce-Ada")
        elif not isinstance(args, ReinforceAdaConfig):
            raise TypeError(
                f"ReinforceAdaTrainer needs a ReinforceAdaConfig, got {type(args).__name__}. "
                "ReinforceAdaConfig accepts every GRPOConfig argument."
            )
        multi_turn = [name for name in ("tools", "environment_factory") if kwargs.get(name)]
        if multi_turn and args.rollout_schedule == "streaming":
            raise NotImplementedError(
                f"rollout_schedule='streaming' does not run `{multi_turn[0]}`: a tool call ends a turn, and "
                "GRPOTrainer's tool loop continues every rollout of a batch together, while streaming hands the "
                "engine one single-turn request per completion. Use rollout_schedule='rounds': each round runs "
                "TRL's tool loop (with an environment instance of its own per rollout)."
            )
        if kwargs.get("rollout_func") is not None and args.rollout_schedule == "streaming":
            raise NotImplementedError(
                "rollout_schedule='streaming' drives the generation engine itself, so a custom rollout_func cannot "
                "run per completion; use rollout_schedule='rounds' (rollout_func is then called once per round)."
            )
        if kwargs.get("rollout_func") is None:  # a rollout_func may add the columns a reward needs
            check_reward_columns(_as_list(reward_funcs), getattr(kwargs.get("train_dataset"), "column_names", None))
        try:
            super().__init__(model, reward_funcs, args=args, **kwargs)
        except OSError as error:  # TRL's message suggests `vllm serve`; TRL's server is `trl vllm-serve`
            # requests' ConnectionError is an OSError, not the builtin ConnectionError.
            if not (args.use_vllm and args.vllm_mode == "server" and type(error).__name__ == "ConnectionError"):
                raise
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            raise ConnectionError(
                f"{error} Start TRL's server first, on GPUs the trainer does not use: `CUDA_VISIBLE_DEVICES=... trl "
                f"vllm-serve --model {model_name}`, then point the trainer at it with vllm_server_base_url (or "
                f"vllm_server_host / vllm_server_port). The trainer waits vllm_server_timeout="
                f"{args.vllm_server_timeout} s for it; raise that if the server is still loading the model."
            ) from error
        if args.rollout_schedule == "streaming" and self.is_deepspeed_enabled:
            zero_stage = self.accelerator.state.deepspeed_plugin.zero_stage
            if zero_stage == 3 and any(isinstance(func, torch.nn.Module) for func in self.reward_funcs):
                raise NotImplementedError(
                    "rollout_schedule='streaming' scores each process's completions without collective calls, but a "
                    "reward model's forward pass under DeepSpeed ZeRO-3 is collective. Use rollout_schedule='rounds', "
                    "a reward function, or ZeRO-2."
                )
        self.ada_schedule = args.schedule()
        self.ada_memory = args.pass_rate_memory()  # identical on every process; saved with each checkpoint
        columns = getattr(self.train_dataset, "column_names", None)
        if args.prompt_id_column is not None and columns is not None and args.prompt_id_column not in columns:
            raise ValueError(
                f"prompt_id_column={args.prompt_id_column!r} is not a column of the training dataset ({columns}). "
                "Name a column that identifies each prompt, or leave it None to identify prompts by their text."
            )
        self.ada_side_prompts = self._side_prompts() if args.refill or args.prompt_selection != "none" else None
        self._ada_batch = (-1, 0)  # (global step, generation batch within it) of the latest training _generate
        self._ada_inputs: list[dict[str, Any]] | None = None  # the dataset rows of the step being generated
        self._ada_step: _AdaStep | None = None
        self._ada_warned_context = False  # the prompt-beyond-context warning is given once per run
        self._ada_replay: tuple[list, list | None] | None = None  # streamed completions handed to TRL's _generate

    # ------------------------------------------------------------------ seam 1: generation in rounds or streamed
    def _generate(self, prompts: list):
        """In training, sample each prompt's pool (in rounds or streamed) and return `num_generations` kept rows per
        prompt. With prompt selection or refill, a row group may end up holding another prompt of the training set:
        its entries in `prompts` and in the step's inputs are replaced, so GRPOTrainer logs what was trained on."""
        # Evaluation, or a direct call outside a training step (also on a trainer whose __init__ did not run, as
        # TRL's own dispatch tests build one): GRPOTrainer's generation, with its own checks and errors.
        if getattr(self, "_ada_inputs", None) is None:
            return super()._generate(prompts)
        step, batch = self._ada_batch
        self._ada_batch = (self.state.global_step, batch + 1 if step == self.state.global_step else 0)
        group_size = self.num_generations
        # With environments, each copy of a row holds its own reset observation: the rows, not the prompts, repeat.
        starts = _group_starts(self._ada_inputs if self.environment_factories is not None else prompts, group_size)
        unique_prompts = [prompts[s] for s in starts]
        unique_inputs = [self._ada_inputs[s] for s in starts]
        self._check_prompts(unique_prompts)
        keys = self._memory_keys(unique_prompts, unique_inputs)
        skipped = (
            self._select_prompts(unique_prompts, unique_inputs, keys) if self.args.prompt_selection != "none" else 0
        )
        refill = self._refill_from_stream(unique_prompts, unique_inputs, keys) if self.args.refill else None
        parents = (super()._generate, super()._calculate_rewards)
        started = time.perf_counter()
        with self._step_rollout_state():
            if self.args.rollout_schedule == "streaming":
                result, rollouts = sample_streaming(self, unique_prompts, unique_inputs, *parents, refill=refill)
            else:
                sizes = self._allocate(self.ada_memory.p_hat_many(keys))
                result, rollouts = sample_in_rounds(
                    self, unique_prompts, unique_inputs, sizes, *parents, refill=refill
                )
        seconds = time.perf_counter() - started
        p_hat = self.ada_memory.p_hat_many([keys[i] for i in result.slots])  # before this step's update (ODC)
        self._update_memory(keys, result.pools)
        self._retarget_rows(prompts, starts, result.slots, unique_prompts, unique_inputs)
        rng = self._downsample_rng()
        mode = self.args.downsample
        kept = [[pool.samples[i] for i in downsample(pool, group_size, rng, mode)] for pool in result.kept_pools]
        rows = [row for group in kept for row in group]
        # Each prompt's first num_generations draws in request order: drawn whatever the rewards (see metrics.py).
        first = [handle for pool in result.pools for handle in pool.samples[:group_size]]
        first_moments = reward_moments(rollouts.rewards_per_func(first), self.reward_weights)
        pool_rewards = None
        if self.args.multi_objective_aggregation == "normalize_then_sum":
            pool_rewards = [rollouts.rewards_per_func(pool.samples) for pool in result.kept_pools]
        self._ada_step = _AdaStep(
            result, rollouts.rewards_per_func(rows), p_hat, seconds, skipped, first_moments, pool_rewards
        )
        self._pending_extra_logs.update(rollouts.extra_logs(rows))
        return rollouts.select(rows)

    # ------------------------------------------------------------------ per-rollout state: tools and environments
    def _round_prompts(self, prompts: list, inputs: list[dict[str, Any]], rows: list[int]) -> list:
        """The prompts of one round's rollouts (`rows` index the step's prompts and inputs). With tools or
        environments, GRPOTrainer's per-rollout state is rebuilt for exactly these rollouts first."""
        if not (self.tools or self.environment_factories is not None):
            return [prompts[i] for i in rows]
        return self._prepare_rollouts([inputs[i] for i in rows])

    def _prepare_rollouts(self, rows: list[dict[str, Any]]) -> list:
        """Set GRPOTrainer's per-rollout state for one rollout per dataset row in `rows` and return their prompts:
        an environment instance each from TRL's pool, reset with its row (its observation appended to the prompt),
        the tool dicts TRL's tool loop calls, the row's images in the prompt. GRPOTrainer builds all of this at the
        top of `_generate_and_score_completions`, sized for its batch, then calls `_generate`; rounds draw other
        numbers of rollouts, so run that same code on the round's rows and stop it at the `_generate` call, rather
        than keep a copy of it here."""
        prepared: list[list] = []

        def stop(prompts: list):
            prepared.append(prompts)
            raise _RolloutsPrepared

        shadowed = self.__dict__.get("_generate")  # a wrapper someone set on this instance, if any
        self._generate = stop  # shadows the method on this instance only, for this one call
        try:
            super()._generate_and_score_completions(rows)
        except _RolloutsPrepared:
            pass
        finally:
            if shadowed is None:
                del self._generate
            else:
                self._generate = shadowed
        return prepared[0]

    @contextmanager
    def _step_rollout_state(self) -> Iterator[None]:
        """Around a step's sampling: count the tool loop's calls over every round, log `tools/*` once over the step,
        and give GRPOTrainer back the per-rollout state of the step's own rows (rounds replace it per round)."""
        names = ("environments", "_batch_environments", "_sync_tool_dicts", "_async_tool_dicts")
        saved = {name: getattr(self, name) for name in names if hasattr(self, name)}
        self._ada_tool_counts = [] if self.tools else None
        marks = metric_marks(self, TOOL_METRICS) if self.tools else {}  # no empty `tools/*` entries without tools
        try:
            yield
            if self.tools:
                log_step_tool_calls(self, self._ada_tool_counts, marks)
        finally:
            self._ada_tool_counts = None
            for name, value in saved.items():
                setattr(self, name, value)

    def _tool_call_loop(self, prompts, prompt_ids, *args, **kwargs):
        """GRPOTrainer's tool loop, its call and failure counts kept for the step's `tools/*` metrics."""
        output = super()._tool_call_loop(prompts, prompt_ids, *args, **kwargs)
        if getattr(self, "_ada_tool_counts", None) is not None:
            self._ada_tool_counts.append((output[4], output[5], len(prompt_ids)))
        return output

    # ------------------------------------------------------------------ prompt selection and refill
    def _side_prompts(self) -> SidePrompts:
        """The side stream over the training set that refill and prompt selection draw from."""
        dataset = self.train_dataset
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")) or not hasattr(
            dataset, "column_names"
        ):
            raise ValueError(
                "refill and prompt_selection draw replacement prompts from the training set by index, so they need a "
                f"map-style datasets.Dataset; got {type(dataset).__name__}."
            )
        columns = dataset.column_names
        if "prompt" not in columns or {"image", "images"} & set(columns) or getattr(self, "environments", None):
            raise NotImplementedError(
                "refill and prompt_selection replace a prompt by another row's `prompt` column; they support text "
                f"or conversational prompts without images or environments (dataset columns: {columns})."
            )
        stream = PromptStream(
            len(dataset), self.args.seed, self.accelerator.process_index, self.accelerator.num_processes
        )
        selecting = self.args.prompt_selection != "none"
        return SidePrompts(
            dataset,
            stream,
            self.ada_memory,
            key=lambda row: self._memory_key(row["prompt"], row),
            group_size=self.ada_schedule.round_size(Pool(self.ada_schedule.positive_threshold), 0),
            threshold=self.args.selection_threshold if selecting else None,
            floor=self.args.selection_floor,
        )

    def _select_prompts(self, prompts: list, inputs: list[dict[str, Any]], keys: list[str]) -> int:
        """`prompt_selection="pass_rate"`: replace, in place, each prompt the selection test skips by the next
        side-stream prompt that passes it. Returns how many were skipped."""
        source, rng = self.ada_side_prompts, self._step_rng("select")
        skipped = 0
        for i, key in enumerate(keys):
            if source.keep(key, rng):
                continue
            row = source.draw(rng)
            prompts[i], inputs[i], keys[i] = row["prompt"], row, source.key(row)
            skipped += 1
        return skipped

    def _refill_from_stream(self, prompts: list, inputs: list[dict[str, Any]], keys: list[str]) -> RefillFn:
        """The engine's refill callback: append the next side-stream prompt (one that passes prompt selection, if
        on) to this step's prompts, up to `max_refills_per_step`."""
        source, rng = self.ada_side_prompts, self._step_rng("refill")
        limit = self.args.max_refills_per_step
        left = len(prompts) if limit is None else limit

        def refill(index: int) -> int | None:
            nonlocal left
            if left == 0:
                return None
            left -= 1
            row = source.draw(rng)
            prompts.append(row["prompt"])
            inputs.append(row)
            keys.append(source.key(row))
            return len(prompts) - 1

        return refill

    def _retarget_rows(self, prompts: list, starts: list[int], slots: list[int], unique_prompts: list, unique_inputs):
        """Point each row group whose prompt was replaced (selection or refill) at its new prompt, in the lists
        GRPOTrainer's step goes on to log and to hand to reward functions; one copy of the row per completion, as
        GRPOTrainer's sampler makes them (a rollout_func's extra fields are written per row)."""
        for slot, start in enumerate(starts):
            index = slots[slot]
            if index == slot and unique_prompts[slot] is prompts[start]:
                continue
            for row in range(start, start + self.num_generations):
                prompts[row] = unique_prompts[index]
                self._ada_inputs[row] = dict(unique_inputs[index])

    def _step_rng(self, purpose: str) -> random.Random:
        """An RNG for this generation batch: a function of (seed, process, global step, batch within the step), so a
        resumed run draws as an uninterrupted one and each generation batch of an optimizer step draws afresh."""
        step, batch = self._ada_batch
        return random.Random(f"{self.args.seed}-{self.accelerator.process_index}-{step}-{batch}-{purpose}")

    @contextmanager
    def _streaming_backend(self, prompt_ids: list[list[int]]) -> Iterator[TokenBackend]:
        """The step's streaming backend, one module each (imported on use: vLLM is optional)."""
        if self.use_vllm and self.args.vllm_mode == "server":
            from .backends.vllm_server import vllm_server_backend as backend
        elif self.use_vllm:
            from .backends.vllm_colocate import vllm_colocate_backend as backend
        else:
            from .backends.continuous_batching import continuous_batching_backend as backend
        with backend(self, prompt_ids) as opened:
            yield opened

    def _generate_single_turn(self, *args, **kwargs):
        """Streaming hands its kept completions to GRPOTrainer's `_generate` (decoding, tool masks, metrics) as if
        the engine had just produced them."""
        if getattr(self, "_ada_replay", None) is not None:
            replay, self._ada_replay = self._ada_replay, None
            return replay
        return super()._generate_single_turn(*args, **kwargs)

    # ------------------------------------------------------------------ pass-rate memory (Reinforce-Ada-Est)
    def _memory_keys(self, prompts: list, inputs: list[dict[str, Any]]) -> list[str]:
        """Each prompt's identity in the memory: its `prompt_id_column` value, else a hash of the prompt."""
        column = self.args.prompt_id_column
        missing = None if column is None else next((row for row in inputs if column not in row), None)
        message = None
        if missing is not None:
            message = (
                f"prompt_id_column={column!r} is not a column of the training rows (columns: {sorted(missing)}). "
                "Add it to the dataset or set prompt_id_column=None to identify prompts by their text."
            )
        self._raise_on_every_process(message, KeyError)  # one process raising alone would hang the others
        return [self._memory_key(prompt, row) for prompt, row in zip(prompts, inputs, strict=True)]

    def _memory_key(self, prompt: Any, row: dict[str, Any]) -> str:
        column = self.args.prompt_id_column
        if column is not None:
            return prompt_key(row[column])
        if self.environment_factories is not None:  # `reset` gets the whole row: the row names the task
            return prompt_text_key(row)
        return prompt_text_key(prompt)

    def _allocate(self, p_hat: list[float]) -> list[int] | None:
        """Reinforce-Ada-Est: this process's budget, `samples_per_prompt_mean` per prompt, split by the allocation
        rule (deterministic, so a resumed run allocates as an uninterrupted one). `None` for the Seq strategies."""
        if self.args.sampling_strategy != "estimate":
            return None
        mean, lo, hi = self.args.samples_per_prompt_bounds
        return allocate(p_hat, mean * len(p_hat), lo, hi, self.args.allocation_rule)

    def _update_memory(self, keys: list[str], pools: list[Pool]) -> None:
        """Record this step's scored counts from every process, in rank order, so every copy stays identical."""
        updates = [
            (key, pool.num_positive, pool.num_positive + pool.num_negative)
            for key, pool in zip(keys, pools, strict=True)
        ]
        if self.accelerator.num_processes > 1:
            updates = gather_object(updates)  # the concatenation of every rank's list, in rank order
        self.ada_memory.update_many(updates)

    def _save_checkpoint(self, model, trial) -> None:
        """Write the pass-rate memory (and the side stream's position on every process) into the checkpoint folder
        too, before the rest, so a Hub push includes them."""
        streams = None
        if self.ada_side_prompts is not None:  # every process calls this, so the gather is safe
            streams = [self.ada_side_prompts.stream.state_dict()]
            if self.accelerator.num_processes > 1:
                streams = gather_object(streams)
        if self.args.should_save:
            checkpoint = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            output_dir = os.path.join(self._get_output_dir(trial=trial), checkpoint)
            os.makedirs(output_dir, exist_ok=True)
            self.ada_memory.save(output_dir)
            if streams is not None:
                with open(os.path.join(output_dir, STREAM_STATE_FILE), "w") as file:
                    json.dump({"processes": streams}, file)
        super()._save_checkpoint(model, trial)

    def _load_side_stream(self, checkpoint: str | os.PathLike) -> None:
        """Put this process's side stream where it was when the checkpoint was written."""
        path = os.path.join(checkpoint, STREAM_STATE_FILE)
        if not os.path.isfile(path):
            logger.warning(f"No prompt-stream state in {checkpoint}: refill and selection draw from a fresh stream.")
            return
        with open(path) as file:
            states = json.load(file)["processes"]
        if len(states) != self.accelerator.num_processes:
            raise ValueError(
                f"{path} holds the prompt streams of {len(states)} processes; this run has "
                f"{self.accelerator.num_processes}. Resume with as many processes as wrote the checkpoint."
            )
        self.ada_side_prompts.stream.load_state_dict(states[self.accelerator.process_index])

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, ignore_keys_for_eval=None, **kwargs):
        """[`~transformers.Trainer.train`], restoring the pass-rate memory (and the side stream of refill and prompt
        selection) on every process when resuming. Done here rather than in `_load_from_checkpoint`, which DeepSpeed
        runs never call. A checkpoint written without the memory leaves it empty, with a warning."""
        checkpoint = resume_from_checkpoint
        if checkpoint is True:  # resolved as Trainer.train does; it raises its own error when there is none
            checkpoint = get_last_checkpoint(self.args.output_dir)
        if isinstance(checkpoint, str | os.PathLike):
            if not self.ada_memory.load(checkpoint):
                logger.warning(f"No pass-rate memory in {checkpoint}: every prompt starts again from the prior.")
            if self.ada_side_prompts is not None:
                self._load_side_stream(checkpoint)
        return super().train(resume_from_checkpoint, trial, ignore_keys_for_eval, **kwargs)

    def _downsample_rng(self) -> random.Random:
        """This generation batch's downsampling RNG: a function of (seed, process, global step, batch within the
        step) only, so a resumed run draws the same kept rows as an uninterrupted one without saving any RNG state,
        and the generation batches of one optimizer step (`steps_per_generation < gradient_accumulation_steps`)
        each draw afresh. The first batch of a step keeps the seed string it always had."""
        step = self.state.global_step
        batch = getattr(self, "_ada_batch", (step, 0))[1]
        suffix = f"-{batch}" if batch else ""
        return random.Random(f"{self.args.seed}-{self.accelerator.process_index}-{step}{suffix}")

    @contextmanager
    def _reward_funcs_as(self, funcs: list) -> Iterator[None]:
        saved, self.reward_funcs = self.reward_funcs, funcs
        try:
            yield
        finally:
            self.reward_funcs = saved

    def _raise_if_any_reward_failed(self, guard: RewardGuard, prompts: list, completions: list, rows: list[int]):
        """Raise the same error on every process when a reward failed on any of them (one flag gathered per round)."""
        failure = guard.failure
        message = None
        if failure is not None:
            message = (
                f"{failure.describe(prompts, completions, rows.__getitem__)} (training step "
                f"{self.state.global_step + 1}). Fix or guard the reward function; return None for a completion it "
                "cannot score."
            )
        self._raise_on_every_process(message, RewardFunctionError, failure.error if failure is not None else None)

    def _check_prompts(self, prompts: list) -> None:
        """Reject empty text prompts, which tokenize to nothing and make generation fail far from the cause."""
        empty = [i for i, prompt in enumerate(prompts) if isinstance(prompt, str) and not prompt.strip()]
        message = None
        if empty:
            message = (
                f"Prompt {empty[0]} of this process's batch is empty or blank ({prompts[empty[0]]!r}); an empty text "
                "prompt cannot be sampled. Drop such rows from the dataset, e.g. "
                "`dataset.filter(lambda row: row['prompt'].strip())`."
            )
        self._raise_on_every_process(message, ValueError)

    def _raise_on_every_process(
        self, local_message: str | None, error_type: type[Exception], cause: BaseException | None = None
    ) -> None:
        """Raise `error_type` on every process when any process has a message, else return. A process raising alone
        would leave the others waiting forever in their next collective call; this costs one gathered flag."""
        if not self._any_process(local_message is not None):
            return
        message = local_message
        if self.accelerator.num_processes > 1:
            messages = gather_object([local_message])
            rank = next(r for r, m in enumerate(messages) if m is not None)
            message = f"On process {rank}: {messages[rank]}"
        raise error_type(message) from cause

    def _warn_if_beyond_context(self, prompt_ids: list[list[int]], prompts: list) -> None:
        """Warn once when a prompt plus `max_completion_length` overruns the model's context: generation still
        runs (Transformers only warns, without naming the prompt), but such completions are unreliable."""
        context = getattr(self.model.config, "max_position_embeddings", None)
        if self._ada_warned_context or context is None:
            return
        budget = context - self.max_completion_length
        for ids, prompt in zip(prompt_ids, prompts, strict=True):
            if len(ids) > budget:
                self._ada_warned_context = True
                logger.warning(
                    f"A prompt of {len(ids)} tokens, {excerpt(prompt)}, leaves less than max_completion_length="
                    f"{self.max_completion_length} tokens of the model's {context}-token context "
                    "(max_position_embeddings); its completions run past the positions the model was trained on. "
                    "Filter long prompts from the dataset or lower max_completion_length. Warned once per run."
                )
                return

    # ------------------------------------------------------------------ seam 2: no second scoring
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """In training, the kept rows' rewards were computed during the rounds: return them, gathered."""
        if getattr(self, "_ada_step", None) is None:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return gather(self._ada_step.kept_rewards_per_func.to(self.accelerator.device))

    # ------------------------------------------------------------------ seam 3: pool-level advantages
    def _generate_and_score_completions(self, inputs):
        """GRPOTrainer's step, with the rows' pool-level advantages in place of the group ones."""
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        self._ada_inputs = inputs
        try:
            output = super()._generate_and_score_completions(inputs)
            step = self._ada_step
        finally:
            self._ada_inputs, self._ada_step = None, None
        advantages, weights = self._pool_advantages(step)
        output["advantages"] = advantages
        self._log_step(step, advantages, weights)
        return output

    def _pool_advantages(self, step: _AdaStep) -> tuple[torch.Tensor, torch.Tensor]:
        device = self.accelerator.device
        kept = total_reward(step.kept_rewards_per_func, self.reward_weights).view(-1, self.num_generations)
        if self.args.advantage_baseline == "pool":
            budget = self.ada_schedule.budget
            reference = torch.tensor(
                [p.rewards + [float("nan")] * (budget - len(p)) for p in step.result.kept_pools], dtype=kept.dtype
            ).view(-1, budget)
        else:
            reference = kept
        baseline, std = nan_mean_std(reference)
        if self.args.scale_rewards == "group":
            scale = std
        elif self.args.scale_rewards == "batch":  # std over every process's baseline set
            scale = nan_mean_std(gather(reference.to(device)).flatten().cpu())[1]
        else:
            scale = None
        if self.args.difficulty_weighting == "odc":
            weights = odc_weights(step.p_hat, self.args.max_difficulty_weight).to(kept.dtype)
        else:
            pass_rate = torch.tensor([p.pass_rate for p in step.result.kept_pools], dtype=kept.dtype)
            weights = difficulty_weights(pass_rate, self.args.difficulty_weighting, self.args.max_difficulty_weight)
        if self.args.multi_objective_aggregation == "normalize_then_sum":
            summed = self._normalized_sums(step)
            batch_mean, batch_std = nan_mean_std(gather(summed.to(device)).flatten().cpu())  # as TRL, over the batch
            advantages = normalized_advantages(summed, batch_mean, batch_std, weights)
        else:
            advantages = normalized_advantages(kept, baseline, scale, weights)
        return advantages.flatten().to(device), weights

    def _normalized_sums(self, step: _AdaStep) -> torch.Tensor:
        """`normalize_then_sum`: each reward function standardised with the prompt's pool (or, with
        `advantage_baseline="group"`, kept-group) statistics, then weighted and summed; (P, G)."""
        num_funcs = len(self.reward_funcs)
        kept = step.kept_rewards_per_func.view(-1, self.num_generations, num_funcs)
        if self.args.advantage_baseline == "pool":
            budget = self.ada_schedule.budget
            padding = torch.full((budget, num_funcs), float("nan"), dtype=kept.dtype)
            reference = torch.stack(
                [
                    torch.cat([rewards.to(kept.dtype), padding[len(rewards) :]])
                    for rewards in step.pool_rewards_per_func
                ]
            )
        else:
            reference = kept
        return normalize_then_sum(kept, reference, self.reward_weights.to(kept.dtype))

    def _log_step(self, step: _AdaStep, advantages: torch.Tensor, weights: torch.Tensor) -> None:
        # One gather for every per-step metric: this process's tally, memory pass rates, pool sizes and counters.
        result = step.result
        kept_pools = result.kept_pools
        # Counters summed over processes (the rest are maxima, below), by metric name.
        summed = {
            "ada/completion_tokens": result.generated_tokens,
            "ada/aborted_tokens": result.aborted_tokens,
            "ada/refills": result.refills,
            "ada/refill_samples": sum(len(pool) for pool in result.replaced_pools),
            "ada/unfilled": sum(not has_signal(pool) for pool in kept_pools),
            "ada/skipped": step.skipped,
        }
        maxima = {
            "ada/in_flight_max": result.in_flight_max,
            "ada/generation_seconds": step.generation_seconds,
            "ada/rounds": result.rounds,  # rounds: the same on every process; streaming: each process's own
        }
        local = (
            Tally.of(kept_pools, weights.tolist()),
            step.p_hat,
            [len(pool) for pool in kept_pools],
            (summed, maxima),
            step.first_reward_moments,
        )
        parts = gather_object([local]) if self.accelerator.num_processes > 1 else [local]
        self._log_honest_rewards([sum(column, Moments()) for column in zip(*(part[4] for part in parts), strict=True)])
        tally = sum((part[0] for part in parts), Tally())
        metrics = tally.metrics(max(part[3][1]["ada/rounds"] for part in parts))
        shown = ["ada/completion_tokens", "ada/aborted_tokens"]
        if self.args.refill:
            shown += ["ada/refills", "ada/refill_samples", "ada/unfilled"]
        if self.args.prompt_selection != "none":
            shown.append("ada/skipped")
        for name in shown:
            metrics[name] = float(sum(part[3][0][name] for part in parts))
        metrics["ada/in_flight_max"] = float(max(part[3][1]["ada/in_flight_max"] for part in parts))
        metrics["ada/generation_seconds"] = max(part[3][1]["ada/generation_seconds"] for part in parts)
        metrics.update(
            self._memory_metrics([p for part in parts for p in part[1]], [n for part in parts for n in part[2]])
        )
        for name, value in metrics.items():
            self._metrics["train"][name].append(value)
        # GRPOTrainer logged its group advantages for the completions table; show the ones actually used.
        all_advantages = gather(advantages).tolist()
        logged = self._logs["advantages"]
        for _ in range(min(len(all_advantages), len(logged))):
            logged.pop()
        logged.extend(all_advantages)

    def _log_honest_rewards(self, first_draws: list[Moments]) -> None:
        """GRPOTrainer just logged `reward`, `reward_std` and `rewards/<func>/mean|std` over the kept rows, which
        downsampling chose by reward: move those to `ada/kept_*` and log the first draws' in their place."""
        train = self._metrics["train"]
        for name, value in reward_metrics(first_draws, self.reward_func_names).items():
            train[f"ada/kept_{name}"].append(train[name][-1])
            train[name][-1] = value

    def _memory_metrics(self, p_hat: list[float], sizes: list[int]) -> dict[str, float]:
        """Mean memory pass rate of the step's prompts (read before the update), the memory's size after it, and
        the spread of samples per prompt (under `"estimate"`, the allocation), over every process."""
        return {
            "ada/p_hat_mean": sum(p_hat) / max(len(p_hat), 1),
            "ada/memory_size": float(len(self.ada_memory)),
            "ada/alloc_min": float(min(sizes, default=0)),
            "ada/alloc_mean": sum(sizes) / max(len(sizes), 1),
            "ada/alloc_max": float(max(sizes, default=0)),
        }

    # ------------------------------------------------------------------ multi-process agreement
    def _any_process(self, local: bool) -> bool:
        if self.accelerator.num_processes == 1:
            return local
        flags = gather(torch.tensor([int(local)], device=self.accelerator.device))
        return bool(flags.any())

    def _sum_over_processes(self, value: int) -> int:
        if self.accelerator.num_processes == 1:
            return value
        return int(gather(torch.tensor([value], device=self.accelerator.device)).sum())

    def _max_over_processes(self, value: int) -> int:
        if self.accelerator.num_processes == 1:
            return value
        return int(gather(torch.tensor([value], device=self.accelerator.device)).max())

    def _common_run_length(self, requests: list[Request]) -> int:
        """Copies of a prompt that stand in a row. vLLM server mode takes every `num_generations`-th prompt and asks
        for `n = num_generations` completions of each, so all processes must agree on the run length."""
        if self.environment_factories is not None:
            return 1  # each rollout has its own environment, whose reset may make its prompt differ
        sizes = {r.num_samples for r in requests}
        if self.accelerator.num_processes > 1:
            sizes = set().union(*gather_object([sizes]))
        return sizes.pop() if len(sizes) == 1 else 1

    @contextmanager
    def _num_generations_as(self, run: int) -> Iterator[None]:
        # GRPOTrainer._generate passes `self.num_generations` to the generation backend as the run length.
        saved, self.num_generations = self.num_generations, run
        try:
            yield
        finally:
            self.num_generations = saved

    def _pop_extra_logs(self, num_rows: int) -> dict[str, list]:
        """Take the columns reward functions logged with `log_extra` this round, to keep only the kept rows'."""
        logs = {k: v for k, v in self._pending_extra_logs.items() if len(v) == num_rows}
        for key in logs:
            del self._pending_extra_logs[key]
        return logs


@dataclass
class _AdaStep:
    result: SamplingResult
    kept_rewards_per_func: torch.Tensor  # (local kept rows, reward functions), NaN where a function returned None
    p_hat: list[float]  # the memory's pass rate of each prompt, read before this step's update
    generation_seconds: float  # wall time of this process's sampling (generation and scoring) this step
    skipped: int = 0  # prompts prompt selection replaced before sampling
    first_reward_moments: list[Moments] | None = None  # each pool's first num_generations draws (metrics.py)
    pool_rewards_per_func: list[torch.Tensor] | None = None  # per kept pool (N, reward functions): normalize_then_sum


class _RolloutsPrepared(Exception):
    """Stops GRPOTrainer's step once it has prepared a batch's rollouts (`_prepare_rollouts`)."""


def _as_list(reward_funcs: Any) -> list:
    if reward_funcs is None:
        return []
    return list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]


def _group_starts(prompts: list, group_size: int) -> list[int]:
    """First rows of the prompt groups: TRL's sampler repeats each prompt `num_generations` times in a row."""
    if len(prompts) % group_size:
        raise ValueError(f"This process got {len(prompts)} rows, not whole groups of num_generations={group_size}.")
    starts = list(range(0, len(prompts), group_size))
    for start in starts:
        if any(prompts[start + j] != prompts[start] for j in range(1, group_size)):
            raise ValueError(f"Rows {start}..{start + group_size - 1} are not one prompt repeated {group_size} times.")
    return starts
