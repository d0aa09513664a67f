"""Learning per generated token on the toy task, on CPU: GRPO at 4, 8 and 16 samples, DAPO (refill), pass-rate
prompt selection, and Reinforce-Ada positive/balanced with fixed or posterior rounds, small rounds, selection, refill.

    python benchmarks/learning_per_token.py                             # every method, 5 seeds x 200 steps
    python benchmarks/learning_per_token.py --methods grpo-4 recommended  # the configuration the README recommends
    python benchmarks/learning_per_token.py --quick                     # 30 steps, 128 held-out prompts x 4 samples
    python benchmarks/learning_per_token.py --task reasoning --methods grpo-4 ada-balanced  # the step-by-step task
    python benchmarks/learning_per_token.py --task reasoning --warm-seed 1 --testbed-only  # another warm model's mix
    python benchmarks/learning_per_token.py --combine a.json b.json --name all  # one table over reports' seeds

Every run starts from the same warmed-up toy model (`trl_ada.toy.toy_model_dir(task=...)`; ``--task`` picks the
arithmetic task, the default, or the step-by-step "reasoning" one), sees the same prompts in the same order for a given
seed (16 per step; selection and refill replace some from their side stream), takes the same number
of optimizer steps with the same learning rate, loss and reward scaling; only the sampling differs. Held-out sampled
accuracy is measured every few steps against the completion tokens generated so far (counted at GRPOTrainer's
generation call, identically for every method: every round, refill and replaced prompt counts) and the training wall
time (evaluations excluded). On the reasoning task the comparison is token-matched by default (``--match-tokens``):
every method but GRPO n=4 trains up to 1.4x its steps over the same rows in the same order, and every curve is read
up to the tokens GRPO n=4 generated, so final accuracies compare at an equal token budget. Runs go to two one-thread
worker processes (faster than one two-thread process on 2 cores); wall times are therefore single-thread times.

Reported (`learning_stats`): first, against GRPO n=4 on the seed-averaged curves read up to its token budget (its
seed-averaged tokens at its last checkpoint), the primary Δ AUC (mean accuracy over tokens 0 to that budget, method
minus GRPO n=4) with a 95% interval from a paired bootstrap over seeds; then Δ accuracy at 25%, 50% and 100% of the
budget, the tokens and steps to 50%, 75% and 90% of GRPO n=4's gain as ratios to its own, and the tokens to GRPO n=4's
final accuracy (a secondary: its target sits on the noisy flat end), each with its interval; under them the A/A floor,
GRPO n=4's seeds split into random halves against each other, the range of each metric when nothing differs. Then, for
the paper's own pairings that ran (`PAIRINGS`: Ada-Est against GRPO n=8, Seq against GRPO n=16, each ablation against
its variant), the same comparison with the reference in GRPO n=4's place and the reference's own A/A floor. Then, as
before: the tokens (and seconds) each method needs to reach GRPO n=4's final accuracy, read off the seed-averaged
accuracy curves by linear interpolation at the first crossing, as a ratio to GRPO n=4's own with a 95% interval from a
paired bootstrap over seeds (`paired_bootstrap`), and per seed (mean and sd); the area under each seed's accuracy curve
up to the fewest tokens (seconds) any run reached; final accuracy (mean with its bootstrap interval, and per seed);
completions generated per trained prompt; zero-std fraction of the groups handed to the loss, averaged over training;
and, where the runs recorded them, pass@1/8/32, accuracy per level and the policy's mean token entropy on the held-out
samples. Before the runs, the start model's own samples on the training prompts (16 per prompt) measure the testbed:
the pass-rate mix (all right / all wrong in a group of 4), completion lengths of right and wrong samples, and how often
each training prompt is visited. Writes JSON, a Markdown table and a PNG plot to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

from learning_stats import (
    BOOTSTRAP_RESAMPLES,
    BUDGET_FRACTIONS,
    COMPARISON_METRICS,
    GAIN_FRACTIONS,
    aa_floor,
    area_under_curve,
    checkpoint_curve,
    compare,
    crossing,
    heldout_aa_floor,
    heldout_at,
    heldout_comparison,
    late_gain,
    mean,
    mean_curve,
    paired_bootstrap,
    paired_bootstrap_comparison,
    ratio,
    spread,
    up_to_budget,
)
from machine import describe, machine_info

from trl_ada.heldout import PASS_AT_K
from trl_ada.toy.registry import TASKS


def _method(label: str, group: int, strategy: str | None = None, **options: Any) -> Any:
    from trl_ada.demo import ToyMethod

    return ToyMethod(label, group, strategy, tuple(options.items()))


POSTERIOR = {"round_sizing": "posterior"}
SELECT = {"prompt_selection": "pass_rate"}
REFILL = {"refill": True}
PILOT = {"pilot_size": 2}
REUSE = {"num_iterations": 2}


# Streaming through transformers' continuous batching, with a KV cache sized for the toy tasks (16 prompts x 8 in
# flight x 90 tokens fit 512 pages of 32): the default sizes it from free memory, which costs seconds per step on CPU.
def _streaming() -> dict[str, Any]:
    from trl_ada.compat import continuous_batching_cache

    return {
        "rollout_schedule": "streaming",
        "use_transformers_continuous_batching": True,
        "transformers_continuous_batching_config": continuous_batching_cache(512, 32, 512),
    }


STREAM = _streaming()
# key -> (method, relative run time for scheduling). GRPO runs with GRPOTrainer itself; everything else with
# ReinforceAdaTrainer ("uniform" is plain GRPO sampling there, with refill: DAPO's dynamic sampling).
CATALOG: dict[str, tuple[Any, float]] = {
    "grpo-4": (_method("GRPO n=4", 4), 1),
    "grpo-8": (_method("GRPO n=8", 8), 2),
    "grpo-16": (_method("GRPO n=16", 16), 4),
    "dapo-4": (_method("DAPO n=4 (refill)", 4, "uniform", **REFILL), 1.5),
    "grpo-4-select": (_method("GRPO n=4 + selection", 4, "uniform", **SELECT), 1),
    # A sharper test: prompts never seen are always sampled, so the threshold may sit below their 2 / (n + 1) = 0.4.
    "grpo-4-select-sharp": (
        _method("GRPO n=4 + selection (threshold 0.3)", 4, "uniform", **SELECT, selection_threshold=0.3),
        1,
    ),
    "dapo-4-select": (_method("DAPO n=4 + selection", 4, "uniform", **REFILL, **SELECT), 1.5),
    "ada-positive": (_method("Ada-positive 8x4", 4, "positive"), 2),
    "ada-balanced": (_method("Ada-balanced 8x4", 4, "balanced"), 3),
    "ada-positive-posterior": (_method("Ada-positive posterior", 4, "positive", **POSTERIOR), 2),
    "ada-balanced-posterior": (_method("Ada-balanced posterior", 4, "balanced", **POSTERIOR), 3),
    "ada-positive-4x2": (_method("Ada-positive 4x2", 4, "positive", samples_per_round=4, max_rounds=2), 1.5),
    "ada-positive-select": (_method("Ada-positive 8x4 + selection", 4, "positive", **SELECT), 2),
    "ada-positive-refill": (_method("Ada-positive 8x4 + refill", 4, "positive", **REFILL), 2.5),
    "ada-positive-4x2-select": (
        _method("Ada-positive 4x2 + selection", 4, "positive", samples_per_round=4, max_rounds=2, **SELECT),
        1.5,
    ),
    # Streaming: no round barriers; a prompt stops on the first request-order prefix where its rule holds and its
    # requests still in flight are aborted (their tokens count as generated).
    "ada-positive-stream": (_method("Ada-positive 8x4 streaming", 4, "positive", **STREAM), 4),
    "ada-balanced-stream": (_method("Ada-balanced 8x4 streaming", 4, "balanced", **STREAM), 6),
    # Pilot-then-commit: 2 completions per prompt first; a prompt whose pilot agrees stops there when its memory says
    # the other 2 of its group would very likely agree too (pilot_stop_threshold 0.8).
    "grpo-4-pilot": (_method("GRPO n=4 + pilot 2", 4, "uniform", **PILOT), 1),
    # DAPO's refill with the pilot as a cheap screen: a slot whose pilot agrees costs 2 completions, not 4, before it
    # is handed to a fresh prompt, so each step trains more groups with signal per generated token.
    "dapo-4-pilot": (_method("DAPO n=4 + pilot 2", 4, "uniform", **REFILL, **PILOT), 1.5),
    # Sample reuse (GRPOConfig.num_iterations, the GRPO paper's mu): every generation batch trains two optimizer steps,
    # the second with PPO's clipped ratio against the sampling policy. Plain GRPOTrainer.
    "grpo-4-reuse2": (_method("GRPO n=4, 2 steps per batch", 4, None, **REUSE), 1.6),
    # Oracle subsets: GRPO n=4 trained only on the training prompts chosen with the start model's own pass rates and
    # lengths, measured in advance (16 samples per prompt, `oracle_subsets`). Not a method a user can run: a bound on
    # what skipping prompts could buy. "agree" drops the prompts whose 16 samples all agree (no signal lost);
    # "signal per token" keeps the prompts whose expected groups with signal per sampled token are at least the
    # training set's average (the cheapest signal, as budgets by signal per cost would pick it).
    "grpo-4-oracle-agree": (_method("GRPO n=4, oracle: no all-agree prompts", 4), 1),
    "grpo-4-oracle-spt": (_method("GRPO n=4, oracle: top signal per token", 4), 1),
}
# The memory baseline (`advantage_baseline="memory"`): each prompt's baseline is its pass rate from earlier visits, so
# groups whose rewards all agree still train and a group of 2 does not halve its own gradient (the group mean does).
# Groups of 2 over twice the prompts: a step generates as many completions as GRPO n=4's, over more prompts.
MEMORY = {"advantage_baseline": "memory", "pass_rate_decay": 0.7}
CATALOG |= {
    "memory-2": (_method("n=2 + memory baseline, 32 prompts/step", 2, "uniform", **MEMORY), 1),
    "memory-4": (_method("n=4 + memory baseline", 4, "uniform", **MEMORY), 1),
    # With pass-rate selection; 0.75, not the default 0.5: a group of 2 agrees with probability at least 1/2.
    "memory-2-select": (
        _method(
            "n=2 + memory baseline + selection, 32 prompts/step",
            2,
            "uniform",
            **MEMORY,
            **SELECT,
            selection_threshold=0.75,
        ),
        1,
    ),
    # Controls for the memory baseline's batch shape: GRPO n=2 over 32 prompts a step (the same shape, the group
    # mean as baseline), and GRPO n=4 over 8 prompts a step (half the completions per optimizer step).
    "grpo-2-wide": (_method("GRPO n=2, 32 prompts/step", 2), 1),
    "grpo-4-narrow": (_method("GRPO n=4, 8 prompts/step", 4), 1.4),
}
# Larger learning rates: do methods whose steps hold more signal (DAPO's refill; the memory baseline, under which
# every group trains) tolerate a larger step than GRPO n=4, and so reach its accuracy with fewer tokens? GRPO n=4 at
# the same rates is the control: a method tuned up against an untuned baseline would prove nothing.
LR2 = {"learning_rate": 2e-4}
CATALOG |= {
    "grpo-4-lr2": (_method("GRPO n=4, lr 2e-4", 4, None, **LR2), 1),
    "dapo-4-lr2": (_method("DAPO n=4 (refill), lr 2e-4", 4, "uniform", **REFILL, **LR2), 1.5),
    "memory-2-lr2": (_method("n=2 + memory baseline, 32 prompts/step, lr 2e-4", 2, "uniform", **MEMORY, **LR2), 1),
    "grpo-4-lr1.5": (_method("GRPO n=4, lr 1.5e-4", 4, None, learning_rate=1.5e-4), 1),
    "grpo-4-lr1.25": (_method("GRPO n=4, lr 1.25e-4", 4, None, learning_rate=1.25e-4), 1),
    "memory-2-lr1.25": (
        _method("n=2 + memory baseline, 32 prompts/step, lr 1.25e-4", 2, "uniform", **MEMORY, learning_rate=1.25e-4),
        1,
    ),
}
# The paper's claims, each in its own frame (benchmarks/README.md, "The paper's claims, one by one").
# Reinforce-Ada-Est: one generation call per step, each prompt's budget from its pass-rate memory in proportion to
# 1/sqrt(p) (8 per prompt on average, between 4 and 32), advantages weighted by 1/sqrt(p) of the pool (the paper's
# hybrid). The paper pairs it with GRPO n=8. Its ablations: weighting off, and budgets in proportion to 1/p (the
# authors' code). The Seq strategies with the same 1/sqrt(p) weighting are the weighting ablation of Seq.
EST = {"samples_per_prompt_mean": 8, "difficulty_weighting": "inv_sqrt_p"}
WEIGHT = {"difficulty_weighting": "inv_sqrt_p"}
CATALOG |= {
    "ada-est": (_method("Ada-Est, 8/prompt, 1/sqrt(p) budgets and weights", 4, "estimate", **EST), 2),
    "ada-est-noweight": (
        _method("Ada-Est, 8/prompt, no weights", 4, "estimate", **{**EST, "difficulty_weighting": "none"}),
        2,
    ),
    "ada-est-invp": (
        _method("Ada-Est, 8/prompt, 1/p budgets", 4, "estimate", **EST, allocation_rule="inv_p"),
        2,
    ),
    "ada-positive-weight": (_method("Ada-positive 8x4, 1/sqrt(p) weights", 4, "positive", **WEIGHT), 2),
    "ada-balanced-weight": (_method("Ada-balanced 8x4, 1/sqrt(p) weights", 4, "balanced", **WEIGHT), 3),
    "grpo-6": (_method("GRPO n=6", 6), 1.5),
    "grpo-10": (_method("GRPO n=10", 10), 2.5),
    "grpo-12": (_method("GRPO n=12", 12), 3),
    # Seq-balanced's own mean samples per prompt on the rules task (25.7 over ten seeds; Seq-positive's, 15.6, is
    # GRPO n=16's).
    "grpo-26": (_method("GRPO n=26", 26), 6.5),
}
# Methods that generate at least twice GRPO n=4's tokens a step train its steps, not MATCH_TOKENS times as many: they
# pass its token budget on the way, so one run serves both frames (equal tokens and equal steps).
EQUAL_STEPS = {
    "grpo-6",
    "grpo-8",
    "grpo-10",
    "grpo-12",
    "grpo-16",
    "grpo-26",
    "ada-positive",
    "ada-balanced",
    "ada-positive-weight",
    "ada-balanced-weight",
    "ada-positive-stream",
    "ada-balanced-stream",
    "ada-est",
    "ada-est-noweight",
    "ada-est-invp",
}
# The claims' own comparisons besides GRPO n=4 (benchmarks/README.md, "The paper's claims, one by one"): (method,
# reference), each reported when both ran, in the same statistics with the reference in GRPO n=4's place. The paper
# pairs Est with GRPO n=8 (the same mean samples per prompt) and Seq with GRPO n=16; Seq-balanced also meets GRPO at
# its own mean samples per prompt. An ablation pairs a method with its variant without the part the paper's theory
# rests on (1/sqrt(p) weights; budgets in proportion to 1/sqrt(p)).
PAIRINGS = (
    ("ada-est", "grpo-8"),
    ("ada-positive", "grpo-16"),
    ("ada-balanced", "grpo-16"),
    ("ada-balanced", "grpo-26"),
    ("ada-est", "ada-est-noweight"),
    ("ada-est", "ada-est-invp"),
    ("ada-positive-weight", "ada-positive"),
    ("ada-balanced-weight", "ada-balanced"),
)
# Methods whose steps hold another number of prompts: key -> a multiple of --prompts-per-step. Their steps (and
# evaluation interval) scale so that a run generates as many completions as the others'.
PROMPTS_FACTOR = {
    "memory-2": 2,
    "memory-2-lr2": 2,
    "memory-2-lr1.25": 2,
    "memory-2-select": 2,
    "grpo-2-wide": 2,
    "grpo-4-narrow": 0.5,
}
ORACLE_SUBSETS = {"grpo-4-oracle-agree": "agree", "grpo-4-oracle-spt": "signal_per_token"}
# The configuration recommended to compute-bound users (README): the best on tokens to target in the arithmetic task's
# full run. No configuration has yet beaten GRPO n=4 per token on the reasoning task (the pilot at ten seeds, DAPO with
# and without the pilot at four: benchmarks/README.md#the-reasoning-task) nor on the rules task (this one, level at ten
# seeds, ahead per step and on pass@k), so it stays until one does.
RECOMMENDED = "ada-positive-4x2-select"
_recommended, _cost = CATALOG[RECOMMENDED]
CATALOG["recommended"] = (
    _method(f"recommended ({_recommended.label})", 4, _recommended.strategy, **dict(_recommended.options)),
    _cost,
)
METHODS = tuple(CATALOG)
BASELINE = "grpo-4"
FULL = {"steps": 200, "eval_every": 10, "heldout": 256, "heldout_samples": 8}
# The rules tasks are measured with 32 samples per held-out prompt (pass@32, and a quarter of the evaluation's own
# sampling variance of 8), over longer runs: GRPO n=4 is still improving where they end (benchmarks/README.md). An
# evaluation every 60 steps keeps ten seeds of GRPO n=4 against `recommended` within 90 minutes on 2 cores (70.1).
TASK_FULL = {task: {"steps": 300, "eval_every": 60, "heldout_samples": 32} for task in ("rules", "rules-epochs")}
QUICK = {"steps": 30, "eval_every": 10, "heldout": 128, "heldout_samples": 4}
# GRPO n=4 at 2e-4 on the reasoning task (its first version's seed-0 model) dropped 11 points in its first 40 steps
# and ended 1 point up; at 1e-4 it rises steadily: +13 points in 200 steps over ten seeds
# (benchmarks/README.md#the-reasoning-task). On today's model 2e-4 is unstable again, 1.25e-4 is worse and 1.5e-4
# splits its seeds (the grpo-4-lr* methods; benchmarks/README.md, "Larger learning rates").
LEARNING_RATE = {"arithmetic": 2e-4, "reasoning": 1e-4, "rules": 1e-4, "rules-epochs": 1e-4}
# Token-matched comparison: every method but the baseline trains up to MATCH_TOKENS x the baseline's steps, and every
# curve is read up to the tokens the baseline generated (its final accuracy is the accuracy at that budget). A method
# that spends fewer tokens per step gets those tokens' worth of extra steps, as at "the same inference budget"; with
# equal step counts a cheaper method could only reach the target at its last checkpoint. None: equal steps, each
# curve read to its end (the arithmetic task's published numbers).
MATCH_TOKENS = {"arithmetic": None, "reasoning": 1.4, "rules": 1.4, "rules-epochs": 1.4}
RESULTS = pathlib.Path(__file__).parent / "results"


# --------------------------------------------------------------------------------------------------------------------
# Curves
# --------------------------------------------------------------------------------------------------------------------


def runs_by_method(runs: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Method key -> its runs, in the order the runs come."""
    by_method: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_method.setdefault(run["key"], []).append(run)
    return by_method


def summarise(
    runs: Sequence[dict[str, Any]], match_tokens: bool = False, heldout_samples: int | None = None
) -> list[dict[str, Any]]:
    """One row per method, leading with the comparison against GRPO n=4 (`learning_stats.compare`: the primary
    ``auc_delta``, then the accuracy differences at fixed budgets and the tokens and steps to fractions of GRPO's gain,
    each with its paired-bootstrap ``*_ci``); then final accuracy, tokens and seconds to reach GRPO n=4's final
    accuracy, zero-std shares; then, with ``heldout_samples`` (per held-out prompt), pass@k, accuracy per label and
    entropy where the runs recorded them (`learning_stats.heldout_at`), and those measures against GRPO n=4's at
    equal tokens and at equal steps with their paired intervals (``heldout_vs_baseline``,
    `learning_stats.heldout_comparison`).

    ``match_tokens``: every curve, and each seed's, is read only up to the tokens GRPO n=4's seed-averaged curve ends
    at (`up_to_budget`), so a method's final accuracy is its accuracy at the baseline's token budget. The comparison
    reads every curve up to that budget either way."""
    by_method = runs_by_method(runs)
    if BASELINE not in by_method:
        raise ValueError(f"the ratios are relative to {BASELINE}, which was not run")
    base_curve = mean_curve(by_method[BASELINE])
    budget = base_curve["tokens"][-1] if match_tokens else None
    curves = {key: up_to_budget(mean_curve(method_runs), budget) for key, method_runs in by_method.items()}
    target = curves[BASELINE]["accuracy"][-1]
    base_tokens = crossing(curves[BASELINE]["tokens"], curves[BASELINE]["accuracy"], target)
    base_seconds = crossing(curves[BASELINE]["seconds"], curves[BASELINE]["accuracy"], target)
    # The area is taken up to the fewest tokens (seconds) any run of any method reached, so every curve covers it.
    token_budget = min(run["checkpoints"][-1]["tokens"] for run in runs)
    second_budget = min(run["checkpoints"][-1]["seconds"] for run in runs)
    rows = []
    for key, method_runs in by_method.items():
        curve = curves[key]
        seed_curves = [up_to_budget(checkpoint_curve(run), budget) for run in method_runs]
        tokens = crossing(curve["tokens"], curve["accuracy"], target)
        seconds = crossing(curve["seconds"], curve["accuracy"], target)

        def per_seed(x: str, seed_curves: list[dict[str, list[float]]] = seed_curves) -> list[float | None]:
            return [crossing(c[x], c["accuracy"], target) for c in seed_curves]

        def areas(x: str, area_budget: float, method_runs: list[dict[str, Any]] = method_runs) -> list[float]:
            return [
                area_under_curve(
                    [c[x] for c in run["checkpoints"]], [c["accuracy"] for c in run["checkpoints"]], area_budget
                )
                for run in method_runs
            ]

        rows.append(
            {
                "key": key,
                "method": method_runs[0]["method"],
                "seeds": [run["seed"] for run in method_runs],
                **comparison_with(by_method[BASELINE], method_runs),
                "target_accuracy": target,
                "token_budget": budget,
                "steps": method_runs[0]["checkpoints"][-1]["step"],
                "steps_at_budget": curve["step"][-1],
                "accuracy_before": curve["accuracy"][0],
                "final_accuracy": curve["accuracy"][-1],
                "final_accuracy_per_seed": [c["accuracy"][-1] for c in seed_curves],
                "tokens_to_target": tokens,
                "tokens_ratio": ratio(tokens, base_tokens),
                "seconds_to_target": seconds,
                "seconds_ratio": ratio(seconds, base_seconds),
                "tokens_total": curve["tokens"][-1],
                "seconds_total": curve["seconds"][-1],
                "tokens_to_target_per_seed": spread(per_seed("tokens")),
                "seconds_to_target_per_seed": spread(per_seed("seconds")),
                "auc_tokens": spread(areas("tokens", token_budget)),
                "auc_seconds": spread(areas("seconds", second_budget)),
                "auc_token_budget": token_budget,
                "auc_second_budget": second_budget,
                "samples_per_prompt": mean([run["samples_per_prompt"] for run in method_runs]),
                "completions_per_trained_prompt": mean([run["completions_per_trained_prompt"] for run in method_runs]),
                "refills_per_step": mean([run["refills_per_step"] for run in method_runs]),
                "skipped_per_step": mean([run["skipped_per_step"] for run in method_runs]),
                "frac_zero_std": mean([run["frac_zero_std"] for run in method_runs]),
                "frac_zero_std_first_round": mean([run["frac_zero_std_first_round"] for run in method_runs]),
                **paired_bootstrap(by_method[BASELINE], method_runs, match_tokens=match_tokens),
                **({} if heldout_samples is None else heldout_at(method_runs, curve["step"][-1], heldout_samples)),
            }
        )
        if heldout_samples is not None and key != BASELINE:
            rows[-1]["heldout_vs_baseline"] = heldout_comparison(by_method[BASELINE], method_runs, heldout_samples)
    return rows


def comparison_with(base_runs: Sequence[dict[str, Any]], method_runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every metric of `learning_stats.compare` for ``method_runs`` against ``base_runs`` (seed-averaged curves) with
    its paired-bootstrap ``<metric>_ci``, and the budget it was read at."""
    comparison = compare(mean_curve(base_runs), mean_curve(method_runs))
    intervals = paired_bootstrap_comparison(base_runs, method_runs)
    lead: dict[str, Any] = {}
    for name in COMPARISON_METRICS:
        lead |= {name: comparison[name], f"{name}_ci": intervals[f"{name}_ci"]}
    return lead | {
        "comparison_token_budget": comparison["budget"],
        "short_of_budget": comparison["short_of_budget"],
        "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
    }


def paired_comparisons(
    runs: Sequence[dict[str, Any]], heldout_samples: int | None = None
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each of `PAIRINGS` whose method and reference both ran, compared as `summarise` compares a method with GRPO n=4
    (`comparison_with`; the held-out measures at equal tokens and equal steps, ``heldout_vs_baseline``) with the
    reference's runs in the baseline's place: the reference's token budget, gain and last step. One row per pairing,
    ``reference`` and ``reference_method`` naming the reference, ``seeds`` the seeds both ran; and per reference its
    A/A floors, its own seeds split against themselves (``aa_floor``, ``heldout_aa_floor``)."""
    by_method = runs_by_method(runs)
    rows, floors = [], {}
    for key, reference in PAIRINGS:
        if key not in by_method or reference not in by_method:
            continue
        base_runs, method_runs = by_method[reference], by_method[key]
        row = {
            "key": key,
            "method": method_runs[0]["method"],
            "reference": reference,
            "reference_method": base_runs[0]["method"],
            "seeds": sorted({run["seed"] for run in method_runs} & {run["seed"] for run in base_runs}),
            **comparison_with(base_runs, method_runs),
        }
        if heldout_samples is not None:
            row["heldout_vs_baseline"] = heldout_comparison(base_runs, method_runs, heldout_samples)
        rows.append(row)
        if reference not in floors:
            floors[reference] = {
                "aa_floor": aa_floor(base_runs),
                "heldout_aa_floor": None if heldout_samples is None else heldout_aa_floor(base_runs, heldout_samples),
            }
    return rows, floors


def markdown_table(
    rows: Sequence[dict[str, Any]],
    floor: dict[str, Any] | None = None,
    heldout_floor: dict[str, Any] | None = None,
) -> str:
    """The report's tables: the comparison with GRPO n=4 (`comparison_table`, the primary metric first) with the A/A
    floor (`aa_floor`) and what the columns mean under it; the details (`details_table`); and the held-out measures
    besides accuracy where the runs recorded them (`heldout_table`), compared with GRPO n=4's at equal tokens and
    equal steps (`heldout_comparison_table`, with their A/A floor `heldout_floor`)."""
    parts = [comparison_table(rows, floor), comparison_note(rows, floor), details_table(rows)]
    for table in (heldout_table(rows), heldout_comparison_table(rows, heldout_floor)):
        if table is not None:
            parts.append(table)
    return "\n\n".join(parts)


def pairings_section(rows: Sequence[dict[str, Any]], floors: dict[str, dict[str, Any]]) -> str | None:
    """The `paired_comparisons`, one group per reference: its comparison table and held-out comparison table, each
    with the reference's own A/A floor; None when no pairing ran."""
    if not rows:
        return None
    parts = [
        "**Against the paper's pairings.** Each method against the method the paper pairs it with (for an ablation: "
        "its variant without the part under test), in the statistics above with that reference in GRPO n=4's place "
        "(its token budget, its gain, its last step); the A/A floor is the reference's own seeds split against "
        "themselves."
    ]
    for reference in dict.fromkeys(row["reference"] for row in rows):
        group = [row for row in rows if row["reference"] == reference]
        name = group[0]["reference_method"]
        parts.append(f"Against {name} (`{reference}`):")
        parts.append(comparison_table(group, floors[reference]["aa_floor"], reference=name))
        floor = floors[reference]["heldout_aa_floor"]
        heldout = heldout_comparison_table(group, floor, reference=name, with_note=False)
        if heldout is not None:
            parts.append(heldout)
    return "\n\n".join(parts)


def _interval(ci: list[float | None] | None, fmt: str) -> str:
    if ci is None:
        return ""
    return " [" + ", ".join("inf" if v is None else fmt.format(v) for v in ci) + "]"


def _delta_cell(value: float | None, ci: list[float | None] | None) -> str:
    return "" if value is None else f"{value:+.3f}{_interval(ci, '{:+.3f}')}"


def _ratio_cell(value: float | None, ci: list[float | None] | None) -> str:
    return ("not reached" if value is None else f"{value:.2f}x") + _interval(ci, "{:.2f}")


def _floor_cell(cell: dict[str, Any], fmt: str) -> str:
    text = _interval(cell["range"], fmt).strip()
    never = cell.get("never_reached")
    return text + (f" ({never:.0%} never)" if never else "")


_PERCENT = {fraction: round(fraction * 100) for fraction in (*BUDGET_FRACTIONS, *GAIN_FRACTIONS)}
DELTA_METRICS = (*(f"acc_delta_at_{_PERCENT[f]}" for f in BUDGET_FRACTIONS), "acc_delta_equal_steps")
TIMES_METRICS = (
    *(f"tokens_to_{_PERCENT[f]}_ratio" for f in GAIN_FRACTIONS),
    *(f"steps_to_{_PERCENT[f]}_ratio" for f in GAIN_FRACTIONS),
    "tokens_to_final_ratio",
)


def comparison_table(
    rows: Sequence[dict[str, Any]], floor: dict[str, Any] | None = None, reference: str = "GRPO n=4"
) -> str:
    """Each method against GRPO n=4 (or the ``reference`` its rows were compared with), paired over seeds: the primary
    Δ AUC, then the secondaries, each with its 95% interval; the A/A floor's 95% ranges as the last row. Cells of
    metrics a row lacks are blank."""
    lines = [
        "| method | seeds | **Δ AUC** vs tokens [95% CI] "
        + "".join(f"| Δ acc. at {_PERCENT[f]}% of budget " for f in BUDGET_FRACTIONS)
        + "| Δ acc. at equal steps "
        + "".join(f"| tokens to {_PERCENT[f]}% of gain " for f in GAIN_FRACTIONS)
        + "".join(f"| steps to {_PERCENT[f]}% of gain " for f in GAIN_FRACTIONS)
        + "| tokens to final acc. (secondary) |",
        "|---" * (3 + len(DELTA_METRICS) + len(TIMES_METRICS)) + "|",
    ]
    for r in rows:
        name = r["method"] + (" †" if r.get("short_of_budget") else "")
        if r["key"] == BASELINE:
            blank = " |" * (len(DELTA_METRICS) + len(TIMES_METRICS))
            lines.append(f"| {name} | {len(r['seeds'])} | baseline |{blank}")
            continue
        cells = [_delta_cell(r.get("auc_delta"), r.get("auc_delta_ci"))]
        cells += [_delta_cell(r.get(m), r.get(f"{m}_ci")) for m in DELTA_METRICS]
        cells += ["" if m not in r else _ratio_cell(r[m], r.get(f"{m}_ci")) for m in TIMES_METRICS]
        lines.append(f"| {name} | {len(r['seeds'])} | " + " | ".join(cells) + " |")
    if floor is not None:
        cells = [_floor_cell(floor[m], "{:+.3f}") for m in ("auc_delta", *DELTA_METRICS)]
        cells += [_floor_cell(floor[m], "{:.2f}") for m in TIMES_METRICS]
        lines.append(
            f"| *A/A floor: {reference} against itself, 95% range* | {floor['half']} vs {floor['half']} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def comparison_note(rows: Sequence[dict[str, Any]], floor: dict[str, Any] | None = None) -> str:
    """What the comparison table's columns mean, and the A/A floor's settings (or why there is none)."""
    base = rows[0]
    budget = base.get("comparison_token_budget", float("nan"))
    text = (
        "Δ: the method minus GRPO n=4, in accuracy (+0.010 is one point), each read off its seed-averaged curve up to "
        f"the budget: GRPO n=4's seed-averaged tokens at its last checkpoint, {budget:,.0f}. Δ AUC, the primary "
        "metric: the difference in mean accuracy over tokens 0 to that budget. Δ acc. at equal steps: at GRPO n=4's "
        "last step, whatever tokens each spent by then. Ratios: the method's tokens (steps) "
        "to reach the given share of GRPO n=4's gain (its final minus its start accuracy) over GRPO n=4's own; not "
        "reached: not within the budget. [95% CI]: paired bootstrap over seeds, "
        f"{base.get('bootstrap_resamples', BOOTSTRAP_RESAMPLES)} resamples, each with its own budget and gain."
    )
    if any(r.get("short_of_budget") for r in rows):
        text += " †: its curve ends before the budget; its last accuracy is held up to it."
    if floor is not None:
        text += (
            f"\n\nA/A floor: GRPO n=4's {floor['seeds']} seeds split at random into two halves of {floor['half']}, "
            f"{floor['splits']} times, one half taken as the method (unpaired): a difference inside its range is no "
            "larger than GRPO n=4's seeds produce against each other; never: the share of splits that never reach."
        )
    elif len(base["seeds"]) < 4:
        text += f"\n\nA/A floor: cannot be computed from {len(base['seeds'])} GRPO n=4 seeds (needs at least 4)."
    return text


def heldout_table(rows: Sequence[dict[str, Any]]) -> str | None:
    """pass@k, the policy's mean token entropy and accuracy per label at each method's last checkpoint within the
    budget (seed means); None when no run recorded any of them (reports from before they were measured)."""

    def number(value: float | None, fmt: str = "{:.3f}") -> str:
        return "" if value is None else fmt.format(value)

    recorded = [
        r
        for r in rows
        if any(v is not None for v in (r.get("pass_at_k") or {}).values())
        or r.get("entropy") is not None
        or r.get("accuracy_by_label")
    ]
    if not recorded:
        return None
    ks = [str(k) for k in PASS_AT_K]
    lines = [
        "| method | at step | " + " | ".join(f"pass@{k}" for k in ks) + " | mean token entropy (before → at step) "
        "| accuracy per label |",
        "|---" * (4 + len(ks)) + "|",
    ]
    for r in rows:
        passes = [number((r.get("pass_at_k") or {}).get(k)) for k in ks]
        entropy = ""
        if r.get("entropy") is not None:
            entropy = f"{number(r.get('entropy_before'))} → {r['entropy']:.3f}"
        labels = ", ".join(f"{label}: {value:.3f}" for label, value in (r.get("accuracy_by_label") or {}).items())
        step = "" if r.get("heldout_step") is None else str(r["heldout_step"])
        lines.append(f"| {r['method']} | {step} | " + " | ".join(passes) + f" | {entropy} | {labels} |")
    return "\n".join(lines)


HELDOUT_FRAMES = {"equal_tokens": "equal tokens", "equal_steps": "equal steps"}


def _measure_order(name: str) -> tuple[int, int, str]:
    """pass@k by k, then entropy, then accuracy per label by label."""
    if name.startswith("pass@"):
        return (0, int(name.removeprefix("pass@")), "")
    return (1, 0, "") if name == "entropy" else (2, 0, name)


def heldout_comparison_table(
    rows: Sequence[dict[str, Any]],
    heldout_floor: dict[str, Any] | None = None,
    reference: str = "GRPO n=4",
    with_note: bool = True,
) -> str | None:
    """pass@k, entropy and accuracy per label against GRPO n=4's (or the ``reference`` its rows were compared with),
    at equal tokens and at equal steps: each Δ with its paired 95% interval, the A/A floor's ranges last; under it,
    unless ``with_note`` is False, what the cells mean. None when no row carries the comparison."""
    compared = [r for r in rows if any((r.get("heldout_vs_baseline") or {}).values())]
    if not compared:
        return None
    measured = set.union(*(set(r["heldout_vs_baseline"][frame]) for r in compared for frame in HELDOUT_FRAMES))
    names = sorted(measured, key=_measure_order)
    if not names:  # runs from before the evaluation recorded these measures
        return None
    lines = [
        "| method | frame | " + " | ".join(f"Δ {name}" for name in names) + " |",
        "|---" * (2 + len(names)) + "|",
    ]
    for r in compared:
        for frame, words in HELDOUT_FRAMES.items():
            cells = [r["heldout_vs_baseline"][frame].get(name) for name in names]
            text = ["" if c is None else _delta_cell(c["delta"], c["ci"]) for c in cells]
            lines.append(f"| {r['method']} | {words} | " + " | ".join(text) + " |")
    if heldout_floor is not None:
        for frame, words in HELDOUT_FRAMES.items():
            ranges = [heldout_floor[frame].get(name) for name in names]
            text = ["" if c is None else _interval(c, "{:+.3f}").strip() for c in ranges]
            lines.append(f"| *A/A floor, 95% range* | {words} | " + " | ".join(text) + " |")
    if not with_note:
        return "\n".join(lines)
    note = (
        "Held-out measures against GRPO n=4's: the mean over seeds of the method's value minus GRPO n=4's on the same "
        "seed, each read off its checkpoints by linear interpolation at GRPO n=4's seed-averaged token budget (equal "
        "tokens) or at its last step (equal steps); [95% CI]: paired bootstrap over seeds. pass@k: the unbiased "
        "estimator over the held-out samples; entropy: the policy's mean token entropy on held-out samples (nats); "
        "accuracy:<rule>: held-out accuracy on that rule's prompts."
    )
    return "\n".join(lines) + "\n\n" + note


def details_table(rows: Sequence[dict[str, Any]]) -> str:
    """Final accuracy, tokens and seconds to GRPO n=4's final accuracy (the benchmark's first headline), areas,
    completions per trained prompt and zero-std groups."""

    def reach(value: float | None, ratio: float | None, fmt: str, ci: list[float | None] | None = None) -> str:
        if value is None:
            return "not reached"
        if ratio is None:
            return fmt.format(value)
        return fmt.format(value) + f" ({ratio:.2f}x{interval(ci, '{:.2f}')})"

    def interval(ci: list[float | None] | None, fmt: str) -> str:
        if ci is None:
            return ""
        return " [" + ", ".join("inf" if v is None else fmt.format(v) for v in ci) + "]"

    def seeds_cell(cell: dict[str, Any], fmt: str) -> str:
        if cell["mean"] is None:
            return "none reached"
        text = fmt.format(cell["mean"]) + ("" if cell["std"] is None else " ± " + fmt.format(cell["std"]))
        return text + (f" ({cell['missing']} not)" if cell["missing"] else "")

    lines = [
        "| method | steps | final accuracy [95% CI] (per seed) | tokens to reach target (ratio [95% CI]) "
        "| per seed: mean ± sd | seconds to reach target (ratio [95% CI]) | AUC vs tokens | AUC vs seconds "
        "| completions / trained prompt | zero-std groups (first round) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per_seed = ", ".join(f"{a:.3f}" for a in r["final_accuracy_per_seed"])
        final = f"{r['final_accuracy']:.3f}{interval(r.get('final_accuracy_ci'), '{:.3f}')}"
        steps = f"{r['steps_at_budget']:.0f}" + (f" of {r['steps']}" if r["steps_at_budget"] < r["steps"] else "")
        lines.append(
            f"| {r['method']} | {steps} | {final} ({per_seed}) "
            f"| {reach(r['tokens_to_target'], r['tokens_ratio'], '{:,.0f}', r.get('tokens_ratio_ci'))} "
            f"| {seeds_cell(r['tokens_to_target_per_seed'], '{:,.0f}')} "
            f"| {reach(r['seconds_to_target'], r['seconds_ratio'], '{:.1f}', r.get('seconds_ratio_ci'))} "
            f"| {seeds_cell(r['auc_tokens'], '{:.3f}')} | {seeds_cell(r['auc_seconds'], '{:.3f}')} "
            f"| {r['completions_per_trained_prompt']:.2f} "
            f"| {r['frac_zero_std']:.2f} ({r['frac_zero_std_first_round']:.2f}) |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------------------------------


def group_signal_probability(right: int, num_samples: int, group: int = 4) -> float:
    """The chance that `group` of a prompt's `num_samples` samples, `right` of them right, drawn without replacement,
    are not all equal: an unbiased estimate of 1 - p^group - (1 - p)^group."""
    total = math.comb(num_samples, group)
    return 1.0 - (math.comb(right, group) + math.comb(num_samples - right, group)) / total


def oracle_subsets(
    contents: Sequence[str], right: Sequence[int], mean_len: Sequence[float], num_samples: int, group: int = 4
) -> dict[str, dict[str, Any]]:
    """Two subsets of the training prompts, chosen with their measured pass rates and lengths (see `ORACLE_SUBSETS`):
    "agree", every prompt whose samples do not all agree; "signal_per_token", every prompt whose chance of a group
    with signal per sampled token, P / L, is at least the set's sum(P) / sum(L). Each with its prompts, its share of
    the set's sampling tokens and its share of the set's expected groups with signal."""
    signal = [group_signal_probability(int(c), num_samples, group) for c in right]
    total_signal, total_tokens = sum(signal), sum(mean_len)
    average = total_signal / total_tokens
    chosen = {
        "agree": [i for i, c in enumerate(right) if 0 < c < num_samples],
        "signal_per_token": [i for i, (s, n) in enumerate(zip(signal, mean_len, strict=True)) if s / n >= average],
    }
    return {
        name: {
            "prompts": [contents[i] for i in members],
            "token_share": sum(mean_len[i] for i in members) / total_tokens,
            "signal_share": sum(signal[i] for i in members) / total_signal if total_signal else None,
        }
        for name, members in chosen.items()
    }


def training_rows(task: Any, rows: int, seed: int, keep: Sequence[str] | None = None) -> Any:
    """The task's `rows` training rows for `seed`, or, with `keep`, the first `rows` of its seeded epochs whose prompt
    is in `keep` (whole epochs over that subset, each in the seed's order)."""
    if keep is None:
        return task.train_rows(rows, seed)
    wanted = set(keep)
    epochs = 1
    while True:
        candidates = task.train_rows(rows * epochs, seed)
        picked = [i for i, prompt in enumerate(candidates["prompt"]) if prompt[-1]["content"] in wanted]
        if len(picked) >= rows:
            return candidates.select(picked[:rows])
        if not picked:
            raise ValueError("no training prompt is in the subset")
        epochs *= 2


def run_one(seed: int, key: str, settings: dict[str, Any], output_dir: str) -> dict[str, Any]:
    """Train one method from the warm start with one seed, in this process; return its measurements."""
    from trl_ada.demo import train_toy
    from trl_ada.toy import toy_task

    task = toy_task(settings["task"])
    steps, prompts_per_step, eval_every = method_shape(settings, key)
    # Training rows (arithmetic: fresh draws; reasoning: epochs of a fixed set) vary with the seed; the held-out set is
    # the same for every seed. Token-matched runs train on the rows in their order, so a longer run's first steps see
    # the baseline's prompts in the baseline's order.
    subset = settings.get("oracle_subsets", {}).get(ORACLE_SUBSETS.get(key, ""))
    train = training_rows(task, steps * prompts_per_step, seed, None if subset is None else subset["prompts"])
    heldout = task.heldout(settings["heldout"])
    run = train_toy(
        CATALOG[key][0],
        settings["model_dir"],
        train,
        heldout,
        steps=steps,
        prompts_per_step=prompts_per_step,
        seed=seed,
        learning_rate=settings["learning_rate"],
        eval_every=eval_every,
        heldout_samples=settings["heldout_samples"],
        output_dir=f"{output_dir}/seed{seed}-{key}",
        log_every=eval_every,
        verbose=False,
        task=settings["task"],
        shuffle=not settings.get("match_tokens"),
        heldout_entropy=settings.get("heldout_entropy", False),
    )
    print(
        f"seed {seed} {run.method:>13}: accuracy {run.accuracy_before:.3f} -> {run.accuracy_after:.3f}, "
        f"{run.generated.completion_tokens:,} tokens, {run.train_seconds:.0f}s",
        flush=True,
    )
    trained_prompts = steps * prompts_per_step

    def per_step(name: str) -> float:  # each log row is TRL's mean over the steps since the last one
        return sum(row.get(name, 0.0) for row in run.logs) / max(len(run.logs), 1)

    return {
        "key": key,
        **run.as_dict(),
        "completions_per_trained_prompt": run.generated.completions / trained_prompts,
        "refills_per_step": per_step("ada/refills"),
        "skipped_per_step": per_step("ada/skipped"),
    }


def method_steps(settings: dict[str, Any], key: str) -> int:
    """Optimizer steps for a method's runs: ``steps``, or, token-matched, ``match_tokens`` times as many for every
    method but the baseline and those in `EQUAL_STEPS`, rounded up to whole evaluation intervals."""
    factor = settings.get("match_tokens")
    if not factor or key == BASELINE or key in EQUAL_STEPS:
        return settings["steps"]
    return math.ceil(settings["steps"] * factor / settings["eval_every"]) * settings["eval_every"]


def method_shape(settings: dict[str, Any], key: str) -> tuple[int, int, int]:
    """A method's optimizer steps, prompts per step and steps between evaluations: ``method_steps`` and the
    settings', or, for a method in ``PROMPTS_FACTOR``, its prompts per step with steps and interval scaled so that it
    generates the baseline's completions per run and is evaluated at the same completion counts."""
    steps, prompts, every = method_steps(settings, key), settings["prompts_per_step"], settings["eval_every"]
    if key not in PROMPTS_FACTOR:
        return steps, prompts, every
    wide = prompts * PROMPTS_FACTOR[key]
    scale = prompts * CATALOG[BASELINE][0].num_generations / (wide * CATALOG[key][0].num_generations)
    if wide != int(wide) or scale != int(scale):
        raise SystemExit(f"{key}: --prompts-per-step {prompts} gives {wide} prompts a step, or a fractional scale")
    return steps * int(scale), int(wide), every * int(scale)


# A task built as an instrument (`ToyTask.instrument`) is measured on at most this many of its distinct training
# prompts, 64 samples each: enough for a pass rate in (0.01, 0.1] to be told from 0 and from 0.2.
INSTRUMENT_PROMPTS = 512
INSTRUMENT_SAMPLES = 64


def measure_testbed(settings: dict[str, Any], seed: int, num_samples: int = 16) -> dict[str, Any]:
    """The start model's pass-rate mix and completion lengths on the distinct prompts of ``seed``'s training rows
    (`trl_ada.toy.sample_properties`), and how many times a run visits each of them. For a task built as an
    instrument, both are measured on the first `INSTRUMENT_PROMPTS` distinct prompts, and the task's own properties
    (`ToyTask.instrument`: real positives, hard prompts at low pass rates) from `INSTRUMENT_SAMPLES` samples each."""
    from collections import Counter

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.toy import sample_properties, toy_task, toy_threads

    task = toy_task(settings["task"])
    rows = task.train_rows(settings["steps"] * settings["prompts_per_step"], seed)
    contents = [prompt[-1]["content"] for prompt in rows["prompt"]]
    visits = Counter(contents)
    first = {content: index for index, content in reversed(list(enumerate(contents)))}
    distinct = rows.select(sorted(first.values()))
    measured = distinct
    if task.instrument is not None and len(distinct) > INSTRUMENT_PROMPTS:
        measured = distinct.select(range(INSTRUMENT_PROMPTS))
    model = AutoModelForCausalLM.from_pretrained(settings["model_dir"])
    tokenizer = AutoTokenizer.from_pretrained(settings["model_dir"])
    with toy_threads():
        properties = sample_properties(
            model, tokenizer, measured, task.reward, task.max_completion_length, num_samples=num_samples
        )
        instrument = {}
        if task.instrument is not None:
            instrument = task.instrument(model, tokenizer, measured, num_samples=INSTRUMENT_SAMPLES)
    return {
        "task": settings["task"],
        "measured_on": f"the {len(measured)} first distinct prompts of seed {seed}'s {len(rows)} training rows",
        **properties,
        **instrument,
        "contents": [prompt[-1]["content"] for prompt in measured["prompt"]],  # for the oracle subsets, then dropped
        "distinct_prompts": len(distinct),
        "visits_per_prompt": len(rows) / len(distinct),
        "visits_per_prompt_min": min(visits.values()),
        "visits_per_prompt_max": max(visits.values()),
    }


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)  # 1: the toy model's matrices are too small to split (trl_ada.toy.TOY_NUM_THREADS)


def run_all(seeds: Sequence[int], methods: Sequence[str], settings: dict[str, Any], jobs: int) -> list[dict]:
    """Every (seed, method) run; with ``jobs`` > 1 in that many one-thread worker processes, each reused across runs
    (start-up is paid once per worker). Runs come back ordered by method, then seed."""
    tasks = [(seed, key) for key in methods for seed in seeds]
    with tempfile.TemporaryDirectory(prefix="trl_ada_bench_") as scratch:
        if jobs <= 1:
            _set_threads(1)
            return [run_one(seed, key, settings, scratch) for seed, key in tasks]
        context = get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=context, initializer=_set_threads, initargs=(1,)) as pool:
            # The most expensive runs first, so no worker is left alone with a long run at the end.
            order = sorted(tasks, key=lambda task: -CATALOG[task[1]][1])
            futures = {task: pool.submit(run_one, *task, settings, scratch) for task in order}
            return [futures[task].result() for task in tasks]


def testbed_line(testbed: dict[str, Any]) -> str:
    def length(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    return (
        f"{testbed['prompts']} training prompts x {testbed['samples_per_prompt']} samples, accuracy "
        f"{testbed['accuracy']:.3f}; all right at n=4 {testbed['frac_all_correct_n4']:.2f}, all wrong at n=4 "
        f"{testbed['frac_all_wrong_n4']:.2f}; mean length right {length(testbed['mean_len_right'])}, wrong "
        f"{length(testbed['mean_len_wrong'])} tokens, p90/p10 of per-prompt mean length "
        f"{testbed['len_p90_over_p10']:.2f}, truncated {testbed['frac_truncated']:.3f}; prompts whose samples all "
        f"agree hold {testbed.get('frac_tokens_prompts_always_agree', float('nan')):.2f} of the tokens; "
        f"{testbed['visits_per_prompt']:.2f} visits per prompt (min {testbed['visits_per_prompt_min']})"
        + (instrument_line(testbed) if "frac_hard_low_p" in testbed else "")
    )


def instrument_line(testbed: dict[str, Any]) -> str:
    """The instrument's properties (`trl_ada.toy.rules.instrument_properties`) in one clause."""
    flawed = testbed["flawed_rewarded_share_low_p"]
    rules = ", ".join(
        f"{rule} {cell['correct_chain_accuracy']:.2f}/{cell['median_correct_p']:.3f}/{cell['frac_zero']:.2f}"
        for rule, cell in testbed["by_rule"].items()
    )
    return (
        f"; from {testbed['instrument_samples_per_prompt']} samples a prompt: flawed share of rewarded samples at "
        f"p <= 0.1 {'-' if flawed is None else f'{flawed:.3f}'} (of {testbed['rewarded_low_p']}), hard prompts at a "
        f"correct-chain p in (0.01, 0.1] {testbed['frac_hard_low_p']:.2f} of all (hard {testbed['frac_hard']:.2f}, "
        f"hard at 0 {testbed['frac_hard_zero']:.2f}); {testbed['distinct_prompts']} distinct prompts; per rule, "
        f"correct-chain accuracy/median p/share at 0: {rules}"
    )


def plot(runs: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]], path: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    target = rows[0]["target_accuracy"]
    for index, row in enumerate(rows):
        method_runs = [run for run in runs if run["key"] == row["key"]]
        curve = mean_curve(method_runs)
        color = plt.get_cmap("tab20")(index % 20)
        for axis, x in zip(axes, ("tokens", "seconds"), strict=True):
            for run in method_runs:
                xs = [c[x] for c in run["checkpoints"]]
                axis.plot(xs, [c["accuracy"] for c in run["checkpoints"]], color=color, alpha=0.25, linewidth=0.8)
            style = ("-", "--", ":")[index // 7 % 3]  # colours alone do not tell 14 methods apart
            axis.plot(curve[x], curve["accuracy"], color=color, linestyle=style, linewidth=2, label=row["method"])
    for axis, label in zip(
        axes, ("completion tokens generated", "training wall time (s), evaluation excluded"), strict=True
    ):
        axis.axhline(target, color="grey", linestyle="--", linewidth=1)
        axis.set_xlabel(label)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("held-out sampled accuracy")
    axes[0].legend(title="mean of seeds (thin: each seed)", fontsize=7)
    fig.suptitle(textwrap.fill(title, 110), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def combine_reports(reports: Sequence[dict[str, Any]], methods: Sequence[str] | None) -> list[dict[str, Any]]:
    """The runs of several reports made with the same settings (seeds run in chunks, or on several machines), for one
    summary over all their seeds: only ``methods`` (default: every method found). A run found again unchanged (the
    copy of GRPO n=4's runs a ``--baseline-from`` report carries) counts once. Refuses reports whose settings differ,
    a (seed, method) run found twice with different measurements, and a method whose seeds are not the baseline's
    (the bootstrap pairs them)."""
    if not reports:
        raise SystemExit("--combine needs at least one report")
    first = reports[0]["settings"]
    for report in reports[1:]:
        differ = settings_differences(first, report["settings"])
        if differ:
            raise SystemExit(f"--combine: the reports' settings differ in {differ}; their runs are not comparable")
    runs: dict[tuple[str, int], dict[str, Any]] = {}  # in the reports' order
    for report in reports:
        for run in report["runs"]:
            if methods is not None and run["key"] not in methods:
                continue
            if runs.get((run["key"], run["seed"]), run) != run:
                raise SystemExit(
                    f"--combine: {run['key']} seed {run['seed']} is in more than one report, measured differently"
                )
            runs[run["key"], run["seed"]] = run
    seeds: dict[str, set[int]] = {}
    for key, seed in runs:
        seeds.setdefault(key, set()).add(seed)
    if BASELINE not in seeds:
        raise SystemExit(f"--combine: no {BASELINE} runs: the ratios are relative to it")
    for key, found in seeds.items():
        if found != seeds[BASELINE]:
            raise SystemExit(f"--combine: {key} ran seeds {sorted(found)}, {BASELINE} {sorted(seeds[BASELINE])}")
    order = {key: i for i, key in enumerate(dict.fromkeys([BASELINE, *seeds]))}
    return sorted(runs.values(), key=lambda run: (order[run["key"]], run["seed"]))


# Settings that change what is measured, not what is trained: `--combine` pools reports that differ in them.
MEASURED_ONLY = {"heldout_entropy"}
# The options `--combine` uses; every other option shapes a training run, and `--combine` refuses it.
COMBINE_OPTIONS = {"combine", "methods", "output_dir", "name"}


def settings_differences(first: dict[str, Any], second: dict[str, Any]) -> list[str]:
    """The settings two reports' runs differ in, beyond what only changes the measuring (`MEASURED_ONLY`). The start
    model's folder is compared only when either report named it with --model-dir: a task's warm model of one
    ``warm_seed`` lives in a different folder on every machine (the clone, the cache) but is the same model."""
    ignored = set(MEASURED_ONLY)
    if first.get("warm_seed") is not None and first.get("warm_seed") == second.get("warm_seed"):
        ignored.add("model_dir")
    keys = (set(first) | set(second)) - ignored
    return sorted(k for k in keys if first.get(k) != second.get(k))


def baseline_runs_from(report: dict[str, Any], settings: dict[str, Any], seeds: Sequence[int]) -> list[dict]:
    """``--baseline-from``: GRPO n=4's runs of ``seeds`` from an earlier report made with the same settings, so that a
    job comparing more methods against it need not train it again. Refuses a report whose settings differ and one
    that lacks a seed."""
    differ = settings_differences(report["settings"], settings)
    if differ:
        raise SystemExit(f"--baseline-from: the report's settings differ in {differ}; its runs are not comparable")
    found = {run["seed"]: run for run in report["runs"] if run["key"] == BASELINE}
    missing = sorted(set(seeds) - set(found))
    if missing:
        raise SystemExit(f"--baseline-from: the report has no {BASELINE} run of seeds {missing}")
    return [found[seed] for seed in seeds]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"a few minutes: {QUICK}")
    parser.add_argument("--task", default="arithmetic", choices=TASKS, help="the toy task (--list-tasks)")
    parser.add_argument("--list-tasks", action="store_true", help="print the toy tasks, one a line, and exit")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=METHODS,
        help="methods to run (default: all but 'recommended', a second name, and the oracle subsets, bounds; with "
        "--combine, every method in the reports)",
    )
    parser.add_argument("--steps", type=int, help=f"optimizer steps per run (default {FULL['steps']})")
    parser.add_argument("--eval-every", type=int, help="steps between held-out evaluations")
    parser.add_argument("--heldout", type=int, help="held-out prompts")
    parser.add_argument("--heldout-samples", type=int, help="sampled completions per held-out prompt")
    parser.add_argument("--prompts-per-step", type=int, default=16)
    parser.add_argument(
        "--no-heldout-entropy",
        action="store_true",
        help="skip the policy's mean token entropy at each held-out evaluation (one forward pass over the samples)",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        help=f"constant learning rate (default per task: {LEARNING_RATE}); the *-lr* methods keep their own",
    )
    parser.add_argument(
        "--match-tokens",
        type=float,
        help="train every method but GRPO n=4 up to this many times its steps and read every curve up to GRPO n=4's "
        f"tokens; 0: equal steps, curves read to their end (default per task: {MATCH_TOKENS})",
    )
    parser.add_argument(
        "--testbed-only", action="store_true", help="measure the start model's testbed, write it, and train nothing"
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each")
    parser.add_argument("--output-dir", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--name", help="result file stem (default learning_per_token[_quick])")
    parser.add_argument(
        "--combine",
        nargs="+",
        type=pathlib.Path,
        metavar="REPORT",
        help="train nothing: summarise the runs of these JSON reports (same settings, e.g. seeds run in chunks) as "
        "one run over all their seeds; the testbed is the first report's",
    )
    parser.add_argument(
        "--baseline-from",
        type=pathlib.Path,
        metavar="REPORT",
        help=f"take {BASELINE}'s runs of --seeds from this JSON report (made with the same settings) instead of "
        f"training them again; leave {BASELINE} out of --methods",
    )
    parser.add_argument("--model-dir", type=pathlib.Path, help="start from this model (default: the warm toy model)")
    parser.add_argument(
        "--warm-seed",
        type=int,
        default=0,
        help="start from the task's warm model built with this seed (toy_model_dir(seed=...); 0: the shipped one)",
    )
    args = parser.parse_args(argv)
    if args.combine is not None:
        # The reports carry their own settings: a training flag here would be silently ignored.
        ignored = [
            f"--{dest.replace('_', '-')}"
            for dest, value in vars(args).items()
            if dest not in COMBINE_OPTIONS and value != parser.get_default(dest)
        ]
        if ignored:
            parser.error(f"--combine trains nothing; the reports carry their settings, so drop {', '.join(ignored)}")
    if args.methods is None and args.combine is None:
        args.methods = [m for m in METHODS if m != "recommended" and m not in ORACLE_SUBSETS]
        if args.baseline_from is not None:
            args.methods.remove(BASELINE)
    return args


def _command(argv: list[str] | None) -> str:
    return " ".join(["python benchmarks/learning_per_token.py", *(argv if argv is not None else sys.argv[1:])])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.list_tasks:
        print("\n".join(TASKS))
        return {"tasks": list(TASKS)}
    if args.combine:
        return combine_main(args, argv)
    if BASELINE not in args.methods and args.baseline_from is None:
        raise SystemExit(
            f"--methods must include {BASELINE} (or --baseline-from a report of it): the ratios are relative to it"
        )
    if BASELINE in args.methods and args.baseline_from is not None:
        raise SystemExit(f"--baseline-from supplies {BASELINE}'s runs: drop it from --methods")
    settings = dict(QUICK if args.quick else FULL | TASK_FULL.get(args.task, {}))
    for name in ("steps", "eval_every", "heldout", "heldout_samples"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    learning_rate = args.learning_rate if args.learning_rate is not None else LEARNING_RATE[args.task]
    match_tokens = args.match_tokens if args.match_tokens is not None else MATCH_TOKENS[args.task]
    if match_tokens is not None and match_tokens != 0 and match_tokens < 1:
        raise SystemExit(f"--match-tokens must be 0 (off) or at least 1, got {match_tokens}")
    settings |= {
        "task": args.task,
        "prompts_per_step": args.prompts_per_step,
        "learning_rate": learning_rate,
        "match_tokens": match_tokens or None,
        "heldout_entropy": not args.no_heldout_entropy,
    }
    name = args.name or ("learning_per_token_quick" if args.quick else "learning_per_token")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    print(f"machine: {describe(machine)}\nsettings: {settings}, seeds {args.seeds}", flush=True)

    from trl_ada.toy import toy_model_dir

    # Build the warm start once, before the workers race for it.
    if args.model_dir is not None and args.warm_seed != 0:
        raise SystemExit("--model-dir and --warm-seed both name the start model: give one")
    settings["model_dir"] = str(args.model_dir or toy_model_dir(seed=args.warm_seed, task=args.task))
    settings["warm_seed"] = None if args.model_dir is not None else args.warm_seed
    oracle = any(key in ORACLE_SUBSETS for key in args.methods)
    earlier = None if args.baseline_from is None else json.loads(args.baseline_from.read_text())
    baseline = [] if earlier is None else baseline_runs_from(earlier, settings, args.seeds)
    if earlier is not None and earlier["seeds"][0] == args.seeds[0] and not oracle:
        # The same start model, settings and first seed: the same measurement, already made.
        testbed = {**earlier["testbed"], "from": str(args.baseline_from)}
    else:
        testbed = timed_testbed(settings, args.seeds[0])
    per_prompt = testbed.pop("per_prompt", None)
    if oracle:
        subsets = oracle_subsets(
            testbed.pop("contents"), per_prompt["right"], per_prompt["mean_len"], testbed["samples_per_prompt"]
        )
        settings["oracle_subsets"] = subsets
        testbed["oracle_subsets"] = {
            name: {"prompts": len(subset["prompts"]), **{k: v for k, v in subset.items() if k != "prompts"}}
            for name, subset in subsets.items()
        }
        print(f"oracle subsets: {testbed['oracle_subsets']}", flush=True)
    testbed.pop("contents", None)
    print(f"testbed: {testbed_line(testbed)}", flush=True)
    if args.testbed_only:
        report = {"command": _command(argv), "settings": settings, "machine": machine, "testbed": testbed}
        (args.output_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
        return report
    start = time.perf_counter()
    runs = baseline + run_all(args.seeds, args.methods, settings, args.jobs)
    elapsed = time.perf_counter() - start
    report = {
        "command": _command(argv),
        "settings": settings,
        "seeds": args.seeds,
        "machine": machine,
        "load_average_1min_after": machine_info()["load_average_1min"],
        "elapsed_seconds": round(elapsed, 1),
        "testbed": testbed,
    }
    if args.baseline_from is not None:  # its time is not in elapsed_seconds
        report["baseline_from"] = str(args.baseline_from)
    return write_results(report, runs, args.output_dir, name)


def timed_testbed(settings: dict[str, Any], seed: int) -> dict[str, Any]:
    """`measure_testbed`, with the seconds it took."""
    began = time.perf_counter()
    testbed = measure_testbed(settings, seed)
    testbed["seconds"] = round(time.perf_counter() - began, 1)
    return testbed


# What reports from before these settings existed were made with: the arithmetic task, each curve read to its end.
EARLIEST_SETTINGS = {"task": "arithmetic", "match_tokens": None}


def combine_main(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    """``--combine``: one summary over the runs of several reports (`combine_reports`), written like a run's."""
    reports = [json.loads(path.read_text()) for path in args.combine]
    for report in reports:
        report["settings"] = EARLIEST_SETTINGS | report["settings"]
    runs = combine_reports(reports, args.methods)
    seeds = sorted({run["seed"] for run in runs})
    report = {
        "command": _command(argv),
        # A --baseline-from report's GRPO n=4 runs were trained by the report it names: keep saying which.
        "combined": [
            {"command": r["command"], "seeds": r["seeds"], "testbed": r.get("testbed")}
            | ({"baseline_from": r["baseline_from"]} if "baseline_from" in r else {})
            for r in reports
        ],
        "settings": reports[0]["settings"],
        "seeds": seeds,
        "machine": reports[0]["machine"],
        "load_average_1min_after": reports[-1]["load_average_1min_after"],
        "elapsed_seconds": round(sum(r["elapsed_seconds"] for r in reports), 1),
        "testbed": reports[0].get("testbed"),  # None: a report from before the testbed was measured
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    return write_results(report, runs, args.output_dir, args.name or "learning_per_token_combined")


def write_results(report: dict[str, Any], runs: list[dict], output_dir: pathlib.Path, name: str) -> dict[str, Any]:
    """Summarise ``runs`` into ``report`` and write it as ``name``.json, .md and .png in ``output_dir``."""
    settings = report["settings"]
    rows = summarise(runs, match_tokens=bool(settings["match_tokens"]), heldout_samples=settings["heldout_samples"])
    base_runs = [run for run in runs if run["key"] == BASELINE]
    floor = aa_floor(base_runs)
    samples = settings["heldout_samples"]
    heldout_floor = None if samples is None else heldout_aa_floor(base_runs, samples)
    table = markdown_table(rows, floor, heldout_floor)
    pairs, pair_floors = paired_comparisons(runs, samples)
    section = pairings_section(pairs, pair_floors)
    if section is not None:
        table += "\n\n" + section
    shape = f"{settings['steps']} steps x {settings['prompts_per_step']} prompts"
    longest = max(run["checkpoints"][-1]["step"] for run in runs)  # the runs', not what the settings would allow
    if longest > settings["steps"]:
        shape += f" (others up to {longest} steps)"
    if settings["match_tokens"]:
        shape += ", read at GRPO n=4's tokens"
    title = (
        f"Toy task ({settings['task']}), {shape}, seeds {report['seeds']}, "
        f"held-out {settings['heldout']} x {settings['heldout_samples']}"
    )
    plot(runs, rows, output_dir / f"{name}.png", title)
    late = late_gain(base_runs)
    report |= {
        "summary": rows,
        "aa_floor": floor,
        "heldout_aa_floor": heldout_floor,
        "baseline_late_gain": late,
        "pairings": pairs,
        "pairing_floors": pair_floors,
        "runs": runs,
    }
    (output_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    target = rows[0]["target_accuracy"]
    budget = ""
    if settings["match_tokens"]:
        budget = f" Final accuracies are read at GRPO n=4's {rows[0]['token_budget']:,.0f} tokens."
    combined = ""
    if "combined" in report:
        count = len(report["combined"])
        combined = f" Summarised from {count} report{'s' if count > 1 else ''}"
        combined += "; the testbed is the first's." if count > 1 else "."
    testbed = "" if report["testbed"] is None else f"Testbed at the start: {testbed_line(report['testbed'])}.\n"
    text = (
        f"{title}; target = GRPO n=4's final accuracy on the seed-averaged curve, {target:.3f}.{budget}\n"
        f"Machine: {describe(report['machine'])}; load average after: {report['load_average_1min_after']}. "
        f"{report['elapsed_seconds'] / 60:.1f} min.{combined}\n"
        f"{testbed}"
        f"GRPO n=4 after {late['fraction']:.0%} of its steps: {late['gain']:+.3f} "
        f"{_interval(late['gain_ci'], '{:+.3f}').strip()} accuracy more by its last step (mean over seeds, "
        f"bootstrap 95% CI; above 0: still improving).\n\n{table}\n"
    )
    (output_dir / f"{name}.md").write_text(text)
    print("\n" + text, flush=True)
    return report


if __name__ == "__main__":
    main()
