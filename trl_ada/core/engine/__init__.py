"""Successive-elimination sampling (Reinforce-Ada-Seq), free of any model.

One training step, for a batch of prompts:

    active <- every prompt
    for round in 1..max_rounds:
        draw a round of completions for each active prompt (`samples_per_round`, or sized from the prompt's counts
        so far with `round_sizing="posterior"`), score them
        retire a prompt once its exit rule holds (and it has a full group) or its budget is spent
        stop when no prompt is active (on any process)
    downsample each prompt's pool to `group_size` completions, half positive where it can

Reinforce-Ada-Est is the same loop with a single round whose per-prompt sizes the caller passes in
(`first_round_sizes`, from `allocation.allocate` over a pass-rate memory) and no exit rule.

Pilot (pilot-then-commit): every prompt first draws a small pilot; a prompt whose pilot completions all agree stops
there when the caller's `Pilot.stop` (a prediction from earlier steps) says the rest of its group would very likely
agree too. It costs the pilot instead of a group, and gives no gradient, as an all-equal group would not.

Refill (DAPO's dynamic sampling, generalised): a prompt whose pool ends with no signal (every scored reward equal,
so every advantage is zero) hands its slot in the batch to a fresh prompt from the caller (`refill`), which is
sampled with a budget of its own while the others go on; the batch keeps its size and the slot trains on whichever
prompt it ends with.

Completions are opaque handles: the caller's `generate` returns them and `score` turns them into rewards, so the
same loop runs inside the trainer (handles are row indices into TRL's generation output) and in simulations
(handles are Bernoulli draws).

The modules, in the order they build on each other: `pool` (a prompt's pool, `SamplingResult`, `Tally`), `rules`
(exit rules, the pilot), `schedule` (round sizes, budgets, when a pool is finished), `backend` (what goes to and comes
back from the caller's generation engine), `rounds` and `streaming` (the two loops), `sampler` (`sample`, which runs
one of them) and `downsample`. Every name a caller needs is imported here: `from trl_ada.core.engine import sample`.
No torch, no TRL (pyproject.toml's import contracts).
"""

from .backend import (
    Backend,
    Draw,
    Finished,
    GenerateFn,
    RefillFn,
    Request,
    RoundsBackend,
    ScoreFn,
    SignalFn,
)
from .downsample import DOWNSAMPLES, downsample
from .pool import Pool, SamplingResult, Tally, has_signal
from .rules import (
    ADAPTIVE_STRATEGIES,
    ESTIMATE,
    EXIT_RULES,
    SAMPLING_STRATEGIES,
    STRATEGIES,
    ExitRule,
    ExitRuleSpec,
    Pilot,
    is_adaptive,
    register_exit_rule,
    unregister_exit_rule,
)
from .sampler import ROLLOUT_SCHEDULES, sample, sample_adaptively
from .schedule import ROUND_SIZINGS, Schedule, expected_remaining_draws, posterior_round_size
from .streaming import POOL_ORDERS, StreamSession, streaming_session

__all__ = [
    "ADAPTIVE_STRATEGIES",
    "DOWNSAMPLES",
    "ESTIMATE",
    "EXIT_RULES",
    "POOL_ORDERS",
    "ROLLOUT_SCHEDULES",
    "ROUND_SIZINGS",
    "SAMPLING_STRATEGIES",
    "STRATEGIES",
    "Backend",
    "Draw",
    "ExitRule",
    "ExitRuleSpec",
    "Finished",
    "GenerateFn",
    "Pilot",
    "Pool",
    "RefillFn",
    "Request",
    "RoundsBackend",
    "SamplingResult",
    "Schedule",
    "ScoreFn",
    "SignalFn",
    "StreamSession",
    "Tally",
    "downsample",
    "expected_remaining_draws",
    "has_signal",
    "is_adaptive",
    "posterior_round_size",
    "register_exit_rule",
    "sample",
    "sample_adaptively",
    "streaming_session",
    "unregister_exit_rule",
]
