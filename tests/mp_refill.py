"""Run by test_multiprocess_refill.py under `accelerate launch --num_processes 2`: refill and prompt selection on
two processes. Each rank writes the rows its side stream handed out, the keys it trained on, its memory and its
logged metrics."""

import json
import os
import sys

from datasets import Dataset
from mp_common import cpu_config, shut_down
from transformers import AutoTokenizer

from trl_ada import ReinforceAdaTrainer
from trl_ada.core.prompt_stream import SidePrompts

out_dir, model_dir = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])  # set by the launcher
drawn, trained = [], []
parent_draw = SidePrompts.draw


def recording_draw(self, rng):
    row = parent_draw(self, rng)
    drawn.append(row["key"])
    return row


SidePrompts.draw = recording_draw


def reward(completions, key, **kwargs):
    """z*: always wrong, o*: always right, m*: 1, 0, 1, 0, ... within a call."""
    rewards, seen = [], {}
    for k in key:
        seen[k] = seen.get(k, -1) + 1
        rewards.append(float(seen[k] % 2 == 0) if k[0] == "m" else float(k[0] == "o"))
    return rewards


class Recording(ReinforceAdaTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        trained.append([row["key"] for row in inputs])
        return output


keys = [f"z{i}" for i in range(8)] + [f"o{i}" for i in range(8)] + [f"m{i}" for i in range(16)]
args = cpu_config(
    out_dir,
    per_device_train_batch_size=16,
    max_completion_length=3,
    max_steps=3,
    sampling_strategy="uniform",
    refill=True,
    max_refills_per_step=12,
    prompt_selection="pass_rate",
)
dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{k}?"}], "key": k} for k in keys])
trainer = Recording(
    model_dir, reward, args=args, train_dataset=dataset, processing_class=AutoTokenizer.from_pretrained(model_dir)
)
trainer.train()
logs = [
    {k: v for k, v in row.items() if k.startswith("ada/") or k == "frac_reward_zero_std"}
    for row in trainer.state.log_history
]
with open(f"{out_dir}/rank{rank}.json", "w") as f:
    json.dump(
        {
            "drawn": drawn,
            "trained": trained,
            "memory": trainer.ada_memory.state_dict(),
            "logs": [row for row in logs if row],
        },
        f,
    )

shut_down()
