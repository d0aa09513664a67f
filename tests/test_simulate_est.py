"""Reinforce-Ada-Est in the budget simulator and the engine pieces it uses, against closed forms."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

import trl_ada.tools.simulate
from trl_ada.core.allocation import allocate
from trl_ada.core.engine import Pool, Request, Schedule, downsample, sample_adaptively
from trl_ada.tools.simulate import main, simulate
from trl_ada.tools.simulate_setup import Estimate, PassRates, Strategy, default_strategies


def est(mean=8, lo=4, hi=32, rule="inv_sqrt_p", **kwargs):
    return Strategy.est(4, Estimate(mean, lo, hi, rule, **kwargs))


@pytest.mark.parametrize("rule", ["inv_sqrt_p", "inv_p", "variance_optimal"])
def test_est_spends_exactly_its_budget_in_one_call_per_step(rule):
    (outcome,) = simulate(PassRates.beta(0.5, 2), [est(mean=8, rule=rule)], 1024, 128, seed=1, epochs=3)
    assert outcome.samples_per_prompt == 8.0  # every step's allocation sums to 8 x its prompts
    assert (outcome.rounds, outcome.max_rounds) == (1, 1)
    assert 8 < outcome.samples_p95 <= 32  # the memory moves samples between prompts, within the bounds
    assert math.isnan(outcome.resolved) and math.isnan(outcome.sequential_ratio)


def test_est_first_epoch_is_grpo_with_the_mean():
    """Every prompt starts at the prior, so the first epoch splits evenly: n = 8 per prompt, and a final group has
    signal unless the 8 samples agree: 1 - E[p^8] - E[(1-p)^8] = 1 - 2 / 9 under uniform(0, 1)."""
    n = 4000
    (outcome,) = simulate(PassRates.beta(1, 1), [est(mean=8)], n, 200, seed=2, epochs=1)
    assert outcome.samples_p95 == 8
    expected = 1 - 2 / 9
    assert abs(outcome.signal - expected) <= 5 * math.sqrt(expected * (1 - expected) / n)


def test_est_signal_matches_its_allocation(monkeypatch):
    """All prompts share p = 0.3, the memory makes the sizes differ; given a prompt's size n, its fresh samples give
    a final group with signal w.p. 1 - p^n - (1-p)^n (the balanced downsample keeps both kinds when the pool has
    them). Average that over the allocations actually made."""
    sizes = []

    def recording_allocate(*args, **kwargs):
        sizes.extend(result := allocate(*args, **kwargs))
        return result

    monkeypatch.setattr(trl_ada.tools.simulate, "allocate", recording_allocate)
    p, visits = 0.3, 1000 * 4
    (outcome,) = simulate(PassRates.empirical([p]), [est(mean=6, lo=4, hi=12)], 1000, 50, seed=3, epochs=4)
    assert len(sizes) == visits and len(set(sizes)) > 3
    probabilities = [1 - p**n - (1 - p) ** n for n in sizes]
    expected = sum(probabilities) / visits
    variance = sum(q * (1 - q) for q in probabilities) / visits
    assert abs(outcome.signal - expected) <= 5 * math.sqrt(variance / visits)


def test_est_rows_in_the_defaults_and_the_command(capsys):
    strategies = default_strategies(grpo_sizes=(), refill_batches=0, rules=(), estimate_means=(8, 16))
    assert [s.estimate.mean for s in strategies] == [8, 16]
    assert strategies[0].estimate.max_samples == 32 and strategies[0].schedule.budget == 32
    args = ["--prompts", "128", "--batch-size", "64", "--grpo", "4", "--dapo-batches", "0", "--rules", "positive"]
    assert main([*args, "--estimate", "8", "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert "est-8 in [4, 32]" in out and "128 prompts x 2 epochs" in out
    with pytest.raises(ValueError, match="min_samples <= mean"):
        Estimate(40, 4, 32)
    with pytest.raises(ValueError, match="below the group size"):
        Strategy.est(4, Estimate(8, 2, 32))


QUICK = ["--prompts", "64", "--batch-size", "64", "--epochs", "1", "--grpo", "4", "--dapo-batches", "0"]
QUICK += ["--rules", "positive", "--round-sizing", "fixed"]


def test_default_est_rows_follow_the_round_flags(capsys):
    """A budget of 4 x 2 = 8 holds the default mean 8 but not 16: the run goes on without it, and says so."""
    assert main([*QUICK, "--samples-per-round", "4", "--max-rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "est-8 in [4, 8]" in out and "est-16 in" not in out
    (note,) = [line for line in out.splitlines() if "left out" in line]
    assert "16" in note and "--estimate" in note and "--max-rounds" in note
    assert main(QUICK) == 0  # the default budget, 8 x 4 = 32, holds both, and nothing is left out
    out = capsys.readouterr().out
    assert "est-8 in [4, 32]" in out and "est-16 in [4, 32]" in out and "left out" not in out
    assert main([*QUICK, "--estimate"]) == 0  # a bare --estimate: no Est row, no note
    out = capsys.readouterr().out
    assert "est-" not in out and "left out" not in out


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--samples-per-round", "4", "--max-rounds", "2", "--estimate", "16"], ["--estimate 16", "--max-rounds"]),
        (["--estimate", "2"], ["--estimate 2", "--group-size 4"]),
        # 8 completions in rounds of 4 need 2 rounds; in 1 round, rounds of 8
        (["--group-size", "8", "--samples-per-round", "4", "--max-rounds", "1"], ["--max-rounds to 2", "to 8"]),
        (["--samples-per-round", "0"], ["--samples-per-round"]),
        (["--max-rounds", "0"], ["--max-rounds"]),
        (["--grpo", "4", "0"], ["--grpo"]),
        (["--dapo-batches", "-1"], ["--dapo-batches"]),
        (["--min-negatives", "-1"], ["--min-negatives"]),
        (["--prompts", "0"], ["--prompts"]),
        (["--batch-size", "0"], ["--batch-size"]),
    ],
)
def test_inconsistent_flags_fail_in_one_line_naming_them(flags, named, capsys):
    assert main([*QUICK, *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("trl-ada simulate: error: --")
    for text in named:
        assert text in line


def test_default_strategies_rejects_an_est_mean_outside_the_budget():
    with pytest.raises(ValueError, match=r"Est mean 16 is outside .* = \[4, 8\]"):
        default_strategies(samples_per_round=4, max_rounds=2, estimate_means=(16,))
    with pytest.raises(ValueError, match=r"Est mean 2 is outside"):
        default_strategies(estimate_means=(2,))


# ---------------------------------------------------------------------------------------------------- engine
def test_uniform_downsample_draws_every_subset_equally():
    """Pool: 3 positives, 3 negatives, 1 unscorable. Uniform keeps 2 of the 6 scorable: each of the 15 pairs w.p.
    1/15 (the balanced mode would only ever keep one of each kind)."""
    pool = Pool(0.5)
    pool.add(list(range(7)), [1, 1, 1, 0, 0, 0, math.nan], 0)
    rng, draws = random.Random(0), 15000
    counts = Counter(tuple(downsample(pool, 2, rng, "uniform")) for _ in range(draws))
    assert len(counts) == 15 and all(6 not in pair for pair in counts)
    for count in counts.values():
        assert abs(count - draws / 15) <= 5 * math.sqrt(draws * (1 / 15) * (14 / 15))
    # Unscorable completions only fill what the scorable ones cannot.
    assert downsample(pool, 7, rng, "uniform") == list(range(7))
    with pytest.raises(ValueError, match="downsample mode"):
        downsample(pool, 2, rng, "stratified")


def test_first_round_sizes_replace_the_first_round_within_the_budget():
    requested = []

    def generate(requests: list[Request]) -> list[float]:
        requested.append([(r.prompt_index, r.num_samples) for r in requests])
        return [0.0] * sum(r.num_samples for r in requests)  # never right: prompts run to the end of the budget

    schedule = Schedule.from_strategy("positive", 4, samples_per_round=8, max_rounds=3)
    result = sample_adaptively(2, schedule, generate, lambda requests, handles: handles, first_round_sizes=[5, 20])
    # Prompt 1 starts with 20 and may take only 4 more; prompt 0 continues with rounds of 8 after its 5.
    assert requested == [[(0, 5), (1, 20)], [(0, 8), (1, 4)], [(0, 8)]]
    assert [len(pool) for pool in result.pools] == [21, 24]
    estimate = Schedule.from_strategy("estimate", 4, samples_per_round=16)
    assert (estimate.max_rounds, estimate.budget, estimate.exit_rule.holds(0, 0)) == (1, 16, True)
    with pytest.raises(ValueError, match="first_round_sizes"):
        sample_adaptively(2, estimate, generate, lambda r, h: h, first_round_sizes=[4, 17])
