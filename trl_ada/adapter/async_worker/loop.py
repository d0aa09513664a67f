"""`AdaRolloutLoop`: TRL's asynchronous rollout loop with Reinforce-Ada's per-prompt sampling. It replaces
`_generate_loop` (one engine streaming session per prompt, prompts opened while request slots are free, selection
and the pilot per prompt) and `_score_group` (downsampling, pool advantages, the memory, refill's drops, the
`RolloutSample`s as TRL builds them); see the package docstring for the seams."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from trl.trainer.utils import is_async_callable

from ...core.advantages import total_reward
from ...core.engine import (
    Pilot,
    Pool,
    StreamSession,
    has_signal,
    streaming_session,
)
from ...core.memory import memory_key
from ...core.prompt_stream import SidePrompts
from ...core.selection import keep_probability, pilot_stop_rule
from ...core.step import ComposedStep, compose_step
from ..checks import refill_filter_column
from .bookkeeping import AdaGroup, Completion, RequestSlots, TaskBackend
from .config import AdaRolloutConfig
from .seams import (  # TRL's private loop, the seam this package subclasses, and its array rows (seams.py)
    RolloutSample,
    _as_row,
    _AsyncRolloutLoop,
)


class AdaRolloutLoop(_AsyncRolloutLoop):
    """TRL's asynchronous rollout loop with Reinforce-Ada's per-prompt sampling (see the package docstring)."""

    def __init__(self, *, ada: AdaRolloutConfig | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ada = ada or AdaRolloutConfig()
        self.ada.validate(self.num_generations)
        self.ada_schedule = self.ada.schedule(self.num_generations)
        self.ada_step_settings = self.ada.step_settings(self.num_generations)
        self.ada_memory = self.ada.pass_rate_memory()
        self._ada_rng = random.Random(self.ada.seed)
        # Selection draws from its own RNG, so turning it on leaves the downsampling draws as they were.
        self._ada_select_rng = random.Random(f"{self.ada.seed}-select")
        # As in the synchronous trainer, selection predicts the signal of the schedule's first round.
        self._ada_select_size = self.ada_schedule.round_size(Pool(self.ada_schedule.positive_threshold), 0)
        self._ada_filter_column = refill_filter_column(self.ada.refill_filter_reward, self.reward_func_names)
        self._ada_drops = 0  # groups in a row that refill kept from the trainer
        self._ada_drop_guard_warned = False
        self._pilot_keys: list[str] = []
        self._pilot_rule: Callable[[int, Pool], bool] | None = None
        # Each prompt keeps up to its in-flight cap of requests; the loop's `max_inflight_tasks` requests are shared
        # (`RequestSlots`): when the open prompts hold fewer, the loop opens another in the free slots.
        per_prompt = self.ada.max_in_flight or self.ada_schedule.samples_per_round
        self._per_prompt_in_flight = min(per_prompt, max(1, self.max_inflight_tasks))
        # Prompts that fill `max_inflight_tasks` at their caps: one pilot rule serves this many prompts in turn.
        self.concurrent_prompts = max(1, self.max_inflight_tasks // self._per_prompt_in_flight)
        self._slots = RequestSlots(max(1, self.max_inflight_tasks))

    def _prompt_iterator(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each dataset row once, as `(group_id, row)`, cycling over epochs as TRL's `_repeat_iterator` does (which
        yields each row `num_generations` times, one per request).

        With `prompt_selection="pass_rate"` a row the selection test skips is passed over for the next one and gets
        no group id. As in the synchronous trainer (`SidePrompts.MAX_CANDIDATES`), after that many skips in a row the
        next row is taken whatever the test says, so a dataset of prompts that would all be skipped cannot hold the
        event loop in this iterator."""
        group_id = skipped = 0
        while True:
            try:
                row = next(self._dataset_iter)
            except StopIteration:
                self._dataset_iter = iter(self.dataset)
                row = next(self._dataset_iter)
            if skipped < SidePrompts.MAX_CANDIDATES and not self._keeps(row):
                skipped += 1
                continue
            if self.ada.prompt_selection != "none":
                self._push_metrics({"ada/skipped_total": float(skipped), "ada/frac_skipped": (skipped, skipped + 1.0)})
            skipped = 0
            yield group_id, row
            group_id += 1

    def _keeps(self, row: dict[str, Any]) -> bool:
        """Prompt selection's test (`trl_ada.core.selection.keep_probability` on the row's memory counts): whether to
        sample this row now. Always true without selection, and for a prompt the memory has not seen."""
        if self.ada.prompt_selection == "none":
            return True
        num_positive, num_total = self.ada_memory.counts(self._memory_key(row))
        probability = keep_probability(
            num_positive, num_total, self._ada_select_size, self.ada.selection_threshold, self.ada.selection_floor
        )
        return probability >= 1.0 or self._ada_select_rng.random() < probability

    def _memory_key(self, row: dict[str, Any]) -> str:
        """The row's key in the pass-rate memory, as the synchronous trainer makes it (by row with environments)."""
        environments = self.environment_factories is not None
        return memory_key(row.get("prompt"), row, self.ada.prompt_id_column, by_row=environments)

    def _pilot(self, key: str) -> Pilot | None:
        """The pilot of the prompt with memory key `key` (None without one). `pilot_stop_rule` fits its prior to the
        whole memory once, when the rule is made; one rule serves `concurrent_prompts` prompts in turn, the
        asynchronous loop's counterpart of the synchronous trainer's one rule per generation batch."""
        if not self.ada.pilot_size:
            return None
        if self._pilot_rule is None or len(self._pilot_keys) >= self.concurrent_prompts:
            self._pilot_keys = []
            self._pilot_rule = pilot_stop_rule(
                self.ada_memory, self._pilot_keys, self.num_generations, self.ada.pilot_stop_threshold
            )
        index, rule = len(self._pilot_keys), self._pilot_rule
        self._pilot_keys.append(key)
        return Pilot(self.ada.pilot_size, lambda _session_index, pool: rule(index, pool))

    async def _generate_loop(self, stop_event: asyncio.Event) -> None:
        """Open prompts while `max_inflight_tasks` has room (a request slot no draw holds or waits for), each with its
        own engine session; queue each prompt's group for scoring when its session stops."""
        self._slots = slots = RequestSlots(max(1, self.max_inflight_tasks))  # this run's, on the running loop
        sessions: dict[asyncio.Task, TaskBackend] = {}
        work = self._prompt_iterator()
        self._generation_start_time = time.monotonic()
        try:
            while True:
                self._heartbeat_value.value = time.time()  # wall clock: the parent compares with time.time()
                slots.wake.clear()
                while slots.room > 0 and not stop_event.is_set():
                    group_id, row = next(work)
                    session, backend = self._open_prompt(group_id, row)  # its first draws take slots (or wait)
                    task = asyncio.create_task(self._sample_prompt(group_id, row, session, backend))
                    task.add_done_callback(lambda _: slots.wake.set())
                    sessions[task] = backend
                self._inflight = slots.held
                if stop_event.is_set():
                    return  # a prompt may be far from its exit rule: cancel its requests (below), do not finish it
                for task in [task for task in sessions if task.done()]:  # in the order the prompts were opened
                    sessions.pop(task)
                    group = task.result()  # a failed draw fails the loop, as in TRL's
                    group.queued_at = time.monotonic()
                    t_blocked = None
                    while True:
                        try:
                            self._groups_to_score.put_nowait(group)
                            break
                        except asyncio.QueueFull:
                            if stop_event.is_set():
                                return
                            t_blocked = t_blocked or time.monotonic()
                            await asyncio.sleep(0.1)
                    if t_blocked is not None:
                        self._push_metrics({"rollout/score_block_s": time.monotonic() - t_blocked})
                try:  # woken when room appears or a prompt stops; else, now and then, for the heartbeat and a stop
                    await asyncio.wait_for(slots.wake.wait(), timeout=0.5)  # the score loop's period
                except TimeoutError:
                    pass
        finally:
            for task in sessions:
                task.cancel()
            if sessions:
                await asyncio.gather(*sessions, return_exceptions=True)
                # A prompt's requests start when it opens: close them even where its task was cancelled unstarted.
                await asyncio.gather(*(backend.close() for backend in sessions.values()))
            try:
                self._groups_to_score.put_nowait(None)
            except asyncio.QueueFull:
                pass

    def _open_prompt(self, group_id: int, row: dict[str, Any]) -> tuple[StreamSession, TaskBackend]:
        """One prompt's streaming successive elimination, started: the engine's session, fed by this loop's requests
        through the shared slots (an older prompt's draws go first: `priority` is the group id)."""
        reward_kwargs = {k: v for k, v in row.items() if k not in {"prompt", "completion", "completion_ids"}}
        backend = TaskBackend(lambda: self._draw(row, reward_kwargs, group_id), self._slots, priority=group_id)
        session = streaming_session(
            1,
            self.ada_schedule,
            backend,
            lambda requests, handles: [handle.reward for handle in handles],  # scored as each draw finished
            max_in_flight=self._per_prompt_in_flight,
            pilot=self._pilot(self._memory_key(row)),
        )
        session.start()
        return session, backend

    async def _sample_prompt(
        self, group_id: int, row: dict[str, Any], session: StreamSession, backend: TaskBackend
    ) -> AdaGroup:
        """Drive an opened prompt's session to its end: each batch of finished draws is stepped through the stopping
        rule, then its slots are handed back (to this prompt's top-up first, if it is the oldest waiting)."""
        try:
            while session.in_flight:
                session.step(await backend.next_batch())
                backend.settle()
        finally:
            await backend.close()
        return AdaGroup(group_id, row, session.finish())

    async def _draw(self, row: dict[str, Any], reward_kwargs: dict[str, Any], group_id: int) -> Completion:
        """One request of a prompt (a whole conversation with tools), scored as soon as it finishes. With
        `environment_factory`, each request resets an environment of its own first, as TRL's loop does per
        generation (`_start_environment`), and the environment's `get_reward` scores it."""
        version = self.model_version  # at dispatch, as TRL tags its groups
        name, environment = self._checkout_environment(row)
        returned = False
        try:
            prompt, tools, tool_dict = await self._start_environment(row, name, environment)
            completion, completion_ids, sequences, n_calls, n_failures, rollout_reward = await self._generate_one(
                prompt, tool_dict=tool_dict, tools=tools, group_id=group_id
            )
            env_reward = await self._environment_reward(environment)
            if environment is not None:
                self._environment_pool[name].append(environment)
                returned = True
        finally:
            if environment is not None and not returned:
                # Aborted (or failed): one of its tool calls may still be running in a thread, so it is not reused;
                # the pool makes a fresh instance when it runs short.
                self._counters["ada/environments_discarded_total"] += 1
        per_func = await self._rewards_of(
            prompt, completion, completion_ids, reward_kwargs, rollout_reward, env_reward
        )
        reward = float(total_reward(torch.tensor([per_func], dtype=torch.float64), torch.ones(len(per_func)))[0])
        self._total_completion_tokens += len(completion_ids)
        return Completion(
            prompt, completion, completion_ids, sequences, n_calls, n_failures, per_func, reward, version
        )

    def _checkout_environment(self, row: dict[str, Any]) -> tuple[Any, Any]:
        """`(environment name, instance)` for one request: an instance from TRL's pool, a new one when the pool is
        empty (TRL's `_generate_loop`); `(None, None)` without `environment_factory`."""
        if self.environment_factories is None:
            return None, None
        name = row.get("environment") if self._multi_environment else None
        if self._multi_environment and name not in self.environment_factories:
            raise ValueError(
                f"Example has `environment={name!r}`, which is not among the environments passed to "
                f"`environment_factory`. Expected one of: {list(self.environment_factories)}."
            )
        pool = self._environment_pool[name]
        return name, (pool.pop() if pool else self.environment_factories[name]())

    async def _start_environment(
        self, row: dict[str, Any], name: Any, environment: Any
    ) -> tuple[list[dict[str, Any]], list[Callable], dict[str, Callable]]:
        """`(prompt, tools, tool dict)` of one request, as TRL's `_generate_loop` builds them: the environment reset
        with the row (its `environment` field left out), its observation appended to the last prompt message, and
        its public methods offered as tools beside the standalone ones."""
        if environment is None:
            return row["prompt"], self.tools, {tool.__name__: tool for tool in self._standalone_tools}
        reset_kwargs = {k: v for k, v in row.items() if k != "environment"} if self._multi_environment else row
        t0 = time.monotonic()
        observation = await asyncio.get_running_loop().run_in_executor(
            self._tool_pool, functools.partial(environment.reset, **reset_kwargs)
        )
        self._rates["env/reset_s"][0] += time.monotonic() - t0
        self._rates["env/reset_s"][1] += 1
        prompt = row["prompt"] if "prompt" in row else [{"role": "user", "content": ""}]
        if observation is not None:
            last = prompt[-1]
            content = last["content"]
            if isinstance(observation, list) and isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if isinstance(observation, str) and isinstance(content, list):
                observation = [{"type": "text", "text": observation}]
            prompt = [*prompt[:-1], {**last, "content": content + observation}]  # a new list: rows are reused
        methods = [
            getattr(environment, member)
            for member, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
            if member not in ("reset", "get_reward") and not member.startswith("_")
        ]
        tool_dict = {tool.__name__: tool for tool in self._standalone_tools + methods}
        return prompt, self._env_tools[name], tool_dict

    async def _environment_reward(self, environment: Any) -> tuple[type, float] | None:
        """`(environment class, reward)` when the request's environment owns its reward (`get_reward`), read while
        it still holds the request's final state; else None."""
        if environment is None or type(environment) not in self._env_reward_types:
            return None
        get_reward = environment.get_reward
        t0 = time.monotonic()
        if inspect.iscoroutinefunction(get_reward):
            reward = await get_reward()
        else:
            reward = await asyncio.get_running_loop().run_in_executor(self._tool_pool, get_reward)
        self._rates["env/reward_s"][0] += time.monotonic() - t0
        self._rates["env/reward_s"][1] += 1
        return type(environment), reward

    async def _rewards_of(
        self,
        prompt: list[dict[str, Any]],
        completion: list[dict[str, Any]],
        completion_ids: list[int],
        reward_kwargs: dict[str, Any],
        rollout_reward: float | None,
        env_reward: tuple[type, float] | None = None,
    ) -> list[float]:
        """One completion's reward per source, called as TRL's `_score_group` calls them (async functions awaited,
        others in a thread), with lists of one, in TRL's column order: the reward functions, one column per
        environment class that owns its reward (`env_reward` fills its own class's), the rollout reward. `None`
        (unscorable) becomes NaN."""
        kwargs = dict(
            completions=[completion],
            prompts=[prompt],
            completion_ids=[completion_ids],
            **{key: [value] for key, value in reward_kwargs.items()},
        )
        columns = await asyncio.gather(
            *[
                func(**kwargs) if is_async_callable(func) else asyncio.to_thread(func, **kwargs)
                for func in self.reward_funcs
            ]
        )
        values = [column[0] for column in columns]
        for env_type in self._env_reward_types:
            values.append(env_reward[1] if env_reward is not None and env_reward[0] is env_type else None)
        if self._provides_rollout_reward:
            values.append(rollout_reward)
        return [math.nan if value is None else float(value) for value in values]

    async def _score_group(self, group: AdaGroup) -> list[RolloutSample]:  # type: ignore[override]
        """The core's step on this prompt's pool (`trl_ada.core.step.compose_step`: the memory, downsampling, pool
        advantages), then refill's drop and the samples."""
        step = self.compose_step(group)
        pool, kept = group.pool, step.kept
        dropped = self._drops(pool)
        self._push_ada_metrics(group, kept, float(step.weights[0]), dropped)
        if dropped:
            return []
        version = min(c.model_version for c in kept)  # the oldest kept completion sets the group's staleness
        return self._samples(group.group_id, kept, step.advantages.tolist(), version)

    def compose_step(self, group: AdaGroup) -> ComposedStep:
        """One prompt's step through the core, as the synchronous trainer composes a batch's: the memory records the
        pool (dropped groups too: the memory saw them), which is downsampled to the group with its pool advantages.
        The rewards are summed with weight 1 each, as TRL's asynchronous loop sums them."""
        num_funcs = len(group.pool.samples[0].rewards_per_func)
        return compose_step(
            self.ada_step_settings,
            group.result,
            [self._memory_key(group.row)],
            self.ada_memory,
            lambda handles: torch.tensor([c.rewards_per_func for c in handles], dtype=torch.float64).view(
                len(handles), num_funcs
            ),
            torch.ones(num_funcs, dtype=torch.float64),
            self._ada_rng,
        )

    def _drops(self, pool: Pool) -> bool:
        """Refill, the asynchronous way: whether to keep this pool's group from the trainer because it has no signal
        (DAPO's group filter; a pilot that stopped has none either). There are no batch slots to refill, so the loop
        simply goes on with the next prompt. After `max_consecutive_drops` groups in a row were dropped the next one
        is pushed whatever its signal (zero advantages, as TRL pushes such groups): a task on which no prompt gives
        signal (a reward that never varies, a threshold above every reward) would otherwise starve the trainer."""
        if not self.ada.refill or self._refill_signal(pool):
            self._ada_drops = 0
            return False
        if self._ada_drops < self.ada.max_consecutive_drops:
            self._ada_drops += 1
            return True
        if not self._ada_drop_guard_warned:
            self._ada_drop_guard_warned = True
            logging.getLogger(__name__).warning(
                "refill: %d groups in a row had no signal (all rewards equal), so this one is pushed with zero "
                "advantages to keep the trainer fed (ada/pushed_without_signal_total counts these). If it keeps "
                "happening, check the rewards against positive_threshold and the task's difficulty.",
                self._ada_drops,
            )
        self._ada_drops = 0
        return False

    def _refill_signal(self, pool: Pool) -> bool:
        """Whether refill keeps the pool: any two total rewards differ, or with `refill_filter_reward` any two values
        of that function (completions whose value or total is NaN left out, as in the synchronous trainer)."""
        column = self._ada_filter_column
        if column is None:
            return has_signal(pool)
        values = {
            c.rewards_per_func[column]
            for c, total in zip(pool.samples, pool.rewards, strict=True)
            if not math.isnan(c.rewards_per_func[column] + total)
        }
        return len(values) > 1

    def _samples(
        self, group_id: int, kept: list[Completion], advantages: list[float], version: int
    ) -> list[RolloutSample]:
        """The kept rows as TRL's `_score_group` builds them (one sample per training row of each conversation)."""
        scored = np.array([c.reward for c in kept], dtype=float)
        scored = scored[~np.isnan(scored)]
        reward_std = float(scored.std()) if scored.size else math.nan  # TRL's: population std of the group
        with_tools = sum(c.tool_call_count for c in kept) > 0
        samples = []
        for c, advantage in zip(kept, advantages, strict=True):
            metrics = {
                "reward": c.reward,
                "reward_std": reward_std,
                **{f"rewards/{name}": r for name, r in zip(self.reward_func_names, c.rewards_per_func, strict=True)},
            }
            if with_tools:
                metrics["tools/call_frequency"] = float(c.tool_call_count)
                metrics["tools/failure_frequency"] = (
                    c.tool_failure_count / c.tool_call_count if c.tool_call_count else 0.0
                )
            for seq in c.sequences:
                samples.append(
                    RolloutSample(
                        prompt=c.prompt,
                        completion=c.completion,
                        input_ids=_as_row(seq.input_ids, np.int64),
                        completion_mask=_as_row(seq.completion_mask, np.int64),
                        old_log_probs=_as_row(seq.old_log_probs, np.float32),
                        advantage=float(advantage),
                        model_version=version,
                        group_id=group_id,
                        metrics=dict(metrics),
                    )
                )
        return samples

    def _push_ada_metrics(self, group: AdaGroup, kept: list[Completion], weight: float, dropped: bool) -> None:
        """`ada/*` metrics of one prompt, as rates `(numerator, denominator)` so the trainer averages over prompts,
        and counters (`*_total`, summed by the trainer)."""
        pool, result = group.pool, group.result
        versions = [c.model_version for c in pool.samples]
        kept_pool = Pool(pool.positive_threshold)
        kept_pool.add(kept, [c.reward for c in kept], 0)
        scored = pool.num_positive + pool.num_negative
        values: dict[str, float | tuple[float, float]] = {
            "ada/samples_per_prompt": (float(len(pool)), 1.0),
            "ada/frac_resolved": (float(pool.resolved), 1.0),
            "ada/frac_group_has_signal": (float(has_signal(kept_pool)), 1.0),
            "ada/frac_zero_std_first_round": (float(pool.first_round_has_zero_std()), 1.0),
            "ada/difficulty_weight_mean": (weight, 1.0),
            "ada/aborted_per_prompt": (float(result.aborted + result.dropped), 1.0),
            "ada/pool_version_span_max": float(max(versions) - min(versions)),
            "ada/samples_per_prompt_max": float(len(pool)),
        }
        if scored:
            values["ada/pool_pass_rate"] = (float(pool.num_positive), float(scored))
        if self.ada.pilot_size:
            values["ada/pilot_stopped_total"] = float(result.pilot_stopped)
            values["ada/frac_pilot_stopped"] = (float(result.pilot_stopped), 1.0)
        if self.ada.refill:
            forced = not dropped and not self._refill_signal(pool)
            values["ada/dropped_total"] = float(dropped)
            values["ada/frac_dropped"] = (float(dropped), 1.0)
            values["ada/pushed_without_signal_total"] = float(forced)
        self._push_metrics(values)
