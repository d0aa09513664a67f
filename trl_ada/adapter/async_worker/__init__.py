"""Reinforce-Ada inside TRL's asynchronous GRPO trainer: a rollout worker with per-prompt adaptive budgets.

`AdaRolloutWorker` is a drop-in `rollout_worker=` for `trl.experimental.async_grpo.AsyncGRPOTrainer`. Each prompt
keeps drawing completions, one request each, until its exit rule holds (on the longest finished prefix of its
requests, in request order) or its budget is spent; its other requests are aborted; its pool is downsampled to
`num_generations` and the kept rows get pool-level advantages (`trl_ada.core.advantages.pool_advantages`). The stopping
rule is `trl_ada.core.engine`'s streaming loop itself (`streaming_session`), driven from TRL's asyncio loop.

Design note: the seams in TRL (line numbers: TRL 1.16.0, `trl/experimental/async_grpo/`)
-------------------------------------------------------------------------------------------
- `async_rollout_worker.py:1155` `AsyncRolloutWorker._loop_cls`: the class the spawned child builds
  (`_child_main`, :271-305) with the worker's constructor kwargs (:1181-1185). `AdaRolloutWorker` only sets it and
  adds one kwarg, `ada`; lifecycle, the picklability check (:1208-1217), health checks and the model-version
  `mp.Value` stay TRL's.
- `_AsyncRolloutLoop._generate_loop` (:536-722): requests exactly `num_generations` completions per prompt
  (`_repeat_iterator`, :878) and queues a group when that many finished (:696). This is the one method replaced:
  `AdaRolloutLoop._generate_loop` runs one engine session per prompt and queues the pool when it stops. With
  `environment_factory` TRL's loop takes an instance from its pool per request, resets it with the row (:555-584),
  folds the observation into the prompt and offers its methods as tools (:585-610), and reads `get_reward` when
  the request ends (:673-692); `AdaRolloutLoop._draw` does the same per request, on TRL's pool. An aborted
  request's instance is not put back (a tool call of it may still be running in a thread): the pool makes a new one
  when it runs short (`ada/environments_discarded_total`).
- `_AsyncRolloutLoop._generate_one` (:890): one conversation (tools, re-tokenisation, fork reconciliation), one
  `/v1/completions` request per turn (`_generate_one_turn`, :999). Reused as is: it is one draw. Cancelling its task
  closes the HTTP connection, which vLLM's server takes as an abort of the request.
- `_AsyncRolloutLoop._score_group` (:1026): rewards and group-normalised advantages of a group, then the
  `RolloutSample`s (:1085-1124). Replaced: rewards are computed per completion as it finishes (the exit rule needs
  them), so `_score_group` downsamples, computes the pool advantages and builds the samples the same way as TRL.
- `_AsyncRolloutLoop._score_loop` (:724): pushes samples into the trainer's queue with backpressure and the
  `rollout/*` metrics. Reused as is; it takes our group object through the same `_groups_to_score` queue.
- `_push_metrics` (:817): the metric channel; `ada/*` metrics go through it.
- `RolloutSample` (:213): `input_ids`, `completion_mask`, `old_log_probs` (NumPy arrays from 1.16.0, lists in
  1.14), `advantage`, `model_version`, `group_id`, `metrics`. The trainer (`async_grpo_trainer.py:351-407`) drops a
  sample when `current version - sample.model_version > max_staleness` and batches rows by `group_id` (:445, :540).

Releases: the seams above were read in TRL 1.14.0, 1.14.1, 1.14.2, 1.15.0 and 1.16.0 (`SUPPORTED_ASYNC_TRL`;
`AdaRolloutWorker` refuses any other release, as `trl.experimental` changes without deprecation). Differences that
touch this package: the loop takes `eos_token_ids` from 1.15.0 on (forwarded untouched), and `RolloutSample`'s arrays
are lists before 1.16.0 (`_as_row` follows the installed annotation).

Concurrency: TRL's loop keeps `max_inflight_tasks` requests in flight, whatever prompt they belong to. Here each prompt
keeps up to its own cap (`max_in_flight`, default `samples_per_round`) and the prompts share the loop's
`max_inflight_tasks` request slots (`RequestSlots`): a draw's request is sent once it holds a slot, draws waiting for
one start oldest prompt first, then in request order, and whenever a slot is neither held nor waited for (the open
prompts are at their caps, or near their budgets with fewer draws left to make) the loop opens the next prompt. A
finished draw keeps its slot until its session has stepped, so a prompt's top-up is queued before the slot can go to a
new prompt. Every open prompt holds a slot when the next one opens, so at most `max_inflight_tasks` prompts are open.
Slots change when requests run, never what a session decides: each pool is still the first request-order prefix of
its prompt's draws on which the rule holds.

Staleness: a completion's version is the policy version when its request was dispatched (TRL tags a group with the
version when its first request was dispatched, :626, the oldest of its requests). A pool may span versions; all
rows of a kept group carry one tag, the *oldest* dispatch version among the kept completions, so the trainer's
per-sample staleness check drops the whole group together when its oldest trained completion is too stale, never
part of a group (its advantages were computed together). Completions of the pool that are not kept shape only the
baseline and do not set the tag. `ada/pool_version_span` reports how many versions a pool spans.

Prompt selection, the pilot and refill: the synchronous trainer's rules, per prompt. Selection
(`prompt_selection="pass_rate"`) asks the pass-rate memory before a prompt is dispatched and skips it (to the next row
of the dataset) with probability `1 - selection_floor` when its next group would likely carry no signal
(`trl_ada.core.selection.keep_probability`), from an RNG seeded with `seed`. The pilot is `trl_ada.core.engine.Pilot`
with `trl_ada.core.selection.pilot_stop_rule`, in each prompt's session. Refill has no batch slots to refill here: a
group whose pool has no signal is not pushed and the loop goes on with the next prompt (DAPO's dynamic sampling, the
asynchronous way); after `max_consecutive_drops` drops in a row the next group is pushed anyway (zero advantages), so
the trainer is never starved. A group whose pilot stopped has no signal: it is pushed (its pilot completions repeated
to `num_generations`, advantage 0, as the synchronous trainer trains it and as TRL pushes zero-advantage groups) unless
`refill` is on, which drops it like any group without signal.

Not supported: `sampling_strategy="estimate"` (it splits one step's budget across a batch in advance) and
`scale_rewards="batch"` (there is no batch here).
"""

from .bookkeeping import AdaGroup, Completion, RequestSlots, TaskBackend
from .config import AdaRolloutConfig
from .loop import AdaRolloutLoop
from .seams import SUPPORTED_ASYNC_TRL, check_async_trl_version
from .worker import TRAINER_ARG_KWARGS, AdaRolloutWorker

__all__ = [
    "SUPPORTED_ASYNC_TRL",
    "TRAINER_ARG_KWARGS",
    "AdaGroup",
    "AdaRolloutConfig",
    "AdaRolloutLoop",
    "AdaRolloutWorker",
    "Completion",
    "RequestSlots",
    "TaskBackend",
    "check_async_trl_version",
]
