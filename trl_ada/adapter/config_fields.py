"""The fields `ReinforceAdaConfig` adds to `GRPOConfig` (default, help and declared choices each) and the values
derived from them: the exit rule, the schedule, Est's bounds, the pass-rate memory. `ReinforceAdaConfig` (config.py)
documents them and checks them when it is built (config_validation.py); `sampling_schedule` and `pass_rate_memory`
serve the asynchronous worker's config too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

from ..core.advantages import WEIGHTINGS
from ..core.allocation import ALLOCATION_RULES
from ..core.engine import DOWNSAMPLES, ROLLOUT_SCHEDULES, ROUND_SIZINGS, SAMPLING_STRATEGIES, ExitRule, Schedule
from ..core.memory import PassRateMemory
from ..core.selection import PROMPT_SELECTIONS
from ..core.step import StepSettings

BASELINES = ("pool", "group", "memory")
DIFFICULTY_WEIGHTINGS = (*WEIGHTINGS, "odc")  # "odc" reads the pass-rate memory, so the trainer computes it


@dataclass
class ReinforceAdaFields(GRPOConfig):
    """`ReinforceAdaConfig`'s own fields, on top of `GRPOConfig`'s, and what they derive. Documented on
    `ReinforceAdaConfig`, the class to use."""

    sampling_strategy: str = field(
        default="balanced",
        metadata={"help": "When a prompt stops being sampled.", "choices": SAMPLING_STRATEGIES},  # the registry, live
    )
    samples_per_round: int = field(
        default=8, metadata={"help": "Completions drawn per round for each prompt still active."}
    )
    max_rounds: int = field(
        default=4, metadata={"help": "Rounds per step; the per-prompt budget is samples_per_round * max_rounds."}
    )
    round_sizing: str = field(
        default="fixed",
        metadata={
            "help": "'fixed': samples_per_round per round; 'posterior': size each prompt's next round from its "
            "counts so far (Beta posterior), within the same budget and max_rounds.",
            "choices": list(ROUND_SIZINGS),
        },
    )
    rollout_schedule: str = field(
        default="rounds",
        metadata={
            "help": "'rounds': each round waits for all its completions; 'streaming': no barriers, each active prompt "
            "keeps max_in_flight completions in flight and stops on the first request-order prefix where its exit "
            "rule holds, aborting the rest (vLLM or transformers continuous batching).",
            "choices": list(ROLLOUT_SCHEDULES),
        },
    )
    max_in_flight: int | None = field(
        default=None,
        metadata={
            "help": "Streaming: most completions each active prompt keeps in flight. None: samples_per_round "
            "(posterior sizing keeps the expected remaining need, up to this)."
        },
    )
    vllm_request_timeout: float = field(
        default=600.0,
        metadata={"help": "Streaming, vLLM server: seconds a request may receive nothing before it fails."},
    )
    vllm_request_retries: int = field(
        default=2,
        metadata={"help": "Streaming, vLLM server: times a failed request is retried before the step fails."},
    )
    positive_threshold: float = field(
        default=0.7,
        metadata={"help": "A completion is positive when its total weighted reward is strictly above this value."},
    )
    min_positives: int | None = field(
        default=None,
        metadata={"help": "Positives needed to exit. None: num_generations // 2 (balanced) or 1 (positive)."},
    )
    min_negatives: int | None = field(
        default=None,
        metadata={"help": "Negatives needed to exit. None: num_generations - num_generations // 2 (balanced) or 0."},
    )
    advantage_baseline: str = field(
        default="pool",
        metadata={
            "help": "Where the advantage mean (and std) come from: every completion drawn for the prompt ('pool'), "
            "the kept num_generations ('group'), or the pass-rate memory of earlier steps ('memory': one 0/1 reward, "
            "scale_rewards 'none' or 'batch', no pilot).",
            "choices": list(BASELINES),
        },
    )
    difficulty_weighting: str = field(
        default="none",
        metadata={
            "help": "Per-prompt advantage weight: 1/sqrt(p) or 1/p from the pool pass rate p, or 'odc': 1/p_hat "
            "from the pass-rate memory (needs downsample='uniform').",
            "choices": list(DIFFICULTY_WEIGHTINGS),
        },
    )
    max_difficulty_weight: float = field(default=4.0, metadata={"help": "Cap on the difficulty weight."})
    downsample: str = field(
        default="balanced",
        metadata={
            "help": "How a pool is cut to num_generations: 'balanced' (half positive where it can) or 'uniform' "
            "(a uniform random subset; needed by difficulty_weighting='odc').",
            "choices": list(DOWNSAMPLES),
        },
    )
    samples_per_prompt_mean: int | None = field(
        default=None,
        metadata={
            "help": "estimate: mean completions per prompt (the step's budget / prompts). None: 2 x num_generations."
        },
    )
    min_samples_per_prompt: int | None = field(
        default=None,
        metadata={"help": "estimate: fewest completions per prompt, >= num_generations. None: num_generations."},
    )
    max_samples_per_prompt: int | None = field(
        default=None,
        metadata={"help": "estimate: most completions per prompt. None: samples_per_round * max_rounds."},
    )
    allocation_rule: str = field(
        default="inv_sqrt_p",
        metadata={
            "help": "estimate: budget share per prompt from its memory pass rate p: 1/sqrt(p) (paper), 1/p "
            "(the authors' score) or sqrt((1-p)/p) (variance-optimal), within the per-prompt bounds.",
            "choices": list(ALLOCATION_RULES),
        },
    )
    pass_rate_alpha: float = field(default=1.0, metadata={"help": "Pass-rate memory: Beta prior positives."})
    pass_rate_beta: float = field(default=16.0, metadata={"help": "Pass-rate memory: Beta prior negatives."})
    pass_rate_decay: float = field(
        default=0.9, metadata={"help": "Pass-rate memory: counts become decay * N + new when a prompt is sampled."}
    )
    pass_rate_max_prompts: int | None = field(
        default=None,
        metadata={"help": "Pass-rate memory: most prompts kept (least recently updated evicted). None: no cap."},
    )
    prompt_id_column: str | None = field(
        default=None,
        metadata={"help": "Dataset column identifying a prompt in the memory. None: a hash of the prompt."},
    )
    refill: bool = field(
        default=False,
        metadata={
            "help": "Replace prompts whose pool ends with no signal by fresh prompts from a side stream within the "
            "step (with sampling_strategy='uniform': DAPO's dynamic sampling)."
        },
    )
    max_refills_per_step: int | None = field(
        default=None,
        metadata={"help": "Most replacements per process and generation batch. None: the process's prompts."},
    )
    refill_filter_reward: str | None = field(
        default=None,
        metadata={
            "help": "Refill replaces a pool whose values of this reward function (by name) are all equal, as DAPO "
            "filters on accuracy. None: a pool whose weighted total rewards are all equal."
        },
    )
    prompt_selection: str = field(
        default="none",
        metadata={
            "help": "'pass_rate': skip (with probability 1 - selection_floor) prompts whose memory says their next "
            "group is almost surely all right or all wrong, replacing them from the side stream.",
            "choices": list(PROMPT_SELECTIONS),
        },
    )
    selection_threshold: float = field(
        default=0.5,
        metadata={"help": "Skip a prompt when its next group has no signal with at least this probability."},
    )
    selection_floor: float = field(
        default=0.1, metadata={"help": "Probability of sampling a prompt that would be skipped."}
    )
    pilot_size: int = field(
        default=0,
        metadata={
            "help": "Pilot-then-commit: completions every prompt draws first; a prompt whose pilot all agrees stops "
            "there when its memory predicts the rest of its group would agree too. 0: no pilot."
        },
    )
    pilot_stop_threshold: float = field(
        default=0.8,
        metadata={"help": "Stop after the pilot when the rest of the group agrees with it with at least this chance."},
    )
    scale_rewards: str = field(
        default="none",
        metadata={
            "help": "Divide advantages by a std: 'group' (std of the baseline set), 'batch' (std over the batch) "
            "or 'none' (the authors' recipe).",
            "choices": ["group", "batch", "none"],
        },
    )

    @property
    def uses_side_stream(self) -> bool:
        """Whether the trainer draws extra prompts from a side stream over the training set: `refill` takes
        replacements for prompts whose pool has no signal from it, and `prompt_selection` for prompts it skips."""
        return bool(self.refill) or self.prompt_selection != "none"

    @property
    def samples_per_prompt_bounds(self) -> tuple[int, int, int]:
        """(mean, min, max) completions per prompt under `sampling_strategy="estimate"`, defaults resolved."""
        mean = 2 * self.num_generations if self.samples_per_prompt_mean is None else self.samples_per_prompt_mean
        lo = self.num_generations if self.min_samples_per_prompt is None else self.min_samples_per_prompt
        hi = (
            self.samples_per_round * self.max_rounds
            if self.max_samples_per_prompt is None
            else self.max_samples_per_prompt
        )
        return mean, lo, hi

    def pass_rate_memory(self) -> PassRateMemory:
        """An empty pass-rate memory with this configuration's prior, decay and cap."""
        return pass_rate_memory(self)

    @property
    def exit_rule(self) -> ExitRule:
        """The rule that retires a prompt: the strategy's default counts, overridden by explicit ones."""
        return ExitRule.for_strategy(
            self.sampling_strategy, self.num_generations, self.min_positives, self.min_negatives
        )

    def step_settings(self) -> StepSettings:
        """The algorithm's fields a step reads (`trl_ada.core.step`), as plain values."""
        normalize_then_sum = self.multi_objective_aggregation == "normalize_then_sum"  # GRPOConfig's field
        return step_settings(self, self.num_generations, self.schedule().budget, normalize_then_sum)

    def schedule(self) -> Schedule:
        """The sampling schedule the trainer (and the simulator) run each step. Under `"estimate"` it is one round
        of at most `max_samples_per_prompt`; the trainer sizes it per prompt from the memory."""
        estimate = self.sampling_strategy == "estimate"
        round_size = self.samples_per_prompt_bounds[2] if estimate else self.samples_per_round
        return sampling_schedule(self, self.num_generations, round_size)


def sampling_schedule(settings: Any, group_size: int, samples_per_round: int) -> Schedule:
    """The `Schedule` of any object carrying `ReinforceAdaConfig`'s sampling fields (this config, or the
    asynchronous worker's `AdaRolloutConfig`), for groups of `group_size` and rounds of `samples_per_round`."""
    return Schedule.from_strategy(
        settings.sampling_strategy,
        group_size,
        samples_per_round=samples_per_round,
        max_rounds=settings.max_rounds,
        positive_threshold=settings.positive_threshold,
        min_positives=settings.min_positives,
        min_negatives=settings.min_negatives,
        round_sizing=settings.round_sizing,
    )


def pass_rate_memory(settings: Any) -> PassRateMemory:
    """An empty pass-rate memory with the prior, decay and cap of `settings` (`ReinforceAdaConfig`'s fields)."""
    return PassRateMemory(
        settings.pass_rate_alpha, settings.pass_rate_beta, settings.pass_rate_decay, settings.pass_rate_max_prompts
    )


# The core's `StepSettings` field each of `ReinforceAdaConfig`'s step fields fills.
STEP_FIELDS = {
    "downsample": "downsample",
    "baseline": "advantage_baseline",
    "scale_rewards": "scale_rewards",
    "weighting": "difficulty_weighting",
    "max_weight": "max_difficulty_weight",
    "pilot_size": "pilot_size",
    "positive_threshold": "positive_threshold",
}


def step_settings(settings: Any, group_size: int, budget: int, normalize_then_sum: bool = False) -> StepSettings:
    """The core's `StepSettings` from any object carrying `ReinforceAdaConfig`'s step fields (this config, or the
    asynchronous worker's `AdaRolloutConfig`), for groups of `group_size` and pools of at most `budget`."""
    values = {name: getattr(settings, field_name) for name, field_name in STEP_FIELDS.items()}
    selection = settings.prompt_selection != "none"
    return StepSettings(
        group_size,
        budget,
        **values,
        normalize_then_sum=normalize_then_sum,
        refill=bool(settings.refill),
        selection=selection,
    )
