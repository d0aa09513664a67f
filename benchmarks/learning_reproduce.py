"""Whether a report's runs reproduce here: a run of a seed trained again must give the same checkpoints, bit for bit.

A toy run is deterministic for a given code, library versions and CPU kernels (one thread, seeded sampling), and
chaotic across them: a last-bit difference in one logit can flip one sampled token, after which every number
differs (`trl_ada.reproducible` says what is pinned and what is not). So two reports' runs are paired only when they
come from the same numbers: `--baseline-from` first trains the report's GRPO n=4 run of every seed again up to its
first checkpoint after the start and refuses the report if anything differs (`check_reproduces`), `--combine` does
the same for the first run of each report made at another commit than the first report's, and `--verify` trains
chosen runs again in full and says where each first drifts (`first_difference`). A report names its start model by
its task and warm seed, so a rerun builds (or finds) that model on this checkout (`start_model`), wherever the report
was made.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import Any

from learning_runs import run_one

# What a checkpoint measured, compared exactly; seconds are wall time and never reproduce.
MEASURED = (
    "step",
    "tokens",
    "accuracy",
    "correct",
    "chain_accuracy",
    "chain_correct",
    "entropy",
    "flawed_rewarded_share",
    "token_points",
    "step_point",
)


def first_difference(stored: Sequence[dict[str, Any]], rerun: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first checkpoint (in order) and field of `MEASURED` where two runs' checkpoints differ, with both values,
    or, where every shared checkpoint matches, the checkpoint count if it differs; None when they are the same."""
    for index, (old, new) in enumerate(zip(stored, rerun, strict=False)):
        for field in MEASURED:
            if old.get(field) != new.get(field):
                return {
                    "checkpoint": index,
                    "step": old.get("step"),
                    "field": field,
                    "stored": old.get(field),
                    "rerun": new.get(field),
                }
    if len(stored) != len(rerun):
        index = min(len(stored), len(rerun))
        step = (stored if len(stored) > index else rerun)[index].get("step")
        return {"checkpoint": index, "step": step, "field": "checkpoints", "stored": len(stored), "rerun": len(rerun)}
    return None


def start_model(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with ``model_dir`` found on this checkout: the task's warm model of the report's ``warm_seed``
    (`toy_model_dir`: shipped, or built into the cache the first time), not the folder of the machine that made the
    report. A report started from a named folder (``warm_seed`` None) keeps it."""
    if settings.get("warm_seed") is None:
        return settings
    from trl_ada.toy import toy_model_dir

    return settings | {"model_dir": toy_model_dir(seed=settings["warm_seed"], task=settings["task"])}


def rerun(run: dict[str, Any], settings: dict[str, Any], stop_after: int | None = None) -> dict[str, Any]:
    """Train ``run``'s method and seed again with ``settings`` (in this process, one thread), up to ``stop_after``."""
    import torch

    torch.set_num_threads(1)  # as the benchmark's workers run
    with tempfile.TemporaryDirectory(prefix="trl_ada_verify_") as scratch:
        return run_one(run["seed"], run["key"], start_model(settings), scratch, stop_after=stop_after)


def check_reproduces(
    report: dict[str, Any], settings: dict[str, Any], key: str, seeds: Sequence[int], flag: str = "--baseline-from"
) -> None:
    """Train ``report``'s ``key`` run of each of ``seeds`` again up to its first checkpoint after the start; SystemExit
    naming the first difference when one does not reproduce (the report was made under other code, library versions
    or CPU kernels, so its runs are not paired with this job's)."""
    for seed in seeds:
        run = next(r for r in report["runs"] if r["key"] == key and r["seed"] == seed)
        upto = run["checkpoints"][1]["step"]
        fresh = rerun(run, settings, stop_after=upto)
        stored = [c for c in run["checkpoints"] if c["step"] <= upto]
        difference = first_difference(stored, fresh["checkpoints"])
        if difference is not None:
            raise SystemExit(
                f"{flag}: {key} seed {seed} does not reproduce here by step {upto} ({difference['field']} at step "
                f"{difference['step']}: {difference['stored']!r} in the report, {difference['rerun']!r} now): it was "
                f"measured under other code, library versions or CPU kernels (its machine: {report.get('machine')}); "
                "train it again in this job"
            )


def verify(report: dict[str, Any], seeds: Sequence[int], methods: Sequence[str]) -> list[dict[str, Any]]:
    """Train each (method, seed) run of ``report`` again in full with its settings and compare: per run, the
    checkpoints compared and the first difference (None: reproduced exactly)."""
    results = []
    for run in report["runs"]:
        if run["seed"] not in seeds or run["key"] not in methods:
            continue
        fresh = rerun(run, report["settings"])
        difference = first_difference(run["checkpoints"], fresh["checkpoints"])
        same_count = len(run["checkpoints"]) == len(fresh["checkpoints"])
        results.append(
            {
                "key": run["key"],
                "seed": run["seed"],
                "checkpoints": len(run["checkpoints"]),
                "reproduced": difference is None and same_count,
                "first_difference": difference,
            }
        )
        verdict = "reproduced exactly" if results[-1]["reproduced"] else f"drifts: {difference}"
        print(f"verify {run['key']} seed {run['seed']}: {verdict}", flush=True)
    return results
