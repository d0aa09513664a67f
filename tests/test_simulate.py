"""The budget simulator (`trl_ada.tools.simulate`) against closed forms, with 5-standard-error bounds where it
samples."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from trl_ada.core.engine import Schedule
from trl_ada.tools.simulate import main, simulate
from trl_ada.tools.simulate_report import format_table
from trl_ada.tools.simulate_setup import (
    PassRates,
    Strategy,
    default_strategies,
    parse_pass_rates,
    read_pass_rates,
    sequential_limit,
)

PROMPTS = 4000


def beta_moment(a: float, b: float, n: int) -> float:
    """E[p^n] for p ~ Beta(a, b): B(a + n, b) / B(a, b)."""
    return math.exp(math.lgamma(a + n) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(a + b + n))


def within(observed: float, expected: float, variance: float, n: int = PROMPTS) -> bool:
    return abs(observed - expected) <= 5 * math.sqrt(variance / n) + 1e-12


def binom_cdf_outside(t: int, p: float, need_pos: int, need_neg: int) -> float:
    """P(after t draws, fewer than need_pos positives or fewer than need_neg negatives)."""
    return sum(math.comb(t, j) * p**j * (1 - p) ** (t - j) for j in range(t + 1) if j < need_pos or t - j < need_neg)


def sequential_samples(p: float, group: int, budget: int, need_pos: int, need_neg: int) -> tuple[float, float]:
    """Mean and variance of N = the first t >= group where the rule holds, capped at budget.
    P(N > t) = 1 for t < group, else P(rule fails after t draws); E[N] = sum_{t < budget} P(N > t)."""
    survival = [1.0 if t < group else binom_cdf_outside(t, p, need_pos, need_neg) for t in range(budget)]
    mean = sum(survival)
    second = sum((2 * t + 1) * s for t, s in enumerate(survival))  # E[N^2] = sum (2t + 1) P(N > t)
    return mean, second - mean**2


@pytest.mark.parametrize(("a", "b"), [(0.5, 4.0), (1.2, 0.6)])
@pytest.mark.parametrize("n", [4, 16])
def test_grpo_zero_std_matches_beta_moments(a, b, n):
    """A GRPO group of n is all-equal w.p. p^n + (1-p)^n; averaged over Beta(a, b): E[p^n] + E[(1-p)^n]."""
    (outcome,) = simulate(
        PassRates.beta(a, b), [Strategy("grpo", Schedule.from_strategy("uniform", n))], PROMPTS, 500, seed=3
    )
    expected = beta_moment(a, b, n) + beta_moment(b, a, n)
    assert within(outcome.zero_std, expected, expected * (1 - expected))
    assert outcome.signal == pytest.approx(1 - outcome.zero_std)
    assert (outcome.samples_per_prompt, outcome.rounds, outcome.max_rounds) == (n, 1, 1)
    assert math.isnan(outcome.resolved) and math.isnan(outcome.sequential_ratio)


@pytest.mark.parametrize(("p", "rule", "need"), [(0.3, "balanced", (2, 2)), (0.1, "positive", (1, 0))])
def test_sequential_limit_samples_and_resolution_match_closed_form(p, rule, need):
    schedule = Schedule.from_strategy(rule, 4, 8, 4)
    strategies = [Strategy("seq", sequential_limit(schedule), is_sequential_limit=True)]
    (outcome,) = simulate(PassRates.empirical([p]), strategies, PROMPTS, 1000, seed=5)
    mean, var = sequential_samples(p, 4, 32, *need)
    assert within(outcome.samples_per_prompt, mean, var)
    resolved = 1 - binom_cdf_outside(32, p, *need)
    assert within(outcome.resolved, resolved, resolved * (1 - resolved))
    assert outcome.max_rounds == 32 and outcome.sequential_ratio == 1.0


def test_fixed_rounds_match_closed_form():
    """Positive rule, rounds of 8, 4 rounds, fixed p: E[samples] = 8 * sum_{r<4} (1-p)^(8r)."""
    p = 0.05
    strategies = [Strategy("ada", Schedule.from_strategy("positive", 4, 8, 4))]
    (outcome,) = simulate(PassRates.empirical([p]), strategies, PROMPTS, 1000, seed=9)
    q = (1 - p) ** 8
    dist = {8 * r: q ** (r - 1) * (1 - q) for r in range(1, 4)} | {32: q**3}
    mean = sum(n * w for n, w in dist.items())
    assert within(outcome.samples_per_prompt, mean, sum((n - mean) ** 2 * w for n, w in dist.items()))


def test_ada_rows_resolve_like_their_sequential_limit_and_posterior_is_cheaper():
    strategies = default_strategies(grpo_sizes=(), refill_batches=0, rules=("balanced",))
    fixed, posterior, floor = simulate(parse_pass_rates("uniform"), strategies, 2048, 256, seed=1)
    # Same reward streams and same budget: the rounds change when a prompt stops, never whether it resolves.
    assert fixed.resolved == posterior.resolved == floor.resolved
    assert floor.samples_per_prompt <= posterior.samples_per_prompt <= fixed.samples_per_prompt
    assert fixed.sequential_ratio == pytest.approx(fixed.samples_per_prompt / floor.samples_per_prompt)
    assert posterior.max_rounds <= 4 and fixed.max_rounds == 4 and posterior.samples_p95 <= 32


def test_dapo_refills_until_the_batch_has_signal():
    """Pass rate 0.5, n = 4: a group has signal w.p. 1 - 2/16 = 0.875, so one batch of 256 keeps about 224 (never
    256 in practice) and two keep about 448: every step takes exactly 2 batches, 8 samples per trained prompt."""
    dapo = Strategy("dapo", Schedule.from_strategy("uniform", 4), refill_batches=10)
    (outcome,) = simulate(PassRates.empirical([0.5]), [dapo], 1024, 256, seed=2)
    assert (outcome.rounds, outcome.samples_per_prompt, outcome.signal) == (2, 8, 1)
    # Prompts that are always right never give signal: the cap is hit and the batch is topped up without signal.
    capped = Strategy("dapo", Schedule.from_strategy("uniform", 4), refill_batches=3)
    (outcome,) = simulate(PassRates.empirical([1.0]), [capped], 512, 256, seed=2)
    assert (outcome.rounds, outcome.samples_per_prompt, outcome.signal, outcome.zero_std) == (3, 12, 0, 1)


def test_read_pass_rates_formats(tmp_path):
    plain = tmp_path / "rates.txt"
    plain.write_text("0.25\n\n0.5\n1\n")
    csv_file = tmp_path / "rates.csv"
    csv_file.write_text('prompt,pass_rate,kept\n"a, b",0.125,True\nc,,True\nd,0.75,True\ne,0.0,False\n')
    jsonl = tmp_path / "rates.jsonl"
    rows = [{"prompt": "x", "pass_rate": 0.5, "kept": True}, {"pass_rate": None}, {"pass_rate": 1.0, "kept": False}]
    jsonl.write_text("\n".join(json.dumps(r) for r in rows))
    assert read_pass_rates(plain) == [0.25, 0.5, 1.0]
    # As `trl-ada prepare` writes them: by default only the prompts it kept for training.
    assert read_pass_rates(csv_file) == [0.125, 0.75]
    assert read_pass_rates(csv_file, kept_only=False) == [0.125, 0.75, 0.0]
    assert read_pass_rates(jsonl) == [0.5]
    assert read_pass_rates(jsonl, kept_only=False) == [0.5, 1.0]
    rates = parse_pass_rates(str(plain))
    assert set(rates.draw(np.random.default_rng(0), 200)) == {0.25, 0.5, 1.0}


def test_bad_pass_rates_name_the_cause(tmp_path):
    missing_key = tmp_path / "bad.jsonl"
    missing_key.write_text('{"prompt": "x"}\n')
    with pytest.raises(ValueError, match="pass_rate"):
        read_pass_rates(missing_key)
    out_of_range = tmp_path / "big.txt"
    out_of_range.write_text("0.5\n1.5\n")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        parse_pass_rates(str(out_of_range))
    for spec, match in [("beta:1", "beta:A,B"), ("beta:0,1", "> 0"), ("nowhere.csv", "neither")]:
        with pytest.raises(ValueError, match=match):
            parse_pass_rates(spec)
    with pytest.raises(ValueError, match="No strategies"):
        simulate(parse_pass_rates("uniform"), [], 10)


def test_command_prints_the_table_and_plots(tmp_path, capsys):
    png = tmp_path / "signal.png"
    args = ["--pass-rates", "beta:0.5,4", "--prompts", "256", "--batch-size", "64", "--grpo", "4", "--plot", str(png)]
    assert main(args) == 0
    out = capsys.readouterr().out
    for row in ["grpo-4", "dapo-4", "seq-balanced-8x4", "seq-positive-8x4-posterior", "sequential limit (balanced)"]:
        assert row in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["--pass-rates", "beta:x"]) == 2
    assert "beta:A,B" in capsys.readouterr().err


def test_format_table_aligns_and_marks_missing_values():
    strategies = [Strategy("GRPO n=4", Schedule.from_strategy("uniform", 4))]
    table = format_table(simulate(PassRates.empirical([0.5]), strategies, 16, 16)).splitlines()
    assert len(table) == 3 and len({len(line) for line in table}) == 1
    assert table[2].startswith("| GRPO n=4") and table[2].rstrip(" |").endswith("-")


# ------------------------------------------------------------------------------------------------ refill, selection
def fixed_rates(values):
    """Pass rates cycling through `values`."""
    return PassRates("fixed", lambda rng, n: np.resize(np.asarray(values, dtype=float), n))


def test_refill_on_prompts_without_signal_spends_the_limit_and_finds_nothing():
    grpo = Schedule.from_strategy("uniform", 4)
    strategy = Strategy("DAPO per slot", grpo, refill=True)  # limit: the batch size, so one refill per slot
    (outcome,) = simulate(fixed_rates([0.0, 1.0]), [strategy], num_prompts=64, batch_size=16, epochs=2)
    assert outcome.signal == 0.0
    assert outcome.samples_per_prompt == 8.0  # each slot's 4 plus one replacement's 4
    assert outcome.rounds == 2.0


def test_refill_fills_the_batch_when_the_prompts_can_give_signal():
    grpo = Schedule.from_strategy("uniform", 4)
    plain, refilled = simulate(
        fixed_rates([0.5]),
        [Strategy("GRPO", grpo), Strategy("DAPO per slot", grpo, refill=True)],
        num_prompts=2048,
        batch_size=64,
    )
    # A group of 4 at p = 0.5 has no signal with probability 1/8; refilled slots fail again with 1/8, and a slot
    # runs out of refills only when the batch's 64 are spent (expected 64/8 + 64/64 + ... = 9.1 per step).
    assert abs(plain.signal - 7 / 8) < 5 * (7 / 8 / 8 / 2048) ** 0.5
    assert refilled.signal == 1.0
    assert refilled.samples_per_prompt == pytest.approx(4 * 8 / 7, rel=0.05)  # 4 / P(signal), geometric


def test_selection_skips_prompts_known_to_have_no_signal():
    grpo = Schedule.from_strategy("uniform", 4)
    rates = fixed_rates([0.0, 1.0, 0.5, 0.5])
    plain, selected = simulate(
        rates,
        [Strategy("GRPO", grpo), Strategy("GRPO + selection", grpo, selection=(0.5, 0.1))],
        num_prompts=1024,
        batch_size=64,
        epochs=4,
    )
    assert abs(plain.signal - 0.5 * 7 / 8) < 0.03
    assert selected.samples_per_prompt == 4.0  # selection changes which prompts are sampled, not how many samples
    # From the second epoch on, a known 0/1 prompt is sampled with probability 0.1 (and replaced by a 0.5 prompt
    # or an unseen one otherwise): well above the 0.44 of uniform sampling.
    assert selected.signal > 0.6
