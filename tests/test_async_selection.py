"""Prompt selection, the pilot and refill in the asynchronous rollout worker, on CPU with a scripted completion source.

The loop runs as in `test_async_worker` (its scripted `_generate_one_turn`). With `max_inflight_tasks` equal to the
per-prompt in-flight cap (and to the pilot size, with a pilot) a prompt holds every request slot until it has made its
last request, and the next prompt starts only in the slots its finished requests leave, so group ids follow the
dataset order (minus the rows selection skips) and groups are scored in id order: the expectations below are worked
out by hand from that order.
"""

from __future__ import annotations

import asyncio
import math
import queue
import re
from collections import defaultdict
from typing import Any

import pytest
from test_async_worker import RIGHT, WRONG, Script, collect_until, exact_answer, make_loop, metrics_of, running
from test_async_worker import tokenizer as tokenizer  # the fixture
from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

from trl_ada.adapter.async_worker import AdaRolloutConfig, AdaRolloutLoop

A, B, C = "1+3", "2+2", "3+1"  # prompts with qid 0, 1, 2 in that order


def length_reward(completions: list[list[dict[str, str]]], **kwargs: Any) -> list[float]:
    """0.1 per character of the answer: a second reward that varies where `exact_answer` does not."""
    return [0.1 * len(completion[-1]["content"].strip()) for completion in completions]


def run_pushed(loop: Any, num_groups: int, timeout: float = 60.0) -> dict[int, list[RolloutSample]]:
    """Run `loop` until `num_groups` whole groups (of any ids) are pushed; stop it; return every group pushed."""

    def whole(groups: dict[int, list[RolloutSample]]) -> bool:
        return sum(len(rows) >= loop.num_generations for rows in groups.values()) >= num_groups

    with running(loop):
        groups = defaultdict(list, collect_until(loop, whole, timeout))
    while True:
        try:
            sample = loop.rollout_buffer.get_nowait()
        except queue.Empty:
            break
        groups[sample.group_id].append(sample)
    return dict(groups)


def question_of(tokenizer: Any, sample: RolloutSample) -> str:
    return next(q for q in (A, B, C) if q in tokenizer.decode(sample.input_ids))


def uniform(**kwargs: Any) -> AdaRolloutConfig:
    """Groups of exactly 4 requests (one round of 4), pool baseline, ids as memory keys."""
    settings = dict(sampling_strategy="uniform", samples_per_round=4, max_rounds=1, prompt_id_column="qid")
    return AdaRolloutConfig(**{**settings, **kwargs})


def all_wrong_no_signal_probability() -> float:
    """Hand-worked: memory counts (0 right of 8), Beta(1, 1) prior, so Beta(1, 9) posterior; a group of 4 is all
    wrong with probability 9/10 * 10/11 * 11/12 * 12/13 = 9/13 and all right with 1*2*3*4 / (10*11*12*13)."""
    return 9 / 13 + 24 / (10 * 11 * 12 * 13)


# Prompt selection


def test_selection_skips_an_all_wrong_prompt_at_one_minus_the_floor(tokenizer: Any) -> None:
    """P(no signal) = 0.6937 for a prompt seen 0 right of 8: at threshold 0.5 (and 0.69) it is kept with probability
    `selection_floor`, over 4000 draws within 5 standard deviations; at threshold 0.70 it is always kept. A prompt the
    memory has not seen is always kept."""
    assert 0.69 < all_wrong_no_signal_probability() < 0.70
    rows = [{"prompt": [{"role": "user", "content": q}], "qid": i} for i, q in enumerate((A, B))]
    floor, draws = 0.3, 4000
    for threshold, rate in ((0.5, floor), (0.69, floor), (0.70, 1.0)):
        ada = uniform(prompt_selection="pass_rate", selection_threshold=threshold, selection_floor=floor)
        loop = make_loop(AdaRolloutLoop, tokenizer, [A, B], Script(tokenizer, {}), num_generations=4, ada=ada)
        loop.ada_memory.update_many([("id:0", 0, 8)])
        kept = sum(loop._keeps(rows[0]) for _ in range(draws))
        bound = 5 * math.sqrt(draws * rate * (1 - rate)) + 1e-9
        assert abs(kept - draws * rate) <= bound, (threshold, kept)
        assert all(loop._keeps(rows[1]) for _ in range(100))


def test_selection_draws_are_reproducible_from_the_seed(tokenizer: Any) -> None:
    row = {"prompt": [{"role": "user", "content": A}], "qid": 0}

    def decisions(seed: int) -> list[bool]:
        ada = uniform(prompt_selection="pass_rate", selection_floor=0.5, seed=seed)
        loop = make_loop(AdaRolloutLoop, tokenizer, [A], Script(tokenizer, {}), num_generations=4, ada=ada)
        loop.ada_memory.update_many([("id:0", 0, 8)])
        return [loop._keeps(row) for _ in range(200)]

    assert decisions(5) == decisions(5)
    assert decisions(5) != decisions(6)


def test_skipped_prompts_are_not_sampled_and_are_counted(tokenizer: Any) -> None:
    """Dataset A, B, C with A's memory all wrong and a floor of 1e-9: A is never requested; group ids go to B and C
    only (0, 2, 4: B; 1, 3, 5: C); one skip is counted before each B dispatched."""
    script = Script(tokenizer, {A: [WRONG], B: [RIGHT, WRONG] * 40, C: [WRONG, RIGHT] * 40})
    ada = uniform(prompt_selection="pass_rate", selection_floor=1e-9)
    loop = make_loop(AdaRolloutLoop, tokenizer, [A, B, C], script, num_generations=4, max_inflight_tasks=4, ada=ada)
    loop.ada_memory.update_many([("id:0", 0, 8)])
    groups = run_pushed(loop, 6)
    assert script.dispatched[A] == 0
    assert loop.ada_memory.counts("id:0") == (0, 8)
    for group_id in range(6):
        assert {question_of(tokenizer, s) for s in groups[group_id]} == {B if group_id % 2 == 0 else C}
    metrics = metrics_of(loop)
    skipped = sum(metrics["ada/skipped_total"])
    b_dispatches = math.ceil(script.dispatched[B] / 4)  # each B group asks for 4 at once
    assert skipped in (b_dispatches, b_dispatches + 1)  # the last B may be dispatched but not yet requested
    assert 3 <= skipped
    assert sum(n for n, _ in metrics["ada/frac_skipped"]) == skipped


def test_at_most_eight_skips_in_a_row(tokenizer: Any) -> None:
    """With every prompt of the dataset skippable, the ninth row in a row is sampled anyway (the synchronous trainer's
    `SidePrompts.MAX_CANDIDATES`), so the loop never spins on the iterator."""
    script = Script(tokenizer, {A: [WRONG]})
    ada = uniform(prompt_selection="pass_rate", selection_floor=1e-9)
    loop = make_loop(AdaRolloutLoop, tokenizer, [A], script, num_generations=4, max_inflight_tasks=4, ada=ada)
    loop.ada_memory.update_many([("id:0", 0, 8)])
    run_pushed(loop, 3)
    assert set(metrics_of(loop)["ada/skipped_total"]) == {8.0}


# The pilot


def test_an_agreeing_pilot_stops_at_pilot_size_and_asks_for_nothing_more(tokenizer: Any) -> None:
    """Memory 0 right of 8 (fewer than 20 prompts: Beta(1, 1) prior), pilot of 2 wrongs: the other 2 of the group are
    wrong too with probability 11/12 * 12/13 = 11/13 = 0.846 >= 0.8, so the prompt stops after 2 requests (the
    balanced rule alone would draw its whole budget of 8 on an all-wrong prompt). Without refill its group is pushed:
    the two pilot completions twice each, advantage 0."""
    assert 11 / 13 >= 0.8
    script = Script(tokenizer, {A: [WRONG], B: [RIGHT, WRONG]}, {B: [5.0]})  # B is still running when the test stops
    ada = AdaRolloutConfig(samples_per_round=4, max_rounds=2, prompt_id_column="qid", pilot_size=2)
    # Two slots, the pilot's size: with more, B would start beside A's pilot (and A again, the dataset cycling).
    loop = make_loop(AdaRolloutLoop, tokenizer, [A, B], script, num_generations=4, max_inflight_tasks=2, ada=ada)
    loop.ada_memory.update_many([("id:0", 0, 8)])
    rows = run_pushed(loop, 1)[0]
    assert script.dispatched[A] == 2 and not script.cancelled[A]
    assert [(s.metrics["reward"], s.advantage) for s in rows] == [(0.0, 0.0)] * 4
    metrics = metrics_of(loop)
    assert metrics["ada/pilot_stopped_total"] == [1.0]
    assert metrics["ada/samples_per_prompt"] == [(2.0, 1.0)]
    assert loop.ada_memory.counts("id:0") == pytest.approx((0.0, 0.9 * 8 + 2))


def test_a_pilot_without_memory_goes_on(tokenizer: Any) -> None:
    """Never seen: Beta(1, 3) after 2 wrongs, the other 2 are wrong with probability 3/4 * 4/5 = 0.6 < 0.8, so the
    prompt goes on and, all wrong, draws its whole budget of 8."""
    script = Script(tokenizer, {A: [WRONG], B: [RIGHT, WRONG]}, {B: [5.0]})
    ada = AdaRolloutConfig(samples_per_round=4, max_rounds=2, prompt_id_column="qid", pilot_size=2)
    loop = make_loop(AdaRolloutLoop, tokenizer, [A, B], script, num_generations=4, max_inflight_tasks=2, ada=ada)
    run_pushed(loop, 1)
    assert script.dispatched[A] == 8
    assert metrics_of(loop)["ada/pilot_stopped_total"] == [0.0]


# Refill


def scored_and_pushed(loop: Any, num_groups: int) -> tuple[int, set[int], dict[str, list[Any]]]:
    """Run until `num_groups` groups are pushed: (groups scored, ids pushed, metrics). Scoring runs in id order, one
    `ada/samples_per_prompt` per scored group, so the scored ids are 0 .. scored - 1."""
    groups = run_pushed(loop, num_groups)
    metrics = metrics_of(loop)
    return len(metrics["ada/samples_per_prompt"]), set(groups), metrics


def test_refill_drops_exactly_the_groups_without_signal(tokenizer: Any) -> None:
    """A all wrong, B right and wrong, C all right, in turn: of the scored groups exactly B's (ids 1, 4, 7, ...) are
    pushed; A's and C's are counted as dropped, and their pools still reach the memory."""
    script = Script(tokenizer, {A: [WRONG], B: [RIGHT, WRONG] * 40, C: [RIGHT]})
    loop = make_loop(
        AdaRolloutLoop, tokenizer, [A, B, C], script, num_generations=4, max_inflight_tasks=4, ada=uniform(refill=True)
    )
    scored, pushed, metrics = scored_and_pushed(loop, 3)
    assert pushed == {i for i in range(scored) if i % 3 == 1}
    assert {1, 4, 7} <= pushed
    dropped = scored - len(pushed)
    assert sum(metrics["ada/dropped_total"]) == dropped >= 5
    assert sum(n for n, _ in metrics["ada/frac_dropped"]) == dropped
    assert sum(metrics["ada/pushed_without_signal_total"]) == 0
    assert loop.ada_memory.counts("id:0")[0] == 0 and loop.ada_memory.counts("id:0")[1] > 0
    assert loop.ada_memory.counts("id:2")[0] == loop.ada_memory.counts("id:2")[1] > 0


def test_without_refill_groups_without_signal_are_pushed(tokenizer: Any) -> None:
    script = Script(tokenizer, {A: [WRONG], B: [RIGHT, WRONG] * 40, C: [RIGHT]})
    loop = make_loop(
        AdaRolloutLoop, tokenizer, [A, B, C], script, num_generations=4, max_inflight_tasks=4, ada=uniform()
    )
    scored, pushed, metrics = scored_and_pushed(loop, 3)
    assert pushed == set(range(scored)) and "ada/dropped_total" not in metrics


def test_refill_filter_reward_decides_on_that_function(tokenizer: Any) -> None:
    """A answers 5, 55, 5, 55: all wrong, but the length reward differs, so its total has signal. Refill on the total
    pushes A's groups; refill on `exact_answer` drops them (B, right and wrong, is pushed either way)."""
    answers = {A: ["5", "55"] * 40, B: [RIGHT, WRONG] * 40}
    for filter_reward, expected in ((None, lambda i: True), ("exact_answer", lambda i: i % 2 == 1)):
        ada = uniform(refill=True, refill_filter_reward=filter_reward)
        loop = make_loop(
            AdaRolloutLoop,
            tokenizer,
            [A, B],
            Script(tokenizer, answers),
            num_generations=4,
            max_inflight_tasks=4,
            ada=ada,
            reward_funcs=[exact_answer, length_reward],
        )
        scored, pushed, _ = scored_and_pushed(loop, 3)
        assert pushed == {i for i in range(scored) if expected(i)}, filter_reward


def test_refill_never_starves_the_trainer(tokenizer: Any) -> None:
    """Every group all wrong, at most 3 drops in a row: groups 3, 7, 11, ... are pushed (zero advantages) and counted
    as pushed without signal."""
    script = Script(tokenizer, {A: [WRONG], B: [WRONG]})
    ada = uniform(refill=True, max_consecutive_drops=3)
    loop = make_loop(AdaRolloutLoop, tokenizer, [A, B], script, num_generations=4, max_inflight_tasks=4, ada=ada)
    groups = run_pushed(loop, 2)
    metrics = metrics_of(loop)
    scored = len(metrics["ada/samples_per_prompt"])
    assert set(groups) == {i for i in range(scored) if i % 4 == 3} and {3, 7} <= set(groups)
    assert all(s.advantage == 0.0 for rows in groups.values() for s in rows)
    assert sum(metrics["ada/pushed_without_signal_total"]) == len(groups)
    assert sum(metrics["ada/dropped_total"]) == scored - len(groups)


def test_a_stopped_pilot_is_dropped_under_refill(tokenizer: Any) -> None:
    """The pilot of the first test, with refill: A stops after 2 requests and its group is dropped, not pushed. Two
    slots, the pilot's size, as in the pilot tests above: with more, the next prompt starts beside the pilot and the
    order in which groups report depends on timing."""
    script = Script(tokenizer, {A: [WRONG], B: [RIGHT, WRONG] * 40})
    ada = AdaRolloutConfig(samples_per_round=4, max_rounds=2, prompt_id_column="qid", pilot_size=2, refill=True)
    loop = make_loop(AdaRolloutLoop, tokenizer, [A, B], script, num_generations=4, max_inflight_tasks=2, ada=ada)
    loop.ada_memory.update_many([("id:0", 0, 8)])
    scored, pushed, metrics = scored_and_pushed(loop, 2)
    assert pushed == {i for i in range(scored) if i % 2 == 1}
    a_groups = (scored + 1) // 2
    assert metrics["ada/samples_per_prompt"] == [(2.0 if i % 2 == 0 else 4.0, 1.0) for i in range(scored)]
    assert sum(metrics["ada/pilot_stopped_total"]) == sum(metrics["ada/dropped_total"]) == a_groups


# Settings


def test_config_checks_the_new_settings(tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="prompt_selection='often'"):
        AdaRolloutConfig(prompt_selection="often").validate(4)
    with pytest.raises(ValueError, match="selection_floor must be in"):
        AdaRolloutConfig(prompt_selection="pass_rate", selection_floor=0.0).validate(4)
    with pytest.raises(ValueError, match="pilot_size must be an integer from 0"):
        AdaRolloutConfig(pilot_size=4).validate(4)
    with pytest.raises(ValueError, match="pilot_stop_threshold must be in"):
        AdaRolloutConfig(pilot_size=2, pilot_stop_threshold=1.5).validate(4)
    with pytest.raises(ValueError, match="needs refill=True"):
        AdaRolloutConfig(refill_filter_reward="exact_answer").validate(4)
    with pytest.raises(ValueError, match="max_consecutive_drops must be an integer >= 1"):
        AdaRolloutConfig(refill=True, max_consecutive_drops=0).validate(4)
    AdaRolloutConfig(prompt_selection="pass_rate", pilot_size=3, refill=True).validate(4)
    with pytest.raises(ValueError, match="refill_filter_reward='accuracy' names no reward function"):
        make_loop(
            AdaRolloutLoop,
            tokenizer,
            [A],
            Script(tokenizer, {}),
            num_generations=4,
            ada=uniform(refill=True, refill_filter_reward="accuracy"),
        )


# Environments

RESETS: list[dict[str, Any]] = []  # every reset's keyword arguments, across instances


class ButtonEnv:
    """A toy environment: `reset` tells the task in its observation, `press` is its one tool, and it owns a reward
    (how often the button was pressed in this rollout)."""

    created = 0

    def __init__(self) -> None:
        ButtonEnv.created += 1
        self.presses = 0

    def reset(self, **kwargs: Any) -> str:
        RESETS.append({"env": id(self), **kwargs})
        self.presses = 0
        return f" (button task {kwargs['qid']}, env {id(self)})"

    def press(self) -> str:
        """Press the button.

        Returns:
            What happened.
        """
        self.presses += 1
        return "pressed"

    def get_reward(self) -> float:
        return float(self.presses)


class ButtonScript(Script):
    """First turn of each request: call `press` (after the request's scripted delay); after the tool's response:
    answer right on even requests of a prompt, wrong on odd ones. Counts requests (first turns) and keeps the prompt
    text each was sent with."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompts: list[str] = []
        self.request_of: dict[Any, int] = {}  # the task running a request (all its turns) -> its index k
        self.env_of: dict[int, int] = {}  # request k -> the id of the environment instance it was reset on

    async def turn(self, loop: Any, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        text = self.tokenizer.decode(prompt_ids)
        question = self.question(prompt_ids)
        if "pressed" in text:
            k = self.request_of[asyncio.current_task()]
            reply = f"{RIGHT if k % 2 == 0 else WRONG}<|im_end|>"
        else:
            k = self.dispatched[question]
            self.dispatched[question] += 1
            self.request_of[asyncio.current_task()] = k
            self.env_of[k] = int(re.findall(r"env (\d+)", text)[-1])
            self.prompts.append(text)
            delays = self.delays.get(question, [0.0])
            try:
                await asyncio.sleep(delays[min(k, len(delays) - 1)])
            except asyncio.CancelledError:
                self.cancelled[question].append(k)
                raise
            reply = '<tool_call>\n{"name": "press", "arguments": {}}\n</tool_call><|im_end|>'
        ids = self.tokenizer(reply, add_special_tokens=False).input_ids
        return ids, [-0.5] * len(ids)


def tool_tokenizer(tool_model_dir: Any) -> Any:
    from accelerate.state import PartialState
    from transformers import AutoTokenizer

    PartialState()
    return AutoTokenizer.from_pretrained(tool_model_dir)


def test_environments_are_reset_per_request_and_their_reward_scores_it(tool_model_dir: Any) -> None:
    """Each request resets an environment with the dataset row, sees its observation at the end of the prompt, calls
    its tool once and is scored by `exact_answer` plus the environment's own reward (1: one press). Requests k = 0..3
    of a group answer right, wrong, right, wrong: totals 2, 1, 2, 1, pool mean 1.5, advantages +-0.5. Instances are
    reused: 8 requests, one at a time, need the probe instance only."""
    tokenizer = tool_tokenizer(tool_model_dir)
    RESETS.clear()
    ButtonEnv.created = 0
    script = ButtonScript(tokenizer, {A: [RIGHT]})
    ada = uniform(max_in_flight=1)
    loop = make_loop(
        AdaRolloutLoop,
        tokenizer,
        [A],
        script,
        num_generations=4,
        max_inflight_tasks=1,
        ada=ada,
        environment_factory=ButtonEnv,
    )
    assert loop.reward_func_names == ["exact_answer", "ButtonEnv"]
    groups = run_pushed(loop, 2)
    for group_id in (0, 1):
        rows = groups[group_id]
        assert sorted((s.metrics["reward"], s.advantage) for s in rows) == [(1.0, -0.5)] * 2 + [(2.0, 0.5)] * 2
        assert all(s.metrics["rewards/ButtonEnv"] == 1.0 and s.metrics["tools/call_frequency"] == 1.0 for s in rows)
    assert len(script.prompts) == script.dispatched[A]
    assert all(text.count("(button task 0, env ") == 1 for text in script.prompts)
    assert len(RESETS) == script.dispatched[A] >= 8
    assert all(kwargs["qid"] == 0 for kwargs in RESETS)
    assert ButtonEnv.created == 1


def test_an_aborted_requests_environment_is_not_reused(tool_model_dir: Any) -> None:
    """In each group of 2 under the `positive` rule, requests 4g and 4g+1 (right, wrong) are fast, 4g+2 and 4g+3
    slow: the rule holds on the first two, so the slow ones are aborted while waiting in their first turn. Their
    environment instances are never reset again (a tool call of theirs could still be running in a thread); the two
    that finished go back to TRL's pool, and the next group resets them again."""
    tokenizer = tool_tokenizer(tool_model_dir)
    RESETS.clear()
    script = ButtonScript(tokenizer, {A: [RIGHT]}, {A: [0.0, 0.0, 5.0, 5.0] * 10})
    ada = uniform(sampling_strategy="positive")
    loop = make_loop(
        AdaRolloutLoop,
        tokenizer,
        [A],
        script,
        num_generations=2,
        max_inflight_tasks=4,
        ada=ada,
        environment_factory=ButtonEnv,
    )
    groups = run_pushed(loop, 2)
    assert all(sorted(s.metrics["reward"] for s in groups[g]) == [1.0, 2.0] for g in (0, 1))
    assert script.cancelled[A][:4] == [2, 3, 6, 7]
    # An aborted request's environment never serves (so is never reset for) a later request. Which of the next
    # group's requests get the two finished ones depends on timing (a freed slot starts the next request at once);
    # that both are reused there does not.
    for k in (2, 3, 6, 7):
        later = {env for j, env in script.env_of.items() if j > k}
        assert script.env_of[k] not in later, k
    assert {script.env_of[0], script.env_of[1]} <= {script.env_of[k] for k in (4, 5, 6, 7)}
    metrics = metrics_of(loop)
    discarded = sum(metrics["ada/environments_discarded_total"]) + loop._counters["ada/environments_discarded_total"]
    assert discarded >= 4


def test_the_worker_takes_an_environment_factory_and_checks_the_new_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL's worker needs the vllm package only to build (see `test_async_worker`); with that check passed, ours
    forwards `environment_factory` to the loop it spawns and rejects a pilot as large as the group before spawning."""
    import pickle

    from trl.experimental.async_grpo import async_rollout_worker

    from trl_ada.adapter.async_worker import AdaRolloutWorker

    monkeypatch.setattr(async_rollout_worker, "is_vllm_available", lambda: True)
    ada = AdaRolloutConfig(prompt_selection="pass_rate", pilot_size=2, refill=True)
    with pytest.warns(UserWarning, match="restarts earlier in the dataset"):
        worker = AdaRolloutWorker(
            ada=ada, num_generations=4, reward_funcs=[exact_answer], environment_factory=ButtonEnv
        )
    kwargs = pickle.loads(pickle.dumps(worker._loop_kwargs))
    assert kwargs["environment_factory"] is ButtonEnv and kwargs["ada"] == ada
    with pytest.raises(ValueError, match="pilot_size must be an integer from 0"):
        AdaRolloutWorker(ada=AdaRolloutConfig(pilot_size=4), num_generations=4, reward_funcs=[exact_answer])


@pytest.mark.parametrize(
    ("settings", "warns"),
    [({}, False), ({"pilot_size": 2}, False), ({"refill": True}, True), ({"prompt_selection": "pass_rate"}, True)],
)
def test_the_worker_warns_that_resume_and_epochs_drift_with_refill_or_selection(
    monkeypatch: pytest.MonkeyPatch, settings: dict, warns: bool
) -> None:
    """AsyncGRPOTrainer resumes at "the first group id never trained" and ends an epoch after len(dataset) trained
    groups; a dropped group (refill) is never trained and a skipped row (selection) gets no id, so both drift. The
    pilot alone pushes every group (a stopped pilot as zero advantages): no drift, no warning."""
    import warnings

    from trl.experimental.async_grpo import async_rollout_worker

    from trl_ada.adapter.async_worker import AdaRolloutWorker

    monkeypatch.setattr(async_rollout_worker, "is_vllm_available", lambda: True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        AdaRolloutWorker(ada=AdaRolloutConfig(**settings), num_generations=4, reward_funcs=[exact_answer])
    resume = [w for w in caught if "restarts earlier in the dataset" in str(w.message)]
    assert len(resume) == (1 if warns else 0)
