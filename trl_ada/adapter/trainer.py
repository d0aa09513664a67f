from __future__ import annotations

import os
import random
import textwrap
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from transformers.utils import logging
from trl.trainer.utils import get_config_model_id

from ..core.advantages import memory_baseline_mismatch, total_reward
from ..core.allocation import allocate_step
from ..core.engine import Pilot, SamplingResult
from ..core.memory import memory_key
from ..core.metrics import length_metrics, tool_metrics
from ..core.prompt_stream import SidePrompts, retarget_rows
from ..core.selection import pilot_stop_rule
from ..core.step import ComposedStep, compose_step
from .checks import (
    ContextCheck,
    RewardFunctionError,
    RewardGuard,
    SignalWatch,
    check_prompt_id_column,
    check_streaming_reward_models,
    check_trainer_setup,
    empty_prompt_message,
    group_starts,
    missing_id_column_message,
    refill_filter_column,
    reward_failure_message,
    server_unreachable_message,
    toy_plain_prompt_message,
)
from .compat import (
    ToolLoopOutput,
    decode_completions,
    ended,
    local_reward_gather,
    open_streaming_engine,
    prepare_rollouts,
    quiet_all_none_warning,
    rollout_state_kept,
    swapped,
)
from .config import ReinforceAdaConfig
from .model_names import check_model_name
from .schedules.rounds import sample_in_rounds
from .schedules.streaming import sample_streaming
from .step_io import Collectives, GenerationOutput, StepIO
from .trainer_checkpoints import CheckpointSeams
from .trl_logs import LENGTH_METRICS, TOOL_METRICS, log_step, metric_marks, pop_columns, replace_since, show_rows

logger = logging.get_logger(__name__)


class ReinforceAdaTrainer(CheckpointSeams):
    """
    Trainer for Reinforce-Ada (https://huggingface.co/papers/2510.04996): GRPO with adaptive sampling. Each step
    samples more completions only for the prompts still *active* (in rounds, or streamed), retires a prompt once its
    exit rule holds or its budget is spent, downsamples each pool to `num_generations` rows and computes advantages
    from the whole pool's statistics. `docs/architecture.md` maps the modules; in training only, it differs from
    [`~trl.GRPOTrainer`] in:

    - `_generate`: samples the pools through a `trl_ada.adapter.step_io.StepIO` and returns the kept rows, in row
      order (a group that selection or refill moved to another prompt is retargeted in the step's prompts and inputs
      too);
    - `_generate_single_turn`: hands streamed completions to GRPOTrainer's `_generate` for decoding and logging;
    - `_tool_call_loop`: counts tool calls, for one `tools/*` entry per step;
    - `_calculate_rewards`: returns the rewards computed during sampling (nothing is scored twice);
    - `_generate_and_score_completions`: puts pool-level advantages in and logs `ada/*` metrics;
    - `_save_checkpoint`, `train`: write each checkpoint under a temporary name, renamed once complete; save and
      restore the pass-rate memory, the side stream's position and a generation batch in flight
      (`trl_ada.adapter.checkpoints`); check that `output_dir` can be written to before training;
    - `_get_train_sampler`: GRPOTrainer's sampler, which a resumed run positions at its epoch.
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
        model = os.fspath(model) if isinstance(model, os.PathLike) else model  # GRPOTrainer takes str or a model
        args = ReinforceAdaConfig(f"{_model_name(model).split('/')[-1]}-Reinforce-Ada") if args is None else args
        check_trainer_setup(args, ReinforceAdaConfig, kwargs, _as_list(reward_funcs))
        if isinstance(model, str):  # the CLI's checks: a missing folder, or a Hub id offline and not cached
            check_model_name(model, (args.model_init_kwargs or {}).get("revision"), flag="model", probe_hub=False)
        if (toy_message := toy_plain_prompt_message(model, kwargs.get("train_dataset"))) is not None:
            warnings.warn(toy_message, UserWarning, stacklevel=2)
        try:
            super().__init__(model, reward_funcs, args=args, **kwargs)
        except OSError as error:  # requests' ConnectionError is an OSError, not the builtin ConnectionError
            if not (args.use_vllm and args.vllm_mode == "server" and type(error).__name__ == "ConnectionError"):
                raise
            message = server_unreachable_message(error, _model_name(model), args.vllm_server_timeout)
            raise ConnectionError(message) from error
        if args.rollout_schedule == "streaming" and self.is_deepspeed_enabled:
            check_streaming_reward_models(self.accelerator.state.deepspeed_plugin.zero_stage, self.reward_funcs)
        # The memory baseline fits one 0/1 reward: several functions are known now, other totals once they are seen.
        self._ada_baseline_mismatch = None
        if args.advantage_baseline == "memory":
            self._ada_baseline_mismatch = memory_baseline_mismatch(len(self.reward_funcs))
            if self._ada_baseline_mismatch is not None and self.accelerator.is_main_process:
                logger.warning(self._ada_baseline_mismatch)
        self.ada_schedule, self.ada_step_settings = args.schedule(), args.step_settings()
        self.ada_memory = args.pass_rate_memory()  # identical on every process; saved with each checkpoint
        schedule = self.ada_schedule
        self._ada_signal_watch = SignalWatch(schedule.exit_rule, schedule.positive_threshold, schedule.budget)
        check_prompt_id_column(args.prompt_id_column, getattr(self.train_dataset, "column_names", None))
        self._ada_refill_filter_column = refill_filter_column(args.refill_filter_reward, self.reward_func_names)
        accelerator = self.accelerator
        self.ada_collectives = Collectives(accelerator.num_processes, accelerator.process_index, accelerator.device)
        self.ada_side_prompts = None  # the side stream refill and prompt selection draw from
        if args.uses_side_stream:
            selection = (args.selection_threshold, args.selection_floor) if args.prompt_selection != "none" else None
            self.ada_side_prompts = SidePrompts.for_dataset(
                self.train_dataset,
                self.ada_memory,
                lambda row: self._memory_key(row["prompt"], row),
                self.ada_schedule,
                args.seed,
                selection,
                rank=accelerator.process_index,
                world_size=accelerator.num_processes,
                environments=self.environment_factories is not None,
            )
        # Per generation batch: (global step, batch within it) of the latest training _generate, the step's dataset
        # rows, what sampling hands to the loss, streamed completions handed to TRL's _generate, tool-loop counts.
        self._ada_batch = (-1, 0)
        self._ada_inputs: list[dict[str, Any]] | None = None
        self._ada_step: ComposedStep | None = None
        self._ada_replay: tuple[list, list | None] | None = None
        self._ada_tool_counts: list[tuple[int, int, int]] | None = None
        self._ada_reward_seconds = 0.0  # time in reward functions during the current generation batch
        context = getattr(self.model.config, "max_position_embeddings", None)
        self._ada_context_check = ContextCheck(context, self.max_completion_length, lambda text: logger.warning(text))

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
        # With environments, each copy of a row holds its own reset observation: the rows, not the prompts, repeat.
        rows = self._ada_inputs if self.environment_factories is not None else prompts
        starts = group_starts(rows, self.num_generations)
        unique_prompts, unique_inputs = [prompts[s] for s in starts], [self._ada_inputs[s] for s in starts]
        args, collectives = self.args, self.ada_collectives
        collectives.raise_everywhere(empty_prompt_message(unique_prompts), ValueError)
        collectives.raise_everywhere(missing_id_column_message(args.prompt_id_column, unique_inputs), KeyError)
        keys = [self._memory_key(prompt, row) for prompt, row in zip(unique_prompts, unique_inputs, strict=True)]
        skipped, refill = 0, None
        if self.ada_side_prompts is not None:  # prompt selection replaces prompts in place; refill appends
            rngs = (self._rng("select"), self._rng("refill"))
            refills = (args.refill, args.max_refills_per_step)
            skipped, refill = self.ada_side_prompts.prepare(unique_prompts, unique_inputs, keys, *rngs, *refills)
        pilot = None
        if args.pilot_size:  # `keys` grows with refills, and the rule reads it when a pilot finishes
            stop = pilot_stop_rule(self.ada_memory, keys, self.num_generations, args.pilot_stop_threshold)
            pilot = Pilot(args.pilot_size, stop)
        io, marks, started = self._step_io(), metric_marks(self._metrics["train"], LENGTH_METRICS), time.perf_counter()
        self._ada_reward_seconds = 0.0
        with self._step_rollout_state():
            if args.rollout_schedule == "streaming":
                result, sampled = sample_streaming(io, unique_prompts, unique_inputs, refill, pilot)
            else:
                bounds, p_hat = args.samples_per_prompt_bounds, self.ada_memory.p_hat_many(keys)
                sizes = allocate_step(p_hat, args.sampling_strategy, *bounds, args.allocation_rule)
                result, sampled = sample_in_rounds(io, unique_prompts, unique_inputs, sizes, refill, pilot)
        seconds = time.perf_counter() - started - self._ada_reward_seconds  # generation (and sampling's own work)
        retarget_rows(
            prompts, self._ada_inputs, starts, result.slots, unique_prompts, unique_inputs, self.num_generations
        )
        self._ada_step = step = self._compose_step(result, keys, sampled, (seconds, self._ada_reward_seconds), skipped)
        self._check_memory_baseline(step.kept_rewards_per_func)
        self._pending_extra_logs.update(sampled.extra_logs(step.kept))
        output = sampled.select(step.kept)
        self._log_lengths(*sampled.step_lengths(), sampled.uncounted_tokens(step.kept), marks)
        return output

    def _compose_step(
        self, result: SamplingResult, keys: list[str], sampled: Any, seconds: tuple[float, float], skipped: int
    ) -> ComposedStep:
        """The core's step on this batch's pools (`trl_ada.core.step.compose_step`: the memory, downsampling, pool
        advantages, the step's counts), with every process's evidence; `sampled` holds the rows' rewards."""
        collectives = self.ada_collectives
        return compose_step(
            self.ada_step_settings,
            result,
            keys,
            self.ada_memory,
            sampled.rewards_per_func,
            self.reward_weights,
            self._rng(),
            seconds=seconds,
            skipped=skipped,
            gather_objects=collectives.gather_objects,
            gather_tensor=collectives.gather_tensor,
        )

    def _step_io(self) -> StepIO:
        """What this generation batch's sampling code may read and do (`trl_ada.adapter.step_io`). With tools or
        environments, each round's rollouts first get GRPOTrainer's per-rollout state of their own."""
        multi_turn = bool(self.tools) or self.environment_factories is not None
        return StepIO(
            schedule=self.ada_schedule,
            reward_weights=self.reward_weights,
            collectives=self.ada_collectives,
            max_in_flight=self.args.max_in_flight,
            runs_of_copies=self.environment_factories is None,
            mask_truncated=self.args.mask_truncated_completions,
            prepare=lambda prompts, rows: prepare_rollouts(self, rows) if multi_turn else prompts,
            generate=self._generate_round,
            score=self._score,
            score_local=lambda *score_args: self._score(*score_args, local=True),
            tokenize=lambda prompts: self._tokenize_prompts(prompts)[:2],
            decode=lambda *decode_args: decode_completions(self, *decode_args),
            ended=lambda completion_ids: ended(self, completion_ids),
            check_context=self._ada_context_check,
            open_engine=lambda prompt_ids: open_streaming_engine(self, prompt_ids),
            replay=self._replay,
            pop_extra_logs=lambda num_rows: pop_columns(self._pending_extra_logs, num_rows),
            refill_filter_column=self._ada_refill_filter_column,
        )

    def _generate_round(self, prompts: list, run_length: int) -> GenerationOutput:
        # GRPOTrainer._generate passes `self.num_generations` to the generation backend as the run length.
        with swapped(self, "num_generations", run_length):
            return GenerationOutput(*super()._generate(prompts))

    def _replay(self, prompts: list, completion_ids: list[list[int]], logprobs: list | None) -> GenerationOutput:
        self._ada_replay = (completion_ids, logprobs)
        return GenerationOutput(*super()._generate(prompts))

    def _generate_single_turn(self, *args, **kwargs):
        """Streaming hands its kept completions to GRPOTrainer's `_generate` (decoding, tool masks, metrics) as if
        the engine had just produced them."""
        if getattr(self, "_ada_replay", None) is not None:
            replay, self._ada_replay = self._ada_replay, None
            return replay
        return super()._generate_single_turn(*args, **kwargs)

    def _score(
        self,
        rows,
        prompts,
        completions,
        completion_ids,
        prompt_indices: Sequence[int],
        real_rows: int,
        local: bool = False,
    ):
        """GRPOTrainer's reward functions, guarded: this process's rewards. `local`: no collective call (streaming),
        and a failure raises here only; else the rewards are scored collectively and a failure raises everywhere.
        The rows after the first `real_rows` are padding (rounds)."""
        guard = RewardGuard(self.reward_func_names)
        gather_locally = local_reward_gather(self.ada_collectives.num_processes) if local else nullcontext()
        user_metrics: defaultdict[str, list[float]] = defaultdict(list)
        started = time.perf_counter()
        with (
            swapped(self, "reward_funcs", guard.wrap(self.reward_funcs)),
            swapped(self, "_pending_metrics", user_metrics),
            gather_locally,
            quiet_all_none_warning(lambda: guard.failure is not None),
        ):
            rewards = super()._calculate_rewards(rows, prompts, completions, completion_ids)
        self._ada_reward_seconds += time.perf_counter() - started
        # GRPOTrainer logs the mean of a reward function's `log_metric` values, one value per call. A step scores in
        # many calls of different sizes (rounds, streamed batches), so each value counts once per real completion its
        # call scored (padding rows, which a process with less to do scores in rounds, not at all): GRPOTrainer's
        # flush (sum over count, across processes) then weights it by the real completions scored.
        for name, values in user_metrics.items():
            if real_rows:
                self._pending_metrics[name].extend(value for value in values for _ in range(real_rows))
        failure, step = guard.failure, self.state.global_step + 1
        message = reward_failure_message(failure, prompts, completions, prompt_indices, step)
        raising = Collectives() if local else self.ada_collectives  # streaming: raise on this process alone
        raising.raise_everywhere(message, RewardFunctionError, failure.error if failure is not None else None)
        first = 0 if local else self.accelerator.process_index * len(prompts)  # rounds: the rewards come gathered
        return rewards[first : first + len(prompts)]

    @contextmanager
    def _step_rollout_state(self) -> Iterator[None]:
        """Around a step's sampling: count the tool loop's calls over every round, log `tools/*` once over the step,
        and give GRPOTrainer back the per-rollout state of the step's own rows (rounds replace it per round)."""
        self._ada_tool_counts = [] if self.tools else None
        marks = metric_marks(self._metrics["train"], TOOL_METRICS) if self.tools else {}  # none without tools
        try:
            with rollout_state_kept(self):
                yield
            if self.tools:  # calls, failures and rollouts of every tool loop, summed over rounds and processes
                local = [sum(column) for column in zip(*self._ada_tool_counts, strict=True)] or [0, 0, 0]
                totals = [sum(column) for column in zip(*self.ada_collectives.gather_objects([local]), strict=True)]
                replace_since(self._metrics["train"], marks, tool_metrics(*totals))
        finally:
            self._ada_tool_counts = None

    def _tool_call_loop(self, prompts, prompt_ids, *args, **kwargs):
        """GRPOTrainer's tool loop, its call and failure counts kept for the step's `tools/*` metrics."""
        output = ToolLoopOutput(*super()._tool_call_loop(prompts, prompt_ids, *args, **kwargs))
        if self._ada_tool_counts is not None:
            self._ada_tool_counts.append((output.tool_call_count, output.tool_failure_count, len(prompt_ids)))
        return output

    def _memory_key(self, prompt: Any, row: dict[str, Any]) -> str:
        return memory_key(prompt, row, self.args.prompt_id_column, by_row=self.environment_factories is not None)

    def _rng(self, purpose: str | None = None) -> random.Random:
        """An RNG for this generation batch, for `purpose` (selection, refill; None: downsampling): a function of
        (seed, process, global step, batch within the step) only, so a resumed run draws as an uninterrupted one
        without saving any RNG state, and each generation batch of an optimizer step draws afresh. Downsampling
        keeps the seed string it always had (no batch suffix for a step's first batch)."""
        step, batch = self._ada_batch
        prefix = f"{self.args.seed}-{self.accelerator.process_index}-{step}"
        if purpose is None:
            return random.Random(f"{prefix}-{batch}" if batch else prefix)
        return random.Random(f"{prefix}-{batch}-{purpose}")

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """In training, the kept rows' rewards were computed during sampling: return them, gathered."""
        if getattr(self, "_ada_step", None) is None:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self.ada_collectives.gather_tensor(self._ada_step.kept_rewards_per_func.to(self.accelerator.device))

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
        output["advantages"] = step.advantages.to(self.accelerator.device)
        self._log_step(step)
        return output

    def _check_memory_baseline(self, kept_rewards_per_func: torch.Tensor) -> None:
        """The memory baseline fits one 0/1 reward: warn once, where the totals show otherwise."""
        if self.args.advantage_baseline == "memory" and self._ada_baseline_mismatch is None:
            totals = total_reward(kept_rewards_per_func, self.reward_weights).tolist()
            self._ada_baseline_mismatch = memory_baseline_mismatch(totals=totals)
            if self._ada_baseline_mismatch is not None:
                logger.warning(self._ada_baseline_mismatch)

    def _log_step(self, step: ComposedStep) -> None:
        """Log the step's `ada/*` metrics (and honest `reward*`), every process's, and show the advantages actually
        used in the completions table (GRPOTrainer logged its group advantages there)."""
        counts, settings = step.counts, self.ada_step_settings
        for warning in self._ada_signal_watch.update(counts.maxima["highest_reward"], counts.tally.resolved):
            if self.accelerator.is_main_process:  # the counts are every process's: one warning is enough
                logger.warning(f"\n{warning}")  # on a line of its own, not after the progress bar
        log_step(
            self._metrics["train"],
            step.signal_metrics(settings),
            step.first_draw_metrics(self.reward_func_names),
            step.step_metrics(settings, len(self.ada_memory)),
        )
        show_rows(self._logs["advantages"], self.ada_collectives.gather_tensor(step.advantages).tolist())

    def _log_lengths(self, lengths: list[int], flags: list[bool], uncounted: int, marks: dict[str, int]) -> None:
        """Make `num_tokens` and `completions/*` (which GRPOTrainer's `_generate` logged per call, over the rows it
        saw) cover every completion of the batch on every process, in one entry."""
        self.state.num_input_tokens_seen += self.ada_collectives.sum(uncounted)
        self._metrics["train"]["num_tokens"] = [self.state.num_input_tokens_seen]
        gathered = self.ada_collectives.gather_objects(list(zip(lengths, flags, strict=True)))
        replace_since(self._metrics["train"], marks, length_metrics(*zip(*gathered, strict=True)))


def _model_name(model: Any) -> str:
    return model if isinstance(model, str) else get_config_model_id(model.config)


def _as_list(reward_funcs: Any) -> list:
    if reward_funcs is None:
        return []
    return list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
