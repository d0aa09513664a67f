"""`AdaRolloutWorker`: the `rollout_worker=` to pass to `AsyncGRPOTrainer`, whose spawned child runs
`AdaRolloutLoop`, and `from_trainer_args`, which builds it with the kwargs the trainer would fill for its own."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .config import AdaRolloutConfig
from .loop import AdaRolloutLoop
from .seams import (  # TRL's private loop class, the seam this package replaces (seams.py)
    AsyncRolloutWorker,
    _AsyncRolloutLoop,
    check_async_trl_version,
)

if TYPE_CHECKING:
    from trl.experimental.async_grpo import AsyncGRPOConfig

# The worker kwargs `AsyncGRPOTrainer.__init__` fills from its config (TRL 1.16.0, async_grpo_trainer.py:1367-1390):
# worker kwarg -> AsyncGRPOConfig field. `max_inflight_tasks` is also inferred there when negative
# (`_trainer_max_inflight_tasks`).
TRAINER_ARG_KWARGS = {
    "num_generations": "num_generations",
    "max_inflight_tasks": "max_inflight_tasks",
    "queue_maxsize": "queue_maxsize",
    "vllm_server_url": "vllm_server_base_url",
    "max_tokens": "max_completion_length",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "request_timeout": "request_timeout",
    "chat_template_kwargs": "chat_template_kwargs",
    "max_tool_calling_iterations": "max_tool_calling_iterations",
    "log_completions": "log_completions",
    "num_completions_to_print": "num_completions_to_print",
    "fork_threshold_tokens": "fork_threshold_tokens",
}
TRAINER_LORA_NAME = "trl-policy"  # `AsyncGRPOTrainer._lora_name`: the served adapter's name under adapter-only sync


def _trainer_max_inflight_tasks(args: AsyncGRPOConfig, num_processes: int) -> int:
    """`args.max_inflight_tasks`, or, when negative, the trainer's inference: `max(max_staleness, 1)` optimizer steps
    of samples (`per_device_train_batch_size * gradient_accumulation_steps * num_processes`)."""
    if args.max_inflight_tasks >= 0:
        return args.max_inflight_tasks
    samples_per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * num_processes
    return max(args.max_staleness, 1) * samples_per_step


def _trainer_eos_token_ids(processing_class: Any, model_eos_token_id: int | list[int] | None) -> list[int]:
    """The trainer's end-of-completion ids: every eos id of the model's generation config, with the tokenizer's
    first when the model does not declare it."""
    if model_eos_token_id is None:
        ids: list[int] = []
    elif isinstance(model_eos_token_id, int):
        ids = [model_eos_token_id]
    else:
        ids = list(model_eos_token_id)
    if processing_class.eos_token_id not in ids:
        ids = [processing_class.eos_token_id, *ids]
    return ids


def _model_eos_token_id(model_name: str, args: AsyncGRPOConfig) -> int | list[int] | None:
    """The eos id(s) of the generation config the trainer's model would load with (its `generation_config.json`, or
    the one derived from its config when there is none), without loading the weights."""
    from transformers import AutoConfig, GenerationConfig

    init_kwargs = args.model_init_kwargs if isinstance(args.model_init_kwargs, dict) else {}
    source = {"revision": init_kwargs.get("revision"), "trust_remote_code": args.trust_remote_code}
    try:
        return GenerationConfig.from_pretrained(model_name, revision=source["revision"]).eos_token_id
    except OSError:  # no generation_config.json: transformers derives one from the model config
        config = AutoConfig.from_pretrained(model_name, **source)
        return GenerationConfig.from_model_config(config).eos_token_id


# AsyncGRPOTrainer assumes group ids are dataset rows: it checkpoints "the first group id never trained" as the row
# to resume from (async_grpo_trainer.py:1864-1867) and ends an epoch after len(dataset) trained groups (:253).
RESUME_WARNING = (
    "AdaRolloutWorker with refill or prompt_selection: AsyncGRPOTrainer saves the first group id never trained as "
    "the dataset row to resume from, and counts epochs in trained groups. Groups dropped for lack of signal are never "
    "trained and skipped rows get no group id, so a run resumed from a checkpoint restarts earlier in the dataset "
    "than where it stopped, and a run reads more rows than num_train_epochs passes over the dataset."
)


class AdaRolloutWorker(AsyncRolloutWorker):
    """`AsyncRolloutWorker` whose child runs `AdaRolloutLoop`: pass it as `rollout_worker=` to `AsyncGRPOTrainer`.

    Takes `AsyncRolloutWorker`'s kwargs (forwarded to the loop, so picklable) plus `ada`, the sampling settings;
    they are checked here, before the child is spawned. Refuses (RuntimeError) a TRL outside `SUPPORTED_ASYNC_TRL`."""

    _loop_cls = AdaRolloutLoop

    def __init__(self, *, ada: AdaRolloutConfig | None = None, **kwargs: Any) -> None:
        check_async_trl_version()
        ada = ada or AdaRolloutConfig()
        ada.validate(kwargs.get("num_generations", 8))
        if ada.refill or ada.prompt_selection != "none":
            warnings.warn(RESUME_WARNING, UserWarning, stacklevel=2)
        super().__init__(ada=ada, **kwargs)

    @classmethod
    def from_trainer_args(
        cls,
        args: AsyncGRPOConfig,
        ada: AdaRolloutConfig | None = None,
        *,
        model_name: str,
        dataset: Any = None,
        reward_funcs: Callable[..., Any] | list[Callable[..., Any]] | None = None,
        processing_class: Any = None,
        tools: list[Callable[..., Any]] | None = None,
        environment_factory: Any = None,
        eos_token_ids: list[int] | None = None,
        lora_sync: bool = False,
        num_processes: int = 1,
        **overrides: Any,
    ) -> AdaRolloutWorker:
        """The worker `AsyncGRPOTrainer(model_name, reward_funcs, args, dataset, processing_class, tools=tools,
        environment_factory=environment_factory)` would build for itself (`AsyncRolloutWorker`, with the same kwargs
        filled from `args`), running the Ada loop with `ada`. Pass it to that trainer as `rollout_worker=`.

        As the trainer does: `reward_funcs` becomes a list; without a `processing_class` the tokenizer is loaded from
        `model_name` (and its pad token set to eos when missing); `eos_token_ids` defaults to the eos ids of the
        model's generation config with the tokenizer's first; a negative `args.max_inflight_tasks` becomes
        `max(max_staleness, 1) * per_device_train_batch_size * gradient_accumulation_steps * num_processes`
        (`num_processes`: the training processes, which the trainer reads from its accelerator); `lora_sync=True`
        (a PEFT model and a server started with `--enable-lora`, which the trainer probes) names the served adapter as
        the trainer does. `args` is not modified. `overrides` replace any kwarg (e.g. `max_inflight_tasks`); kwargs
        the installed TRL's loop does not take (e.g. `eos_token_ids` before 1.16.0) are left out.
        """
        if processing_class is None:
            from transformers import AutoTokenizer

            init_kwargs = args.model_init_kwargs if isinstance(args.model_init_kwargs, dict) else {}
            processing_class = AutoTokenizer.from_pretrained(
                model_name, revision=init_kwargs.get("revision"), trust_remote_code=args.trust_remote_code
            )
        if processing_class.pad_token is None:  # the trainer sets it on the tokenizer it hands its worker
            processing_class.pad_token = processing_class.eos_token
        if reward_funcs is None:
            reward_funcs = []
        elif not isinstance(reward_funcs, list):
            reward_funcs = [reward_funcs]
        if eos_token_ids is None:
            eos_token_ids = _trainer_eos_token_ids(processing_class, _model_eos_token_id(model_name, args))
        kwargs: dict[str, Any] = {
            "model_name": model_name,
            "lora_name": TRAINER_LORA_NAME if lora_sync else None,
            "dataset": dataset,
            "reward_funcs": reward_funcs,
            "processing_class": processing_class,
            "eos_token_ids": eos_token_ids,
            "tools": tools,
            "environment_factory": environment_factory,
            **{kwarg: getattr(args, name) for kwarg, name in TRAINER_ARG_KWARGS.items() if hasattr(args, name)},
        }
        kwargs["max_inflight_tasks"] = _trainer_max_inflight_tasks(args, num_processes)
        kwargs.update(overrides)
        accepted = inspect.signature(_AsyncRolloutLoop.__init__).parameters
        worker_only = {"queue_maxsize", "child_ready_timeout"}  # consumed by AsyncRolloutWorker itself
        dropped = sorted(k for k in kwargs if k not in accepted and k not in worker_only and k not in overrides)
        for key in dropped:
            del kwargs[key]
        return cls(ada=ada, **kwargs)
