"""ReinforceAdaTrainer through TRL's integrations: the trackers receive the `ada/*` metrics, the model card is ours.

Every run trains two steps on the untrained toy model with a scripted reward, so that the metrics each tracker must
receive are worked out by hand (see EXPECTED). wandb (offline) and trackio (local) read their settings from the
environment, trackio once at import time, so each trains in a fresh process with its own: running this file as a
script performs one such training run (see `main`).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sqlite3
import struct
import subprocess
import sys

import pytest
import yaml
from datasets import Dataset
from transformers import AutoTokenizer

from trl_ada import ReinforceAdaConfig, ReinforceAdaTrainer

STEPS = 2
PROJECT = "trl-ada-integrations"

# Each step holds both prompts (2 prompts x 4 = the batch of 8), rounds of 4 completions, at most 2 rounds.
# "a" scores 1, 0, 1, 0 in round 1: 2 correct and 2 incorrect meet the balanced rule (2 + 2) after 4 completions.
# "b" always scores 0: it draws a second round, spends its budget of 4 x 2 = 8 and stays unresolved.
EXPECTED = {
    "ada/rounds": 2,
    "ada/samples_per_prompt": (4 + 8) / 2,
    "ada/samples_per_prompt_max": 8,
    "ada/frac_resolved": 1 / 2,
    "ada/frac_zero_std_first_round": 1 / 2,  # b's 4 zeros
    "ada/pool_pass_rate": (2 / 4 + 0 / 8) / 2,
    "ada/difficulty_weight_mean": 1.0,  # no weighting
    "frac_reward_zero_std": 1 / 2,  # a keeps its 2 + 2, b keeps 4 zeros
    "reward": (2 / 4 + 0) / 2,  # mean of the kept rewards
}


def scripted_reward(completions, key, **kwargs):
    """1, 0, 1, 0, ... over prompt "a"'s completions in each call; 0 for everything else."""
    rewards, seen = [], 0
    for k in key:
        rewards.append(float(k == "a" and seen % 2 == 0))
        seen += k == "a"
    return rewards


def build(model_dir: str | os.PathLike, output_dir: str | os.PathLike, report_to: list[str]) -> ReinforceAdaTrainer:
    """A trainer for two scripted steps on the toy model, logging every step to `report_to`."""
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{k}?"}], "key": k} for k in "ab"])
    args = ReinforceAdaConfig(
        output_dir=str(output_dir),
        report_to=report_to,
        project=PROJECT,
        run_name="scripted",
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=3,
        max_steps=STEPS,
        seed=0,
        sampling_strategy="balanced",
        samples_per_round=4,
        max_rounds=2,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return ReinforceAdaTrainer(
        str(model_dir), scripted_reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )


def train(model_dir: str | os.PathLike, output_dir: str | os.PathLike, report_to: list[str]) -> ReinforceAdaTrainer:
    trainer = build(model_dir, output_dir, report_to)
    trainer.train()
    return trainer


def main(argv: list[str]) -> None:
    """`python tests/test_integrations.py MODEL_DIR OUTPUT_DIR TRACKER`: one scripted run logging to TRACKER."""
    model_dir, output_dir, tracker = argv
    train(model_dir, output_dir, [tracker])


def train_in_subprocess(model_dir, tmp_path, tracker: str, env: dict[str, str]) -> None:
    command = [sys.executable, __file__, str(model_dir), str(tmp_path / "out"), tracker]
    # One intra-op thread: two spin-wait for each other on shared cores, and two steps gain nothing from them.
    full_env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **env}
    result = subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"training with report_to={tracker} failed:\n{result.stderr[-4000:]}"


def assert_ada_steps(rows: dict[int, dict[str, float]]) -> None:
    """`rows` maps the global step to the metrics a tracker stored for it, under the names the user sees."""
    assert sorted(rows) == list(range(1, STEPS + 1))
    for step, metrics in rows.items():
        for name, value in EXPECTED.items():
            assert metrics.get(f"train/{name}") == pytest.approx(value), f"train/{name} at step {step}"


# -------------------------------------------------------------------------------------------------------------------
# tensorboard (in process) and the model card
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_tensorboard_receives_ada_scalars(toy_cold_dir, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)  # it would move the event files out of output_dir
    output_dir = tmp_path / "out"
    train(toy_cold_dir, output_dir, ["tensorboard"])
    event_files = list(output_dir.rglob("events.out.tfevents.*"))
    assert len(event_files) == 1, event_files
    events = EventAccumulator(str(event_files[0]))
    events.Reload()
    tags = events.Tags()["scalars"]
    rows: dict[int, dict[str, float]] = {}
    for tag in tags:
        for event in events.Scalars(tag):
            rows.setdefault(event.step, {})[tag] = event.value
    assert_ada_steps(rows)
    assert {f"train/{name}" for name in EXPECTED} <= set(tags)


def test_model_card_has_tags_and_citation(toy_cold_dir, tmp_path):
    output_dir = tmp_path / "out"
    build(toy_cold_dir, output_dir, ["none"]).create_model_card(model_name="toy-reinforce-ada")
    text = (output_dir / "README.md").read_text()
    front_matter = yaml.safe_load(text.split("---")[1])
    assert {"trl", "reinforce-ada"} <= set(front_matter["tags"])
    assert "trained with Reinforce-Ada, a method introduced in" in text
    assert "https://huggingface.co/papers/2510.04996" in text
    assert "@article{xiong2025reinforceada" in text and "arXiv:2510.04996" in text


def test_push_to_hub_and_model_card_are_trls():
    from trl import GRPOTrainer

    for method in ("push_to_hub", "create_model_card"):
        assert method not in vars(ReinforceAdaTrainer)
        assert getattr(ReinforceAdaTrainer, method) is getattr(GRPOTrainer, method)


# -------------------------------------------------------------------------------------------------------------------
# wandb (offline) and trackio (local), each in its own process
# -------------------------------------------------------------------------------------------------------------------


def wandb_history(run_file: pathlib.Path) -> list[dict]:
    """The history records of an offline run's `.wandb` file.

    The file is a LevelDB-style log (a 7-byte header, then 32 KiB blocks of chunks, each with a 7-byte header:
    checksum, length, type) whose reassembled records are `wandb_internal_pb2.Record` messages.
    """
    from wandb.proto import wandb_internal_pb2

    data, block, full, last = run_file.read_bytes(), 32 * 1024, 1, 4
    assert data[:4] == b":W&B", "not a wandb run file"
    history, chunks, pos = [], [], 7
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # too little room left for a chunk header: the block is padded
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunks.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (full, last):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(chunks))
            chunks = []
            if record.WhichOneof("record_type") == "history":
                items = record.history.item  # a "train/ada/rounds" key may come split into `nested_key` parts
                history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
    return history


@pytest.mark.slow
def test_wandb_offline_receives_ada_metrics(toy_cold_dir, tmp_path):
    pytest.importorskip("wandb")
    wandb_dir = tmp_path / "wandb"
    wandb_dir.mkdir()
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_PROJECT": PROJECT, "WANDB_SILENT": "true"}
    train_in_subprocess(toy_cold_dir, tmp_path, "wandb", env)
    (run_file,) = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    rows = {int(r["train/global_step"]): r for r in wandb_history(run_file) if "train/ada/rounds" in r}
    assert_ada_steps(rows)


@pytest.mark.slow
def test_trackio_local_receives_ada_metrics(toy_cold_dir, tmp_path):
    pytest.importorskip("trackio")  # importing here is harmless: only the subprocess writes
    trackio_dir = tmp_path / "trackio"
    train_in_subprocess(toy_cold_dir, tmp_path, "trackio", {"TRACKIO_DIR": str(trackio_dir)})
    with contextlib.closing(sqlite3.connect(trackio_dir / f"{PROJECT}.db")) as db:
        logged = [json.loads(metrics) for (metrics,) in db.execute("SELECT metrics FROM metrics")]
    rows = {int(r["train/global_step"]): r for r in logged if "train/ada/rounds" in r}
    assert_ada_steps(rows)


if __name__ == "__main__":
    main(sys.argv[1:])
