from __future__ import annotations

import math
import numbers
import sys
import warnings
from dataclasses import dataclass, field, fields
from typing import Any

from trl import GRPOConfig

from ..core.advantages import WEIGHTINGS
from ..core.allocation import ALLOCATION_RULES
from ..core.engine import DOWNSAMPLES, ROLLOUT_SCHEDULES, ROUND_SIZINGS, STRATEGIES, ExitRule, Schedule
from ..core.hints import budget_hint
from ..core.memory import PassRateMemory
from ..core.selection import PROMPT_SELECTIONS

BASELINES = ("pool", "group", "memory")
SAMPLING_STRATEGIES = (*STRATEGIES, "estimate")
DIFFICULTY_WEIGHTINGS = (*WEIGHTINGS, "odc")  # "odc" reads the pass-rate memory, so the trainer computes it


@dataclass
class ReinforceAdaConfig(GRPOConfig):
    r"""
    Configuration class for [`ReinforceAdaTrainer`].

    Inherits every parameter of [`~trl.GRPOConfig`]. `num_generations` keeps its meaning: the number of completions
    per prompt handed to the loss. Reinforce-Ada samples a larger *pool* per prompt, in rounds, and downsamples it
    to `num_generations`.

    Parameters:
        sampling_strategy (`str`, *optional*, defaults to `"balanced"`):
            When a prompt stops being sampled. `"balanced"`: once its pool holds `min_positives` correct and
            `min_negatives` incorrect completions (Reinforce-Ada-Seq-balance, the paper's best). `"positive"`: once it
            holds `min_positives` correct ones. `"uniform"`: plain GRPO, one round of `num_generations`.
            `"estimate"` (Reinforce-Ada-Est): one round per step, its budget `samples_per_prompt_mean` x prompts split
            across prompts by `allocation_rule` from each prompt's pass rate in the pass-rate memory.
        samples_per_round (`int`, *optional*, defaults to `8`):
            Completions drawn per round for each prompt still active.
        max_rounds (`int`, *optional*, defaults to `4`):
            Rounds per step. The per-prompt budget is `samples_per_round * max_rounds`.
        round_sizing (`str`, *optional*, defaults to `"fixed"`):
            `"fixed"`: every round draws `samples_per_round` completions per active prompt. `"posterior"`: each
            active prompt's next round is sized from its counts so far (a Beta(1, 1) prior updated to a Beta posterior
            on its pass rate) to minimise its expected samples, the last round taking whatever budget is left; the
            budget `samples_per_round * max_rounds` and `max_rounds` still cap it, so a round can draw more or fewer
            than `samples_per_round` for a prompt. Resolves the same prompts as `"fixed"`, with fewer samples on the
            pass-rate mixes measured in `benchmarks/README.md`.
        rollout_schedule (`str`, *optional*, defaults to `"rounds"`):
            `"rounds"`: every round waits for all of its completions before the next round starts (the paper's
            loop). `"streaming"`: no round barriers; each active prompt keeps up to `max_in_flight` completions in
            flight, finished completions are scored in small batches, and a prompt stops at the first prefix of its
            completions, in the order they were requested, where its exit rule holds (the pool is then distributed
            exactly as with one sample at a time); its other requests are aborted. Needs an engine with continuous
            batching: vLLM (server or colocate) or `use_transformers_continuous_batching=True`. Not for
            `sampling_strategy="estimate"`, whose sizes are fixed before sampling.
        max_in_flight (`int` or `None`, *optional*, defaults to `None`):
            Streaming: the most completions each active prompt keeps in flight. `None`: `samples_per_round`. With
            `round_sizing="posterior"` a prompt keeps as many as it is expected to still need (from every outcome
            seen so far, Beta(1, 1) prior), up to this.
        vllm_request_timeout (`float`, *optional*, defaults to `600.0`):
            Streaming in vLLM server mode: seconds a request may go without receiving any data (the server streams
            tokens as they are generated) before it counts as failed.
        vllm_request_retries (`int`, *optional*, defaults to `2`):
            Streaming in vLLM server mode: times a failed request (refused connection, server error, timeout) is
            sent again before the step fails on every process with an error naming the server and these settings.
        positive_threshold (`float`, *optional*, defaults to `0.7`):
            A completion is positive when its total weighted reward is strictly above this value.
        min_positives (`int` or `None`, *optional*, defaults to `None`):
            Positives a prompt needs before it exits. `None`: `num_generations // 2` for `"balanced"`, 1 for
            `"positive"`.
        min_negatives (`int` or `None`, *optional*, defaults to `None`):
            Negatives a prompt needs before it exits. `None`: `num_generations - num_generations // 2` for
            `"balanced"`, 0 for `"positive"`.
        advantage_baseline (`str`, *optional*, defaults to `"pool"`):
            `"pool"`: the advantage baseline (and std, when `scale_rewards` is not `"none"`) comes from every
            completion drawn for the prompt this step. `"group"`: from the kept `num_generations` only, as GRPO does.
            `"memory"`: the pass-rate memory's estimate from earlier steps, `(1 + N_pos) / (2 + N_total)` (a
            uniform prior, whatever `pass_rate_alpha`/`pass_rate_beta`), so a group whose rewards all agree still
            trains and no sample is part of its own baseline; meant for prompts that recur (several epochs), level
            with GRPO n=4 per token on the reasoning toy task (`benchmarks/README.md#the-reasoning-task`). Meant
            for one binary (0/1) reward, with a warning otherwise; needs `scale_rewards` `"none"` or `"batch"`, no
            `normalize_then_sum`, no `pilot_size`, and `difficulty_weighting` `"none"` or `"odc"`.
        difficulty_weighting (`str`, *optional*, defaults to `"none"`):
            Multiply each prompt's advantages by `1/sqrt(p)` (`"inv_sqrt_p"`) or `1/p` (`"inv_p"`), `p` being the
            pool pass rate, to weight hard prompts up; or by `1/p_hat` (`"odc"`, Oversample-Downsample-Correct),
            `p_hat` being the pass-rate memory's estimate from earlier steps. Objective ascended, with
            `scale_rewards="none"` and a uniformly drawn kept group, each prompt's update also scaled by `(N-1)/N`
            for a pool of `N` (the pool-mean baseline): `"none"` E[p]; `"inv_sqrt_p"` E[2 sqrt p] approximately
            (its weight comes from the pool's own pass rate: 0.76x that gradient at p = 0.1 with a pool of 8,
            1.05x at p = 0.5); `"inv_p"` E[log p] (biased: the weight comes from the rewards it scales); `"odc"`
            E[log p] (unbiased up to the cap, as `p_hat` is fixed before the step's samples are drawn; with the
            default prior a prompt never seen has `p_hat = 1/17`, so its weight is the cap). `"odc"` needs
            `downsample="uniform"` (or `sampling_strategy="uniform"`, where nothing is downsampled).
        max_difficulty_weight (`float`, *optional*, defaults to `4.0`):
            Cap on the difficulty weight (`p` is clamped so the weight never exceeds it).
        downsample (`str`, *optional*, defaults to `"balanced"`):
            How a pool is cut to `num_generations`: `"balanced"` keeps half positives where it can (the paper's
            choice; it re-weights each prompt's expected update by about `(p^2 + (1-p)^2) / (2p(1-p))`);
            `"uniform"` keeps a uniform random subset, distributed as a fresh GRPO group when the pool's size was
            fixed before sampling (`"estimate"`); a Seq pool stops on its own rewards, so there it is close to, not
            exactly, a fresh group. Training on every sample (the authors' Est code) is not offered: TRL's loss
            takes `num_generations` rows per prompt, and with all samples each prompt's share of a token-mean loss
            would grow with its sample count, an extra per-prompt weight equal to its allocation.
        samples_per_prompt_mean (`int` or `None`, *optional*, defaults to `None`):
            `"estimate"`: mean completions per prompt; the step's budget is this times the process's prompts.
            `None`: `2 * num_generations`.
        min_samples_per_prompt (`int` or `None`, *optional*, defaults to `None`):
            `"estimate"`: fewest completions a prompt gets, at least `num_generations`. `None`: `num_generations`.
        max_samples_per_prompt (`int` or `None`, *optional*, defaults to `None`):
            `"estimate"`: most completions a prompt gets. `None`: `samples_per_round * max_rounds`, Seq's budget.
        allocation_rule (`str`, *optional*, defaults to `"inv_sqrt_p"`):
            `"estimate"`: each prompt's share of the budget, from its memory pass rate `p_hat`: `1/sqrt(p_hat)`
            (`"inv_sqrt_p"`, the paper's Algorithm 1), `1/p_hat` (`"inv_p"`, the score of the authors' code, which
            gives every prompt 1 sample plus a share of the rest proportional to 1/p, uncapped) or
            `sqrt((1 - p_hat)/p_hat)` (`"variance_optimal"`, the paper's appendix). Every rule's shares are
            water-filled within the bounds above (`min_samples_per_prompt` to `max_samples_per_prompt`).
        pass_rate_alpha (`float`, *optional*, defaults to `1.0`):
            Beta prior of the pass-rate memory (positives): `p_hat = (alpha + N_pos) / (alpha + beta + N_total)`, so
            a prompt never seen starts at `alpha / (alpha + beta)` = 1/17 (assumed hard). The memory is kept under
            every strategy (for the `ada/p_hat_mean` metric and `"odc"`); `"estimate"` sizes its round from it.
        pass_rate_beta (`float`, *optional*, defaults to `16.0`):
            Beta prior of the pass-rate memory (negatives).
        pass_rate_decay (`float`, *optional*, defaults to `0.9`):
            Each time a prompt is sampled its counts become `decay * N + new`.
        pass_rate_max_prompts (`int` or `None`, *optional*, defaults to `None`):
            Cap on the prompts the memory keeps (least recently updated evicted first). `None`: one small record per
            distinct prompt trained on.
        prompt_id_column (`str` or `None`, *optional*, defaults to `None`):
            Dataset column identifying a prompt in the memory. `None`: a hash of the prompt (text or messages).
        refill (`bool`, *optional*, defaults to `False`):
            Replace a prompt whose pool ends with no signal (every reward equal, so every advantage zero) by a fresh
            prompt from a side stream over the training set, sampled within the same step under the same schedule
            with a budget of its own; the batch keeps its size and the rows handed to the loss (and logged) belong
            to the replacement. With `sampling_strategy="uniform"` this is DAPO's dynamic sampling with group
            filtering, per prompt slot. The side stream is shuffled with `seed`, sharded across processes and saved
            in checkpoints. Needs a map-style training set with a `prompt` column and no images.
        max_refills_per_step (`int` or `None`, *optional*, defaults to `None`):
            The most replacements each process makes per generation batch. `None`: as many as the process has
            prompts in the batch. A slot can be refilled again when its replacement also has no signal.
        refill_filter_reward (`str` or `None`, *optional*, defaults to `None`):
            The name of one reward function (as logged under `rewards/<name>/mean`) whose values decide whether a
            pool has signal for refill: a pool is replaced when that function gives all its completions the same
            value, as DAPO's recipe filters on accuracy. `None`: when the weighted total reward is the same.
        prompt_selection (`str`, *optional*, defaults to `"none"`):
            `"pass_rate"`: before sampling, a prompt whose memory counts make its next group almost surely all right
            or all wrong (`trl_ada.selection.no_signal_probability` >= `selection_threshold`) is sampled only with
            probability `selection_floor` and otherwise replaced by the next side-stream prompt that passes the same
            test. Prompts never seen are always sampled.
        selection_threshold (`float`, *optional*, defaults to `0.5`):
            Skip a prompt when the probability that its next group carries no signal is at least this. At 0.5 one
            earlier visit whose group of 4 was all right (or all wrong) suffices; at 0.8 it takes about five in a
            row (`benchmarks/refill_selection.py` measures both).
        selection_floor (`float`, *optional*, defaults to `0.1`):
            The probability with which a prompt that would be skipped is sampled anyway, so its memory can change.
        pilot_size (`int`, *optional*, defaults to `0`):
            Pilot-then-commit: every prompt first draws this many completions. A prompt whose pilot completions all
            agree (all right or all wrong) stops there when the probability that the rest of its group would agree
            with them too is at least `pilot_stop_threshold`; the others go on under `sampling_strategy`, the pilot
            counting towards their group and budget. The probability is the posterior predictive given the prompt's
            pass-rate memory and its pilot, under a Beta prior fitted to the whole memory
            (`trl_ada.selection.pilot_stop_rule`). A stopped prompt costs `pilot_size` completions instead of a
            group, and trains on its pilot's completions with zero advantage, as an all-equal group would. Every
            prompt is sampled at every visit, so one that starts to change shows it. `0`: no pilot. Must be below
            `num_generations`; not with `sampling_strategy="estimate"` or `advantage_baseline="memory"`.
        pilot_stop_threshold (`float`, *optional*, defaults to `0.8`):
            How sure the pilot's stop rule must be that the rest of the group would carry no signal.

    > Parameters whose default differs from [`~trl.GRPOConfig`]:
    >
    > - `scale_rewards`: `"none"` instead of `"group"`. The authors' shipped recipe subtracts the pool mean and does
    >   not divide by a std (`A = r - p_hat`); set `"group"` to divide by the std of the same set as the baseline,
    >   or `"batch"` to divide by the std over the whole batch.
    """

    sampling_strategy: str = field(
        default="balanced",
        metadata={"help": "When a prompt stops being sampled.", "choices": list(SAMPLING_STRATEGIES)},
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

    def __post_init__(self) -> None:
        """Resolve GRPOConfig's settings, then check this class's (see `_validate`)."""
        super().__post_init__()  # first: GRPOConfig derives generation_batch_size, which the rules below read
        _validate(self)
        for message in config_warnings(self):
            warnings.warn(message, UserWarning, stacklevel=3)

    def get_process_log_level(self) -> int:
        """TrainingArguments' log level. transformers' `Trainer.__init__` calls it once, as
        `args.get_process_log_level()`: the one moment this config meets the trainer that takes it, so it warns
        there when that trainer is not a `ReinforceAdaTrainer` (a plain `GRPOTrainer` trains plain GRPO and ignores
        every Reinforce-Ada field)."""
        warn_unless_ada_trainer(sys._getframe(1).f_locals.get("self"))
        return super().get_process_log_level()

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

    def schedule(self) -> Schedule:
        """The sampling schedule the trainer (and the simulator) run each step. Under `"estimate"` it is one round
        of at most `max_samples_per_prompt`; the trainer sizes it per prompt from the memory."""
        estimate = self.sampling_strategy == "estimate"
        round_size = self.samples_per_prompt_bounds[2] if estimate else self.samples_per_round
        return sampling_schedule(self, self.num_generations, round_size)


# Validation: `_validate` runs the rules in order and the first one broken raises a ValueError naming its fields.
# The pass-rate memory and the exit rule are built once and check their own arguments; where their wording would
# differ from the config's (`self.min_positives=-1`, `group_size`), the config's own check runs first. `Schedule`
# is not built: each of its checks is made here already, in the config's words.

# The choice fields this class adds; GRPOConfig's (its `scale_rewards`, only re-declared here with a new default, and
# TrainingArguments' `log_level` etc.) are GRPOConfig's to check or not, as before.
_CHOICES: dict[str, tuple[str, ...]] = {
    f.name: tuple(f.metadata["choices"])
    for f in fields(ReinforceAdaConfig)
    if "choices" in f.metadata and f.name not in {g.name for g in fields(GRPOConfig)}
}


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


def warn_unless_ada_trainer(trainer: object) -> None:
    """Warn when `trainer` is a transformers Trainer (GRPOTrainer, say) but not a `ReinforceAdaTrainer`. The class
    is recognised by name along the trainer's class hierarchy: the trainer module imports this one, not the reverse."""
    from transformers import Trainer

    is_ada = any(cls.__name__ == "ReinforceAdaTrainer" for cls in type(trainer).__mro__)
    if isinstance(trainer, Trainer) and not is_ada:
        warnings.warn(
            f"A ReinforceAdaConfig was passed to {type(trainer).__name__}, which ignores every Reinforce-Ada setting "
            "and trains with its own sampling. Use trl_ada.ReinforceAdaTrainer with it for adaptive sampling.",
            UserWarning,
            stacklevel=3,
        )


def _validate(config: ReinforceAdaConfig) -> None:
    """Raise a ValueError on the first rule that `config` breaks. Choices come first, so that every later rule (and
    every object built along the way) sees a known strategy, sizing and schedule."""
    _check_choices(config)
    _check_types(config)
    _check_exit_and_budget(config)
    _check_whole_groups_per_process(config)
    config.pass_rate_memory()  # its constructor checks the prior, the decay and the cap
    _check_odc_downsample(config)
    _check_memory_baseline(config)
    if config.sampling_strategy == "estimate":
        _check_estimate_budget(config)
    _check_streaming(config)
    _check_prompt_source(config)
    _check_pilot(config)


def _check_choices(config: ReinforceAdaConfig) -> None:
    """Every choice field holds one of the values its metadata declares (the CLI's `choices` too)."""
    for name, choices in _CHOICES.items():
        value = getattr(config, name)
        if value not in choices:
            raise ValueError(f"{name}={value!r} is not one of {choices}.")


def _check_exit_and_budget(config: ReinforceAdaConfig) -> None:
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
    if (
        config.sampling_strategy not in ("uniform", "estimate")
        and config.samples_per_round * config.max_rounds < config.num_generations
    ):
        raise ValueError(
            f"The per-prompt budget samples_per_round * max_rounds = {config.samples_per_round} * "
            f"{config.max_rounds} is smaller than num_generations={config.num_generations}, so a group could never "
            f"be filled. {budget_hint(config.samples_per_round, config.max_rounds, config.num_generations)}"
        )


def _check_whole_groups_per_process(config: ReinforceAdaConfig) -> None:
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


def _check_odc_downsample(config: ReinforceAdaConfig) -> None:
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


def _check_memory_baseline(config: ReinforceAdaConfig) -> None:
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


def _check_estimate_budget(config: ReinforceAdaConfig) -> None:
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


def _check_streaming(config: ReinforceAdaConfig) -> None:
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


def _check_prompt_source(config: ReinforceAdaConfig) -> None:
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


def _check_pilot(config: ReinforceAdaConfig) -> None:
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


# Types: every numeric (and boolean) field this class adds, read from its annotation, so a new field is checked too.
# A wrong type would otherwise fail as a bare TypeError in a comparison below ("'<' not supported between instances
# of 'str' and 'int'"), or pass unnoticed (2.5 rounds).
_ADDED = [f for f in fields(ReinforceAdaConfig) if f.name not in {g.name for g in fields(GRPOConfig)}]
_TYPED_FIELDS: dict[str, tuple[str, bool]] = {  # name -> (kind, None allowed)
    f.name: (str(f.type).removesuffix(" | None"), str(f.type).endswith(" | None"))
    for f in _ADDED
    if str(f.type).removesuffix(" | None") in ("int", "float", "bool")
}


def _check_types(config: ReinforceAdaConfig) -> None:
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
_IGNORED_BY: dict[str, tuple[str, ...]] = {
    "uniform": ("samples_per_round", "max_rounds", "round_sizing", *_EST_FIELDS),
    "balanced": _EST_FIELDS,
    "positive": _EST_FIELDS,
    "estimate": ("round_sizing",),
}


def config_warnings(config: ReinforceAdaConfig) -> list[str]:
    """The warnings `config` deserves (see above): an adaptive budget no larger than the group, and fields the
    chosen strategy ignores."""
    found = [message for message in (_uniform_budget_message(config), _ignored_fields_message(config)) if message]
    return found


def _uniform_budget_message(config: ReinforceAdaConfig) -> str | None:
    """An adaptive strategy whose budget equals the group draws exactly `num_generations` for every prompt: uniform
    sampling under another name. (A budget below the group is refused in `_validate`.)"""
    group, strategy = config.num_generations, config.sampling_strategy
    if strategy in ("balanced", "positive"):
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


def _ignored_fields_message(config: ReinforceAdaConfig) -> str | None:
    """Fields set away from their defaults that the chosen strategy never reads."""
    ignored = list(_IGNORED_BY.get(config.sampling_strategy, ()))
    if config.sampling_strategy == "estimate" and config.max_samples_per_prompt is not None:
        ignored += ["samples_per_round", "max_rounds"]  # they only give max_samples_per_prompt's default
    defaults = {f.name: f.default for f in fields(ReinforceAdaConfig)}
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
