"""One step, composed once (`trl_ada.core.step`): the trainer, the asynchronous worker and the budget simulator take
the same pools to the same kept rows, advantages, memory and metrics, each through its own call of `compose_step`
with the settings it builds from its own configuration; and the exit-rule registry, where a new rule is one
`register_exit_rule` away from the config, the worker, the simulator and the engine."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
import torch

from trl_ada import ReinforceAdaConfig
from trl_ada.adapter.async_worker.bookkeeping import AdaGroup, Completion
from trl_ada.adapter.async_worker.config import AdaRolloutConfig
from trl_ada.adapter.async_worker.loop import AdaRolloutLoop
from trl_ada.adapter.step_io import Collectives
from trl_ada.adapter.trainer import ReinforceAdaTrainer
from trl_ada.core.engine import (
    EXIT_RULES,
    SAMPLING_STRATEGIES,
    ExitRule,
    ExitRuleSpec,
    Pool,
    SamplingResult,
    Schedule,
    register_exit_rule,
    sample_adaptively,
    unregister_exit_rule,
)
from trl_ada.core.memory import PassRateMemory
from trl_ada.core.step import StepSettings, compose_step
from trl_ada.tools import simulate
from trl_ada.tools.simulate_setup import Strategy, default_strategies

# Two prompts, group 2, budget 4, a completion positive above 0.5. Prompt "a" drew R W R R (resolved under the
# balanced rule), prompt "b" W W, one completion it could not score (NaN), then W: it never resolved.
REWARDS = {"a": [1.0, 0.0, 1.0, 1.0], "b": [0.0, 0.0, math.nan, 0.0]}
SEED = 3


def pools(handle) -> SamplingResult:
    """The scripted step's pools, each completion's handle made by `handle(prompt, index, reward)`."""
    made = []
    for prompt, rewards in REWARDS.items():
        pool = Pool(0.5, resolved=prompt == "a")
        pool.add([handle(prompt, i, r) for i, r in enumerate(rewards)], rewards, 0)
        made.append(pool)
    return SamplingResult(made, rounds=1, slots=[0, 1])


def trainer_path():
    """`ReinforceAdaTrainer._compose_step` on a stand-in trainer holding what its `__init__` builds from the config."""
    config = ReinforceAdaConfig(
        output_dir="unused", use_cpu=True, report_to="none", per_device_train_batch_size=2, num_generations=2,
        samples_per_round=4, max_rounds=1, positive_threshold=0.5,
    )  # fmt: skip
    trainer = SimpleNamespace(
        ada_step_settings=config.step_settings(),
        ada_memory=config.pass_rate_memory(),
        ada_collectives=Collectives(1, 0, torch.device("cpu")),
        reward_weights=torch.ones(1, dtype=torch.float64),
        _rng=lambda: random.Random(SEED),
    )
    result = pools(lambda prompt, i, reward: (prompt, i))  # the trainer's handles are rows of its rollouts
    rewards = {(p, i): r for p, rs in REWARDS.items() for i, r in enumerate(rs)}
    sampled = SimpleNamespace(
        rewards_per_func=lambda rows: torch.tensor([[rewards[row]] for row in rows], dtype=torch.float64)
    )
    step = ReinforceAdaTrainer._compose_step(trainer, result, ["a", "b"], sampled, (0.0, 0.0), 0)
    return trainer.ada_step_settings, step, trainer.ada_memory, [rewards[row] for row in step.kept]


def async_path():
    """`AdaRolloutLoop.compose_step`, one prompt at a time, on a stand-in loop holding what its `__init__` builds."""
    ada = AdaRolloutConfig(samples_per_round=4, max_rounds=1, positive_threshold=0.5, seed=SEED)
    ada.validate(2)
    loop = SimpleNamespace(
        ada_step_settings=ada.step_settings(2),
        ada_memory=ada.pass_rate_memory(),
        _ada_rng=random.Random(SEED),
        _memory_key=lambda row: row["prompt"],
    )
    result = pools(lambda prompt, i, reward: Completion([], [], [], [], 0, 0, [reward], reward, 0))
    steps = []
    for index, pool in enumerate(result.pools):  # each prompt's session finishes with a result of its own
        one = SamplingResult([pool], rounds=1, slots=[0])
        steps.append(AdaRolloutLoop.compose_step(loop, AdaGroup(index, {"prompt": "ab"[index]}, one)))
    return loop.ada_step_settings, steps, loop.ada_memory, [c.reward for step in steps for c in step.kept]


def simulator_path():
    """`simulate.simulated_step`, the simulator's call, with its `Strategy` of the same schedule."""
    strategy = Strategy("Ada balanced", Schedule.from_strategy("balanced", 2, 4, 1, positive_threshold=0.5))
    memory = PassRateMemory()  # the simulator's memory (refill and selection, Est): the trainer's defaults
    step = simulate.simulated_step(
        strategy, pools(lambda p, i, reward: reward), ["a", "b"], memory, random.Random(SEED)
    )
    return strategy.step_settings, step, memory, list(step.kept)


def test_the_three_paths_build_the_same_settings():
    settings = {trainer_path()[0], async_path()[0], simulator_path()[0]}
    assert settings == {StepSettings(group_size=2, budget=4, positive_threshold=0.5)}


def test_one_scripted_step_is_the_same_through_trainer_async_worker_and_simulator():
    """Same pools in, same kept rows, advantages, weights, memory and metrics out, against the hand-worked step.

    Balanced downsampling keeps one R and one W of "a" (its pool mean 3/4: advantages +1/4 and -3/4) and two Ws of
    "b" (mean 0 over its three scored: advantages 0). The memory records 3 of 4 and 0 of 3 (the NaN is not counted:
    the simulator used to count it), on the Beta(1, 16) prior with decay 0.9: p_hat 4/21 and 1/20."""
    settings, step, memory, kept = trainer_path()
    assert kept in ([1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0])
    expected_advantages = [0.25 if r else -0.75 for r in kept[:2]] + [0.0, 0.0]
    assert step.advantages.tolist() == pytest.approx(expected_advantages)
    assert step.weights.tolist() == [1.0, 1.0]
    assert memory.state_dict() == {"records": [["a", 3.0, 4.0], ["b", 0.0, 3.0]]}
    assert memory.p_hat("a") == pytest.approx(4 / 21) and memory.p_hat("b") == pytest.approx(1 / 20)
    assert step.p_hat == [1 / 17, 1 / 17]
    metrics = step.step_metrics(settings, len(memory))
    assert metrics["ada/samples_per_prompt"] == 4.0 and metrics["ada/frac_resolved"] == 0.5
    assert metrics["ada/pool_pass_rate"] == 0.375  # (3/4 + 0/3) / 2
    assert metrics["ada/memory_size"] == 2.0 and metrics["ada/p_hat_mean"] == pytest.approx(1 / 17)
    first = step.first_draw_metrics(["r"])  # each prompt's first 2 draws: R W and W W
    assert first["reward"] == 0.25 and first["rewards/r/mean"] == 0.25

    async_settings, async_steps, async_memory, async_kept = async_path()
    sim_settings, sim_step, sim_memory, sim_kept = simulator_path()
    assert async_kept == kept and sim_kept == kept
    assert torch.cat([s.advantages for s in async_steps]).tolist() == step.advantages.tolist()
    assert sim_step.advantages.tolist() == step.advantages.tolist()
    assert torch.cat([s.weights for s in async_steps]).tolist() == sim_step.weights.tolist() == [1.0, 1.0]
    assert async_memory.state_dict() == sim_memory.state_dict() == memory.state_dict()
    assert sum((s.counts for s in async_steps), type(step.counts)()) == step.counts == sim_step.counts
    assert async_settings == sim_settings == settings
    assert sim_step.step_metrics(sim_settings, len(sim_memory)) == metrics
    assert sim_step.first_draw_metrics(["r"]) == first
    assert sim_step.signal_metrics(sim_settings) == step.signal_metrics(settings)


def test_without_a_memory_the_step_reads_and_records_nothing():
    step = compose_step(
        StepSettings(group_size=2, budget=4),
        pools(lambda p, i, reward: reward),
        ["a", "b"],
        None,
        lambda handles: torch.tensor(handles, dtype=torch.float64).view(-1, 1),
        torch.ones(1, dtype=torch.float64),
        random.Random(SEED),
    )
    assert all(math.isnan(p) for p in step.p_hat) and step.memory_counts == [(0.0, 0.0)] * 2
    assert len(step.kept) == 4


# ----------------------------------------------------------------------------------------------- the exit rules


@pytest.fixture
def two_positives():
    """A new exit rule, registered here only: two positives, whatever the group."""
    spec = register_exit_rule(ExitRuleSpec("two_positives", lambda group_size: (2, 0), summary="two positives"))
    try:
        yield spec
    finally:
        unregister_exit_rule(spec.name)
    assert "two_positives" not in SAMPLING_STRATEGIES


def test_a_registered_exit_rule_is_accepted_everywhere_and_runs_through_the_engine(two_positives):
    """One `register_exit_rule` call: the config takes it (choices, checks, derived exit rule and schedule), as do the
    asynchronous worker's config and the simulator, and the engine stops a prompt on it."""
    assert "two_positives" in SAMPLING_STRATEGIES and EXIT_RULES["two_positives"] is two_positives
    config = ReinforceAdaConfig(
        output_dir="unused", use_cpu=True, report_to="none", sampling_strategy="two_positives", num_generations=4,
    )  # fmt: skip
    assert config.exit_rule == ExitRule(2, 0)
    assert config.schedule().max_rounds == 4  # adaptive: rounds until the rule holds
    AdaRolloutConfig(sampling_strategy="two_positives").validate(4)
    names = [s.name for s in default_strategies(grpo_sizes=(), refill_batches=0, rules=("two_positives",))]
    assert names == [
        "seq-two_positives-8x4",
        "seq-two_positives-8x4-posterior",
        "sequential limit (two_positives)",
    ]

    schedule = Schedule.from_strategy("two_positives", 4, samples_per_round=2, max_rounds=4)
    answers = [0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]  # the second positive comes in round 3

    def generate(requests):
        drawn = sum(r.num_samples for r in requests)
        return [answers.pop(0) for _ in range(drawn)]

    result = sample_adaptively(1, schedule, generate, lambda requests, handles: handles)
    (pool,) = result.pools
    assert pool.resolved and len(pool) == 6 and pool.num_positive == 3


def test_an_unknown_strategy_is_refused_naming_the_registry():
    with pytest.raises(ValueError, match="'balanced', 'positive', 'uniform', 'estimate'"):
        ExitRule.for_strategy("nope", 4)
    with pytest.raises(ValueError, match="sampling_strategy='nope' is not one of"):
        ReinforceAdaConfig(output_dir="unused", use_cpu=True, report_to="none", sampling_strategy="nope")
    with pytest.raises(ValueError, match="Unknown Ada rule 'uniform'"):
        default_strategies(rules=("uniform",))
    with pytest.raises(ValueError, match="registered already"):
        register_exit_rule(ExitRuleSpec("balanced", lambda group_size: (1, 1)))
