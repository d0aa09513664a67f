"""`ReinforceAdaConfig(GRPOConfig)`: the configuration `ReinforceAdaTrainer` takes. Its fields and what they derive
are in config_fields.py, its checks in config_validation.py; this class documents the fields, runs the checks when it
is built, and warns when it is handed to a trainer that ignores it."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass

from .config_fields import ReinforceAdaFields
from .config_validation import (
    ConfigError,
    config_warnings,
    naming_none_of,
    trainer_field_problems,
    validation_problems,
)


@dataclass
class ReinforceAdaConfig(ReinforceAdaFields):
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
            or all wrong (`trl_ada.core.selection.no_signal_probability` >= `selection_threshold`) is sampled only with
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
            (`trl_ada.core.selection.pilot_stop_rule`). A stopped prompt costs `pilot_size` completions instead of a
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

    def __post_init__(self) -> None:
        """Resolve GRPOConfig's settings, then check this class's; raise one `ConfigError` (a ValueError) naming
        every problem found (config_validation.py), before anything is loaded."""
        # GRPOConfig's numbers that would fail only at training time, or inside GRPOConfig with a ZeroDivisionError
        invalid = trainer_field_problems(self)
        problems = list(invalid.values())
        try:
            super().__post_init__()  # first: GRPOConfig derives generation_batch_size, which the rules below read
        except ValueError as error:  # GRPOConfig's or TrainingArguments' own checks
            if not problems:  # with ours, it is most often the same value seen again (num_generations=1)
                problems.append(str(error))
        except Exception:  # a ZeroDivisionError on num_generations=0, reported above
            if not problems:
                raise
        problems += naming_none_of(validation_problems(self, tolerate=bool(problems)), list(invalid))
        if problems:
            raise ConfigError(problems)
        for message in config_warnings(self):
            warnings.warn(message, UserWarning, stacklevel=3)

    def get_process_log_level(self) -> int:
        """TrainingArguments' log level. transformers' `Trainer.__init__` calls it once, as
        `args.get_process_log_level()`: the one moment this config meets the trainer that takes it, so it warns
        there when that trainer is not a `ReinforceAdaTrainer` (a plain `GRPOTrainer` trains plain GRPO and ignores
        every Reinforce-Ada field)."""
        warn_unless_ada_trainer(sys._getframe(1).f_locals.get("self"))
        return super().get_process_log_level()


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
