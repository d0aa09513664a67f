from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl import GRPOConfig

from .advantages import WEIGHTINGS
from .engine import ROUND_SIZINGS, STRATEGIES, ExitRule, Schedule

BASELINES = ("pool", "group")


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
        difficulty_weighting (`str`, *optional*, defaults to `"none"`):
            Multiply each prompt's advantages by `1/sqrt(p)` (`"inv_sqrt_p"`) or `1/p` (`"inv_p"`), `p` being the
            pool pass rate, to weight hard prompts up.
        max_difficulty_weight (`float`, *optional*, defaults to `4.0`):
            Cap on the difficulty weight (`p` is clamped so the weight never exceeds it).

    > Parameters whose default differs from [`~trl.GRPOConfig`]:
    >
    > - `scale_rewards`: `"none"` instead of `"group"`. The authors' shipped recipe subtracts the pool mean and does
    >   not divide by a std (`A = r - p_hat`); set `"group"` to divide by the std of the same set as the baseline,
    >   or `"batch"` to divide by the std over the whole batch.
    """

    sampling_strategy: str = field(
        default="balanced",
        metadata={"help": "When a prompt stops being sampled.", "choices": list(STRATEGIES)},
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
            "help": "Where the advantage mean (and std) come from: every completion drawn for the prompt ('pool') "
            "or the kept num_generations ('group').",
            "choices": list(BASELINES),
        },
    )
    difficulty_weighting: str = field(
        default="none",
        metadata={"help": "Per-prompt advantage weight from the pool pass rate p.", "choices": list(WEIGHTINGS)},
    )
    max_difficulty_weight: float = field(default=4.0, metadata={"help": "Cap on the difficulty weight."})
    scale_rewards: str = field(
        default="none",
        metadata={
            "help": "Divide advantages by a std: 'group' (std of the baseline set), 'batch' (std over the batch) "
            "or 'none' (the authors' recipe).",
            "choices": ["group", "batch", "none"],
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sampling_strategy not in STRATEGIES:
            raise ValueError(f"sampling_strategy={self.sampling_strategy!r} is not one of {STRATEGIES}.")
        if self.advantage_baseline not in BASELINES:
            raise ValueError(f"advantage_baseline={self.advantage_baseline!r} is not one of {BASELINES}.")
        if self.round_sizing not in ROUND_SIZINGS:
            raise ValueError(f"round_sizing={self.round_sizing!r} is not one of {ROUND_SIZINGS}.")
        if self.difficulty_weighting not in WEIGHTINGS:
            raise ValueError(f"difficulty_weighting={self.difficulty_weighting!r} is not one of {WEIGHTINGS}.")
        if not self.max_difficulty_weight >= 1.0:
            raise ValueError(
                f"max_difficulty_weight must be >= 1 (a cap on an up-weighting), got {self.max_difficulty_weight}."
            )
        if math.isnan(self.positive_threshold):
            raise ValueError("positive_threshold must be a number, got NaN.")
        for name in ("samples_per_round", "max_rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        for name in ("min_positives", "min_negatives"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0 (or None to derive it from the strategy), got {value}.")
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "Reinforce-Ada classifies and baselines completions by their total weighted reward, so it needs "
                f"multi_objective_aggregation='sum_then_normalize', got {self.multi_objective_aggregation!r}."
            )
        rule = self.exit_rule
        if rule.min_positives + rule.min_negatives > self.num_generations:
            raise ValueError(
                f"The exit rule asks for {rule.min_positives} positives + {rule.min_negatives} negatives, more than "
                f"the {self.num_generations} completions (num_generations) a group keeps. Lower min_positives / "
                "min_negatives or raise num_generations."
            )
        if self.sampling_strategy != "uniform" and self.samples_per_round * self.max_rounds < self.num_generations:
            raise ValueError(
                f"The per-prompt budget samples_per_round * max_rounds = {self.samples_per_round} * {self.max_rounds}"
                f" is smaller than num_generations={self.num_generations}, so a group could never be filled."
            )
        local_rows = self.generation_batch_size // self.world_size
        if local_rows % self.num_generations:
            raise ValueError(
                f"Each process must hold whole prompt groups: its generation batch of {local_rows} rows "
                f"(generation_batch_size {self.generation_batch_size} / {self.world_size} processes) is not a "
                f"multiple of num_generations={self.num_generations}. Adjust per_device_train_batch_size or "
                "steps_per_generation."
            )

    @property
    def exit_rule(self) -> ExitRule:
        return ExitRule.for_strategy(
            self.sampling_strategy, self.num_generations, self.min_positives, self.min_negatives
        )

    def schedule(self) -> Schedule:
        """The sampling schedule the trainer (and the simulator) run each step."""
        return Schedule.from_strategy(
            self.sampling_strategy,
            self.num_generations,
            samples_per_round=self.samples_per_round,
            max_rounds=self.max_rounds,
            positive_threshold=self.positive_threshold,
            min_positives=self.min_positives,
            min_negatives=self.min_negatives,
            round_sizing=self.round_sizing,
        )
