"""Intervals and tests for paired learning comparisons, as pure functions of arrays (tests/test_paired_stats.py
checks each on synthetic data whose answer is known).

A comparison of a method with a partner gives, for every training seed s and held-out prompt j, a paired difference
d[s, j] (the method's per-prompt measure minus the partner's, the same seed: the same training prompts, order and
sampling seeds). The estimate is the mean over prompts (each rule weighted equally, `stratum_weights`) of the mean over
seeds. Both the seeds and the held-out prompts are samples: another ten seeds, or another 256 held-out prompts drawn
by the same rules, would give another estimate. So:

1. `two_way_estimate`: the standard error from both sources, seeds and prompts (prompts stratified by rule), by the
   two-way random-effects decomposition (seed effect, prompt effect, their interaction), and a Student t interval
   with S - 1 degrees of freedom. The percentile bootstrap over ten seeds that the reports used before covers about
   92%, and conditions on the fixed prompts.
2. `t_test` and `sign_flip_test`: the paired t test and the exact sign-flip (randomisation) test over all 2^S sign
   patterns of the per-seed differences.
3. `holm`: Holm's step-down adjustment over a family of p values (strong control of the family-wise error).
4. `random_effects`: estimates from several warm models pooled with the between-model variance (DerSimonian-Laird
   tau^2, the Hartung-Knapp interval with K - 1 degrees of freedom, never narrower than the fixed-effect one), so
   that a pooled interval holds what a new warm model would add. With two or three warm models that interval is
   wide (t with 1 or 2 degrees of freedom): it estimates the mean over warm models, and says how little three of them
   pin it down.
5. `every_model_p`: whether an effect shows on every warm model (the intersection-union test), the verdicts' test:
   a claim holds where each warm model's own test shows it, in the same direction.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

LEVEL = 0.95
MAX_EXACT_SEEDS = 20  # 2^20 sign patterns


def t_quantile(level: float, df: float) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom."""
    return float(stats.t.ppf((1 + level) / 2, df))


def _t_result(estimate: float, se: float, df: float, level: float) -> dict[str, Any]:
    """Estimate, standard error, degrees of freedom, the t interval and the two-sided p value of estimate = 0."""
    if se > 0:
        half = t_quantile(level, df) * se
        p = float(2 * stats.t.sf(abs(estimate) / se, df))
    else:  # no variation at all: the estimate is exact
        half, p = 0.0, (1.0 if estimate == 0 else 0.0)
    return {"estimate": estimate, "se": se, "df": df, "ci": [estimate - half, estimate + half], "p": p}


def t_test(values: Sequence[float], level: float = LEVEL) -> dict[str, Any]:
    """The paired t test of per-seed differences: their mean, its standard error, the t interval, the p value."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        raise ValueError(f"a t interval needs at least 2 values, got {x.size}")
    return _t_result(float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)), x.size - 1, level)


def sign_flip_test(values: Sequence[float]) -> float:
    """The exact two-sided sign-flip p value of mean = 0: the share of the 2^S sign patterns of the values whose mean
    is at least as far from 0 as the observed one (the observed pattern included). Valid for any distribution
    symmetric about 0 under the null; its smallest p value with ten seeds is 2/1024."""
    x = np.asarray(values, dtype=float)
    if not 1 <= x.size <= MAX_EXACT_SEEDS:
        raise ValueError(f"the exact sign-flip test takes 1 to {MAX_EXACT_SEEDS} values, got {x.size}")
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=x.size)))
    observed = abs(x.mean())
    means = np.abs(signs @ x) / x.size
    return float(np.mean(means >= observed - 1e-12 * max(1.0, observed)))


def stratum_weights(strata: Sequence[Sequence[int]], prompts: int) -> np.ndarray:
    """Per prompt, its weight in the estimate: each stratum (a rule) weighs 1 / len(strata), shared by its prompts."""
    weights = np.zeros(prompts)
    for stratum in strata:
        if not len(stratum):
            raise ValueError("an empty stratum")
        weights[list(stratum)] = 1 / (len(strata) * len(stratum))
    if not np.isclose(weights.sum(), 1.0) or np.any(weights == 0):
        raise ValueError("the strata must cover every prompt once")
    return weights


def two_way_estimate(
    differences: np.ndarray, strata: Sequence[Sequence[int]] | None = None, level: float = LEVEL
) -> dict[str, Any]:
    """The mean of paired differences d[s, j] (seeds x prompts; each stratum of prompts weighted equally) with a
    standard error from seeds and prompts together, and its t interval (S - 1 degrees of freedom).

    The variance of the estimate is the seeds' part (the variance of the per-seed estimates over S: seed effects and
    their interaction with the prompts) plus, per stratum r with weight c_r over n_r prompts, c_r^2 times the prompts'
    part: the variance of the per-prompt means over n_r, less the interaction's share already counted with the seeds
    (the residual mean square over S n_r). That is the unbiased estimator of Var(mean) in the two-way random-effects
    model d = mu + a_s + b_j + e_sj; the prompts' part is floored at 0. ``strata`` None: one stratum of all prompts.
    """
    d = np.asarray(differences, dtype=float)
    if d.ndim != 2 or d.shape[0] < 2 or d.shape[1] < 2:
        raise ValueError(f"need a seeds x prompts array with at least 2 of each, got shape {d.shape}")
    seeds, prompts = d.shape
    strata = [range(prompts)] if strata is None else strata
    weights = stratum_weights(strata, prompts)
    per_seed = d @ weights
    seed_variance = per_seed.var(ddof=1) / seeds
    prompt_variance = 0.0
    for stratum in strata:
        block = d[:, list(stratum)]
        n = block.shape[1]
        if n < 2:
            continue
        share = 1 / len(strata)
        prompt_means = block.mean(axis=0)
        residual = block - block.mean(axis=1, keepdims=True) - prompt_means + block.mean()
        residual_ms = (residual**2).sum() / ((seeds - 1) * (n - 1))
        part = prompt_means.var(ddof=1) / n - residual_ms / (seeds * n)
        prompt_variance += share**2 * max(part, 0.0)
    result = _t_result(float(per_seed.mean()), math.sqrt(seed_variance + prompt_variance), seeds - 1, level)
    return result | {
        "seed_variance": float(seed_variance),
        "prompt_variance": float(prompt_variance),
        "per_seed": per_seed.tolist(),
    }


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p values: the k-th smallest of m times (m - k + 1), made non-decreasing, capped at 1.
    Reject where the adjusted p is below the family's level."""
    order = sorted(pvalues, key=lambda name: pvalues[name])
    adjusted, running = {}, 0.0
    for k, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - k) * pvalues[name]))
        adjusted[name] = running
    return {name: adjusted[name] for name in pvalues}


def random_effects(estimates: Sequence[float], standard_errors: Sequence[float], level: float = LEVEL) -> dict:
    """Pool per-warm-model estimates with their standard errors: DerSimonian-Laird's between-model variance tau^2, the
    inverse-variance weighted mean, and the Hartung-Knapp standard error (its scale floored at 1, so never narrower
    than the fixed-effect one) with a t interval and p value on K - 1 degrees of freedom. One model: its own
    estimate, nothing pooled (``pooled`` False)."""
    y, se = np.asarray(estimates, dtype=float), np.asarray(standard_errors, dtype=float)
    if y.size != se.size or y.size == 0 or np.any(se <= 0):
        raise ValueError("need one positive standard error per estimate")
    if y.size == 1:
        return {"estimate": float(y[0]), "se": float(se[0]), "tau2": None, "models": 1, "pooled": False}
    w = 1 / se**2
    fixed = float((w * y).sum() / w.sum())
    q = float((w * (y - fixed) ** 2).sum())
    tau2 = max(0.0, (q - (y.size - 1)) / (w.sum() - (w**2).sum() / w.sum()))
    w_star = 1 / (se**2 + tau2)
    pooled = float((w_star * y).sum() / w_star.sum())
    scale = float((w_star * (y - pooled) ** 2).sum() / (y.size - 1))
    result = _t_result(pooled, math.sqrt(max(scale, 1.0) / w_star.sum()), y.size - 1, level)
    return result | {"tau2": tau2, "models": int(y.size), "pooled": True}


def every_model_p(estimates: Sequence[float], pvalues: Sequence[float]) -> float:
    """The intersection-union test of "the effect has the same sign on every warm model": its p value is the largest
    of the warm models' own p values when every estimate has the same sign, else 1. It rejects at level alpha only
    when every warm model's own test does, and needs no correction over the warm models (Berger 1982)."""
    if not estimates or len(estimates) != len(pvalues):
        raise ValueError("need one p value per estimate")
    same_sign = all(e > 0 for e in estimates) or all(e < 0 for e in estimates)
    return float(max(pvalues)) if same_sign else 1.0


def verdict(estimate: float, adjusted_p: float, models: int = 1, alpha: float = 0.05) -> str:
    """The pre-registered verdict at family level ``alpha`` from an (adjusted) `every_model_p` over ``models`` warm
    models: "ahead" or "behind" (on every warm model, or on the one), else "not distinguished" (one warm model) or
    "not shown on every warm model"."""
    where = " on every warm model" if models > 1 else " (one warm model)"
    if adjusted_p < alpha:
        return ("ahead" if estimate > 0 else "behind") + where
    return "not shown on every warm model" if models > 1 else "not distinguished (one warm model)"
