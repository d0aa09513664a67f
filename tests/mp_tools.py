"""Run by test_multiprocess_tools.py under `accelerate launch --num_processes 2`.

The calculator tool task of test_tools_environments.py, with a scripted policy that always calls the tool on rank 0
(right, resolved in round 1 under the positive rule) and never on rank 1 (wrong, every round): rank 0 pads its later
rounds, whose rollouts run TRL's tool loop too, and both ranks must log the same step-wide `tools/*` values.
"""

import json
import os
import sys
from unittest.mock import patch

import test_tools_environments as tool_task
from datasets import Dataset
from mp_common import cpu_config, shut_down
from transformers import AutoTokenizer

from trl_ada import ReinforceAdaTrainer

out_dir, model_dir = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])  # set by the launcher
tool_task.PASS_RATE.update({key: 1.0 if rank == 0 else 0.0 for key in tool_task.PASS_RATE})

args = cpu_config(
    out_dir,
    per_device_train_batch_size=8,
    max_completion_length=200,
    max_steps=1,
    sampling_strategy="positive",
    samples_per_round=4,
    max_rounds=3,
    shuffle_dataset=False,
)
dataset = Dataset.from_list([row for row in tool_task.tool_dataset() for _ in range(2)])
tokenizer = AutoTokenizer.from_pretrained(model_dir)
trainer = ReinforceAdaTrainer(
    model_dir, tool_task.answer_reward, args=args, train_dataset=dataset, processing_class=tokenizer,
    tools=[tool_task.multiply],
)  # fmt: skip
policy = tool_task.ScriptedPolicy(tokenizer)
with patch.object(trainer.model, "generate", side_effect=policy):
    trainer.train()
logs = [row for row in trainer.state.log_history if "tools/call_frequency" in row]
with open(f"{out_dir}/rank{rank}.json", "w") as f:
    json.dump({"logs": logs, "first_turns": policy.first_turns, "calls": policy.calls}, f)

shut_down()
