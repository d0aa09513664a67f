"""Run by test_streaming_server.py under `accelerate launch` with 2 CPU processes; writes rank<r>.json.

Both processes stream against the stand-in server at argv[3] (vLLM server mode, timeout 1 s, 1 retry). Step 1 runs
against an answering server; at its end rank 0 switches the server to silent and both ranks wait for it, so step 2
must fail on both ranks with the timeout error.
"""

import json
import os
import sys
import time
import urllib.request

import torch.distributed as dist
from datasets import Dataset
from mp_common import cpu_config, shut_down
from standin_vllm_server import attach
from transformers import AutoTokenizer, TrainerCallback

from trl_ada import ReinforceAdaTrainer

out_dir, model_dir, url = sys.argv[1], sys.argv[2], sys.argv[3]
rank = int(os.environ["RANK"])  # set by the launcher
RIGHT = 40  # as in test_streaming_server.py


def right_first(completion_ids, **kwargs):
    return [float(bool(ids) and ids[0] == RIGHT) for ids in completion_ids]


class SilenceAfterFirstStep(TrainerCallback):
    def __init__(self):
        self.silenced_at = None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            if rank == 0:
                body = json.dumps({"mode": "silent"}).encode()
                urllib.request.urlopen(urllib.request.Request(f"{url}/standin/mode", data=body), timeout=10).read()
            dist.barrier()
            self.silenced_at = time.monotonic()


args = cpu_config(
    out_dir,
    per_device_train_batch_size=8,
    samples_per_round=4,
    max_rounds=4,
    max_completion_length=8,
    max_steps=2,
    sampling_strategy="positive",
    use_transformers_continuous_batching=True,  # switched to vLLM server mode by `attach`
    rollout_schedule="streaming",
)
dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{i}+1"}]} for i in range(16)])
callback = SilenceAfterFirstStep()
trainer = ReinforceAdaTrainer(
    model_dir,
    right_first,
    args=args,
    train_dataset=dataset,
    processing_class=AutoTokenizer.from_pretrained(model_dir),
    callbacks=[callback],
)
attach(trainer, url, timeout=1.0, retries=1)
result = {}
try:
    trainer.train()
except Exception as error:
    result["error"] = f"{type(error).__name__}: {error}"
    result["seconds_in_failed_step"] = time.monotonic() - (callback.silenced_at or time.monotonic())
    raise
finally:
    result["steps"] = trainer.state.global_step
    logs = [{k: v for k, v in row.items() if k.startswith("ada/")} for row in trainer.state.log_history]
    result["logs"] = [row for row in logs if row]
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(result, f)

shut_down()
