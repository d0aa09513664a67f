"""Where TRL releases differ at the seams trl-ada uses, and the one place that adapts to them.

`ReinforceAdaTrainer` overrides private `GRPOTrainer` methods and calls private helpers. Read from each release's
installed source (TRL 1.14.0, 1.14.1, 1.14.2, 1.15.0 and 1.16.0), the seams are the same in every supported release
except these, each handled by one function below:

- `unwrap_model_for_generation` takes `gradient_checkpointing_kwargs` from TRL 1.16.0 on (it re-enables gradient
  checkpointing with them after generation). Before, it re-enables it without kwargs, and GRPOTrainer passes none.
- `parse_response` takes `tools` from TRL 1.16.0 on (tool-call arguments typed from each tool's schema). Before,
  GRPOTrainer decodes without them.
- `GRPOTrainer.eos_token_ids` (every EOS id the model's generation config declares) exists from TRL 1.14.2 on.
  Before, GRPOTrainer counts a completion as terminated only on the tokenizer's EOS.

One transformers difference matters too: `ContinuousBatchingConfig` names its page size `page_size` from transformers
5.18 on and `block_size` before (5.18 still takes `block_size`, with a deprecation warning);
`continuous_batching_cache` writes the installed one's name.

In every case trl-ada does what the installed GRPOTrainer does, so its streamed completions are decoded, counted and
logged exactly as TRL's own would be. Unchanged across the range, and relied on as is (`tests/test_compat.py` pins
each one that has a signature or a source line to check):

- overridden: `_generate`, `_generate_single_turn` (1.14.0 reads the run length from `self.num_generations`, later
  releases take it as an argument that `_generate` fills from `self.num_generations`: trl-ada sets that attribute for
  each round either way), `_calculate_rewards`, `_generate_and_score_completions`, `_tool_call_loop` (its output
  tuple, `ToolLoopOutput`), `_save_checkpoint`, `train` and `_get_train_sampler` (wrapped, for `set_epoch`);
- called: `_tokenize_prompts`, `_get_output_dir` (and replaced on the instance while a checkpoint is written, so
  Trainer's and TRL's save code write into the staging folder), GRPOTrainer's `_generate` output (the 8-tuple
  `GenerationOutput` names), `_calculate_rewards` ending with the module-level `gather` (`local_reward_gather` makes
  it local for one call, streaming on several processes) and logging "All reward functions returned None" through
  its module's logger (`quiet_all_none_warning`), `vllm_generation.sync_weights`, `_dist.summon_full_params`,
  Trainer's `_push_from_checkpoint`;
- read or written: `_tokenizer`, `tools`, `environments`, `environment_factories`, `_batch_environments`,
  `_sync_tool_dicts`, `_async_tool_dicts` (per-rollout state that rounds rebuild and restore), `_last_loaded_step`,
  `vllm_generation._llm_weights_sleeping`, `_pending_extra_logs`, `_pending_metrics` (a reward's `log_metric` values,
  weighted by completions scored), `_metrics`, `_logs`, `continuous_batching_config`, and `_step`,
  `_buffered_inputs`, `num_iterations` (`_prepare_inputs`' generation window, saved with a checkpoint saved inside it
  and restored on resume: `trl_ada.adapter.checkpoints`).

Checkpoint rotation is Trainer's `_rotate_checkpoints` method in transformers 5.0 and the module-level
`transformers.trainer_utils.rotate_checkpoints` by 5.17; `trl_ada.adapter.checkpoints.rotate_checkpoints` calls
whichever the installed release has. Resuming a run on several CPU processes needs transformers 5.18
(`trl_ada.adapter.checkpoints.resume_problem` says why before the resume would fail inside Trainer).
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NamedTuple

import torch
import transformers
import trl
import trl.models
import trl.trainer.grpo_trainer as grpo_trainer
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from trl.data_utils import is_conversational

# Keep in step with `install_requires` in setup.cfg and the matrix in docs/compatibility.md.
SUPPORTED_TRL = SpecifierSet(">=1.14.0,<1.17")
TRL_VERSION = Version(trl.__version__)
TRANSFORMERS_VERSION = Version(transformers.__version__)


def _accepts(function: Any, name: str) -> bool:
    return name in inspect.signature(function).parameters


_UNWRAP_TAKES_CHECKPOINTING_KWARGS = _accepts(trl.models.unwrap_model_for_generation, "gradient_checkpointing_kwargs")
_PARSE_RESPONSE_TAKES_TOOLS = _accepts(grpo_trainer.parse_response, "tools")


def check_trl_version(version: Version = TRL_VERSION) -> bool:
    """Warn (and return False) when the installed TRL is outside the range whose seams were read and tested."""
    if SUPPORTED_TRL.contains(version, prereleases=True):
        return True
    warnings.warn(
        f"trl-ada is tested with TRL {SUPPORTED_TRL}, and TRL {version} is installed. ReinforceAdaTrainer overrides "
        "private GRPOTrainer methods, which change between TRL releases: check the results, or install a "
        f"supported TRL (pip install 'trl{SUPPORTED_TRL}').",
        stacklevel=2,
    )
    return False


def unwrap_model_for_generation(trainer: Any) -> AbstractContextManager[Any]:
    """TRL's `unwrap_model_for_generation` for `trainer`'s model, with the arguments GRPOTrainer's own
    continuous-batching path passes in the installed release."""
    args = trainer.args
    kwargs: dict[str, Any] = {"gather_deepspeed3_params": args.ds3_gather_for_generation}
    if _UNWRAP_TAKES_CHECKPOINTING_KWARGS:  # TRL >= 1.16.0
        kwargs["gradient_checkpointing_kwargs"] = args.gradient_checkpointing_kwargs
    return trl.models.unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator, **kwargs)


def parse_response(tokenizer: Any, ids: list[int], prefix: list[int], tools: list | None) -> dict:
    """TRL's `parse_response`, given the prompt's tools where the installed release takes them (as its
    GRPOTrainer does)."""
    if _PARSE_RESPONSE_TAKES_TOOLS:  # TRL >= 1.16.0
        return grpo_trainer.parse_response(tokenizer, ids, prefix=prefix, tools=tools)
    return grpo_trainer.parse_response(tokenizer, ids, prefix=prefix)


def eos_token_ids(trainer: Any) -> list[int]:
    """The token ids that end a completion, as the installed GRPOTrainer counts them."""
    ids = getattr(trainer, "eos_token_ids", None)  # TRL >= 1.14.2
    return list(ids) if ids is not None else [trainer._tokenizer.eos_token_id]


def ended(trainer: Any, completion_ids: Sequence[list[int]]) -> list[bool]:
    """Whether each completion ended (last token EOS or pad, as GRPOTrainer decides it) rather than being clipped."""
    ends = {*eos_token_ids(trainer), trainer._tokenizer.pad_token_id}
    return [bool(ids) and ids[-1] in ends for ids in completion_ids]


class ToolLoopOutput(NamedTuple):
    """What `GRPOTrainer._tool_call_loop` returns, by name."""

    tool_mask: list
    completions: list
    completion_ids: list
    logprobs: list | None
    tool_call_count: int
    tool_failure_count: int
    tool_images: list | None


@contextmanager
def swapped(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Set one of GRPOTrainer's attributes for the duration of a call of its own code."""
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


@contextmanager
def local_reward_gather(num_processes: int) -> Iterator[None]:
    """Within this context, GRPOTrainer's `_calculate_rewards` returns this process's rewards, not every process's.

    It ends with the module-level `gather` of `trl.trainer.grpo_trainer`; streaming scores each process's batches on
    their own, where a gather would pair up unrelated batches or wait forever. On one process that gather already
    returns its input, so nothing is patched; on several, the module global is swapped for this one call (the
    reward functions run in it exactly as GRPOTrainer runs them: sync and async, reward models, `log_extra`)."""
    if num_processes == 1:
        yield
        return
    saved = grpo_trainer.gather
    grpo_trainer.gather = lambda tensor: tensor
    try:
        yield
    finally:
        grpo_trainer.gather = saved


# What GRPOTrainer's `_calculate_rewards` logs, through its module's logger, when every reward function returned None
# for a row. After a reward function failed, `checks.RewardGuard` returns None for its rows so that the collective
# step goes on, and then raises a message naming the function and the fix: TRL's warning, which would come first
# and blame the values, is dropped then.
ALL_REWARDS_NONE = "All reward functions returned None"


@contextmanager
def quiet_all_none_warning(failed: Callable[[], bool]) -> Iterator[None]:
    """Within this context, GRPOTrainer's "All reward functions returned None" warning is dropped while `failed()`
    says a reward function failed (a None its function returned on purpose is still warned about)."""
    logger = logging.getLogger(grpo_trainer.__name__)

    def keep(record: logging.LogRecord) -> bool:
        return not (failed() and ALL_REWARDS_NONE in str(record.msg))  # accelerate's adapter prefixes "[RANK 0] "

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def decode_completions(
    trainer: Any, prompts: Sequence[Any], prompt_ids: Sequence[list[int]], completion_ids: Sequence[list[int]]
) -> list[Any]:
    """Completions as GRPOTrainer's `_generate` decodes them for the reward functions (text, or an assistant
    message for conversational prompts, parsed with the tokenizer's response schema when it has one)."""
    tokenizer = trainer._tokenizer
    if not is_conversational({"prompt": prompts[0]}):
        return trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
    has_schema = (
        getattr(tokenizer, "response_template", None) is not None
        or getattr(tokenizer, "response_schema", None) is not None
    )
    if Version(transformers.__version__) >= Version("5.0.0") and has_schema:
        return [
            [parse_response(tokenizer, ids, prefix, trainer.tools)]
            for ids, prefix in zip(completion_ids, prompt_ids, strict=True)
        ]
    contents = trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
    return [[{"role": "assistant", "content": content}] for content in contents]


def sync_vllm_weights(trainer: Any) -> None:
    """Push the policy's weights to vLLM once per optimizer step, as GRPOTrainer's generation does."""
    if trainer.use_vllm and trainer.state.global_step != trainer._last_loaded_step:
        trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step


@contextmanager
def awake_colocated_vllm(generation: Any) -> Iterator[Any]:
    """The colocated `vllm.LLM`, awake for a batch and put back to sleep after it, as GRPOTrainer does."""
    if generation.enable_sleep_mode:
        if generation._llm_weights_sleeping:  # sleep level 2 dropped the weights: push them again
            generation.sync_weights()
        generation.llm.wake_up(tags=["kv_cache"])
    try:
        yield generation.llm
    finally:
        if generation.enable_sleep_mode:
            generation.llm.sleep(level=2)
            generation._llm_weights_sleeping = True


@contextmanager
def model_for_generation(trainer: Any) -> Iterator[Any]:
    """The policy, unwrapped, with full parameters and cast as GRPOTrainer's continuous-batching path prepares it;
    back in training mode on exit."""
    args = trainer.args
    with (
        unwrap_model_for_generation(trainer) as model,
        torch.no_grad(),
        trainer._dist.summon_full_params(trainer.model_wrapped, recurse=False),
    ):
        if args.bf16:
            model.to(torch.bfloat16)
        elif args.fp16:
            model.to(torch.float16)
        if args.cast_lm_head_to_fp32:
            model.lm_head.to(torch.float32)
        try:
            yield model
        finally:
            model.train()


class _RolloutsPrepared(Exception):
    """Stops GRPOTrainer's step once it has prepared a batch's rollouts (`prepare_rollouts`)."""


def prepare_rollouts(trainer: Any, rows: list[dict[str, Any]]) -> list:
    """Set GRPOTrainer's per-rollout state for one rollout per dataset row in `rows` and return their prompts: an
    environment instance each from TRL's pool, reset with its row (its observation appended to the prompt), the
    tool dicts TRL's tool loop calls, the row's images in the prompt. GRPOTrainer builds all of this inline at the
    top of `_generate_and_score_completions`, sized for its batch, then calls `_generate`; rounds draw other numbers
    of rollouts, so this runs that same code on the round's rows and stops it at the `_generate` call (raising is
    the one way to stop it there), rather than keep a copy of it."""
    prepared: list[list] = []

    def stop(prompts: list):
        prepared.append(prompts)
        raise _RolloutsPrepared

    shadowed = trainer.__dict__.get("_generate")  # a wrapper someone set on this instance, if any
    trainer._generate = stop  # shadows the method on this instance only, for this one call
    try:
        grpo_trainer.GRPOTrainer._generate_and_score_completions(trainer, rows)
    except _RolloutsPrepared:
        pass
    finally:
        if shadowed is None:
            del trainer._generate
        else:
            trainer._generate = shadowed
    return prepared[0]


ROLLOUT_STATE = ("environments", "_batch_environments", "_sync_tool_dicts", "_async_tool_dicts")


@contextmanager
def rollout_state_kept(trainer: Any) -> Iterator[None]:
    """Give GRPOTrainer back the per-rollout state of the step's own rows on exit (rounds replace it per round)."""
    saved = {name: getattr(trainer, name) for name in ROLLOUT_STATE if hasattr(trainer, name)}
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(trainer, name, value)


@contextmanager
def open_streaming_engine(trainer: Any, prompt_ids: list[list[int]]) -> Iterator[Any]:
    """The trainer's streaming backend for one generation batch (`trl_ada.adapter.engines`, imported on use: vLLM is
    optional): vLLM server, colocated vLLM, or transformers' continuous batching, each as GRPOTrainer configures its
    own generation; vLLM's weights synced once per step first, as GRPOTrainer does."""
    sync_vllm_weights(trainer)
    args = trainer.args
    if trainer.use_vllm and args.vllm_mode == "server":
        from .engines.vllm_server import sampling_payload, vllm_server_backend

        sampling = sampling_payload(getattr(trainer, "vllm_generation", None) or trainer, args)
        with vllm_server_backend(args, prompt_ids, sampling, trainer.accelerator.process_index) as backend:
            yield backend
    elif trainer.use_vllm:
        from .engines.vllm_colocate import sampling_params, vllm_colocate_backend

        params = sampling_params(trainer.vllm_generation)
        with awake_colocated_vllm(trainer.vllm_generation) as llm:
            with vllm_colocate_backend(llm.llm_engine, params, prompt_ids) as backend:
                yield backend
    else:
        from .engines.continuous_batching import continuous_batching_backend

        config, budget = trainer.continuous_batching_config, trainer.max_completion_length
        with model_for_generation(trainer) as model:
            with continuous_batching_backend(model, prompt_ids, trainer.generation_config, config, budget) as backend:
                yield backend


def continuous_batching_cache(num_blocks: int, page_size: int, max_batch_tokens: int) -> dict[str, int]:
    """A `transformers_continuous_batching_config` sizing the KV cache, in the installed transformers' words."""
    from transformers.generation import ContinuousBatchingConfig

    page = "page_size" if _accepts(ContinuousBatchingConfig, "page_size") else "block_size"  # transformers < 5.18
    return {"num_blocks": num_blocks, page: page_size, "max_batch_tokens": max_batch_tokens}


def seam_report() -> Iterator[str]:
    """One line per adapted seam: which form the installed TRL has (printed by `python -m trl_ada.gpu_check`)."""
    yield f"TRL {TRL_VERSION} ({'supported' if SUPPORTED_TRL.contains(TRL_VERSION, prereleases=True) else 'untested'})"
    yield f"unwrap_model_for_generation(gradient_checkpointing_kwargs=): {_UNWRAP_TAKES_CHECKPOINTING_KWARGS}"
    yield f"parse_response(tools=): {_PARSE_RESPONSE_TAKES_TOOLS}"
    yield f"GRPOTrainer.eos_token_ids: {'eos_token_ids' in inspect.getsource(grpo_trainer.GRPOTrainer.__init__)}"


check_trl_version()
