"""Peak memory of one training step: Reinforce-Ada with a large per-prompt budget against GRPO, on the toy model.

Each configuration runs in its own process. The reward is always 0, so every Ada prompt draws its whole budget
(the worst case for memory), while GRPO keeps the same number of completions per prompt. For each measured step
(the first step is a warm-up: lazy initialisation, optimizer state):

- peak RSS: the process's resident-set high-water mark during the step, minus its RSS when the step began (Linux:
  the mark is reset through /proc/self/clear_refs, and freed heap is returned with malloc_trim first);
- Python heap peak: tracemalloc's peak during the step (Python objects: pools, token-id lists, texts; tensors are
  allocated outside Python's allocator and show up in RSS only).

    python benchmarks/memory.py                      # 16 prompts x 4 kept, Ada budget 8 x 4 = 32, 32 new tokens
    python benchmarks/memory.py --samples-per-round 16 --max-rounds 4
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe, machine_info


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status (Linux only).")


def measure(args: argparse.Namespace) -> dict:
    """Train `args.steps` steps of one configuration in this process and return its per-step peaks."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from trl_ada import ReinforceAdaConfig, ReinforceAdaTrainer
    from trl_ada.toy import toy_model_dir

    libc = ctypes.CDLL("libc.so.6")
    steps: list[dict] = []

    class PeakMemory(TrainerCallback):
        def on_step_begin(self, *_, **__):
            gc.collect()
            libc.malloc_trim(0)
            Path("/proc/self/clear_refs").write_text("5")  # reset the RSS high-water mark
            self.start_kb = _status_kb("VmRSS")
            tracemalloc.start()

        def on_step_end(self, *_, **__):
            python_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            steps.append(
                {
                    "rss_start_mb": self.start_kb / 1024,
                    "rss_peak_delta_mb": (_status_kb("VmHWM") - self.start_kb) / 1024,
                    "python_peak_mb": python_peak / 2**20,
                }
            )

    def always_wrong(completions, **kwargs):
        return [0.0] * len(completions)

    model_dir = toy_model_dir(warmup=False)
    ada = args.child == "ada"
    group = args.num_generations if args.child != "grpo-budget" else args.samples_per_round * args.max_rounds
    config = ReinforceAdaConfig(
        output_dir=str(Path(args.output_dir) / args.child),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        seed=0,
        per_device_train_batch_size=args.prompts * group,
        num_generations=group,
        max_completion_length=args.max_completion_length,
        max_steps=args.steps,
        sampling_strategy="balanced" if ada else "uniform",
        samples_per_round=args.samples_per_round,
        max_rounds=args.max_rounds,
    )
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{i}+{i % 7}"}]} for i in range(512)])
    trainer = ReinforceAdaTrainer(
        str(model_dir),
        always_wrong,
        args=config,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=[PeakMemory()],
    )
    trainer.train()
    logged = [row for row in trainer.state.log_history if "ada/samples_per_prompt" in row]
    measured = steps[1:]  # the first step is the warm-up
    return {
        "config": args.child,
        "kept_per_prompt": group,
        "generated_per_prompt": logged[-1]["ada/samples_per_prompt"],
        "rss_start_mb": max(s["rss_start_mb"] for s in measured),
        "rss_peak_delta_mb": max(s["rss_peak_delta_mb"] for s in measured),
        "python_peak_mb": max(s["python_peak_mb"] for s in measured),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--num-generations", type=int, default=4, help="kept completions per prompt")
    parser.add_argument("--samples-per-round", type=int, default=8)
    parser.add_argument("--max-rounds", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4, help="steps per configuration, the first one a warm-up")
    parser.add_argument("--output-dir", default="outputs/memory-benchmark")
    parser.add_argument("--child", choices=["grpo", "ada", "grpo-budget"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args)))
        return

    rows = {}
    for child in ("grpo", "ada", "grpo-budget"):
        command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--child", child]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        output = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
        rows[child] = json.loads(output.strip().splitlines()[-1])
    names = {
        "grpo": f"GRPO n={args.num_generations}",
        "ada": f"Ada balanced {args.samples_per_round}x{args.max_rounds}, keeps {args.num_generations}",
        "grpo-budget": f"GRPO n={args.samples_per_round * args.max_rounds}",
    }
    print(f"{args.prompts} prompts per step, max_completion_length={args.max_completion_length}, reward always 0")
    print(f"machine: {describe(machine_info())}\n")
    print("| config | generated/prompt | kept/prompt | peak RSS above step start (MB) | Python heap peak (MB) |")
    print("| ------ | ---------------- | ----------- | ------------------------------ | --------------------- |")
    for child, row in rows.items():
        print(
            f"| {names[child]} | {row['generated_per_prompt']:.0f} | {row['kept_per_prompt']} "
            f"| {row['rss_peak_delta_mb']:.1f} | {row['python_peak_mb']:.2f} |"
        )
    ada, grpo = rows["ada"], rows["grpo"]
    print(
        f"\nAda / GRPO n={args.num_generations} (same kept completions): peak RSS x"
        f"{ada['rss_peak_delta_mb'] / grpo['rss_peak_delta_mb']:.2f}, Python heap peak x"
        f"{ada['python_peak_mb'] / grpo['python_peak_mb']:.2f}"
    )


if __name__ == "__main__":
    main()
