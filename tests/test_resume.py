"""Kill a `trl-ada train` run after its first checkpoint, resume it, and compare with a run that was never stopped."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from trl_ada.trainer import ReinforceAdaTrainer

TIMEOUT = 240  # seconds, per run


def train_command(model_dir, output_dir, max_steps: int, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "trl_ada.train",
        "--model_name_or_path", str(model_dir), "--dataset_name", "builtin:toy",
        "--reward_funcs", "resume_reward.even_first_token",
        "--use_cpu", "true", "--bf16", "false", "--report_to", "none", "--disable_tqdm", "true", "--seed", "0",
        "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "4",
        # A constant learning rate: the killed run's max_steps differs, and must not change the schedule.
        "--learning_rate", "2e-4", "--lr_scheduler_type", "constant", "--beta", "0.0",
        "--samples_per_round", "4", "--max_rounds", "4", "--logging_steps", "1",
        "--save_strategy", "steps", "--save_steps", "2", "--max_steps", str(max_steps),
        "--output_dir", str(output_dir), *extra,
    ]  # fmt: skip


# The same arithmetic in every run; tests/ on the path for the reward.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parent)}


def run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
    assert result.returncode == 0, result.stderr[-4000:]


def logged_steps(checkpoint) -> dict[int, dict[str, float]]:
    history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    return {row["step"]: row for row in history if "ada/rounds" in row}


@pytest.mark.slow
def test_killed_run_resumes_and_matches_an_uninterrupted_run(toy_cold_dir, tmp_path):
    # The run to kill asks for many steps; it is stopped (SIGTERM) once checkpoint-2 is complete.
    killed = tmp_path / "killed"
    process = subprocess.Popen(
        train_command(toy_cold_dir, killed, 1000), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + TIMEOUT
    try:
        while not (killed / "checkpoint-2" / "trainer_state.json").exists():  # written last in a checkpoint
            assert process.poll() is None, process.stderr.read().decode()[-4000:]
            assert time.monotonic() < deadline, "no checkpoint-2"
            time.sleep(0.5)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        process.stderr.close()
    assert not (killed / "checkpoint-1000").exists()

    resumed = tmp_path / "resumed"
    run(train_command(toy_cold_dir, resumed, 4, "--resume_from_checkpoint", str(killed / "checkpoint-2")))
    reference = tmp_path / "reference"
    run(train_command(toy_cold_dir, reference, 4))

    after, uninterrupted = logged_steps(resumed / "checkpoint-4"), logged_steps(reference / "checkpoint-4")
    assert sorted(after) == sorted(uninterrupted) == [1, 2, 3, 4]  # the resumed state carries steps 1-2
    for step in (3, 4):  # trained after the resume
        same_keys = [
            k
            for k in uninterrupted[step]
            if (k.startswith("ada/") and not k.endswith("_seconds"))  # wall time differs from run to run
            or k in ("reward", "loss", "grad_norm")
        ]
        assert len(same_keys) > 8
        assert uninterrupted[step]["loss"] != 0 and 0 < uninterrupted[step]["reward"] < 1  # a step that learns
        # Same batches (the sampler skips what was trained), same torch RNG (restored from the checkpoint), same
        # downsampling (a function of seed, process and step): the same numbers, to the last bit.
        assert {k: after[step][k] for k in same_keys} == {k: uninterrupted[step][k] for k in same_keys}


def test_downsampling_rng_is_a_function_of_seed_process_step_and_batch_only():
    def stand_in(seed, process, step, batch=0):
        return SimpleNamespace(
            args=SimpleNamespace(seed=seed),
            accelerator=SimpleNamespace(process_index=process),
            state=SimpleNamespace(global_step=step),
            _ada_batch=(step, batch),
        )

    def draws(seed, process, step, batch=0):
        rng = ReinforceAdaTrainer._rng(stand_in(seed, process, step, batch))
        return [rng.random() for _ in range(4)]

    # No state carried between calls (a resumed run rebuilds it from the step alone) ...
    assert draws(0, 0, 7) == draws(0, 0, 7)
    # ... and each of the four changes the draw: the second generation batch of a step draws afresh.
    base = draws(0, 0, 7)
    assert draws(1, 0, 7) != base and draws(0, 1, 7) != base and draws(0, 0, 8) != base and draws(0, 0, 7, 1) != base
    # The first batch's seed is the one earlier releases used, so their runs resume and reproduce unchanged.
    legacy = __import__("random").Random("0-0-7")
    assert base == [legacy.random() for _ in range(4)]
