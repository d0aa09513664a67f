"""Run by test_multiprocess_est.py under `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo).

Reinforce-Ada-Est over 4 prompts, 2 per process per step: each process allocates its own prompts' budget from the
shared pass-rate memory, and every process must end with the same memory. Each rank writes what its reward function
scored (per prompt key), its generation calls and its final memory.
"""

import json
import os
import sys
from collections import Counter

from datasets import Dataset
from mp_common import cpu_config, shut_down
from transformers import AutoTokenizer
from trl import GRPOTrainer

from trl_ada import ReinforceAdaTrainer

out_dir, model_dir = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])  # set by the launcher
rows_per_call = []
scored = Counter()
positives = Counter()
parent_generate = GRPOTrainer._generate


def recording_generate(self, prompts):
    if self.model.training:
        rows_per_call.append(len(prompts))
    return parent_generate(self, prompts)


GRPOTrainer._generate = recording_generate


def key_reward(completions, key, **kwargs):
    rewards = [1.0 if k in "ac" else 0.0 for k in key]  # "a" and "c" always right, "b" and "d" never
    scored.update(key)
    positives.update(k for k, r in zip(key, rewards, strict=True) if r > 0.5)
    return rewards


args = cpu_config(
    out_dir,
    per_device_train_batch_size=8,
    max_completion_length=3,
    max_steps=2,
    seed=0,
    sampling_strategy="estimate",
    samples_per_prompt_mean=8,
    min_samples_per_prompt=4,
    max_samples_per_prompt=16,
    pass_rate_decay=1.0,  # the memory then holds plain sums, checkable against what was scored
    prompt_id_column="key",
)
dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{k}?"}], "key": k} for k in "abcd"])
trainer = ReinforceAdaTrainer(
    model_dir, key_reward, args=args, train_dataset=dataset, processing_class=AutoTokenizer.from_pretrained(model_dir)
)
trainer.train()
logs = [{k: v for k, v in row.items() if k.startswith("ada/")} for row in trainer.state.log_history]
with open(f"{out_dir}/rank{rank}.json", "w") as f:
    json.dump(
        {
            "rows_per_call": rows_per_call,
            "scored": scored,
            "positives": positives,
            "memory": trainer.ada_memory.state_dict(),
            "logs": [row for row in logs if row],
        },
        f,
    )

shut_down()
