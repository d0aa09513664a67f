"""`AdaRolloutConfig`: Reinforce-Ada's sampling settings for the asynchronous worker, `ReinforceAdaConfig`'s fields
of the same names (so the two cannot drift), checked by `ReinforceAdaConfig`'s own rules where they apply."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.engine import (
    STRATEGIES,
    ExitRule,
    Schedule,
)
from ...core.memory import PassRateMemory
from ...core.step import StepSettings
from ..config import ReinforceAdaConfig
from ..config_fields import pass_rate_memory, sampling_schedule, step_settings
from ..config_validation import (  # the synchronous config's own rules, so both configs refuse alike, in its words
    _check_exit_and_budget,
    _check_odc_downsample,
    _check_pilot,
    _check_prompt_source,
)

_ADA_FIELDS = {f.name: f for f in dataclasses.fields(ReinforceAdaConfig)}


def _ada_field(name: str, choices: Sequence[str] | None = None) -> Any:
    """`ReinforceAdaConfig`'s field `name` (default and help), so the two configs cannot drift; `choices` narrows
    the declared choices to those that apply to the asynchronous worker."""
    source = _ADA_FIELDS[name]
    metadata = dict(source.metadata)
    if choices is not None:
        metadata["choices"] = choices
    return field(default=source.default, metadata=metadata)


@dataclass(frozen=True)
class AdaRolloutConfig:
    """Reinforce-Ada's sampling settings for `AdaRolloutWorker`: `ReinforceAdaConfig`'s fields of the same names,
    with their defaults and meanings. `num_generations`, the group handed to the loss, is the worker's own kwarg (the
    trainer's `AsyncGRPOConfig.num_generations`). `sampling_strategy="estimate"` is not offered (it splits one
    step's budget across a batch in advance), `scale_rewards` has no `"batch"`: the asynchronous loop samples and
    scores one prompt at a time, and `advantage_baseline` has no `"memory"` (not built here yet).

    Where the asynchronous loop differs from the synchronous trainer: there are no batch slots, so `refill` does not
    replace a prompt in a slot but drops its group (the loop moves on to the next prompt; `max_consecutive_drops`
    bounds how long the trainer can wait), and prompt selection skips a prompt by moving on to the next prompt of the
    dataset rather than drawing a replacement from a side stream."""

    sampling_strategy: str = _ada_field("sampling_strategy", STRATEGIES)  # every exit rule (the registry), no Est
    samples_per_round: int = _ada_field("samples_per_round")
    max_rounds: int = _ada_field("max_rounds")
    round_sizing: str = _ada_field("round_sizing")
    max_in_flight: int | None = _ada_field("max_in_flight")
    positive_threshold: float = _ada_field("positive_threshold")
    min_positives: int | None = _ada_field("min_positives")
    min_negatives: int | None = _ada_field("min_negatives")
    advantage_baseline: str = _ada_field("advantage_baseline", ("pool", "group"))
    scale_rewards: str = _ada_field("scale_rewards", ("group", "none"))
    difficulty_weighting: str = _ada_field("difficulty_weighting")
    max_difficulty_weight: float = _ada_field("max_difficulty_weight")
    downsample: str = _ada_field("downsample")
    pass_rate_alpha: float = _ada_field("pass_rate_alpha")
    pass_rate_beta: float = _ada_field("pass_rate_beta")
    pass_rate_decay: float = _ada_field("pass_rate_decay")
    pass_rate_max_prompts: int | None = _ada_field("pass_rate_max_prompts")
    prompt_id_column: str | None = _ada_field("prompt_id_column")
    prompt_selection: str = _ada_field("prompt_selection")
    selection_threshold: float = _ada_field("selection_threshold")
    selection_floor: float = _ada_field("selection_floor")
    pilot_size: int = _ada_field("pilot_size")
    pilot_stop_threshold: float = _ada_field("pilot_stop_threshold")
    refill: bool = field(
        default=False,
        metadata={
            "help": "Do not push a group whose pool ends with no signal (every reward equal, so every advantage "
            "zero); the loop moves on to the next prompt. With sampling_strategy='uniform': DAPO's dynamic sampling."
        },
    )
    refill_filter_reward: str | None = _ada_field("refill_filter_reward")
    max_consecutive_drops: int = field(
        default=64,
        metadata={
            "help": "refill: after this many groups in a row were not pushed, the next is pushed whatever its "
            "signal, so the trainer is never starved when no prompt gives signal."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the downsampling and prompt-selection RNGs."})

    def validate(self, num_generations: int) -> None:
        """Raise a ValueError on the first broken rule, with `ReinforceAdaConfig`'s own checks and messages."""
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            if choices is not None and getattr(self, f.name) not in choices:
                raise ValueError(f"{f.name}={getattr(self, f.name)!r} is not one of {tuple(choices)}.")
        in_flight = self.max_in_flight
        if in_flight is not None and (isinstance(in_flight, bool) or in_flight < 1):
            raise ValueError(f"max_in_flight must be an integer >= 1 or None, got {in_flight!r}.")
        drops = self.max_consecutive_drops
        if isinstance(drops, bool) or not isinstance(drops, int) or drops < 1:
            raise ValueError(
                f"max_consecutive_drops must be an integer >= 1, got {drops!r}: it bounds how many groups in a row "
                "refill may keep from the trainer."
            )
        # The config checks read these attributes only; a view adds the group size they are checked against.
        view = _CheckView(self, num_generations)
        _check_exit_and_budget(view)  # type: ignore[arg-type]
        _check_odc_downsample(view)  # type: ignore[arg-type]
        _check_prompt_source(view)  # type: ignore[arg-type]
        _check_pilot(view)  # type: ignore[arg-type]
        self.pass_rate_memory()  # its constructor checks the prior, the decay and the cap

    def exit_rule(self, num_generations: int) -> ExitRule:
        return ExitRule.for_strategy(self.sampling_strategy, num_generations, self.min_positives, self.min_negatives)

    def schedule(self, num_generations: int) -> Schedule:
        """The per-prompt schedule: the same as `ReinforceAdaConfig.schedule()` for these fields."""
        return sampling_schedule(self, num_generations, self.samples_per_round)

    def pass_rate_memory(self) -> PassRateMemory:
        return pass_rate_memory(self)

    def step_settings(self, num_generations: int) -> StepSettings:
        """The algorithm's fields a step reads (`trl_ada.core.step`): one prompt's group at a time, no
        `normalize_then_sum`."""
        return step_settings(self, num_generations, self.schedule(num_generations).budget)


class _CheckView:
    """`AdaRolloutConfig` plus `num_generations`, read as a `ReinforceAdaConfig` by the config's rule functions."""

    max_refills_per_step = None  # no steps here: refill is bounded by `max_consecutive_drops` instead

    def __init__(self, config: AdaRolloutConfig, num_generations: int) -> None:
        self._config, self.num_generations = config, num_generations
        self.exit_rule = config.exit_rule(num_generations)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)
