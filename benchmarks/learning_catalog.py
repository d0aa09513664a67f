"""The learning benchmark's catalog: every method it can train (`CATALOG`), the paper's pairings, and the settings each
task is measured with. `learning_per_token.py` is the command; `learning_runs.py` trains, `learning_report.py`
summarises."""

from __future__ import annotations

import pathlib
from dataclasses import replace
from typing import Any

from grid_stats import geometric_grid


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
    from trl_ada.adapter.compat import continuous_batching_cache

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
    "seq-positive-8x4": (_method("Seq, exit rule positive, rounds of 8, at most 4", 4, "positive"), 2),
    "seq-balanced-8x4": (
        _method("Seq, exit rule balanced, rounds of 8, at most 4 (the paper's defaults)", 4, "balanced"),
        3,
    ),
    "seq-positive-8x4-posterior": (
        _method("seq-positive-8x4 with posterior-sized rounds", 4, "positive", **POSTERIOR),
        2,
    ),
    "seq-balanced-8x4-posterior": (
        _method("seq-balanced-8x4 with posterior-sized rounds", 4, "balanced", **POSTERIOR),
        3,
    ),
    "seq-positive-4x2": (
        _method("Seq, exit rule positive, rounds of 4, at most 2", 4, "positive", samples_per_round=4, max_rounds=2),
        1.5,
    ),
    "seq-positive-8x4-select": (_method("seq-positive-8x4 + pass-rate selection", 4, "positive", **SELECT), 2),
    "seq-positive-8x4-refill": (_method("seq-positive-8x4 + refill", 4, "positive", **REFILL), 2.5),
    "seq-positive-4x2-select": (
        _method("seq-positive-4x2 + pass-rate selection", 4, "positive", samples_per_round=4, max_rounds=2, **SELECT),
        1.5,
    ),
    # Streaming: no round barriers; a prompt stops on the first request-order prefix where its rule holds and its
    # requests still in flight are aborted (their tokens count as generated).
    "seq-positive-8x4-stream": (_method("seq-positive-8x4, streaming", 4, "positive", **STREAM), 4),
    "seq-balanced-8x4-stream": (_method("seq-balanced-8x4, streaming", 4, "balanced", **STREAM), 6),
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
    "est-8": (_method("Est, 8/prompt on average, 1/sqrt(p) budgets and weights", 4, "estimate", **EST), 2),
    "est-8-noweight": (
        _method("est-8 without weights", 4, "estimate", **{**EST, "difficulty_weighting": "none"}),
        2,
    ),
    "est-8-invp": (
        _method("est-8 with 1/p budgets", 4, "estimate", **EST, allocation_rule="inv_p"),
        2,
    ),
    "seq-positive-8x4-weight": (_method("seq-positive-8x4 + 1/sqrt(p) weights", 4, "positive", **WEIGHT), 2),
    "seq-balanced-8x4-weight": (_method("seq-balanced-8x4 + 1/sqrt(p) weights", 4, "balanced", **WEIGHT), 3),
    "grpo-6": (_method("GRPO n=6", 6), 1.5),
    "grpo-10": (_method("GRPO n=10", 10), 2.5),
    "grpo-12": (_method("GRPO n=12", 12), 3),
    # seq-balanced-8x4's own mean samples per prompt on the rules task (25.7 over ten seeds; seq-positive-8x4's,
    # 15.6, is GRPO n=16's).
    "grpo-26": (_method("GRPO n=26", 26), 6.5),
    # Equal-inference partners on the columns task: GRPO at seq-positive-8x4's and seq-balanced-8x4's mean samples per
    # prompt there (10.6-12.2 and 20.0 over ten seeds), so that a pairing reads the exit rule, not the extra samples.
    "grpo-11": (_method("GRPO n=11", 11), 2.75),
    "grpo-20": (_method("GRPO n=20", 20), 5),
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
    "grpo-11",
    "grpo-20",
    "seq-positive-8x4",
    "seq-balanced-8x4",
    "seq-positive-8x4-weight",
    "seq-balanced-8x4-weight",
    "seq-positive-8x4-stream",
    "seq-balanced-8x4-stream",
    "est-8",
    "est-8-noweight",
    "est-8-invp",
}
# The claims' own comparisons besides GRPO n=4 (benchmarks/README.md, "The paper's claims, one by one"): (method,
# reference), each reported when both ran, in the same statistics with the reference in GRPO n=4's place. The paper
# pairs Est with GRPO n=8 (the same mean samples per prompt) and Seq with GRPO n=16; seq-balanced-8x4 also meets GRPO
# at its own mean samples per prompt. An ablation pairs a method with its variant without the part the paper's theory
# rests on (1/sqrt(p) weights; budgets in proportion to 1/sqrt(p)).
PAIRINGS = (
    ("est-8", "grpo-8"),
    ("seq-positive-8x4", "grpo-16"),
    ("seq-balanced-8x4", "grpo-16"),
    ("seq-balanced-8x4", "grpo-26"),
    ("seq-positive-8x4", "grpo-11"),
    ("seq-balanced-8x4", "grpo-20"),
    ("est-8", "est-8-noweight"),
    ("est-8", "est-8-invp"),
    ("seq-positive-8x4-weight", "seq-positive-8x4"),
    ("seq-balanced-8x4-weight", "seq-balanced-8x4"),
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
# The configuration the `efficient` recipes run (for users short of optimizer steps): seq-positive-4x2. It carries only
# options measured where they act: prompt selection, part of it on the rules task (`seq-positive-4x2-select`), had
# nothing to act on over fresh prompts and lowered pass@32 over four passes, so it was dropped.
EFFICIENT = "seq-positive-4x2"
# One name per configuration: its key. The label a report carries is the key itself; what the configuration does, in
# words, is its description (docs/names.md lists both and the older names).
DESCRIPTIONS: dict[str, str] = {key: method.label for key, (method, _) in CATALOG.items()}
CATALOG = {key: (replace(method, label=key), cost) for key, (method, cost) in CATALOG.items()}
# Retired keys -> their configuration's key. Applied where committed reports are read (`rename_report`) and where a
# benchmark command names methods (`resolve_method`), so every earlier report and every command a study wrote still
# reads and runs under the current names. `recommended` named other configurations before seq-positive-4x2 (the
# reasoning task's pilot, the rules task's 4x2 with selection): a report's own label says which (`RECOMMENDED_LABELS`).
RENAMED: dict[str, str] = {
    "recommended": "seq-positive-4x2",
    "ada-positive-4x2": "seq-positive-4x2",
    "ada-positive-4x2-select": "seq-positive-4x2-select",
    "ada-positive": "seq-positive-8x4",
    "ada-balanced": "seq-balanced-8x4",
    "ada-positive-posterior": "seq-positive-8x4-posterior",
    "ada-balanced-posterior": "seq-balanced-8x4-posterior",
    "ada-positive-select": "seq-positive-8x4-select",
    "ada-positive-refill": "seq-positive-8x4-refill",
    "ada-positive-stream": "seq-positive-8x4-stream",
    "ada-balanced-stream": "seq-balanced-8x4-stream",
    "ada-positive-weight": "seq-positive-8x4-weight",
    "ada-balanced-weight": "seq-balanced-8x4-weight",
    "ada-est": "est-8",
    "ada-est-noweight": "est-8-noweight",
    "ada-est-invp": "est-8-invp",
}
# The labels earlier reports gave `recommended`'s runs, and the configuration each named.
RECOMMENDED_LABELS = {
    "recommended (Ada-positive 4x2)": "seq-positive-4x2",
    "recommended (Ada-positive 4x2 + selection)": "seq-positive-4x2-select",
    "recommended (GRPO n=4 + pilot 2)": "grpo-4-pilot",
}


def resolve_method(key: str) -> str:
    """A method named on a command line: its current key, saying so in one line when ``key`` is a retired one."""
    if key in RENAMED:
        print(f"renamed: {key} is now {RENAMED[key]}", flush=True)
        return RENAMED[key]
    return key


def current_key(key: str, label: str | None = None) -> str:
    """The current key of a configuration a report names ``key`` (with ``label``, the label it gave the run)."""
    if key == "recommended" and label in RECOMMENDED_LABELS:
        return RECOMMENDED_LABELS[label]
    return RENAMED.get(key, key)


def rename_report(report: Any) -> Any:
    """A report (or any part of one) with every configuration under its current name: the runs', summary rows' and
    pairings' ``key``/``method`` and ``reference``/``reference_method``, and dictionaries keyed by method (pairing
    floors). Numbers, commands and paths are left as written. A key the catalog no longer holds keeps its label."""
    if isinstance(report, list):
        return [rename_report(item) for item in report]
    if not isinstance(report, dict):
        return report
    out = {current_key(k) if k in RENAMED else k: rename_report(v) for k, v in report.items()}
    for key_field, label_field in (("key", "method"), ("reference", "reference_method")):
        key = report.get(key_field)
        if isinstance(key, str) and (key in RENAMED or key in CATALOG):
            new = current_key(key, report.get(label_field))
            out[key_field] = new
            if label_field in report and new in CATALOG:
                out[label_field] = new
    return out


METHODS = tuple(CATALOG)
BASELINE = "grpo-4"
FULL = {"steps": 200, "eval_every": 10, "heldout": 256, "heldout_samples": 8}
# The rules tasks are measured with 32 samples per held-out prompt (pass@32, and a quarter of the evaluation's own
# sampling variance of 8), over longer runs: GRPO n=4 is still improving where they end (benchmarks/README.md). An
# evaluation every 60 steps keeps ten seeds of GRPO n=4 against `seq-positive-4x2` within 90 minutes on 2 cores (70.1).
TASK_FULL = {task: {"steps": 300, "eval_every": 60, "heldout_samples": 32} for task in ("columns", "columns-epochs")}
QUICK = {"steps": 30, "eval_every": 10, "heldout": 128, "heldout_samples": 4}
# GRPO n=4 at 2e-4 on the reasoning task (its first version's seed-0 model) dropped 11 points in its first 40 steps
# and ended 1 point up; at 1e-4 it rises steadily: +13 points in 200 steps over ten seeds
# (benchmarks/README.md#the-reasoning-task). On today's model 2e-4 is unstable again, 1.25e-4 is worse and 1.5e-4
# splits its seeds (the grpo-4-lr* methods; benchmarks/README.md, "Larger learning rates").
LEARNING_RATE = {
    "arithmetic": 2e-4,
    "columns": 1e-4,
    "columns-epochs": 1e-4,
}
# Token-matched comparison: every method but the baseline trains up to MATCH_TOKENS x the baseline's steps, and every
# curve is read up to the tokens the baseline generated (its final accuracy is the accuracy at that budget). A method
# that spends fewer tokens per step gets those tokens' worth of extra steps, as at "the same inference budget"; with
# equal step counts a cheaper method could only reach the target at its last checkpoint. None: equal steps, each
# curve read to its end (the arithmetic task's published numbers).
MATCH_TOKENS = {
    "arithmetic": None,
    "columns": 1.4,
    "columns-epochs": 1.4,
}
RESULTS = pathlib.Path(__file__).parent / "results"

# Tasks measured on a shared grid (`grid_stats.py`): every method evaluated at the same generated-token counts and
# steps, on the primary metric of correct chains. Per task: GRPO n=4's mean completion tokens on its warm model (which
# sets B, the token grid's end, at GRID_MARGIN of GRPO n=4's expected budget so that every seed reaches it) and the
# samples per prompt of the testbed's instrument (a pass rate of 1/128 is told from 0).
GRID_TASKS = {
    "columns": {"completion_tokens": 14.0, "instrument_samples": 128},
    "columns-epochs": {"completion_tokens": 14.0, "instrument_samples": 128},
}
GRID_FIRST = 0.025  # of B (of the steps): the first point, where GRPO n=4 has made a fifth of its gain
GRID_RATIO = 2**0.5  # geometric: a crossing is placed between two points sqrt(2) apart
GRID_MARGIN = 0.97
GRID_LOG_EVERY = 10


def grid_settings(task: str, steps: int, prompts_per_step: int) -> dict[str, list[int]]:
    """The token and step grids of a grid task's runs (`GRID_TASKS`), or nothing for another task."""
    if task not in GRID_TASKS:
        return {}
    group = CATALOG[BASELINE][0].num_generations
    budget = GRID_MARGIN * steps * prompts_per_step * group * GRID_TASKS[task]["completion_tokens"]
    return {
        "token_grid": geometric_grid(budget, GRID_FIRST, GRID_RATIO),
        "step_grid": geometric_grid(steps, GRID_FIRST, GRID_RATIO),
    }
