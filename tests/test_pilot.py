"""Pilot-then-commit: the engine's pilot under both schedules, the stop rule's prediction math, and the trainer.

Expectations come from hand-worked scripts, exact rational products, closed forms and Monte Carlo with stated bounds.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from test_engine_streaming import EventBackend, Outcomes
from test_refill_engine import Script
from test_trainer import ada_logs, keyed_dataset, make_trainer

from trl_ada import ReinforceAdaConfig, ReinforceAdaTrainer
from trl_ada.core.engine import Pilot, Pool, RoundsBackend, Schedule, downsample, sample
from trl_ada.core.memory import PassRateMemory
from trl_ada.core.selection import MIN_PROMPTS_TO_FIT, agreement_probability, fit_beta_prior, pilot_stop_rule

GRPO_4 = Schedule.from_strategy("uniform", 4)


class StopLog:
    """A `stop` that answers from a table and records every question it was asked."""

    def __init__(self, answers: dict[int, bool]):
        self.answers, self.asked = answers, []

    def __call__(self, index: int, pool: Pool) -> bool:
        self.asked.append((index, list(pool.rewards)))
        return self.answers.get(index, False)


def run_rounds(rewards, schedule, pilot, refill=None, num_prompts=None):
    """Rounds over scripted rewards (`rewards[i][k]`: prompt i's k-th draw); returns the result and the requests of
    every generation call."""
    script = Script(rewards)
    num_prompts = len(rewards) if num_prompts is None else num_prompts
    result = sample(num_prompts, schedule, RoundsBackend(script.generate), script.score, refill=refill, pilot=pilot)
    return result, script.calls


# --------------------------------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------------------------------


def test_rounds_pilot_hand_worked():
    # GRPO's group of 4 with a pilot of 2. Prompt 0's pilot agrees and the rule stops it; prompt 1's pilot has both
    # kinds, so nobody is asked; prompt 2's pilot agrees but the rule says go on.
    stop = StopLog({0: True, 2: False})
    rewards = {0: [1, 1, 0, 0], 1: [1, 0, 1, 1], 2: [0, 0, 1, 0]}
    result, calls = run_rounds(rewards, GRPO_4, Pilot(2, stop))
    assert calls == [[(0, 2), (1, 2), (2, 2)], [(1, 2), (2, 2)]]
    assert stop.asked == [(0, [1.0, 1.0]), (2, [0.0, 0.0])]
    assert [pool.rewards for pool in result.pools] == [[1, 1], [1, 0, 1, 1], [0, 0, 1, 0]]
    assert [pool.rounds for pool in result.pools] == [[0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]
    assert (result.rounds, result.pilot_stopped) == (2, 1)
    # The stopped prompt's group is its pilot, each completion twice; every reward in it agrees.
    assert downsample(result.pools[0], 4, random.Random(0)) == [0, 0, 1, 1]


def test_rounds_pilot_under_the_positive_rule_counts_towards_the_budget():
    # Positive rule, rounds of 4, at most 2, budget 8; pilot of 2. Prompt 0 never finds a positive and is never
    # stopped: 2 + 4 + the 2 left of its budget. Prompt 1's pilot has no positive, its first round does.
    schedule = Schedule.from_strategy("positive", 4, samples_per_round=4, max_rounds=2)
    rewards = {0: [0] * 8, 1: [0, 0, 0, 1, 0, 0]}
    result, calls = run_rounds(rewards, schedule, Pilot(2, StopLog({})))
    assert calls == [[(0, 2), (1, 2)], [(0, 4), (1, 4)], [(0, 2)]]
    assert [len(pool) for pool in result.pools] == [8, 6] and result.rounds == 3
    assert [pool.resolved for pool in result.pools] == [False, True]


def test_a_pilot_of_the_whole_budget_is_one_round():
    schedule = Schedule.from_strategy("positive", 4, samples_per_round=2, max_rounds=2)  # budget 4
    result, calls = run_rounds({0: [0, 0, 0, 0]}, schedule, Pilot(6, StopLog({})))
    assert calls == [[(0, 4)]] and len(result.pools[0]) == 4


def test_a_stopped_pilot_is_refilled_and_the_refill_pilots_too():
    stop = StopLog({0: True, 2: True})
    asked = []

    def refill(index):
        asked.append(index)
        return 2 if len(asked) == 1 else None

    rewards = {0: [0, 0], 1: [1, 0, 1, 0], 2: [1, 1]}
    result, calls = run_rounds(rewards, GRPO_4, Pilot(2, stop), refill=refill, num_prompts=2)
    assert calls == [[(0, 2), (1, 2)], [(2, 2), (1, 2)]]  # the refill takes its slot's place in the round
    assert asked == [0, 2] and result.slots == [2, 1] and result.refills == 1 and result.pilot_stopped == 2


def test_pilot_refuses_bad_arguments():
    with pytest.raises(ValueError, match="at least one"):
        Pilot(0, StopLog({}))
    with pytest.raises(ValueError, match="first_round_sizes"):
        sample(1, GRPO_4, RoundsBackend(lambda r: []), lambda r, h: [], first_round_sizes=[2], pilot=Pilot(1, bool))


def sequential_pool(stream: list[float], schedule: Schedule, pilot: int, stops: bool) -> list[float]:
    """Draw one at a time: after the pilot, stop if its rewards agree and the rule says so; else stop at the first
    length where the group is full and the exit rule holds, or at the budget."""
    if stops and len(set(stream[:pilot])) == 1:
        return stream[:pilot]
    for length in range(max(pilot, 1), schedule.budget + 1):
        head = stream[:length]
        positives = sum(r > schedule.positive_threshold for r in head)
        if length >= schedule.group_size and schedule.exit_rule.holds(positives, length - positives):
            return head
    return stream[: schedule.budget]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("strategy", ["uniform", "balanced", "positive"])
def test_streaming_pilot_pools_are_the_sequential_rule_whatever_the_finish_order(seed, strategy):
    """Rewards fixed per (prompt, draw in request order), random durations: a streamed pool is exactly what drawing
    one at a time gives, and nothing beyond a prompt's pilot is requested before its pilot has finished. Under
    GRPO's one group (where rounds cannot overshoot) rounds give the same pools."""
    rng = random.Random(seed)
    schedule = Schedule.from_strategy(strategy, 4, samples_per_round=3, max_rounds=3)
    rates = [rng.choice([0.0, 0.2, 0.5, 0.9, 1.0]) for _ in range(8)]
    draws = {i: [float(rng.random() < rates[i]) for _ in range(schedule.budget)] for i in range(8)}
    stop_set = {i for i in range(8) if rng.random() < 0.5}

    def stop(index, pool):
        return index in stop_set

    outcomes = Outcomes(lambda i, k: (draws[i][k], rng.choice([1.0, 2.0, 3.0, 5.0])))
    backend = EventBackend(outcomes)
    streamed = sample(8, schedule, backend, outcomes.score, rollout="streaming", max_in_flight=3, pilot=Pilot(2, stop))
    expected = [sequential_pool(draws[i], schedule, 2, i in stop_set) for i in range(8)]
    assert [p.rewards for p in streamed.pools] == expected
    assert streamed.pilot_stopped == sum(i in stop_set and len(set(draws[i][:2])) == 1 for i in range(8))
    if strategy == "uniform":
        rounds, _ = run_rounds(draws, schedule, Pilot(2, stop))
        assert [p.rewards for p in rounds.pools] == expected
    submitted = {i: 0 for i in range(8)}
    for wave in backend.submits:
        for draw in wave:
            submitted[draw.prompt_index] += 1
            if submitted[draw.prompt_index] > 2:  # a third draw: the pilot must have finished and not stopped
                pilot_done = [k for (i, k) in backend.returned.values() if i == draw.prompt_index and k < 2]
                assert len(pilot_done) == 2


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_stopping_every_agreeing_pilot_stops_at_the_binomial_rate(p):
    """A rule that always stops: a pilot of k stops with probability p^k + (1-p)^k, and a prompt draws
    4 - (4 - k) (p^k + (1-p)^k) completions on average."""
    rng = np.random.default_rng(int(p * 100))
    num_prompts, k = 4000, 2

    def generate(requests):
        return [float(u < p) for r in requests for u in rng.random(r.num_samples)]

    result = sample(num_prompts, GRPO_4, RoundsBackend(generate), lambda r, h: h, pilot=Pilot(k, lambda i, pool: True))
    agree = p**k + (1 - p) ** k
    bound = 5 * math.sqrt(agree * (1 - agree) / num_prompts)
    assert abs(result.pilot_stopped / num_prompts - agree) < bound
    mean_size = sum(len(pool) for pool in result.pools) / num_prompts
    assert abs(mean_size - (4 - (4 - k) * agree)) < (4 - k) * bound


# --------------------------------------------------------------------------------------------------------------------
# The stop rule's prediction
# --------------------------------------------------------------------------------------------------------------------


def exact_agreement(pos: int, neg: int, more: int, positive: bool, prior=(1, 1)) -> Fraction:
    """P(the next `more` draws are all positive / all negative) under Beta(a + pos, b + neg): a product of rising
    ratios (the Polya urn)."""
    a, b = prior[0] + pos, prior[1] + neg
    same = a if positive else b
    return math.prod(Fraction(same + j, a + b + j) for j in range(more))


@pytest.mark.parametrize("pos, neg", [(0, 0), (2, 0), (0, 2), (6, 0), (3, 1), (0, 9)])
@pytest.mark.parametrize("more", [0, 1, 2, 6])
@pytest.mark.parametrize("prior", [(1, 1), (2, 5)])
def test_agreement_probability_is_the_beta_binomial(pos, neg, more, prior):
    for positive in (True, False):
        expected = float(exact_agreement(pos, neg, more, positive, prior))
        assert agreement_probability(pos, neg, more, positive, prior) == pytest.approx(expected, rel=1e-12)


def test_agreement_probability_with_a_u_shaped_prior_by_monte_carlo():
    prior, pos, neg, more = (0.3, 0.4), 4.6, 0.0, 2  # decayed counts: fractional
    p = np.random.default_rng(0).beta(prior[0] + pos, prior[1] + neg, 400_000)
    estimate, error = np.mean(p**more), np.std(p**more) / math.sqrt(len(p))
    assert abs(agreement_probability(pos, neg, more, True, prior) - estimate) < 5 * error
    with pytest.raises(ValueError):
        agreement_probability(-1, 0, 2, True)


@pytest.mark.parametrize("a, b", [(0.3, 0.4), (2.0, 6.0), (5.0, 1.5)])
def test_fit_beta_prior_recovers_a_known_prior(a, b):
    """Beta-binomial counts from a known Beta(a, b), n = 4 to 12 draws per prompt: the method of moments gets the
    mean within 0.02 and the prior's weight a + b within 25% (its sampling spread at 5,000 prompts is a few %)."""
    rng = np.random.default_rng(1)
    n = rng.integers(4, 13, 5000)
    x = rng.binomial(n, rng.beta(a, b, len(n)))
    fitted_a, fitted_b = fit_beta_prior(zip(x.tolist(), n.tolist(), strict=True))
    assert abs(fitted_a / (fitted_a + fitted_b) - a / (a + b)) < 0.02
    assert abs((fitted_a + fitted_b) / (a + b) - 1) < 0.25


def test_fit_beta_prior_hand_worked_and_fallbacks():
    # 20 prompts with 4 draws each, half 4/4 and half 0/4: m = 1/2, v = 20/76, h = 1/4, so
    # rho = (v / (1/4) - 1/4) / (3/4) = (80/76 - 1/4) / (3/4) > 0.95: clamped, a = b = (1/0.95 - 1) / 2.
    counts = [(4, 4)] * 10 + [(0, 4)] * 10
    a, b = fit_beta_prior(counts)
    assert a == b == pytest.approx((1 / 0.95 - 1) / 2)
    # Less spread across prompts than 2 draws' binomial noise alone: rho is negative, clamped at 0.01.
    counts = [(1, 2), (1, 2)] * 10 + [(0, 2), (2, 2)] * 5
    v = float(np.var([c[0] / 2 for c in counts], ddof=1))  # m = 1/2, so m (1 - m) = 1/4; h = 1/2
    rho = (v / 0.25 - 0.5) / 0.5
    a, b = fit_beta_prior(counts)
    assert a + b == pytest.approx(1 / max(rho, 0.01) - 1)
    assert fit_beta_prior([(1, 4)] * (MIN_PROMPTS_TO_FIT - 1)) == (1.0, 1.0)  # too few prompts
    assert fit_beta_prior([(0, 1), (1, 1)] * 20) == (1.0, 1.0)  # single draws: rho undetermined
    assert fit_beta_prior([(0, 4)] * 30, fallback=(2.0, 3.0)) == (2.0, 3.0)  # mean 0
    assert fit_beta_prior([(0, 0)] * 30 + [(1, 4)] * 5) == (1.0, 1.0)  # prompts without counts do not count


def test_pilot_stop_rule_hand_worked():
    # Fewer prompts than MIN_PROMPTS_TO_FIT: the prior is Beta(1, 1). Group 4, pilot 2, so 2 more draws.
    memory = PassRateMemory()
    memory.update("seen", 4, 4)
    keys = ["seen", "new"]
    stop = pilot_stop_rule(memory, keys, group_size=4, threshold=0.75)
    right, wrong, unscored = Pool(0.5), Pool(0.5), Pool(0.5)
    right.add(["a", "b"], [1.0, 1.0], 0)
    wrong.add(["a", "b"], [0.0, 0.0], 0)
    unscored.add(["a", "b"], [math.nan, math.nan], 0)
    # seen, pilot right: Beta(7, 1), 7/8 * 8/9 = 7/9 >= 0.75. new, pilot right: Beta(3, 1), 3/4 * 4/5 = 3/5.
    assert exact_agreement(6, 0, 2, True) == Fraction(7, 9) and exact_agreement(2, 0, 2, True) == Fraction(3, 5)
    assert stop(0, right) and not stop(1, right)
    assert not stop(0, wrong)  # Beta(5, 3): 3/8 * 4/9 = 1/6
    assert not stop(0, unscored)  # nothing to go by
    assert not pilot_stop_rule(memory, keys, 4, threshold=0.8)(0, right)  # 7/9 < 0.8
    keys.append("seen")  # a refill appended later is read when its pilot finishes
    assert stop(2, right)


# --------------------------------------------------------------------------------------------------------------------
# The trainer, on the tiny toy model
# --------------------------------------------------------------------------------------------------------------------


def keyed_reward(completions, key, **kwargs):
    """ "z*" prompts are never right, "o*" always; "m*" alternate 1, 0, 1, 0 within each call."""
    return [float(k.startswith("o") or (k.startswith("m") and i % 2 == 0)) for i, k in enumerate(key)]


class Recording(ReinforceAdaTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.records = getattr(self, "records", [])
        self.records.append(
            {
                "keys": [row["key"] for row in inputs],
                "completions": output["completion_ids"].tolist(),
                "advantages": output["advantages"].tolist(),
            }
        )
        return output


@pytest.mark.slow
def test_the_trainer_stops_agreeing_pilots_and_trains_the_rest(toy_cold_dir, tmp_path):
    # Threshold 0.5: with Beta(1, 1) (few prompts) a pilot of 2 that agrees predicts the other 2 agree with 3/5.
    keys = ["z0", "o0", "m0", "m1"]
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        keyed_reward,
        keyed_dataset(keys),  # one step is one pass over the 4 prompts
        trainer_cls=Recording,
        sampling_strategy="uniform",
        pilot_size=2,
        pilot_stop_threshold=0.5,
        per_device_train_batch_size=16,
        max_steps=2,
    )
    generated = []
    generate = trainer._generate_single_turn

    def counted(prompt_ids, *args, **kwargs):
        ids, logprobs = generate(prompt_ids, *args, **kwargs)
        generated.append(len(ids))
        return ids, logprobs

    trainer._generate_single_turn = counted
    trainer.train()
    assert generated == [8, 4, 8, 4]  # per step: a pilot of 2 for 4 prompts, then 2 more for the 2 "m" prompts
    for record in trainer.records:
        for start in range(0, 16, 4):
            key, rows = record["keys"][start], range(start, start + 4)
            completions = [record["completions"][r] for r in rows]
            advantages = [record["advantages"][r] for r in rows]
            if key[0] in "zo":  # stopped: the pilot's two completions, each twice, with no gradient
                assert completions[0] == completions[1] and completions[2] == completions[3]
                assert advantages == [0.0] * 4
            else:
                assert sorted(advantages) == [-0.5, -0.5, 0.5, 0.5]
    for log in ada_logs(trainer):
        assert log["ada/pilot_stopped"] == 2 and log["ada/samples_per_prompt"] == 3.0
        assert log["frac_reward_zero_std"] == 0.5
        assert log["reward"] == pytest.approx(0.5)  # first 2 draws per prompt: z 0, o 1, m 1/2 each


def test_config_checks_the_pilot():
    for size in (-1, 4, 2.5):
        with pytest.raises(ValueError, match="pilot_size"):
            ReinforceAdaConfig(output_dir="out", use_cpu=True, bf16=False, num_generations=4, pilot_size=size)
    with pytest.raises(ValueError, match="pilot_stop_threshold"):
        ReinforceAdaConfig(output_dir="out", use_cpu=True, bf16=False, pilot_size=2, pilot_stop_threshold=0)
    with pytest.raises(ValueError, match="estimate"):
        ReinforceAdaConfig(output_dir="out", use_cpu=True, bf16=False, pilot_size=2, sampling_strategy="estimate")
