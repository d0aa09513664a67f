"""Run by test_multiprocess.py under `accelerate launch --num_processes 2 --cpu`.

Rank 0's prompts are always right (resolved in round 1 under the positive rule), rank 1's never (4 rounds): both
ranks must still make the same generation calls with the same number of rows, and log the same global metrics. The
reward logs its call's mean with `log_metric`, padding rows included.
"""

import json
import os
import sys

from datasets import Dataset
from mp_common import cpu_config, shut_down
from transformers import AutoTokenizer
from trl import GRPOTrainer

from trl_ada import ReinforceAdaTrainer

out_dir, model_dir = sys.argv[1], sys.argv[2]
round_sizing = sys.argv[3] if len(sys.argv) > 3 else "fixed"
rank = int(os.environ["RANK"])  # set by the launcher
rows_per_call = []
parent_generate = GRPOTrainer._generate


def recording_generate(self, prompts):
    if self.model.training:
        rows_per_call.append(len(prompts))
    return parent_generate(self, prompts)


GRPOTrainer._generate = recording_generate


def rank_reward(completions, log_metric, **kwargs):
    rewards = [1.0 if rank == 0 else 0.0] * len(completions)
    log_metric("right", sum(rewards) / len(rewards))  # this call's mean, padding rows included, as a user would log it
    return rewards


args = cpu_config(
    out_dir,
    per_device_train_batch_size=8,
    max_completion_length=3,
    max_steps=2,
    sampling_strategy="positive",
    round_sizing=round_sizing,
)
dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{i}+1"}]} for i in range(16)])
trainer = ReinforceAdaTrainer(
    model_dir,
    rank_reward,
    args=args,
    train_dataset=dataset,
    processing_class=AutoTokenizer.from_pretrained(model_dir),
)
trainer.train()
logs = [{k: v for k, v in row.items() if k.startswith("ada/")} for row in trainer.state.log_history]
logs = [row for row in logs if row]
right = [row["right"] for row in trainer.state.log_history if "right" in row]
with open(f"{out_dir}/rank{rank}.json", "w") as f:
    json.dump({"rows_per_call": rows_per_call, "logs": logs, "right": right}, f)

shut_down()
