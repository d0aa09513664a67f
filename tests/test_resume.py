"""Checkpoints and resume, each against a run that was never stopped: a killed `trl-ada train` run resumed; a resume
from every checkpoint saved inside a generation batch; a save that fails half-way; an output_dir that cannot be
written to, found before training."""

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers.trainer_utils import get_last_checkpoint

from trl_ada.adapter import checkpoints
from trl_ada.adapter.checkpoints import GENERATION_BATCH_FILE
from trl_ada.adapter.trainer import ReinforceAdaTrainer
from trl_ada.core.memory import STATE_FILE
from trl_ada.core.prompt_stream import STREAM_STATE_FILE

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


# -------------------------------------------------------------------------------------------------------------------
# Resuming from a checkpoint saved inside a generation batch
# -------------------------------------------------------------------------------------------------------------------


class Recording(ReinforceAdaTrainer):
    """Keeps what each training micro-step hands to the loss: its step, prompts, completions and advantages."""

    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if self.model.training:
            decode = self.processing_class.batch_decode
            self.trained = getattr(self, "trained", [])
            self.trained.append(
                (
                    self.state.global_step,
                    decode(inputs["prompt_ids"], skip_special_tokens=True),
                    decode(inputs["completion_ids"]),
                    inputs["advantages"].tolist(),
                )
            )
        return inputs


def first_token_reward(completion_ids, key, **kwargs):
    """'z' prompts are never right, so their groups carry no signal and refill replaces them from the side stream;
    the others are right when the completion's first token is even, so what the model writes decides."""
    rows = zip(completion_ids, key, strict=True)
    return [0.0 if k[0] == "z" else float(bool(ids) and ids[0] % 2 == 0) for ids, k in rows]


# Each generation batch trains two optimizer steps: every odd-numbered checkpoint is saved inside one.
WINDOWS = {
    "num_iterations": dict(num_iterations=2),  # the same batch of 2 prompts, twice
    "steps_per_generation": dict(steps_per_generation=2),  # one batch of 4 prompts, half of it per step
    # one batch of 4 prompts, a quarter per micro-step, two micro-steps per optimizer step
    "accumulation": dict(steps_per_generation=4, gradient_accumulation_steps=2, per_device_train_batch_size=4),
}


def window_run(model_dir, out_dir, window: str, resume=None) -> Recording:
    from test_trainer import keyed_dataset, make_trainer

    trainer = make_trainer(
        model_dir,
        out_dir,
        first_token_reward,
        keyed_dataset([f"z{i}" for i in range(8)] + [f"m{i}" for i in range(8)]),  # 16 prompts: one epoch
        trainer_cls=Recording,
        max_steps=4,
        save_strategy="steps",
        save_steps=1,
        sampling_strategy="uniform",
        refill=True,  # draws from the side stream
        prompt_selection="pass_rate",  # reads the memory
        **({"per_device_train_batch_size": 8} | WINDOWS[window]),
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def step_logs(trainer) -> dict[int, dict[str, float]]:
    """The per-step log rows, without wall times (which differ from run to run)."""
    rows = [row for row in trainer.state.log_history if "loss" in row]
    return {row["step"]: {k: v for k, v in row.items() if "seconds" not in k and k != "step_time"} for row in rows}


def ada_state(checkpoint) -> tuple[dict, dict]:
    return json.loads((checkpoint / STATE_FILE).read_text()), json.loads((checkpoint / STREAM_STATE_FILE).read_text())


@pytest.mark.slow
@pytest.mark.parametrize("window", WINDOWS)
def test_resume_from_every_step_inside_generation_batches_matches_an_uninterrupted_run(toy_cold_dir, tmp_path, window):
    straight = window_run(toy_cold_dir, tmp_path / "straight", window)
    logs = step_logs(straight)
    assert sorted(logs) == [1, 2, 3, 4]
    # Generation happens at steps 1 and 3 only (Ada metrics logged there); steps 2 and 4 train the buffered batch.
    assert [step for step, row in logs.items() if "ada/rounds" in row] == [1, 3]
    assert any(row.get("ada/refills", 0) > 0 for row in logs.values())  # the side stream was drawn from
    # Checkpoints 1 and 3 are saved inside a generation batch, and hold each process's buffer of it.
    held = [step for step in (1, 2, 3, 4) if (tmp_path / "straight" / f"checkpoint-{step}" / BATCH_FILE).exists()]
    assert held == [1, 3]
    for saved in (1, 2, 3):
        resumed = window_run(toy_cold_dir, tmp_path / f"resumed-{saved}", window, straight_checkpoint(tmp_path, saved))
        # The same prompts, completions and advantages handed to the loss at every micro-step after the resume ...
        assert resumed.trained == [row for row in straight.trained if row[0] >= saved]
        # ... the same pass-rate memory and side-stream position in every later checkpoint ...
        for step in range(saved + 1, 5):
            after = ada_state(tmp_path / f"resumed-{saved}" / f"checkpoint-{step}")
            assert after == ada_state(tmp_path / "straight" / f"checkpoint-{step}"), (saved, step)
        assert resumed.ada_memory.state_dict() == straight.ada_memory.state_dict()
        # ... and the same logged metrics, Ada's and TRL's (loss, grad_norm, reward), to the last bit (the log rows
        # up to the checkpoint come from its trainer state).
        assert step_logs(resumed) == logs


BATCH_FILE = GENERATION_BATCH_FILE.format(0)


@pytest.mark.slow
def test_resume_in_a_later_epoch_trains_what_an_uninterrupted_run_trains(toy_cold_dir, tmp_path):
    """4 prompts, 2 per step: 6 steps are 3 epochs, each shuffled differently. Resumed from any checkpoint, a run
    shuffles its epoch as the uninterrupted run did (GRPOTrainer alone would shuffle it as epoch 0)."""
    from test_trainer import keyed_dataset, make_trainer

    def run(name, resume=None):
        trainer = make_trainer(
            toy_cold_dir,
            tmp_path / name,
            counting_reward(),
            keyed_dataset(["a", "b", "c", "d"]),
            trainer_cls=Recording,
            max_steps=6,
            save_strategy="steps",
            save_steps=1,
        )
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    def prompts(trainer):  # the keys trained at each step
        return {step: sorted({text.split()[1] for text in texts}) for step, texts, *_ in trainer.trained}

    straight = run("straight")
    order = [prompts(straight)[step] for step in range(6)]
    assert order[0:2] != order[2:4] != order[4:6]  # three different shuffles
    for saved in range(1, 6):
        resumed = run(f"resumed-{saved}", tmp_path / "straight" / f"checkpoint-{saved}")
        assert resumed.trained == straight.trained[saved:], saved
        assert step_logs(resumed) == step_logs(straight)


def straight_checkpoint(tmp_path, step: int) -> str:
    return str(tmp_path / "straight" / f"checkpoint-{step}")


# -------------------------------------------------------------------------------------------------------------------
# Where checkpoints go: a writable output_dir, checked first; atomic saves
# -------------------------------------------------------------------------------------------------------------------


def counting_reward():
    """A reward that counts its calls: none means training never generated."""

    def reward(completion_ids, **kwargs):
        reward.calls += 1
        return [float(bool(ids) and ids[0] % 2 == 0) for ids in completion_ids]

    reward.calls = 0
    return reward


def small_run(model_dir, out_dir, reward, **overrides):
    from test_trainer import keyed_dataset, make_trainer

    settings = dict(max_steps=3, save_strategy="steps", save_steps=1, per_device_train_batch_size=4)
    dataset = keyed_dataset([f"k{i}" for i in range(12)])
    return make_trainer(model_dir, out_dir, reward, dataset, **settings | overrides)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder: see the simulated test below")
def test_a_read_only_output_dir_fails_before_training_naming_it(toy_cold_dir, tmp_path):
    out_dir, reward = tmp_path / "read-only", counting_reward()
    trainer = small_run(toy_cold_dir, out_dir, reward)  # Trainer creates output_dir here
    out_dir.chmod(0o555)
    try:
        expected = f"output_dir '{out_dir}' cannot be written to (Permission denied)"
        with pytest.raises(OSError, match=re.escape(expected)):
            trainer.train()
    finally:
        out_dir.chmod(0o755)
    assert reward.calls == 0 and trainer.state.global_step == 0


@pytest.mark.slow
def test_a_read_only_output_dir_fails_before_training_naming_it_simulated(toy_cold_dir, tmp_path, monkeypatch):
    """As root, chmod does not stop a write: the file system's refusal is simulated where the check writes."""
    out_dir, reward = tmp_path / "read-only", counting_reward()
    trainer = small_run(toy_cold_dir, out_dir, reward)

    def refuse(*args, dir=None, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system", dir)

    monkeypatch.setattr(checkpoints.tempfile, "mkstemp", refuse)
    expected = f"output_dir '{out_dir}' cannot be written to (Read-only file system)"
    with pytest.raises(OSError, match=re.escape(expected)):
        trainer.train()
    assert reward.calls == 0 and trainer.state.global_step == 0


@pytest.mark.slow
def test_an_output_dir_that_cannot_be_created_fails_before_training_naming_it(toy_cold_dir, tmp_path):
    (tmp_path / "a-file").write_text("")
    out_dir, reward = tmp_path / "a-file" / "run", counting_reward()
    # Trainer's constructor creates output_dir already, and raises there; train() would raise the same way.
    with pytest.raises(NotADirectoryError, match=re.escape(str(out_dir))):
        small_run(toy_cold_dir, out_dir, reward).train()
    assert reward.calls == 0
    assert checkpoints.output_dir_problem(out_dir) == (
        f"output_dir '{out_dir}' cannot be written to (Not a directory). Checkpoints, the trainer state and the model "
        "card are saved there: pass a folder you can write to (output_dir=... or --output_dir), before training "
        "starts rather than at the first save."
    )


def test_resume_problem_only_for_several_cpu_processes_before_transformers_5_18():
    from packaging.version import Version

    cpu, plain, cuda = torch.device("cpu", 0), torch.device("cpu"), torch.device("cuda", 1)
    message = checkpoints.resume_problem(Version("5.17.0"), 2, cpu)
    assert message.startswith("transformers 5.17.0 cannot resume a run on 2 CPU processes")
    assert "onto cpu:0" in message and "pip install 'transformers>=5.18.0'" in message
    assert checkpoints.resume_problem(Version("5.0.0"), 4, torch.device("cpu", 3)) is not None
    # Fixed in 5.18; one process maps to plain "cpu"; torch restores to plain "cpu" and to a GPU.
    fine = [("5.18.0", 2, cpu), ("5.24.0", 2, cpu), ("5.17.0", 1, cpu), ("5.17.0", 2, cuda), ("5.17.0", 2, plain)]
    for version, world_size, device in fine:
        assert checkpoints.resume_problem(Version(version), world_size, device) is None


def checkpoint_folders(out_dir) -> list[str]:
    return sorted(path.name for path in out_dir.iterdir() if "checkpoint" in path.name)


@pytest.mark.slow
def test_a_save_that_fails_half_way_leaves_the_previous_checkpoint_resumable(toy_cold_dir, tmp_path, monkeypatch):
    out_dir = tmp_path / "run"
    trainer = small_run(toy_cold_dir, out_dir, counting_reward(), save_total_limit=2)
    model_class = type(trainer.model)
    save_pretrained = model_class.save_pretrained

    def disk_full_at_step_2(model, save_directory, *args, **kwargs):
        if trainer.state.global_step != 2:
            return save_pretrained(model, save_directory, *args, **kwargs)
        model.config.save_pretrained(save_directory)  # a part is written, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(model_class, "save_pretrained", disk_full_at_step_2)
        with pytest.raises(OSError, match="No space left on device"):
            trainer.train()
    # No checkpoint-2 without weights, no staging folder left: checkpoint-1 is the latest, and complete.
    assert checkpoint_folders(out_dir) == ["checkpoint-1"]
    assert get_last_checkpoint(str(out_dir)) == str(out_dir / "checkpoint-1")
    assert (out_dir / "checkpoint-1" / "model.safetensors").exists()
    # A save killed outright (no exception to clean up after) leaves its staging folder: ignored, then replaced.
    stale = out_dir / "_tmp-checkpoint-2" / "checkpoint-2"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    assert get_last_checkpoint(str(out_dir)) == str(out_dir / "checkpoint-1")

    # Resuming from the latest checkpoint trains steps 2 and 3 as a run that never failed.
    resumed = small_run(toy_cold_dir, out_dir, counting_reward(), save_total_limit=2)
    resumed.train(resume_from_checkpoint=True)
    straight = small_run(toy_cold_dir, tmp_path / "straight", counting_reward(), save_total_limit=2)
    straight.train()
    assert step_logs(resumed) == step_logs(straight) and sorted(step_logs(resumed)) == [1, 2, 3]
    # Rotation still keeps the newest save_total_limit checkpoints, each one complete.
    assert checkpoint_folders(out_dir) == checkpoint_folders(tmp_path / "straight") == ["checkpoint-2", "checkpoint-3"]
    for step in (2, 3):
        assert (out_dir / f"checkpoint-{step}" / "model.safetensors").exists()
        assert (out_dir / f"checkpoint-{step}" / "trainer_state.json").exists()


def best_at_step_1(completion_ids, trainer_state, **kwargs):
    """1 at step 1 (evaluation after the first step), 0.5 afterwards: the best checkpoint is the first one."""
    return [1.0 if trainer_state.global_step == 1 else 0.5 for _ in completion_ids]


@pytest.mark.slow
def test_best_checkpoint_and_rotation_are_those_the_trainer_keeps(toy_cold_dir, tmp_path):
    """Staged saves keep Trainer's bookkeeping: plain GRPOTrainer (no staging) on the same settings is the reference
    for the folders kept and the best checkpoint recorded, midway and at the end."""
    from mp_common import cpu_config
    from test_trainer import keyed_dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_ada import ReinforceAdaConfig

    class Listing(TrainerCallback):
        def __init__(self):
            self.seen = []

        def on_save(self, args, state, control, **kwargs):  # right after each save: what every process sees
            folder = Path(args.output_dir)
            recorded = json.loads((folder / f"checkpoint-{state.global_step}" / "trainer_state.json").read_text())
            best = (state.best_model_checkpoint, recorded["best_model_checkpoint"])
            self.seen.append((checkpoint_folders(folder), *(os.path.relpath(path, folder) for path in best)))

    def run(trainer_cls, config_cls, name):
        settings = dict(max_completion_length=3, max_steps=3, seed=0, per_device_train_batch_size=4)
        best = dict(eval_strategy="steps", eval_steps=1, metric_for_best_model="reward", load_best_model_at_end=True)
        saving = dict(save_strategy="steps", save_steps=1, save_total_limit=1)
        args = cpu_config(str(tmp_path / name), config_cls, **settings, **best, **saving, per_device_eval_batch_size=8)
        listing = Listing()
        trainer = trainer_cls(
            str(toy_cold_dir),
            best_at_step_1,
            args=args,
            train_dataset=keyed_dataset([f"k{i}" for i in range(12)]),
            eval_dataset=keyed_dataset(["e0", "e1"]),
            processing_class=AutoTokenizer.from_pretrained(toy_cold_dir),
            callbacks=[listing],
        )
        trainer.train()
        best = os.path.relpath(trainer.state.best_model_checkpoint, tmp_path / name)
        return listing.seen, checkpoint_folders(tmp_path / name), best

    ada = run(ReinforceAdaTrainer, ReinforceAdaConfig, "ada")
    reference = run(GRPOTrainer, GRPOConfig, "grpo")
    assert ada == reference
    seen, kept, best = ada
    # The first checkpoint stays the best; rotation keeps it and the newest; at the end only the best is left.
    assert seen[-1] == (["checkpoint-1", "checkpoint-3"], "checkpoint-1", "checkpoint-1")
    assert kept == ["checkpoint-1"] and best == "checkpoint-1"


def test_a_batch_saved_by_two_processes_cannot_resume_on_one(tmp_path):
    for process in (0, 1):
        checkpoints.save_generation_batch(tmp_path, process, 3, 4, [{"x": torch.ones(2)}] * 2)
    with pytest.raises(ValueError, match=r"by 2 processes; this run has 1\. Resume with as many processes"):
        checkpoints.load_generation_batch(tmp_path, 1, 0, "cpu")
    saved = checkpoints.load_generation_batch(tmp_path, 2, 1, "cpu")
    assert saved["step"] == 3 and saved["generate_every"] == 4
    assert len(saved["buffered_inputs"]) == 2 and torch.equal(saved["buffered_inputs"][1]["x"], torch.ones(2))
    (tmp_path / "between").mkdir()
    assert checkpoints.load_generation_batch(tmp_path / "between", 2, 0, "cpu") is None  # saved between batches


@pytest.mark.parametrize(
    ("steps_per_generation", "num_iterations", "restored"), [(2, 2, True), (2, 1, False), (4, 1, False)]
)
def test_a_batch_saved_with_another_window_is_not_restored(steps_per_generation, num_iterations, restored, caplog):
    saved = {"step": 3, "generate_every": 4, "buffered_inputs": [{"x": 1}, {"x": 2}]}  # spg 2, num_iterations 2
    trainer = SimpleNamespace(
        args=SimpleNamespace(steps_per_generation=steps_per_generation),
        num_iterations=num_iterations,
        _step=0,
        _buffered_inputs=None,
    )
    ReinforceAdaTrainer._load_generation_batch(trainer, saved)
    assert (trainer._step, trainer._buffered_inputs) == ((3, saved["buffered_inputs"]) if restored else (0, None))
    assert ("GRPOTrainer generates a new batch" in caplog.text) != restored


# -------------------------------------------------------------------------------------------------------------------
# Resuming from a checkpoint that is not there, or that has nothing left to train
# -------------------------------------------------------------------------------------------------------------------


def test_a_missing_checkpoint_is_one_clear_error_before_anything_is_read(toy_cold_dir, tmp_path, caplog):
    trainer = small_run(toy_cold_dir, tmp_path / "out", counting_reward())
    missing = tmp_path / "out" / "checkpoint-7"
    with pytest.raises(FileNotFoundError) as info:
        trainer.train(resume_from_checkpoint=str(missing))
    assert str(info.value) == (
        f"resume_from_checkpoint='{missing}': no such folder. Pass a checkpoint-N folder a run saved in its "
        "output_dir, or resume_from_checkpoint=True for the latest one in args.output_dir."
    )
    assert "pass-rate memory" not in caplog.text  # the misleading line that came first
    assert trainer.state.global_step == 0


@pytest.mark.slow
@pytest.mark.parametrize("max_steps", [1, 2])
def test_resuming_at_or_past_max_steps_trains_nothing_and_keeps_the_checkpoint_s_model(
    toy_cold_dir, tmp_path, caplog, max_steps
):
    first = small_run(toy_cold_dir, tmp_path / "out", counting_reward(), max_steps=2)
    first.train()
    checkpoint = tmp_path / "out" / "checkpoint-2"
    saved = {name: tensor.clone() for name, tensor in first.model.state_dict().items()}

    reward = counting_reward()
    resumed = small_run(toy_cold_dir, tmp_path / "again", reward, max_steps=max_steps)
    result = resumed.train(resume_from_checkpoint=str(checkpoint))
    # Trainer checks max_steps only after a step: it would have trained step 3. Nothing is generated here.
    assert reward.calls == 0 and result.global_step == 2 and resumed.state.global_step == 2
    expected = (
        f"Nothing to train: {checkpoint} was saved at step 2 and max_steps is {max_steps}; the model and trainer "
        "state are the checkpoint's. Raise max_steps to train on from it."
    )
    assert expected in caplog.text
    for name, tensor in resumed.model.state_dict().items():  # what save_model would write: the checkpoint's weights
        assert torch.equal(tensor, saved[name]), name
    assert len(resumed.state.log_history) == len(
        json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    )
