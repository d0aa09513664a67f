"""Resuming Reinforce-Ada-Est from a checkpoint: the pass-rate memory and the next allocation match a straight run."""

import json
import random
from collections import defaultdict

import pytest
from test_trainer import keyed_dataset, make_trainer
from transformers import TrainerCallback

import trl_ada.core.allocation
from trl_ada.core.allocation import allocate
from trl_ada.core.memory import STATE_FILE

pytestmark = pytest.mark.slow


def step_keyed_reward(completions, key, trainer_state, **kwargs):
    """A reward fixed by (prompt, step, draw number within the step), whatever the model writes: the runs compared
    below differ only in how they reached step 3, not in what they are told."""
    step = trainer_state.global_step
    drawn = step_keyed_reward.drawn
    rewards = []
    for k in key:
        j = drawn[(k, step)]
        drawn[(k, step)] += 1
        rewards.append(float(random.Random(f"{k}-{step}-{j}").random() < {"a": 0.9, "b": 0.5, "c": 0.2, "d": 0.05}[k]))
    return rewards


class StopAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def run(model_dir, out_dir, monkeypatch, resume=None, stop_at=None):
    """Train up to 4 steps of 2 prompts, one epoch over 8 rows that hold each of 4 prompts twice; return the
    allocations made (memory p_hat in, samples out) and the trainer. With seed 0 TRL's sampler visits the rows in the
    order 4 0 7 3 2 5 1 6, so the steps draw (a, b), (c, d), (a, c), (b, d): steps 3 and 4 revisit prompts.

    The resume point stays inside the epoch; resuming in later epochs is covered in test_resume.py."""
    step_keyed_reward.drawn = defaultdict(int)
    made = []

    def recording_allocate(p_hat, *args, **kwargs):
        sizes = allocate(p_hat, *args, **kwargs)
        made.append((list(p_hat), sizes))
        return sizes

    monkeypatch.setattr(trl_ada.core.allocation, "allocate", recording_allocate)
    trainer = make_trainer(
        model_dir,
        out_dir,
        step_keyed_reward,
        keyed_dataset("bbadacdc"),
        max_steps=4,
        sampling_strategy="estimate",
        samples_per_prompt_mean=8,
        min_samples_per_prompt=4,
        max_samples_per_prompt=16,
        save_strategy="steps",
        save_steps=2,
    )
    if stop_at is not None:
        trainer.add_callback(StopAt(stop_at))
    trainer.train(resume_from_checkpoint=resume)
    return made, trainer


def test_two_steps_resume_two_steps_equals_four_straight(toy_cold_dir, tmp_path, monkeypatch):
    straight, straight_trainer = run(toy_cold_dir, tmp_path / "straight", monkeypatch)
    first_half, first_trainer = run(toy_cold_dir, tmp_path / "split", monkeypatch, stop_at=2)
    checkpoint = tmp_path / "split" / "checkpoint-2"
    saved = json.loads((checkpoint / STATE_FILE).read_text())
    assert saved == first_trainer.ada_memory.state_dict() and len(saved["records"]) == 4  # a, b, c, d
    second_half, resumed_trainer = run(toy_cold_dir, tmp_path / "split", monkeypatch, resume=str(checkpoint))

    assert len(straight) == 4 and len(first_half) == 2 and len(second_half) == 2
    assert first_half == straight[:2]
    # Step 3 revisits a prompt of steps 1-2: the memory, restored from the checkpoint, is no longer the prior ...
    p_hat_step3, sizes_step3 = second_half[0]
    assert all(p != pytest.approx(1 / 17) for p in p_hat_step3)
    assert len(set(sizes_step3)) > 1
    # ... and gives exactly the straight run's pass rates and allocation, at step 3 and at step 4.
    assert second_half == straight[2:]
    assert resumed_trainer.ada_memory.state_dict() == straight_trainer.ada_memory.state_dict()
