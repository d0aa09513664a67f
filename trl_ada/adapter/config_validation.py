"""`ReinforceAdaConfig`'s checks, run when it is built: `validation_problems` runs every rule and returns what each
one found (a rule stops at its first broken condition), so that one `ConfigError` names every problem at once; then
`config_warnings`, the valid settings that do not do what they look like doing. `trainer_field_problems` checks the
GRPOConfig and TrainingArguments numbers that TRL or transformers would refuse only once the model is loaded (or with
a ZeroDivisionError). The asynchronous worker's config runs the rules that apply to it (`_check_exit_and_budget`,
...), each raising a ValueError naming its fields."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

from trl import GRPOConfig

from ..core.engine import ESTIMATE, is_adaptive
from ..core.hints import budget_hint
from .config_fields import ReinforceAdaFields
from .errors import numbered

# Validation: each rule raises a ValueError naming its fields at its first broken condition. The pass-rate memory and
# the exit rule are built once and check their own arguments; where their wording would differ from the config's
# (`self.min_positives=-1`, `group_size`), the config's own check runs first. `Schedule` is not built: each of its
# checks is made here already, in the config's words.

# The choice fields ReinforceAdaConfig adds; GRPOConfig's (its `scale_rewards`, only re-declared there with a new
# default, and TrainingArguments' `log_level` etc.) are GRPOConfig's to check or not, as before.
_CHOICES: dict[str, Sequence[str]] = {  # sampling_strategy's is the exit-rule registry's live view
    f.name: f.metadata["choices"]
    for f in fields(ReinforceAdaFields)
    if "choices" in f.metadata and f.name not in {g.name for g in fields(GRPOConfig)}
}


class ConfigError(ValueError):
    """Every problem `ReinforceAdaConfig` found in its values, one sentence each (`problems`); its message is one
    line, numbered when there are several."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(numbered(self.problems, "the settings"))


def validation_problems(config: ReinforceAdaFields, tolerate: bool = False) -> list[str]:
    """What every rule finds wrong with `config` (empty when nothing). Choices and types come first; when either is
    broken the other rules are not run, since every later rule (and every object built along the way) assumes a
    known strategy, sizing and schedule and numbers where numbers go. `tolerate`: problems were found already (in the
    fields GRPOConfig reads), so a rule that cannot even run on the values (a TypeError on a None that GRPOConfig did
    not get to derive) is skipped rather than raised."""
    problems = _run_rules(config, (_check_choices, _check_types), tolerate)
    if problems:
        return problems
    return _run_rules(config, _RULES, tolerate)


def _run_rules(
    config: ReinforceAdaFields, rules: Sequence[Callable[[ReinforceAdaFields], Any]], tolerate: bool
) -> list[str]:
    problems: list[str] = []
    for rule in rules:
        try:
            rule(config)
        except ValueError as error:
            problems.append(str(error))
        except Exception:
            if not (tolerate or problems):
                raise
    return problems


def _validate(config: ReinforceAdaFields) -> None:
    """Raise a `ConfigError` naming every problem `validation_problems` finds in `config`."""
    problems = validation_problems(config)
    if problems:
        raise ConfigError(problems)


# GRPOConfig's and TrainingArguments' numbers that TRL, transformers or torch refuse only once the model is loaded
# (the optimizer, the first `generate`), or that make GRPOConfig fail with a ZeroDivisionError: (field, None allowed,
# the test a valid value passes, what it must be). Written so that NaN fails too.
_TRAINER_FIELDS: tuple[tuple[str, bool, Callable[[Any], bool], str], ...] = (
    (
        "num_generations",
        False,
        lambda v: _integer(v) and v >= 2,
        "an integer >= 2 (GRPO compares the completions of a prompt with each other)",
    ),
    ("learning_rate", False, lambda v: _real(v) and 0 <= v < math.inf, "a number >= 0"),
    ("temperature", False, lambda v: _real(v) and 0 < v < math.inf, "a number > 0 (completions are sampled)"),
    ("max_completion_length", True, lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("top_p", False, lambda v: _real(v) and 0 < v <= 1, "a number in (0, 1]"),
    ("min_p", True, lambda v: _real(v) and 0 <= v <= 1, "a number in [0, 1]"),
    ("repetition_penalty", False, lambda v: _real(v) and 0 < v < math.inf, "a number > 0"),
    ("per_device_train_batch_size", False, lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("gradient_accumulation_steps", False, lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("steps_per_generation", True, lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("num_iterations", False, lambda v: _integer(v) and v >= 1, "an integer >= 1"),
)


def _integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def trainer_field_problems(config: Any) -> dict[str, str]:
    """The GRPOConfig / TrainingArguments values in `_TRAINER_FIELDS` that would fail later, by field (a field this
    TRL does not have is skipped)."""
    problems = {}
    for name, optional, valid, wanted in _TRAINER_FIELDS:
        if not hasattr(config, name):
            continue
        value = getattr(config, name)
        if (value is None and optional) or (value is not None and valid(value)):
            continue
        problems[name] = f"{name} must be {wanted}{' or None' if optional else ''}, got {value!r}."
    return problems


def naming_none_of(problems: Sequence[str], names: Sequence[str]) -> list[str]:
    """`problems` without those that name one of the fields `names` (already reported as invalid on their own): a
    rule comparing with `num_generations=0` only repeats that problem in other words."""
    return [problem for problem in problems if not any(re.search(rf"\b{name}\b", problem) for name in names)]


def _check_choices(config: ReinforceAdaFields) -> None:
    """Every choice field holds one of the values its metadata declares (the CLI's `choices` too)."""
    for name, choices in _CHOICES.items():
        value = getattr(config, name)
        if value not in choices:
            raise ValueError(f"{name}={value!r} is not one of {tuple(choices)}.")


def _check_exit_and_budget(config: ReinforceAdaFields) -> None:
    """The weighting and exit fields are in range, the exit rule fits a group and a Seq budget can fill one."""
    if not config.max_difficulty_weight >= 1.0:  # written so that NaN fails too
        raise ValueError(
            f"max_difficulty_weight must be >= 1 (a cap on an up-weighting), got {config.max_difficulty_weight}."
        )
    if not math.isfinite(config.positive_threshold):  # inf: nothing (or everything) is ever positive
        raise ValueError(
            f"positive_threshold must be a finite number, got {config.positive_threshold}. It is compared with the "
            "total weighted reward; rewards outside [0, 1] are fine, with a threshold on the same scale."
        )
    for name in ("samples_per_round", "max_rounds"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)}.")
    # ExitRule rejects negative counts too, but names them `self.min_positives=` and does not mention None.
    for name in ("min_positives", "min_negatives"):
        value = getattr(config, name)
        if value is not None and value < 0:
            raise ValueError(f"{name} must be >= 0 (or None to derive it from the strategy), got {value}.")
    rule = config.exit_rule
    if rule.min_positives + rule.min_negatives > config.num_generations:
        raise ValueError(
            f"The exit rule asks for {rule.min_positives} positives + {rule.min_negatives} negatives, more than "
            f"the {config.num_generations} completions (num_generations) a group keeps. Lower min_positives / "
            "min_negatives or raise num_generations."
        )
    # Plain GRPO draws one round of exactly num_generations and Est sizes its own round; only Seq can fall short.
    if is_adaptive(config.sampling_strategy) and config.samples_per_round * config.max_rounds < config.num_generations:
        raise ValueError(
            f"The per-prompt budget samples_per_round * max_rounds = {config.samples_per_round} * "
            f"{config.max_rounds} is smaller than num_generations={config.num_generations}, so a group could never "
            f"be filled. {budget_hint(config.samples_per_round, config.max_rounds, config.num_generations)}"
        )


def _check_whole_groups_per_process(config: ReinforceAdaFields) -> None:
    """Each process samples and downsamples its own prompts, so its share of a generation batch is whole groups.
    (GRPOConfig only checks the batch over all processes.)"""
    local_rows = config.generation_batch_size // config.world_size
    if local_rows % config.num_generations:
        raise ValueError(
            f"Each process must hold whole prompt groups: its generation batch of {local_rows} rows "
            f"(generation_batch_size {config.generation_batch_size} / {config.world_size} processes) is not a "
            f"multiple of num_generations={config.num_generations}. Adjust per_device_train_batch_size or "
            "steps_per_generation."
        )


def _check_odc_downsample(config: ReinforceAdaFields) -> None:
    """ODC's 1/p_hat weight is unbiased only over a uniformly drawn kept group (or when nothing is downsampled)."""
    if (
        config.difficulty_weighting == "odc"
        and config.downsample != "uniform"
        and config.sampling_strategy != "uniform"
    ):
        raise ValueError(
            "difficulty_weighting='odc' multiplies a prompt's update by 1/p_hat, which targets the log objective "
            "only when the kept group is a uniform draw from the pool; the balanced downsample re-weights each "
            "prompt by about (p^2 + (1-p)^2) / (2p(1-p)) on top. Set downsample='uniform'."
        )


def _check_memory_baseline(config: ReinforceAdaFields) -> None:
    """The memory baseline is a pass rate, not a group statistic: there is no group std to divide by, and a weight
    taken from this step's pool pass rate would depend on the rewards it scales. (The pilot: `_check_pilot`.)"""
    if config.advantage_baseline != "memory":
        return
    if config.scale_rewards == "group":
        raise ValueError(
            "advantage_baseline='memory' cannot divide by the group's std (scale_rewards='group'): a group whose "
            "rewards all agree has std 0 but nonzero advantages. Use scale_rewards='none' or 'batch'."
        )
    if getattr(config, "multi_objective_aggregation", None) == "normalize_then_sum":
        raise ValueError(
            "advantage_baseline='memory' subtracts a pass rate from the total reward; "
            "multi_objective_aggregation='normalize_then_sum' standardises each reward function on its own. Use "
            "'sum_then_normalize' or another advantage_baseline."
        )
    if config.difficulty_weighting in ("inv_sqrt_p", "inv_p"):
        raise ValueError(
            f"advantage_baseline='memory' with difficulty_weighting={config.difficulty_weighting!r}: that weight "
            "comes from the pool's pass rate this step, a function of the very rewards it multiplies, so the update "
            "is no longer the unbiased gradient the memory baseline gives. Use difficulty_weighting='odc' (1/p_hat "
            "from the memory, fixed before the step) or 'none'."
        )


def _check_estimate_budget(config: ReinforceAdaFields) -> None:
    """Est's per-prompt bounds are whole numbers, a pool can fill a group, and the mean lies within the bounds."""
    mean, lo, hi = config.samples_per_prompt_bounds
    names = ("samples_per_prompt_mean", "min_samples_per_prompt", "max_samples_per_prompt")
    for name, value in zip(names, (mean, lo, hi), strict=True):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer (completions per prompt), got {value!r}.")
    if lo < config.num_generations:
        raise ValueError(
            f"min_samples_per_prompt={lo} is below num_generations={config.num_generations}: a prompt's pool would "
            "be too small to downsample to a group. Raise min_samples_per_prompt or lower num_generations."
        )
    if not lo <= mean <= hi:
        raise ValueError(
            f"samples_per_prompt_mean={mean} must lie between min_samples_per_prompt={lo} and "
            f"max_samples_per_prompt={hi}, or the step's budget cannot be split within the bounds."
        )


def _check_streaming(config: ReinforceAdaFields) -> None:
    """The streaming settings are in range; streaming needs an exit rule and an engine that can abort requests."""
    in_flight = config.max_in_flight
    if in_flight is not None and (isinstance(in_flight, bool) or in_flight < 1):
        raise ValueError(f"max_in_flight must be an integer >= 1 or None, got {in_flight!r}.")
    if not config.vllm_request_timeout > 0:  # written so that NaN fails too
        raise ValueError(f"vllm_request_timeout must be > 0 seconds, got {config.vllm_request_timeout}.")
    if config.vllm_request_retries < 0:
        raise ValueError(f"vllm_request_retries must be >= 0, got {config.vllm_request_retries}.")
    if config.rollout_schedule != "streaming":
        return
    if config.sampling_strategy == "estimate":
        raise ValueError(
            "rollout_schedule='streaming' has nothing to stream under sampling_strategy='estimate': its "
            "per-prompt sizes are fixed before sampling and it has no exit rule. Use rollout_schedule='rounds'."
        )
    if not config.use_vllm and not config.use_transformers_continuous_batching:
        raise ValueError(
            "rollout_schedule='streaming' needs an engine that takes and aborts requests while it generates: "
            "set use_vllm=True (vllm_mode='server' or 'colocate'), or use_transformers_continuous_batching=True "
            "to stream through transformers on this machine. Plain `model.generate` works on whole batches; use "
            "rollout_schedule='rounds' with it."
        )
    if config.use_vllm and config.vllm_mode == "colocate" and config.vllm_tensor_parallel_size > 1:
        raise ValueError(
            "rollout_schedule='streaming' with vllm_mode='colocate' needs vllm_tensor_parallel_size=1: with "
            "tensor parallelism every rank of the group must submit and abort the same requests in lockstep, "
            "which streaming does not do. Use rollout_schedule='rounds', or vllm_mode='server'."
        )


def _check_prompt_source(config: ReinforceAdaFields) -> None:
    """The refill and prompt-selection settings are in range, and refill has an exit rule and budget to work with.
    The selection settings are checked even when no side stream is used, so a bad value fails before it matters."""
    if not 0.0 < config.selection_threshold <= 1.0:
        raise ValueError(f"selection_threshold must be in (0, 1], got {config.selection_threshold}.")
    if not 0.0 < config.selection_floor <= 1.0:
        raise ValueError(
            f"selection_floor must be in (0, 1], got {config.selection_floor}: with 0 a skipped prompt would never "
            "be sampled again, so its memory could never show that it changed."
        )
    refills = config.max_refills_per_step
    if refills is not None and (isinstance(refills, bool) or not isinstance(refills, int) or refills < 0):
        raise ValueError(f"max_refills_per_step must be an integer >= 0 or None, got {refills!r}.")
    if config.refill_filter_reward is not None and not config.refill:
        raise ValueError(
            f"refill_filter_reward={config.refill_filter_reward!r} chooses which pools refill replaces; it needs "
            "refill=True."
        )
    if config.refill and config.sampling_strategy == "estimate":
        raise ValueError(
            "refill=True needs an exit rule and a per-prompt budget to sample a replacement with; "
            "sampling_strategy='estimate' splits one step's budget across the batch in advance. Use 'uniform' "
            "(DAPO's dynamic sampling), 'positive' or 'balanced'."
        )


def _check_pilot(config: ReinforceAdaFields) -> None:
    """A pilot draws fewer completions than a group, under a strategy that samples each prompt on its own."""
    size = config.pilot_size
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < config.num_generations:
        raise ValueError(
            f"pilot_size must be an integer from 0 (no pilot) to num_generations - 1 = {config.num_generations - 1}, "
            f"got {size!r}: a pilot of a whole group decides nothing the group would not."
        )
    if not 0.0 < config.pilot_stop_threshold <= 1.0:
        raise ValueError(f"pilot_stop_threshold must be in (0, 1], got {config.pilot_stop_threshold}.")
    if size and config.sampling_strategy == "estimate":
        raise ValueError(
            "pilot_size needs a strategy that samples each prompt on its own ('uniform', 'positive' or "
            "'balanced'); sampling_strategy='estimate' splits one step's budget across the batch in advance."
        )
    if size and config.advantage_baseline == "memory":
        raise ValueError(
            "pilot_size stops a prompt whose pilot agrees, saving a group that would have no signal under a pool or "
            "group mean; under advantage_baseline='memory' an agreeing group has signal (reward - p_hat), and "
            "whether a prompt stops depends on its pilot's own rewards, so training the stopped pilot (repeated to "
            "num_generations) or zeroing it would both bias the update. Use pilot_size=0 with the memory baseline, "
            "or advantage_baseline='pool'."
        )


def _check_pass_rate_memory(config: ReinforceAdaFields) -> None:
    config.pass_rate_memory()  # its constructor checks the prior, the decay and the cap


def _check_estimate(config: ReinforceAdaFields) -> None:
    if config.sampling_strategy == "estimate":
        _check_estimate_budget(config)


# Types: every numeric (and boolean) field ReinforceAdaConfig adds, read from its annotation, so a new field is
# checked too. A wrong type would otherwise fail as a bare TypeError in a comparison below ("'<' not supported between
# instances of 'str' and 'int'"), or pass unnoticed (2.5 rounds).
_ADDED = [f for f in fields(ReinforceAdaFields) if f.name not in {g.name for g in fields(GRPOConfig)}]
_TYPED_FIELDS: dict[str, tuple[str, bool]] = {  # name -> (kind, None allowed)
    f.name: (str(f.type).removesuffix(" | None"), str(f.type).endswith(" | None"))
    for f in _ADDED
    if str(f.type).removesuffix(" | None") in ("int", "float", "bool")
}


def _check_types(config: ReinforceAdaFields) -> None:
    """Integer fields hold integers, float fields real numbers, `refill` a bool, each naming the field. A bool is
    not a number here (`samples_per_round=True` is a mistake, not 1), and a float is not an integer, even 8.0."""
    for name, (kind, optional) in _TYPED_FIELDS.items():
        value = getattr(config, name)
        if value is None and optional:
            continue
        if kind == "bool":
            ok, wanted = isinstance(value, bool), "True or False"
        elif kind == "int":
            ok, wanted = isinstance(value, numbers.Integral) and not isinstance(value, bool), "an integer"
        else:
            ok, wanted = isinstance(value, numbers.Real) and not isinstance(value, bool), "a number"
        if not ok:
            shown = f"{value!r} ({type(value).__name__})" if isinstance(value, str | bool) else repr(value)
            raise ValueError(f"{name} must be {wanted}{' or None' if optional else ''}, got {shown}.")


# Warnings: settings that are valid but do not do what they look like doing. `config_warnings` returns them; the
# config emits each once, as a UserWarning, when it is built.

# The sampling fields each strategy never reads. A field counts as set by the user when its value differs from its
# default: one passed explicitly at its default value is not reported.
_EST_FIELDS = ("samples_per_prompt_mean", "min_samples_per_prompt", "max_samples_per_prompt", "allocation_rule")


def _ignored_by(strategy: str) -> tuple[str, ...]:
    """The sampling fields `strategy` never reads: Est's for an exit rule, the rounds' too for plain GRPO."""
    if strategy == ESTIMATE:
        return ("round_sizing",)
    return _EST_FIELDS if is_adaptive(strategy) else ("samples_per_round", "max_rounds", "round_sizing", *_EST_FIELDS)


def config_warnings(config: ReinforceAdaFields) -> list[str]:
    """The warnings `config` deserves (see above): an adaptive budget no larger than the group, and fields the
    chosen strategy ignores."""
    found = [message for message in (_uniform_budget_message(config), _ignored_fields_message(config)) if message]
    return found


def _uniform_budget_message(config: ReinforceAdaFields) -> str | None:
    """An adaptive strategy whose budget equals the group draws exactly `num_generations` for every prompt: uniform
    sampling under another name. (A budget below the group is refused in `_validate`.)"""
    group, strategy = config.num_generations, config.sampling_strategy
    if is_adaptive(strategy):
        budget = config.samples_per_round * config.max_rounds
        if budget != group:
            return None
        spent = (
            f"a budget of samples_per_round * max_rounds = {config.samples_per_round} * {config.max_rounds} = "
            f"{budget}, equal to num_generations={group}"
        )
        fix = "raise samples_per_round or max_rounds, or lower num_generations (e.g. to samples_per_round)"
    elif strategy == "estimate":
        # Every prompt gets at least num_generations (min_samples_per_prompt >= it), so a mean of num_generations
        # leaves each exactly that; a max of num_generations forces the mean down to it (the bounds are checked).
        if config.samples_per_prompt_bounds[0] != group:
            return None
        spent = f"samples_per_prompt_mean={group}, equal to num_generations (each prompt gets at least that)"
        fix = "raise samples_per_prompt_mean and max_samples_per_prompt above num_generations"
    else:
        return None
    return (
        f"sampling_strategy={strategy!r} with {spent}: every prompt draws exactly {group} completions, which is "
        f"uniform sampling (plain GRPO) with nothing adaptive. To sample adaptively, {fix}; for plain GRPO, set "
        "sampling_strategy='uniform'."
    )


def _ignored_fields_message(config: ReinforceAdaFields) -> str | None:
    """Fields set away from their defaults that the chosen strategy never reads."""
    ignored = list(_ignored_by(config.sampling_strategy))
    if config.sampling_strategy == "estimate" and config.max_samples_per_prompt is not None:
        ignored += ["samples_per_round", "max_rounds"]  # they only give max_samples_per_prompt's default
    defaults = {f.name: f.default for f in fields(ReinforceAdaFields)}
    changed = [name for name in ignored if getattr(config, name) != defaults[name]]
    if not changed:
        return None
    shown = ", ".join(f"{name}={getattr(config, name)!r}" for name in changed)
    return (
        f"sampling_strategy={config.sampling_strategy!r} ignores {shown}: these settings change nothing. Remove "
        "them, or choose the strategy that reads them (samples_per_round, max_rounds and round_sizing: 'balanced' "
        "or 'positive'; samples_per_prompt_mean, min_/max_samples_per_prompt and allocation_rule: 'estimate'). "
        "A field counts as set when it differs from its default."
    )


# The rules `validation_problems` runs once the choices and types are right, in this order.
_RULES: tuple[Callable[[ReinforceAdaFields], None], ...] = (
    _check_exit_and_budget,
    _check_whole_groups_per_process,
    _check_pass_rate_memory,
    _check_odc_downsample,
    _check_memory_baseline,
    _check_estimate,
    _check_streaming,
    _check_prompt_source,
    _check_pilot,
)
