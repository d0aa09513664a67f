"""Run by test_multiprocess_faults.py under `accelerate launch` with 2 CPU processes; writes rank<r>.json.

Modes:
- `uneven`: per round, the ranks have different numbers of active prompts, and rank 0 ends with none.
- `fail_on_rank1`: the reward raises on rank 1 only, in round 2; each rank records the error it raised.
"""

import json
import os
import sys

from datasets import Dataset
from mp_common import cpu_config, shut_down
from transformers import AutoTokenizer

from trl_ada import ReinforceAdaTrainer

out_dir, model_dir, mode = sys.argv[1], sys.argv[2], sys.argv[3]
rank = int(os.environ["RANK"])  # set by the launcher
served: dict[str, int] = {}  # completions scored so far, per prompt text
first_seen: list[str] = []  # this rank's prompts, in the order the rounds first showed them


def uneven_reward(prompts, completions, **kwargs):
    """Rank 0: its first prompt is always right (done in round 1), its second right only from its 9th completion
    on (done in round 3). Rank 1: never right (active for all 4 rounds)."""
    rewards = []
    for prompt in prompts:
        text = prompt[-1]["content"]
        if text not in first_seen:
            first_seen.append(text)
        count = served[text] = served.get(text, 0) + 1
        second = first_seen.index(text) == 1
        rewards.append(float(rank == 0 and (not second or count > 8)))
    return rewards


def fail_on_rank1(prompts, completions, **kwargs):
    served["calls"] = served.get("calls", 0) + 1
    if rank == 1 and served["calls"] == 2:
        raise ZeroDivisionError("grader crashed")
    return [0.0] * len(prompts)


args = cpu_config(
    out_dir,
    per_device_train_batch_size=8,
    samples_per_round=4,
    max_rounds=4,
    max_completion_length=3,
    max_steps=1,
    sampling_strategy="positive",
)
dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{i}+1"}]} for i in range(16)])
trainer = ReinforceAdaTrainer(
    model_dir,
    uneven_reward if mode == "uneven" else fail_on_rank1,
    args=args,
    train_dataset=dataset,
    processing_class=AutoTokenizer.from_pretrained(model_dir),
)
result = {}
try:
    trainer.train()
except Exception as error:
    result["error"] = f"{type(error).__name__}: {error}"
    raise
else:
    logs = [{k: v for k, v in row.items() if k.startswith("ada/")} for row in trainer.state.log_history]
    result["logs"] = [row for row in logs if row]
finally:
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(result, f)

shut_down()
