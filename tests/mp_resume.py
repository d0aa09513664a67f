"""Run by test_multiprocess_resume.py under `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo).

Train 3 steps with `num_iterations=2` (each generation batch trains two optimizer steps), saving every step, with
refill and prompt selection (one side stream per process); then resume from checkpoint-1, saved inside the first
generation batch, to step 3. Each rank writes, for both runs, what each micro-step handed to the loss, the memory,
its side stream's position and the logged metrics.
"""

import json
import os
import sys

from datasets import Dataset
from mp_common import cpu_config, shut_down
from transformers import AutoTokenizer

from trl_ada import ReinforceAdaTrainer

out_dir, model_dir = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])  # set by the launcher


class Recording(ReinforceAdaTrainer):
    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if self.model.training:
            decode = self.processing_class.batch_decode
            self.trained.append(
                [self.state.global_step, decode(inputs["prompt_ids"]), decode(inputs["completion_ids"])]
            )
        return inputs


def reward(completion_ids, key, **kwargs):
    """z*: never right (refill replaces them); the others: right when the first completion token is even."""
    rows = zip(completion_ids, key, strict=True)
    return [0.0 if k[0] == "z" else float(bool(ids) and ids[0] % 2 == 0) for ids, k in rows]


def run(name, resume=None):
    keys = [f"z{i}" for i in range(8)] + [f"m{i}" for i in range(8)]
    args = cpu_config(
        f"{out_dir}/{name}",
        per_device_train_batch_size=8,
        max_completion_length=3,
        max_steps=3,
        seed=0,
        num_iterations=2,
        save_strategy="steps",
        save_steps=1,
        sampling_strategy="uniform",
        refill=True,
        prompt_selection="pass_rate",
    )
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{k}?"}], "key": k} for k in keys])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = Recording(model_dir, reward, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.trained = []
    trainer.train(resume_from_checkpoint=resume)
    logs = {
        row["step"]: {k: v for k, v in row.items() if "seconds" not in k and k != "step_time"}
        for row in trainer.state.log_history
        if "loss" in row
    }
    return {
        "trained": trainer.trained,
        "memory": trainer.ada_memory.state_dict(),
        "stream": trainer.ada_side_prompts.stream.state_dict(),
        "logs": logs,
        "folders": sorted(os.listdir(f"{out_dir}/{name}")),
    }


straight = run("straight")
resumed = run("resumed", resume=f"{out_dir}/straight/checkpoint-1")
with open(f"{out_dir}/rank{rank}.json", "w") as f:
    json.dump(
        {"straight": straight, "resumed": resumed, "saved": sorted(os.listdir(f"{out_dir}/straight/checkpoint-1"))}, f
    )

shut_down()
