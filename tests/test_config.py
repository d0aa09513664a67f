"""Tests of `ReinforceAdaConfig`: defaults, derived exit rules and schedules, and validation messages."""

from __future__ import annotations

import math

import pytest

from trl_ada.engine import ExitRule, Schedule


@pytest.fixture(scope="module")
def make(tmp_path_factory):
    """Build a config on this CPU-only machine; importing TRL is the slow part (once per session)."""
    from trl_ada import ReinforceAdaConfig

    output_dir = str(tmp_path_factory.mktemp("ada-config"))

    def build(**kwargs):
        kwargs.setdefault("num_generations", 4)
        return ReinforceAdaConfig(use_cpu=True, bf16=False, output_dir=output_dir, report_to="none", **kwargs)

    return build


def test_defaults(make):
    config = make()
    assert config.sampling_strategy == "balanced"
    assert config.samples_per_round == 8
    assert config.max_rounds == 4
    assert config.positive_threshold == 0.7
    assert config.scale_rewards == "none"
    assert config.advantage_baseline == "pool"
    assert config.difficulty_weighting == "none"
    assert config.max_difficulty_weight == 4.0
    assert config.min_positives is None and config.min_negatives is None
    assert config.multi_objective_aggregation == "sum_then_normalize"


@pytest.mark.parametrize(
    ("strategy", "num_generations", "expected"),
    [
        ("balanced", 4, (2, 2)),
        ("positive", 4, (1, 0)),
        ("uniform", 4, (0, 0)),
        ("balanced", 5, (2, 3)),
        ("positive", 5, (1, 0)),
        ("balanced", 8, (4, 4)),
    ],
)
def test_derived_exit_rules(make, strategy, num_generations, expected):
    # per_device_train_batch_size must hold whole groups: use num_generations itself
    config = make(
        sampling_strategy=strategy, num_generations=num_generations, per_device_train_batch_size=num_generations
    )
    assert config.exit_rule == ExitRule(*expected)


def test_explicit_exit_counts_override(make):
    config = make(min_positives=1, min_negatives=3)
    assert config.exit_rule == ExitRule(1, 3)
    config = make(sampling_strategy="positive", min_negatives=1)
    assert config.exit_rule == ExitRule(1, 1)
    config = make(min_positives=0)  # 0 is a value, not "derive it"
    assert config.exit_rule == ExitRule(0, 2)


@pytest.mark.parametrize(
    ("kwargs", "fields"),
    [
        ({"sampling_strategy": "greedy"}, ["sampling_strategy"]),
        ({"advantage_baseline": "batch"}, ["advantage_baseline"]),
        ({"difficulty_weighting": "inv_q"}, ["difficulty_weighting"]),
        ({"max_difficulty_weight": 0.5}, ["max_difficulty_weight"]),
        ({"max_difficulty_weight": math.nan}, ["max_difficulty_weight"]),
        ({"min_positives": -1}, ["min_positives"]),
        ({"min_negatives": -1}, ["min_negatives"]),
        ({"min_positives": 3}, ["min_positives", "min_negatives", "num_generations"]),  # 3 + 2 > 4
        ({"min_positives": 2, "min_negatives": 3}, ["min_positives", "min_negatives", "num_generations"]),
        ({"sampling_strategy": "positive", "min_positives": 5}, ["min_positives", "num_generations"]),
        ({"samples_per_round": 1, "max_rounds": 3}, ["samples_per_round", "max_rounds", "num_generations"]),
        ({"samples_per_round": 0}, ["samples_per_round"]),
        ({"max_rounds": 0}, ["max_rounds"]),
        ({"samples_per_round": -2}, ["samples_per_round"]),
        ({"positive_threshold": math.nan}, ["positive_threshold"]),
    ],
)
def test_invalid_combinations_name_the_field(make, kwargs, fields):
    with pytest.raises(ValueError) as info:
        make(**kwargs)
    for name in fields:
        assert name in str(info.value), (name, str(info.value))


def test_exit_rule_may_use_the_whole_group(make):
    assert make(min_positives=2, min_negatives=2).exit_rule == ExitRule(2, 2)  # 2 + 2 == 4 is fine
    assert make(min_positives=4, min_negatives=0).exit_rule == ExitRule(4, 0)


def test_uniform_allows_a_budget_below_the_group(make):
    config = make(sampling_strategy="uniform", samples_per_round=1, max_rounds=1)
    schedule = config.schedule()
    # plain GRPO: one round of exactly num_generations
    assert (schedule.group_size, schedule.samples_per_round, schedule.max_rounds, schedule.budget) == (4, 4, 1, 4)
    assert schedule.exit_rule == ExitRule(0, 0)


@pytest.mark.parametrize("threshold", [1.5, -2.0, 0.0, 1.0])
def test_threshold_outside_unit_interval_is_accepted(make, threshold):
    config = make(positive_threshold=threshold)
    assert config.positive_threshold == threshold
    assert config.schedule().positive_threshold == threshold


def test_schedule_from_config(make):
    schedule = make().schedule()
    assert isinstance(schedule, Schedule)
    assert (schedule.group_size, schedule.samples_per_round, schedule.max_rounds) == (4, 8, 4)
    assert schedule.budget == 32
    assert schedule.exit_rule == ExitRule(2, 2)
    assert schedule.positive_threshold == 0.7

    schedule = make(samples_per_round=3, max_rounds=2, sampling_strategy="positive").schedule()
    assert (schedule.samples_per_round, schedule.max_rounds, schedule.budget) == (3, 2, 6)
    assert schedule.exit_rule == ExitRule(1, 0)

    schedule = make(samples_per_round=1, max_rounds=4, min_positives=1, min_negatives=1).schedule()
    assert schedule.budget == 4 and schedule.exit_rule == ExitRule(1, 1)

    schedule = make(
        sampling_strategy="uniform", num_generations=5, per_device_train_batch_size=5, samples_per_round=8
    ).schedule()
    assert (schedule.group_size, schedule.samples_per_round, schedule.max_rounds) == (5, 5, 1)


def test_round_sizing(make):
    assert make().round_sizing == "fixed" and make().schedule().round_sizing == "fixed"
    schedule = make(round_sizing="posterior").schedule()
    assert (schedule.round_sizing, schedule.prior, schedule.budget, schedule.max_rounds) == (
        "posterior",
        (1.0, 1.0),
        32,
        4,
    )
    # Plain GRPO has a single round of num_generations whatever the sizing.
    assert make(round_sizing="posterior", sampling_strategy="uniform").schedule().round_sizing == "fixed"
    with pytest.raises(ValueError, match="round_sizing"):
        make(round_sizing="adaptive")


def test_every_declared_choice_is_enforced(make):
    """Independent of the validation loop: every choice field ReinforceAdaConfig adds rejects an undeclared value,
    with a message naming the field and its choices."""
    import dataclasses
    import re

    from trl import GRPOConfig

    from trl_ada import ReinforceAdaConfig

    inherited = {f.name for f in dataclasses.fields(GRPOConfig)}
    declared = {
        f.name: f.metadata["choices"]
        for f in dataclasses.fields(ReinforceAdaConfig)
        if "choices" in f.metadata and f.name not in inherited
    }
    known = ("sampling_strategy", "round_sizing", "rollout_schedule", "advantage_baseline", "difficulty_weighting")
    assert {*known, "downsample", "allocation_rule", "prompt_selection"} <= set(declared)  # not vacuous
    for name, choices in declared.items():
        for good in choices:  # every declared value passes the choice check (it may break another rule)
            try:
                make(**{name: good})
            except ValueError as error:
                assert f"{name}={good!r} is not one of" not in str(error), error
        bad = "not-a-choice"
        with pytest.raises(ValueError, match=re.escape(f"{name}={bad!r} is not one of {tuple(choices)}.")):
            make(**{name: bad})


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, False),
        ({"refill": True}, True),
        ({"prompt_selection": "pass_rate"}, True),
        ({"refill": True, "prompt_selection": "pass_rate"}, True),
    ],
)
def test_uses_side_stream(make, kwargs, expected):
    config = make(**kwargs)
    assert config.uses_side_stream is expected
    with pytest.raises(AttributeError):  # read-only: derived from refill and prompt_selection
        config.uses_side_stream = not expected
