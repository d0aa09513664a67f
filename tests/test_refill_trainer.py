"""Refill (DAPO's dynamic sampling) and pass-rate prompt selection in the trainer, on the tiny toy model."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset
from test_streaming_cb import SMALL_CACHE
from test_trainer import ada_logs, keyed_dataset, make_trainer

from trl_ada import ReinforceAdaConfig, ReinforceAdaTrainer
from trl_ada.core.prompt_stream import STREAM_STATE_FILE

pytestmark = pytest.mark.slow

# "z*" prompts are never right and "o*" always: their groups carry no signal. Each "m*" prompt's completions get
# 1, 0, 1, 0, ... in the order they are scored, so 4 completions scored in a row hold two of each.
NO_SIGNAL = ["z0", "z1", "z2", "o0", "o1", "o2"]
MIXED = ["m0", "m1", "m2", "m3", "m4", "m5"]


class ScriptedReward:
    """Rewards by key (see above); remembers every (key, completion) it scored."""

    __name__ = "scripted"

    def __init__(self):
        self.scored: set[tuple[str, str]] = set()
        self.count: dict[str, int] = {}

    def __call__(self, completions, key, **kwargs):
        rewards = []
        for completion, k in zip(completions, key, strict=True):
            self.scored.add((k, completion[0]["content"]))
            if k.startswith("m"):
                self.count[k] = self.count.get(k, -1) + 1
                rewards.append(float(self.count[k] % 2 == 0))
            else:
                rewards.append(float(k.startswith("o")))
        return rewards


class Recording(ReinforceAdaTrainer):
    """Keeps, per generation batch, the keys before and after the step and what the step handed on."""

    def _generate_and_score_completions(self, inputs):
        before = [row["key"] for row in inputs]
        output = super()._generate_and_score_completions(inputs)
        rows = len(inputs)
        tokenizer = self.processing_class
        self.records = getattr(self, "records", [])
        self.records.append(
            {
                "before": before,
                "after": [row["key"] for row in inputs],
                "prompt_ids": [tokenizer.decode(ids, skip_special_tokens=True) for ids in output["prompt_ids"]],
                "logged_prompts": list(self._logs["prompt"])[-rows:],
                "logged_completions": list(self._logs["completion"])[-rows:],
                "logged_rewards": list(self._logs["rewards"]["scripted"])[-rows:],
                "advantages": output["advantages"].tolist(),
            }
        )
        return output


def refill_trainer(model_dir, tmp_path, keys, **overrides):
    reward = ScriptedReward()
    settings = dict(sampling_strategy="uniform", refill=True, per_device_train_batch_size=16, max_steps=3)
    settings.update(overrides)
    trainer = make_trainer(model_dir, tmp_path, reward, keyed_dataset(keys), trainer_cls=Recording, **settings)
    return trainer, reward


def test_refill_keeps_rows_and_positions_and_hands_on_the_replacement(toy_cold_dir, tmp_path):
    trainer, reward = refill_trainer(toy_cold_dir, tmp_path, NO_SIGNAL + MIXED, max_refills_per_step=20)
    trainer.train()
    assert len(trainer.records) == 3
    for record in trainer.records:
        before, after = record["before"], record["after"]
        assert len(after) == 16 and len(record["prompt_ids"]) == 16 and len(record["advantages"]) == 16
        for start in range(0, 16, 4):
            group = slice(start, start + 4)
            assert len(set(after[group])) == 1
            key = after[start]
            if before[start].startswith("m"):
                assert key == before[start]  # a group with signal keeps its prompt and its place
            else:
                assert key.startswith("m")  # the stream held mixed prompts: every empty group was refilled
            for row in range(start, start + 4):
                assert f"\n{key}?\n" in record["prompt_ids"][row]  # the loss sees the replacement's prompt
                # and so does the table (TRL 1.14 logs the templated text, later releases the messages)
                logged = record["logged_prompts"][row]
                assert f"{key}?" in logged if isinstance(logged, str) else logged[-1]["content"] == f"{key}?"
                completion = record["logged_completions"][row]
                completion = completion if isinstance(completion, str) else completion[0]["content"]
                assert (key, completion) in reward.scored  # a completion drawn for that prompt
            assert sorted(record["logged_rewards"][group]) == [0.0, 0.0, 1.0, 1.0]  # that prompt's own rewards
            assert any(a != 0 for a in record["advantages"][group])
    for log in ada_logs(trainer):
        assert log["frac_reward_zero_std"] == 0.0 and log["ada/unfilled"] == 0.0
        assert log["ada/refills"] >= 0 and log["ada/refill_samples"] == 4 * log["ada/refills"]


def test_dapo_reports_what_it_could_not_fill(toy_cold_dir, tmp_path):
    # Nothing in the stream has signal: every slot stays empty, whatever the limit; the limit caps the refills.
    trainer, _ = refill_trainer(toy_cold_dir, tmp_path, NO_SIGNAL, max_refills_per_step=3, max_steps=2)
    trainer.train()
    for log in ada_logs(trainer):
        assert log["ada/unfilled"] == 4 and log["ada/refills"] == 3
        assert log["ada/refill_samples"] == 12 and log["frac_reward_zero_std"] == 1.0
    assert trainer.records[0]["after"] != trainer.records[0]["before"]  # three slots hold their last replacement


def test_positive_rule_with_refill_and_streaming(toy_cold_dir, tmp_path):
    trainer, _ = refill_trainer(
        toy_cold_dir,
        tmp_path,
        NO_SIGNAL + MIXED,
        sampling_strategy="positive",
        samples_per_round=4,
        max_rounds=2,
        max_refills_per_step=20,
        max_steps=2,
        rollout_schedule="streaming",
        use_transformers_continuous_batching=True,
        transformers_continuous_batching_config=SMALL_CACHE,
    )
    trainer.train()
    for record in trainer.records:
        for start in range(0, 16, 4):
            key = record["after"][start]
            assert key.startswith("m") and f"\n{key}?\n" in record["prompt_ids"][start]
    for log in ada_logs(trainer):
        assert log["ada/unfilled"] == 0 and log["frac_reward_zero_std"] == 0.0


def test_resume_trains_the_same_prompts_as_a_straight_run(toy_cold_dir, tmp_path):
    settings = dict(
        prompt_selection="pass_rate",
        max_refills_per_step=2,
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
    )
    # 16 rows, two per key: the 4 steps are one epoch, so GRPOTrainer's sampler gives the resumed run the same order
    # (it starts each epoch's permutation afresh on resume) and the prompts repeat for selection.
    keys = (NO_SIGNAL[:4] + MIXED[:4]) * 2
    straight, _ = refill_trainer(toy_cold_dir, tmp_path / "straight", keys, **settings)
    straight.train()
    checkpoint = tmp_path / "straight" / "checkpoint-2"
    states = json.loads((checkpoint / STREAM_STATE_FILE).read_text())["processes"]
    assert len(states) == 1 and states[0]["position"] + 16 * states[0]["epoch"] > 0  # the stream moved
    resumed, _ = refill_trainer(toy_cold_dir, tmp_path / "resumed", keys, **settings)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert [r["after"] for r in resumed.records] == [r["after"] for r in straight.records[2:]]
    assert resumed.ada_side_prompts.stream.state_dict() == straight.ada_side_prompts.stream.state_dict()
    skipped = sum(log.get("ada/skipped", 0) for log in ada_logs(straight))
    assert skipped > 0  # selection did replace prompts: each key comes twice in the epoch


@pytest.mark.parametrize("floor", [1e-9, 1.0])
def test_selection_skips_prompts_the_memory_knows_and_keeps_unseen_ones(toy_cold_dir, tmp_path, floor):
    trainer, _ = refill_trainer(
        toy_cold_dir,
        tmp_path,
        NO_SIGNAL + MIXED,
        refill=False,
        prompt_selection="pass_rate",
        selection_floor=floor,
        max_steps=2,
    )
    for key in NO_SIGNAL:  # four all-right or all-wrong visits each: P(no signal) > 0.9
        trainer.ada_memory.update(trainer._memory_key([{"role": "user", "content": f"{key}?"}], {}), 16, 16)
    trainer.train()
    skipped = [log["ada/skipped"] for log in ada_logs(trainer)]
    for record, count in zip(trainer.records, skipped, strict=True):
        before, after = record["before"][::4], record["after"][::4]
        if floor == 1.0:  # a floor of 1 samples every prompt
            assert after == before and count == 0
            continue
        # Known prompts are skipped, unseen ones never; a replacement is the next stream prompt that passes, and
        # with 6 known prompts among 12 the stream cannot offer 8 known ones in a row.
        assert [k in NO_SIGNAL for k in before] == [a != b for a, b in zip(before, after, strict=True)]
        assert all(k in MIXED for k in after)
        assert count == sum(k in NO_SIGNAL for k in before)
    if floor < 1.0:
        assert sum(skipped) > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"refill": True, "sampling_strategy": "estimate"}, "needs an exit rule"),
        ({"prompt_selection": "pass_rate", "selection_floor": 0.0}, "selection_floor must be in"),
        ({"prompt_selection": "sometimes"}, "prompt_selection='sometimes'"),
        ({"selection_threshold": 1.5}, "selection_threshold must be in"),
        ({"max_refills_per_step": -1}, "max_refills_per_step must be"),
    ],
)
def test_config_errors(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        ReinforceAdaConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            bf16=False,
            num_generations=4,
            per_device_train_batch_size=8,
            **overrides,
        )


def test_refill_refuses_datasets_it_cannot_draw_from(toy_cold_dir, tmp_path):
    images = Dataset.from_list([{"prompt": "a", "key": "m0", "images": None}] * 4)
    with pytest.raises(NotImplementedError, match="without images"):
        make_trainer(toy_cold_dir, tmp_path, ScriptedReward(), images, refill=True)
    iterable = keyed_dataset(MIXED).to_iterable_dataset()
    with pytest.raises(ValueError, match="map-style"):
        make_trainer(toy_cold_dir, tmp_path, ScriptedReward(), iterable, refill=True, max_steps=1)


def test_resume_needs_the_stream_of_every_process(toy_cold_dir, tmp_path):
    trainer, _ = refill_trainer(toy_cold_dir, tmp_path, MIXED)
    state = trainer.ada_side_prompts.stream.state_dict()
    (tmp_path / STREAM_STATE_FILE).write_text(json.dumps({"processes": [state, state]}))
    with pytest.raises(ValueError, match="2 processes; this run has 1"):
        trainer.ada_side_prompts.load_stream(tmp_path)
    (tmp_path / STREAM_STATE_FILE).write_text(json.dumps({"processes": [{**state, "position": 3}]}))
    assert trainer.ada_side_prompts.load_stream(tmp_path)
    assert trainer.ada_side_prompts.stream.position == 3
