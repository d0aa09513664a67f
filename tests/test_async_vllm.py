"""The Reinforce-Ada rollout worker's loop against a real vLLM server (opt-in, like tests/test_vllm.py).

Marked `vllm` (deselected by default) and skipped unless `vllm` imports. `trl vllm-serve` serves the offline toy model
on loopback (tests/test_vllm.py's `vllm_server` fixture: float32, eager, one sequence at a time, so requests queue
and a prompt that stops early has requests left to abort), and `AdaRolloutLoop` runs in this process, sending TRL's
own `/v1/completions` requests (not streamed, token ids and log-probs).

Checked independently: each pushed row is the chat template's prompt ids then the completion vLLM sampled; its old
log-probs are the toy model's own float32 log-softmax of the sampled tokens (recomputed here with transformers);
rewards follow a rule read off the completion; advantages are worked from the kept rewards; and from the server's
log and metrics, every request it received either finished or was aborted, and aborts reached it while the loop ran
(the exit rule's, not the loop's shutdown).

Run: `make test-vllm VLLM_VENV=../vllm-venv` (with tests/test_vllm.py; how to build that venv: its docstring), or
`HF_HUB_OFFLINE=1 ../vllm-venv/bin/python -m pytest -m vllm tests/test_async_vllm.py`.
"""

from __future__ import annotations

import math
import queue
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from datasets import Dataset
from test_async_server import wait_for
from test_async_worker import child_channels, collect, eos_token_ids, metrics_of, running
from test_vllm import server_finished_requests, vllm, vllm_server  # noqa: F401  (fixtures)
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.chat_template_utils import qwen3_template

from trl_ada.adapter.async_worker import AdaRolloutConfig, AdaRolloutLoop

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.timeout(900),
    pytest.mark.filterwarnings("ignore:TRL currently supports vLLM versions:UserWarning"),
]

MAX_TOKENS = 24
KEYS = ["a", "b", "c"]


def reward_of(key: str, completion_ids: list[int]) -> float:
    """Read off the completion, so it does not depend on when it is scored: "a" never right, "b" always, "c" when
    its token ids sum to an even number."""
    return {"a": 0.0, "b": 1.0}.get(key, float(sum(completion_ids) % 2 == 0))


def keyed_reward(completion_ids: list[list[int]], key: list[str], **kwargs: Any) -> list[float]:
    return [reward_of(k, ids) for k, ids in zip(key, completion_ids, strict=True)]


def log_counts(log: Path, offset: int) -> tuple[int, int]:
    """Completion requests the server received, and those it aborted, in its log after `offset` (INFO level with
    `--enable-log-requests`: "Received request cmpl-...", "Aborted request(s) cmpl-..., cmpl-....")."""
    text = log.read_text(errors="replace")[offset:]
    received = len(re.findall(r"Received request cmpl-\S+: ", text))
    aborted = sum(len(m.group(1).split(", ")) for m in re.finditer(r"Aborted request\(s\) (.+?)\.?$", text, re.M))
    return received, aborted


def check_rows(groups: dict[int, list[Any]], model_dir: Path, tokenizer: Any, keys: list[str]) -> None:
    """Groups 0..len(keys)-1 (prompt `keys[g]`), each row against the prompt's template ids, the toy model's own
    log-probs of the sampled tokens, the reward rule and the group-normalised advantage, worked here."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for group_id, key in enumerate(keys):
        rows = groups[group_id]
        assert len(rows) == 2 and {s.group_id for s in rows} == {group_id} and {s.model_version for s in rows} == {0}
        messages = [{"role": "user", "content": f"{key}?"}]
        prompt = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False))
        rewards = []
        for s in rows:
            input_ids = np.asarray(s.input_ids).tolist()
            completion = input_ids[len(prompt) :]
            assert input_ids[: len(prompt)] == prompt and 1 <= len(completion) <= MAX_TOKENS
            assert completion[-1] == tokenizer.eos_token_id or len(completion) == MAX_TOKENS
            assert np.asarray(s.completion_mask).tolist() == [0] * len(prompt) + [1] * len(completion)
            old = np.asarray(s.old_log_probs, dtype=float)
            assert not old[: len(prompt)].any()
            with torch.no_grad():
                logits = model(torch.tensor([input_ids])).logits[0, len(prompt) - 1 : -1].double()
            expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None])[:, 0]
            np.testing.assert_allclose(old[len(prompt) :], expected.numpy(), rtol=0, atol=1e-3)
            rewards.append(reward_of(key, completion))
            assert s.metrics["reward"] == rewards[-1]
        mean = sum(rewards) / 2
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards))  # unbiased, n - 1 = 1
        for s, r in zip(rows, rewards, strict=True):
            assert s.advantage == pytest.approx((r - mean) / (std + 1e-4), abs=1e-9)
        if key == "b":
            assert rewards == [1.0, 1.0]


def check_server(server: Any, log_offset: int, finished_before: float) -> None:
    """From the server's log and metrics: every request it received finished or was aborted, and some were."""
    received, aborted = log_counts(server.log, log_offset)
    deadline = time.monotonic() + 30  # after the stop: the server logs each abort a moment after the close
    while True:
        finished = server_finished_requests(server.url) - finished_before
        received, aborted = log_counts(server.log, log_offset)
        if finished + aborted >= received or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    print(f"vLLM server: {received} requests received, {finished:.0f} finished, {aborted} aborted")
    assert finished + aborted == received  # every request it received ended one way or the other
    assert aborted > 0


ADA = AdaRolloutConfig(
    sampling_strategy="positive", samples_per_round=4, max_rounds=2, advantage_baseline="group", scale_rewards="group"
)


def toy_tokenizer(model_dir: Path) -> Any:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.response_template = qwen3_template  # the toy's ChatML turns parse as Qwen3's (as test_async_worker)
    return tokenizer


def worker_kwargs(tokenizer: Any, model_dir: Path, url: str) -> dict[str, Any]:
    """What `AsyncGRPOTrainer` would pass its worker (the loop's own arguments): positive rule, groups of 2, 4
    requests in flight per prompt, budget 8, 2 prompts at once, 24-token completions."""
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{k}?"}], "key": k} for k in KEYS])
    return dict(
        ada=ADA,
        model_name=str(model_dir),  # vLLM serves the model under its path
        dataset=dataset,
        reward_funcs=[keyed_reward],
        processing_class=tokenizer,
        **eos_token_ids(tokenizer),
        num_generations=2,
        max_inflight_tasks=8,
        vllm_server_url=url,
        max_tokens=MAX_TOKENS,
        temperature=1.0,
        request_timeout=120,
    )


def test_ada_loop_against_vllm_serve(vllm_server: Any, toy_cold_dir: Path) -> None:  # noqa: F811
    """The loop in this process, served one sequence at a time: "b" stops on its first two requests and aborts the
    rest; "a" never does and draws its budget; "c" depends on what vLLM samples."""
    from accelerate.state import PartialState

    PartialState()  # the loop logs through accelerate (TRL's child process makes it the same way)
    tokenizer = toy_tokenizer(toy_cold_dir)
    loop = AdaRolloutLoop(
        **worker_kwargs(tokenizer, toy_cold_dir, vllm_server.url),
        **child_channels(),
    )
    log_offset = len(vllm_server.log.read_text(errors="replace"))
    finished_before = server_finished_requests(vllm_server.url)
    with running(loop):
        groups = collect(loop, 3, timeout=600)
        # Aborts that reach the server while the loop runs on are the exit rules' (the shutdown comes later).
        wait_for(lambda: log_counts(vllm_server.log, log_offset)[1] > 0, "an abort in the server's log", 60)
    metrics = metrics_of(loop)
    check_rows(groups, toy_cold_dir, tokenizer, KEYS)
    by_pool = sorted(n for n, _ in metrics["ada/samples_per_prompt"][:3])
    assert 8.0 in by_pool and 2.0 in by_pool  # "a" drew its budget, "b" stopped at 2
    check_server(vllm_server, log_offset, finished_before)


def test_ada_worker_process_against_vllm_serve(vllm_server: Any, toy_cold_dir: Path) -> None:  # noqa: F811
    """`AdaRolloutWorker` as `AsyncGRPOTrainer` drives it: `start()` spawns TRL's child process running our loop
    (the kwargs pickled across), rows arrive on its multiprocessing queue, a model version the parent publishes
    tags the groups dispatched after it, `ada/*` metrics come through its metric queue, and `stop()` ends the child
    and its requests."""
    from trl_ada.adapter.async_worker import AdaRolloutWorker

    tokenizer = toy_tokenizer(toy_cold_dir)
    worker = AdaRolloutWorker(**worker_kwargs(tokenizer, toy_cold_dir, vllm_server.url))
    log_offset = len(vllm_server.log.read_text(errors="replace"))
    finished_before = server_finished_requests(vllm_server.url)
    samples: list[Any] = []
    groups: dict[int, list[Any]] = defaultdict(list)
    worker.start()
    try:
        deadline = time.monotonic() + 600
        while not any(s.model_version == 5 for s in samples):
            assert time.monotonic() < deadline, f"rows of groups {sorted(groups)} in 600 s, none of version 5"
            worker.check_health(stale_after_s=120)
            try:
                sample = worker.rollout_buffer.get(timeout=1.0)
            except queue.Empty:
                continue
            samples.append(sample)
            groups[sample.group_id].append(sample)
            if worker.model_version == 0 and all(len(groups[g]) >= 2 for g in range(3)):
                worker.update_model_version(5)  # as the trainer does after a weight sync
        wait_for(lambda: log_counts(vllm_server.log, log_offset)[1] > 0, "an abort in the server's log", 60)
    finally:
        worker.stop()
    assert worker._process is None
    check_rows(groups, toy_cold_dir, tokenizer, KEYS)
    assert {s.model_version for s in samples} <= {0, 5}
    assert min(s.group_id for s in samples if s.model_version == 5) >= 3  # dispatched after the bump
    names = set()
    while True:
        try:
            names |= set(worker.metrics_queue.get(timeout=1.0))
        except queue.Empty:
            break
    assert {"ada/samples_per_prompt", "ada/aborted_per_prompt", "ada/pool_version_span_max"} <= names
    check_server(vllm_server, log_offset, finished_before)
