"""Refill in the engine (both schedules), the side prompt stream and the selection test: no model."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from test_engine_streaming import EventBackend, Outcomes

from trl_ada.core.engine import RoundsBackend, Schedule, has_signal, sample
from trl_ada.core.memory import PassRateMemory
from trl_ada.core.prompt_stream import PromptStream, SidePrompts
from trl_ada.core.selection import keep_probability, no_signal_probability

# --------------------------------------------------------------------------------------------------------------------
# The engine's refill, worked by hand
# --------------------------------------------------------------------------------------------------------------------


class Script:
    """`generate` over scripted rewards: prompt i's k-th draw gets `rewards[i][k]`; handles are (i, k)."""

    def __init__(self, rewards: dict[int, list[float]]):
        self.rewards, self.served, self.calls = rewards, {}, []

    def generate(self, requests):
        self.calls.append([(r.prompt_index, r.num_samples) for r in requests])
        handles = []
        for r in requests:
            start = self.served.get(r.prompt_index, 0)
            self.served[r.prompt_index] = start + r.num_samples
            handles.extend((r.prompt_index, k) for k in range(start, start + r.num_samples))
        return handles

    def score(self, requests, handles):
        return [self.rewards[i][k] for i, k in handles]


def counting_refill(first_new: int, limit: int):
    """A refill that hands out new prompt indices first_new, first_new + 1, ... up to `limit` times."""
    asked = []

    def refill(index):
        asked.append(index)
        if len(asked) > limit:
            return None
        return first_new + len(asked) - 1

    return refill, asked


def test_uniform_refill_replaces_groups_without_signal_hand_worked():
    # GRPO sampling (one round of 4). Prompt 1 is all wrong and prompt 2 all right: both are replaced in round 1 by
    # prompts 3 and 4; prompt 4 is all wrong again and is replaced in round 2 by prompt 5.
    script = Script(
        {
            0: [1, 0, 1, 0],
            1: [0, 0, 0, 0],
            2: [1, 1, 1, 1],
            3: [1, 1, 0, 1],
            4: [0, 0, 0, 0],
            5: [1, 0, 0, 0],
        }
    )
    refill, asked = counting_refill(3, limit=3)
    schedule = Schedule.from_strategy("uniform", 4)
    result = sample(3, schedule, _rounds(script), script.score, refill=refill)
    assert asked == [1, 2, 4]
    assert script.calls == [[(0, 4), (1, 4), (2, 4)], [(3, 4), (4, 4)], [(5, 4)]]
    assert result.slots == [0, 3, 5]
    assert result.refills == 3 and result.rounds == 3
    assert [len(p) for p in result.pools] == [4] * 6
    assert result.replaced_pools == [result.pools[1], result.pools[2], result.pools[4]]
    assert all(has_signal(p) for p in result.kept_pools)
    # A replacement's rounds count from its own start: what `first_round_has_zero_std` reads.
    assert result.pools[5].rounds == [0, 0, 0, 0]


def test_refill_limit_leaves_the_slot_without_signal():
    script = Script({0: [0] * 4, 1: [1] * 4, 2: [1, 0, 0, 0]})
    refill, asked = counting_refill(2, limit=1)
    result = sample(2, Schedule.from_strategy("uniform", 4), _rounds(script), script.score, refill=refill)
    assert asked == [0, 1]  # the second request is refused
    assert result.slots == [2, 1] and result.refills == 1
    assert [has_signal(p) for p in result.kept_pools] == [True, False]


def test_positive_rule_replacement_gets_a_budget_and_rounds_of_its_own():
    # Prompt 0 is never right: 4 rounds of 8 (budget 32), then replaced by prompt 2, which resolves in its 2nd round.
    # Prompt 1 resolves in round 1 with a mixed pool and keeps its slot.
    script = Script({0: [0] * 32, 1: [1, 0, 0, 0, 0, 0, 0, 0], 2: [0] * 8 + [1] + [0] * 7})
    refill, asked = counting_refill(2, limit=5)
    schedule = Schedule.from_strategy("positive", 4, 8, 4)
    result = sample(2, schedule, _rounds(script), script.score, refill=refill)
    assert asked == [0]
    assert script.calls == [[(0, 8), (1, 8)], [(0, 8)], [(0, 8)], [(0, 8)], [(2, 8)], [(2, 8)]]
    assert result.slots == [2, 1] and result.rounds == 6
    assert len(result.pools[2]) == 16 and result.pools[2].rounds == [0] * 8 + [1] * 8
    assert result.pools[2].resolved and not result.pools[0].resolved


def test_refill_must_return_the_next_index():
    script = Script({0: [0] * 4, 1: [0] * 4})
    with pytest.raises(ValueError, match="next prompt index, 1"):
        sample(1, Schedule.from_strategy("uniform", 4), _rounds(script), script.score, refill=lambda i: 5)


def test_without_refill_nothing_changes():
    rng = random.Random(3)
    rewards = {i: [float(rng.random() < 0.3) for _ in range(32)] for i in range(6)}
    schedule = Schedule.from_strategy("balanced", 4, 8, 4)
    plain = sample(6, schedule, _rounds(Script(rewards)), Script(rewards).score)
    never = sample(6, schedule, _rounds(Script(rewards)), Script(rewards).score, refill=lambda i: None)
    assert [p.rewards for p in plain.pools] == [p.rewards for p in never.pools]
    assert plain.slots == never.slots == list(range(6)) and plain.rounds == never.rounds


def test_other_processes_keep_a_process_with_refill_in_step():
    # With refill, the loop runs as long as any process is active: a process that is done still joins the
    # generation calls (empty), so every process makes the same number of calls.
    script = Script({0: [1, 0, 1, 0]})
    busy_elsewhere = iter([True, True, True, False])
    result = sample(
        1,
        Schedule.from_strategy("uniform", 4),
        _rounds(script),
        script.score,
        any_active=lambda local: next(busy_elsewhere) or local,
        refill=lambda index: None,
    )
    assert script.calls == [[(0, 4)], [], []]
    assert result.rounds == 3


def test_streaming_refill_starts_the_replacement_at_once():
    # Prompt 0 (all wrong, fast) stops after its group of 4 and is replaced by prompt 2 while prompt 1's slow draws
    # are still running.
    rewards = {0: [0.0] * 4, 1: [1.0, 0.0, 1.0, 0.0], 2: [1.0, 0.0, 0.0, 0.0]}
    durations = {0: [1.0] * 4, 1: [10.0] * 4, 2: [1.0] * 4}
    outcomes = Outcomes.scripted(rewards, durations)
    backend = EventBackend(outcomes)
    refill, asked = counting_refill(2, limit=1)
    schedule = Schedule.from_strategy("uniform", 4)
    result = sample(2, schedule, backend, outcomes.score, rollout="streaming", max_in_flight=4, refill=refill)
    assert asked == [0]
    assert [d.prompt_index for d in backend.submits[1]] == [2] * 4
    assert backend.now == 10.0  # prompt 2 ran (t = 1..2) alongside prompt 1's draws, not after them
    assert result.slots == [2, 1] and result.refills == 1
    assert [p.rewards for p in result.kept_pools] == [rewards[2], rewards[1]]


def accuracy_signal(correct: dict[int, list[float]]):
    """A refill signal on a second reward column: handle (i, k)'s correctness is `correct[i][k]`."""
    return lambda pool: len({correct[i][k] for i, k in pool.samples}) > 1


def test_refill_signal_filters_on_the_named_column_not_the_total_rounds():
    # Totals all differ (a length bonus), so the default filter keeps every pool; on correctness, prompt 0 (all
    # right) is replaced by prompt 2, and prompt 1 (mixed) keeps its slot.
    totals = {0: [1.1, 1.2, 1.3, 1.4], 1: [1.1, 0.2, 1.3, 0.4], 2: [1.0, 0.1, 0.2, 0.3]}
    correct = {0: [1, 1, 1, 1], 1: [1, 0, 1, 0], 2: [1, 0, 0, 0]}
    schedule = Schedule.from_strategy("uniform", 4)
    refill, asked = counting_refill(2, limit=1)
    script = Script(totals)
    default = sample(2, schedule, _rounds(script), script.score, refill=refill)
    assert asked == [] and default.slots == [0, 1]
    refill, asked = counting_refill(2, limit=1)
    script = Script(totals)
    signal = accuracy_signal(correct)
    filtered = sample(2, schedule, _rounds(script), script.score, refill=refill, refill_signal=signal)
    assert asked == [0] and filtered.slots == [2, 1] and filtered.refills == 1


def test_refill_signal_filters_on_the_named_column_not_the_total_streaming():
    rewards = {0: [1.1, 1.2, 1.3, 1.4], 1: [1.1, 0.2, 1.3, 0.4], 2: [1.0, 0.1, 0.2, 0.3]}
    correct = {0: [1, 1, 1, 1], 1: [1, 0, 1, 0], 2: [1, 0, 0, 0]}
    outcomes = Outcomes.scripted(rewards, {i: [1.0] * 4 for i in rewards})
    refill, asked = counting_refill(2, limit=1)
    schedule = Schedule.from_strategy("uniform", 4)
    signal = accuracy_signal(correct)
    result = sample(
        2, schedule, EventBackend(outcomes), outcomes.score, rollout="streaming", refill=refill, refill_signal=signal
    )
    assert asked == [0] and result.slots == [2, 1]


def _rounds(script: Script) -> RoundsBackend:
    return RoundsBackend(script.generate)


# --------------------------------------------------------------------------------------------------------------------
# The side stream
# --------------------------------------------------------------------------------------------------------------------


def test_stream_shards_are_disjoint_and_never_repeat_within_an_epoch():
    size, world = 23, 3
    streams = [PromptStream(size, seed=7, rank=r, world_size=world) for r in range(world)]
    shard_sizes = [len(range(r, size, world)) for r in range(world)]
    epoch0 = [[s.next() for _ in range(n)] for s, n in zip(streams, shard_sizes, strict=True)]
    assert sorted(i for shard in epoch0 for i in shard) == list(range(size))  # disjoint, and every row once
    epoch1 = [[s.next() for _ in range(n)] for s, n in zip(streams, shard_sizes, strict=True)]
    assert sorted(i for shard in epoch1 for i in shard) == list(range(size))
    assert epoch0 != epoch1  # a fresh permutation each epoch
    assert all(s.epoch == 1 for s in streams)


def test_stream_resumes_exactly_and_refuses_another_layout():
    straight = PromptStream(10, seed=1)
    expected = [straight.next() for _ in range(25)]
    first = PromptStream(10, seed=1)
    head = [first.next() for _ in range(13)]
    state = first.state_dict()
    resumed = PromptStream(10, seed=1)
    resumed.load_state_dict(state)
    assert head + [resumed.next() for _ in range(12)] == expected
    with pytest.raises(ValueError, match="world_size=1"):
        PromptStream(10, seed=1, rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="fewer than the 4 processes"):
        PromptStream(3, seed=0, rank=0, world_size=4)


# --------------------------------------------------------------------------------------------------------------------
# The selection test
# --------------------------------------------------------------------------------------------------------------------


def exact_no_signal(num_positive: int, num_total: int, n: int) -> Fraction:
    """P(n draws all equal) under Beta(1 + pos, 1 + neg): E[p^n] + E[(1-p)^n], each a product of rising ratios."""
    a, b = 1 + num_positive, 1 + num_total - num_positive
    all_right = math.prod(Fraction(a + k, a + b + k) for k in range(n))
    all_wrong = math.prod(Fraction(b + k, a + b + k) for k in range(n))
    return all_right + all_wrong


@pytest.mark.parametrize("counts", [(0, 0), (4, 4), (0, 4), (2, 4), (7, 8), (15, 16), (0, 30)])
@pytest.mark.parametrize("n", [1, 4, 8])
def test_no_signal_probability_matches_the_exact_beta_binomial(counts, n):
    assert no_signal_probability(*counts, n) == pytest.approx(float(exact_no_signal(*counts, n)), rel=1e-12)


def test_no_signal_probability_with_decayed_counts_by_monte_carlo():
    rng = np.random.default_rng(0)
    num_positive, num_total, n = 7.29, 8.1, 4  # 0.9 * (0.9 * 4 + 4) + ... style fractional counts
    p = rng.beta(1 + num_positive, 1 + num_total - num_positive, 400_000)
    estimate = np.mean(p**n + (1 - p) ** n)
    standard_error = np.std(p**n + (1 - p) ** n) / math.sqrt(len(p))
    assert abs(no_signal_probability(num_positive, num_total, n) - estimate) < 5 * standard_error


def test_keep_probability_defaults():
    assert keep_probability(0, 0, 4, 0.5, 0.1) == 1.0  # never seen: always sampled
    assert keep_probability(4, 4, 4, 0.5, 0.1) == 0.1  # P(no signal) = 5/9 + 1/126 > 0.5
    assert keep_probability(2, 4, 4, 0.5, 0.1) == 1.0
    assert float(exact_no_signal(4, 4, 4)) > 0.5 > float(exact_no_signal(3, 4, 4))


def test_skipped_prompts_are_still_sampled_at_the_floor_rate():
    """A long run of the trainer's selection loop over prompts whose memory says "always right": each prompt's
    main-stream offers are accepted at the floor rate (binomial bound), and none is starved."""
    prompts, epochs, floor = 12, 3000, 0.1
    memory = PassRateMemory()
    for i in range(prompts):
        memory.update(str(i), 40, 40)
    dataset = [{"prompt": str(i)} for i in range(prompts)]
    side = SidePrompts(dataset, PromptStream(prompts, 0), memory, lambda row: row["prompt"], 4, 0.5, floor)
    rng = random.Random(0)
    accepted = np.zeros(prompts)
    trained = np.zeros(prompts)
    for epoch in range(epochs):
        for i in np.random.default_rng(epoch).permutation(prompts):
            if side.keep(str(i), rng):
                accepted[i] += 1
                trained[i] += 1
            else:
                trained[int(side.draw(rng)["prompt"])] += 1
    mean, sd = epochs * floor, math.sqrt(epochs * floor * (1 - floor))
    assert np.all(np.abs(accepted - mean) < 5 * sd), accepted
    assert trained.min() >= accepted.min()
    # A replacement is the first candidate that passes (floor), else the 8th: each candidate is accepted at the
    # floor rate too, so trained visits are spread evenly across prompts.
    assert trained.sum() == prompts * epochs
    assert np.all(np.abs(trained - epochs) < 6 * math.sqrt(epochs)), trained
