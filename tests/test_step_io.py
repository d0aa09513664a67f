"""The schedules below the trainer run on a `StepIO` alone: here a hand-made one, with no model and no TRL trainer.

Each test works out by hand what the rounds must ask for and what they must keep, and checks the schedule against it.
"""

from __future__ import annotations

import math

import pytest
import torch

from trl_ada.adapter.schedules.rounds import sample_in_rounds
from trl_ada.adapter.step_io import Collectives, GenerationOutput, StepIO
from trl_ada.core.engine import Schedule

EOS = 9


class FakeTrainerSide:
    """Records every call the schedule makes through the StepIO and answers from a script: each prompt's rewards in
    the order its completions are drawn; a completion's token ids are [prompt index, draw number, EOS]."""

    def __init__(self, rewards_by_prompt: dict[str, list[float]], truncated: set[tuple[str, int]] = frozenset()):
        self.rewards_by_prompt = rewards_by_prompt
        self.truncated = truncated  # (prompt, draw) pairs whose completion has no EOS
        self.drawn = {prompt: 0 for prompt in rewards_by_prompt}
        self.generate_calls: list[tuple[list, int]] = []
        self.score_calls: list[int] = []

    def generate(self, prompts: list, run_length: int) -> GenerationOutput:
        self.generate_calls.append((list(prompts), run_length))
        completion_ids = []
        for prompt in prompts:
            draw = self.drawn[prompt]
            self.drawn[prompt] += 1
            ending = [] if (prompt, draw) in self.truncated else [EOS]
            completion_ids.append([sorted(self.rewards_by_prompt).index(prompt), draw, *ending])
        texts = [f"{prompt}#{ids[1]}" for prompt, ids in zip(prompts, completion_ids, strict=True)]
        return GenerationOutput([[0]] * len(prompts), completion_ids, None, texts, None, {}, None, [])

    def score(self, rows, prompts, completions, completion_ids, prompt_indices, real_rows) -> torch.Tensor:
        self.score_calls.append(len(prompts))
        rewards = [self.rewards_by_prompt[p][ids[1]] for p, ids in zip(prompts, completion_ids, strict=True)]
        return torch.tensor(rewards).unsqueeze(1)

    def step_io(self, schedule: Schedule, mask_truncated: bool = False) -> StepIO:
        def refuse(*args, **kwargs):
            raise AssertionError("rounds must not call this")

        return StepIO(
            schedule=schedule,
            reward_weights=torch.tensor([1.0]),
            collectives=Collectives(),
            max_in_flight=None,
            runs_of_copies=True,
            mask_truncated=mask_truncated,
            prepare=lambda prompts, rows: prompts,
            generate=self.generate,
            score=self.score,
            score_local=refuse,
            tokenize=refuse,
            decode=refuse,
            ended=lambda ids: [bool(c) and c[-1] == EOS for c in ids],
            check_context=lambda prompt_ids, prompts: None,
            open_engine=refuse,
            replay=refuse,
            pop_extra_logs=lambda num_rows: {},
        )


def balanced(samples_per_round: int = 4, max_rounds: int = 2) -> Schedule:
    return Schedule.from_strategy("balanced", 4, samples_per_round=samples_per_round, max_rounds=max_rounds)


def test_rounds_draw_only_for_active_prompts_and_keep_every_draw():
    # 'a' meets the balanced rule (2 positives, 2 negatives) in its first round of 4; 'b' is all wrong, so it draws
    # a second round and spends its budget of 8. Round 1: 4 + 4 rows in runs of 4; round 2: 'b' alone.
    side = FakeTrainerSide({"a": [1, 0, 1, 0], "b": [0] * 8})
    result, rollouts = sample_in_rounds(side.step_io(balanced()), ["a", "b"], [{"k": "a"}, {"k": "b"}], None)
    assert side.generate_calls == [(["a"] * 4 + ["b"] * 4, 4), (["b"] * 4, 4)]
    assert side.score_calls == [8, 4]
    assert result.rounds == 2
    assert [len(pool) for pool in result.pools] == [4, 8]
    assert [pool.resolved for pool in result.pools] == [True, False]
    assert result.pools[0].rewards == [1, 0, 1, 0] and result.pools[1].rewards == [0] * 8
    # Every completion is kept once, in draw order; the handles index the rollouts' rows.
    assert rollouts.size == 12
    assert [rollouts.columns["completions"][h] for h in result.pools[1].samples] == [f"b#{i}" for i in range(8)]
    lengths, ended = rollouts.step_lengths()
    assert lengths == [3] * 12 and ended == [True] * 12
    assert rollouts.uncounted_tokens(list(range(12))) == 0
    picked = rollouts.select(result.pools[0].samples[:2])
    assert picked.completions == ["a#0", "a#1"] and picked.completion_ids == [[0, 0, EOS], [0, 1, EOS]]
    assert picked.tool_mask is None and picked.logprobs is None and picked.images is None


def test_a_prompt_without_a_full_group_draws_again_with_the_run_of_its_round():
    # Rounds of 2 (budget 2 x 3 = 6): 'a' holds 1 positive and 1 negative after round 1 but has no group of 4 yet.
    side = FakeTrainerSide({"a": [1, 0, 1, 0, 1, 1]})
    result, _ = sample_in_rounds(side.step_io(balanced(2, 3)), ["a"], [{}], None)
    assert [run for _, run in side.generate_calls] == [2, 2]
    assert len(result.pools[0]) == 4 and result.pools[0].resolved


def test_truncated_completions_count_as_neither_when_masked():
    # 'a' draws 4: two rewarded 1.0, two 0.0, but one of the zeros is truncated. Masked, it is NaN: the pool holds
    # only one negative, so the balanced rule does not hold after round 1 and 'a' draws its second round.
    rewards = {"a": [1, 0, 1, 0, 0, 0, 0, 0]}
    masked = FakeTrainerSide(rewards, truncated={("a", 1)})
    result, rollouts = sample_in_rounds(masked.step_io(balanced(), mask_truncated=True), ["a"], [{}], None)
    assert len(result.pools[0]) == 8
    assert math.isnan(result.pools[0].rewards[1]) and result.pools[0].num_negative == 5
    assert rollouts.step_lengths()[1][1] is False
    unmasked = FakeTrainerSide(rewards, truncated={("a", 1)})
    result, _ = sample_in_rounds(unmasked.step_io(balanced()), ["a"], [{}], None)
    assert len(result.pools[0]) == 4  # unmasked, the truncated zero counts as a negative


def test_collectives_on_one_process_return_their_input_and_raise_the_message_itself():
    collectives = Collectives()
    assert collectives.any(True) is True and collectives.any(False) is False
    assert collectives.sum(7) == 7 and collectives.max(3) == 3
    assert collectives.gather_objects([1, 2]) == [1, 2]
    tensor = torch.arange(3.0)
    assert torch.equal(collectives.gather_tensor(tensor), tensor)
    collectives.raise_everywhere(None, ValueError)  # nothing to raise
    cause = KeyError("missing")
    with pytest.raises(ValueError, match=r"^the message$") as raised:
        collectives.raise_everywhere("the message", ValueError, cause)
    assert raised.value.__cause__ is cause
