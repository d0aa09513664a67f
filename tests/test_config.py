"""Tests of `ReinforceAdaConfig`: defaults, derived exit rules and schedules, and validation messages."""

from __future__ import annotations

import math
import re

import pytest

from trl_ada.core.engine import ExitRule, Schedule


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


# -------------------------------------------------------------------------------------------------------------------
# Types: every numeric field the config adds is refused, naming it, when it holds the wrong type
# -------------------------------------------------------------------------------------------------------------------

# Worked out from the field list: (field, kind, None allowed). A field added to the class with a numeric type must be
# added here too (test_every_numeric_field_the_config_adds_is_type_checked compares).
NUMERIC_FIELDS = [
    ("samples_per_round", "int", False),
    ("max_rounds", "int", False),
    ("max_in_flight", "int", True),
    ("vllm_request_timeout", "float", False),
    ("vllm_request_retries", "int", False),
    ("positive_threshold", "float", False),
    ("min_positives", "int", True),
    ("min_negatives", "int", True),
    ("max_difficulty_weight", "float", False),
    ("samples_per_prompt_mean", "int", True),
    ("min_samples_per_prompt", "int", True),
    ("max_samples_per_prompt", "int", True),
    ("pass_rate_alpha", "float", False),
    ("pass_rate_beta", "float", False),
    ("pass_rate_decay", "float", False),
    ("pass_rate_max_prompts", "int", True),
    ("max_refills_per_step", "int", True),
    ("selection_threshold", "float", False),
    ("selection_floor", "float", False),
    ("pilot_size", "int", False),
    ("pilot_stop_threshold", "float", False),
]


def test_every_numeric_field_the_config_adds_is_type_checked():
    import dataclasses

    from trl import GRPOConfig

    from trl_ada import ReinforceAdaConfig
    from trl_ada.adapter.config_validation import _TYPED_FIELDS

    grpo = {f.name for f in dataclasses.fields(GRPOConfig)}
    added = [f for f in dataclasses.fields(ReinforceAdaConfig) if f.name not in grpo]

    # HfArgumentParser replaces a field's string annotation with the type it names (the CLI's tests build one), so
    # spell either form the same way: "int", "float | None".
    def spelled(annotation):
        return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))

    numeric = {f.name for f in added if spelled(f.type).split(" |")[0] in ("int", "float")}
    assert numeric == {name for name, _, _ in NUMERIC_FIELDS}
    assert _TYPED_FIELDS == {name: (kind, optional) for name, kind, optional in NUMERIC_FIELDS} | {
        "refill": ("bool", False)
    }


def test_a_fractional_samples_per_round_is_refused_with_the_field_and_value(make):
    with pytest.raises(ValueError, match=r"^samples_per_round must be an integer, got 2\.5\.$"):
        make(samples_per_round=2.5)


@pytest.mark.parametrize(("name", "kind", "optional"), NUMERIC_FIELDS)
def test_a_string_is_refused_naming_the_field(make, name, kind, optional):
    wanted = {"int": "an integer", "float": "a number"}[kind] + (" or None" if optional else "")
    with pytest.raises(ValueError) as info:
        make(**{name: "8"})
    assert str(info.value) == f"{name} must be {wanted}, got '8' (str)."


@pytest.mark.parametrize(("name", "kind", "optional"), NUMERIC_FIELDS)
def test_a_bool_is_not_a_number_here(make, name, kind, optional):
    with pytest.raises(ValueError, match=f"^{name} must be .*, got True \\(bool\\)\\.$"):
        make(**{name: True})


@pytest.mark.parametrize("name", [name for name, kind, _ in NUMERIC_FIELDS if kind == "int"])
def test_an_integer_field_refuses_a_whole_float(make, name):
    with pytest.raises(ValueError, match=f"^{name} must be an integer.*, got 8.0\\.$"):
        make(**{name: 8.0})


def test_refill_must_be_a_bool_and_numbers_of_numpy_are_accepted(make):
    import numpy as np

    with pytest.raises(ValueError, match=r"^refill must be True or False, got 'yes' \(str\)\.$"):
        make(refill="yes")
    config = make(samples_per_round=np.int64(4), max_rounds=2, positive_threshold=np.float32(0.5))
    assert config.schedule().budget == 8


# -------------------------------------------------------------------------------------------------------------------
# Warnings: an adaptive budget equal to the group, and fields the strategy ignores
# -------------------------------------------------------------------------------------------------------------------


def ada_warnings(make, **kwargs) -> list[str]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make(**kwargs)
    return [str(w.message) for w in caught if "sampling_strategy=" in str(w.message)]


def test_a_budget_equal_to_the_group_warns_that_sampling_is_uniform(make):
    # The README's recommended settings under GRPOConfig's default group of 8: 4 x 2 = 8 = the group.
    (message,) = ada_warnings(make, sampling_strategy="positive", samples_per_round=4, max_rounds=2, num_generations=8)
    assert message.startswith(
        "sampling_strategy='positive' with a budget of samples_per_round * max_rounds = 4 * 2 = 8, equal to "
        "num_generations=8: every prompt draws exactly 8 completions, which is uniform sampling"
    )
    assert "lower num_generations" in message and "sampling_strategy='uniform'" in message
    assert ada_warnings(make, sampling_strategy="positive", samples_per_round=4, max_rounds=2, num_generations=4) == []
    (message,) = ada_warnings(make, samples_per_round=2, max_rounds=2)  # balanced, group 4
    assert "= 2 * 2 = 4, equal to num_generations=4" in message


def test_an_estimate_budget_equal_to_the_group_warns_too(make):
    # min_samples_per_prompt defaults to the group of 4 and the mean is 4: every prompt gets exactly 4.
    (message,) = ada_warnings(make, sampling_strategy="estimate", samples_per_prompt_mean=4)
    assert "with samples_per_prompt_mean=4, equal to num_generations" in message
    assert "every prompt draws exactly 4 completions" in message
    assert (
        len(ada_warnings(make, sampling_strategy="estimate", samples_per_prompt_mean=4, max_samples_per_prompt=4)) == 1
    )
    assert ada_warnings(make, sampling_strategy="estimate") == []  # mean 8, max 32


def test_fields_the_strategy_ignores_are_named_when_set(make):
    (message,) = ada_warnings(make, sampling_strategy="uniform", samples_per_round=4, max_rounds=2)
    assert message.startswith("sampling_strategy='uniform' ignores samples_per_round=4, max_rounds=2:")
    assert "A field counts as set when it differs from its default." in message
    (message,) = ada_warnings(make, sampling_strategy="balanced", allocation_rule="inv_p", samples_per_prompt_mean=12)
    assert message.startswith(
        "sampling_strategy='balanced' ignores samples_per_prompt_mean=12, allocation_rule='inv_p':"
    )
    (message,) = ada_warnings(make, sampling_strategy="estimate", max_samples_per_prompt=16, max_rounds=2)
    assert message.startswith("sampling_strategy='estimate' ignores max_rounds=2:")
    # At their defaults, or read by the strategy: nothing to say.
    assert ada_warnings(make, sampling_strategy="uniform", samples_per_round=8, max_rounds=4) == []
    assert (
        ada_warnings(make, sampling_strategy="estimate", max_rounds=2) == []
    )  # gives max_samples_per_prompt's default
    assert ada_warnings(make, sampling_strategy="positive", samples_per_round=4, round_sizing="posterior") == []


BUDGET_HINT = r"Raise max_rounds to (\d+) or samples_per_round to (\d+), or lower num_generations to (\d+)\."


@pytest.mark.parametrize(("samples_per_round", "max_rounds", "group"), [(1, 2, 4), (3, 1, 4), (2, 3, 8), (5, 1, 6)])
def test_the_budget_error_names_the_smallest_value_of_each_field_that_fills_the_group(
    make, samples_per_round, max_rounds, group
):
    """Each suggested change on its own makes the config valid, and one less would not."""

    def build(spr: int, rounds: int, n: int):
        return make(
            sampling_strategy="positive", samples_per_round=spr, max_rounds=rounds, num_generations=n,
            per_device_train_batch_size=840,  # whole groups of every size from 1 to 8
        )  # fmt: skip

    with pytest.raises(ValueError) as info:
        build(samples_per_round, max_rounds, group)
    match = re.search(BUDGET_HINT, str(info.value))
    assert match, str(info.value)
    rounds, spr, smaller_group = map(int, match.groups())
    build(samples_per_round, rounds, group)
    build(spr, max_rounds, group)
    build(samples_per_round, max_rounds, smaller_group)
    for too_small in ((samples_per_round, rounds - 1, group), (spr - 1, max_rounds, group)):
        if min(too_small) >= 1:
            with pytest.raises(ValueError, match="could never be filled"):
                build(*too_small)
    with pytest.raises(ValueError, match="could never be filled"):
        build(samples_per_round, max_rounds, smaller_group + 1)


# -------------------------------------------------------------------------------------------------------------------
# Every problem at once, and GRPOConfig's numbers that would otherwise fail only once the model is loaded
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # num_generations=0 made GRPOConfig fail with a ZeroDivisionError; a negative learning rate failed in torch's
        # optimizer, temperature 0 and max_completion_length 0 in transformers' generate, after the model loaded.
        (
            {"num_generations": 0},
            "num_generations must be an integer >= 2 (GRPO compares the completions of a prompt with each other), "
            "got 0.",
        ),
        ({"learning_rate": -1e-4}, "learning_rate must be a number >= 0, got -0.0001."),
        ({"learning_rate": math.nan}, "learning_rate must be a number >= 0, got nan."),
        ({"temperature": 0.0}, "temperature must be a number > 0 (completions are sampled), got 0.0."),
        ({"max_completion_length": 0}, "max_completion_length must be an integer >= 1 or None, got 0."),
        ({"top_p": 0.0}, "top_p must be a number in (0, 1], got 0.0."),
        ({"repetition_penalty": 0.0}, "repetition_penalty must be a number > 0, got 0.0."),
        ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps must be an integer >= 1, got 0."),
    ],
)
def test_trainer_numbers_that_fail_late_are_refused_when_the_config_is_built(make, kwargs, message):
    with pytest.raises(ValueError) as info:
        make(**kwargs)
    assert str(info.value) == message


def test_every_problem_is_named_at_once_numbered_on_one_line(make):
    with pytest.raises(ValueError) as info:
        make(learning_rate=-1.0, temperature=0.0, samples_per_round=0, selection_floor=0.0)
    assert str(info.value) == (
        "4 problems with the settings: (1) learning_rate must be a number >= 0, got -1.0. (2) temperature must be a "
        "number > 0 (completions are sampled), got 0.0. (3) samples_per_round must be >= 1, got 0. (4) "
        "selection_floor must be in (0, 1], got 0.0: with 0 a skipped prompt would never be sampled again, so its "
        "memory could never show that it changed."
    )
    assert info.value.problems[2] == "samples_per_round must be >= 1, got 0."


def test_a_group_size_of_zero_is_one_problem_not_a_zero_division_nor_its_consequences(make):
    with pytest.raises(ValueError) as info:
        make(num_generations=0, max_rounds=0)
    # Not also "pilot_size must be ... num_generations - 1 = -1": a consequence of the same value.
    assert str(info.value) == (
        "2 problems with the settings: (1) num_generations must be an integer >= 2 (GRPO compares the completions of "
        "a prompt with each other), got 0. (2) max_rounds must be >= 1, got 0."
    )


def test_an_unknown_strategy_stops_the_rules_that_need_a_known_one(make):
    with pytest.raises(ValueError) as info:
        make(sampling_strategy="greedy", samples_per_round=0, learning_rate=-1.0)
    assert str(info.value) == (
        "2 problems with the settings: (1) learning_rate must be a number >= 0, got -1.0. (2) "
        "sampling_strategy='greedy' is not one of ('balanced', 'positive', 'uniform', 'estimate')."
    )
