r"""Built-in rewards on hand-worked strings: the last \boxed{}, math-verify grading, conversational completions."""

import math

import pytest

from trl_ada.tools.rewards import (
    REWARDS,
    grade_math,
    last_boxed,
    math_reward,
    resolve_reward,
    score_groups,
    toy_reward,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{42}.", "42"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces stay balanced
        (r"\boxed{\sqrt{\frac{a}{b}} + {c}}", r"\sqrt{\frac{a}{b}} + {c}"),
        (r"first \boxed{1}, then \boxed{2}, finally \boxed{3}", "3"),  # the last box wins
        (r"\boxed{7} and later \fbox{8}", "8"),
        ("no box at all: 5", None),
        (r"cut off \boxed{\frac{1}{2", None),  # unbalanced: generation stopped inside the box
        (r"\boxed 5", None),  # no brace group
        (r"\boxed{}", ""),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        (r"The answer is \boxed{4}", "4", 1.0),
        (r"\boxed{4}", "5", 0.0),
        (r"\boxed{\frac{1}{2}}", "0.5", 1.0),  # equal values, different notation
        (r"\boxed{\dfrac12}", r"\frac{1}{2}", 1.0),
        (r"\boxed{(1, 2)}", "(1,2)", 1.0),
        (r"\boxed{3} ... on reflection \boxed{4}", "4", 1.0),  # only the last box counts
        (r"\boxed{4} ... on reflection \boxed{3}", "4", 0.0),
        ("4", "4", 0.0),  # no box: wrong, even if the number is right
        (r"\boxed{4}", r"\boxed{4}", 1.0),  # a gold given as a box
        (r"\boxed{4}", "", None),  # gold that cannot be parsed: unscorable, not wrong
        (r"\boxed{4}", r"\text{}", None),
    ],
)
def test_grade_math(response, gold, expected):
    assert grade_math(response, gold) == expected


def test_math_reward_reads_conversational_completions_and_either_gold_column():
    completions = [
        [{"role": "assistant", "content": r"\boxed{10}"}],
        [{"role": "assistant", "content": r"\boxed{11}"}],
        r"plain text \boxed{12}",
    ]
    assert math_reward(completions=completions, answer=["10", "10", "12"]) == [1.0, 0.0, 1.0]
    # a worked solution as gold: math-verify reads its box
    assert math_reward(completions=completions[:1], solution=[r"Since 5+5=10, \boxed{10}."]) == [1.0]


def test_math_reward_without_gold_names_the_columns_it_got():
    with pytest.raises(ValueError, match=r"'answer'.*\['question'\]"):
        math_reward(completions=[r"\boxed{1}"], question=["1?"])


def test_resolve_reward_by_name_and_path():
    assert resolve_reward("math") is math_reward
    assert resolve_reward("toy") is toy_reward
    assert set(REWARDS) >= {"math", "toy"}
    assert resolve_reward("trl_ada.tools.rewards.math_reward") is math_reward
    with pytest.raises(ValueError, match="Unknown reward function 'nope'"):
        resolve_reward("nope")


def test_score_groups_passes_completions_as_trl_does():
    seen = []

    def reward(prompts, completions, answer, solution, **kwargs):
        seen.append((prompts, completions, answer, solution))
        return [1.0, math.nan, None][: len(completions)]

    conversation = [{"role": "user", "content": "1+1"}]
    scores = score_groups(reward, [conversation, "2+2"], [["a", "b", "c"], ["d"]], ["2", "4"])
    assert scores == [[1.0, None, None], [1.0]]  # NaN becomes None
    (prompts, completions, answer, solution), second = seen
    assert prompts == [conversation] * 3
    assert completions[0] == [{"role": "assistant", "content": "a"}]
    assert answer == solution == ["2"] * 3
    assert second[1] == ["d"]  # a plain-text prompt gets plain-text completions
