"""`python -m trl_ada.gpu_async_check`: `AsyncGRPOTrainer.train()` with `AdaRolloutWorker`, end to end, on a GPU.

NOT YET RUN ON A GPU. What has run is its CPU dry run
(`--dry-run`, tests/test_gpu_async_check.py): the recipe is read, the configs are built and checked, the data and
rewards are loaded and the worker is built with `AdaRolloutWorker.from_trainer_args`; no trainer, no server.

It reads an asynchronous recipe (default `async-balanced`, recipes/async-balanced.yaml; top-level keys are
`AsyncGRPOConfig` fields plus `model_name_or_path`, `dataset_name` and `reward_funcs`, and `ada:` holds
`AdaRolloutConfig` fields), applies the command line's overrides, builds the worker from the trainer's own config and
trains a few steps against a vLLM server, printing every `ada/*` metric the trainer logs. Exit status 0 when the run
trained the steps asked for, logged `ada/samples_per_prompt` and every loss was finite; 1 otherwise; 2 on bad
arguments or a missing prerequisite.

Needs, beyond trl-ada: a CUDA GPU (Hopper: `AsyncGRPOTrainer`'s tree attention loads the FlashAttention-3 kernel
`kernels-community/flash-attn3` through the `kernels` package, from the Hub or its cache), vLLM, and a server started
as TRL's async GRPO expects (`VLLM_SERVER_DEV_MODE=1`; `trl vllm-serve` adds the weight-transfer settings):

    VLLM_SERVER_DEV_MODE=1 CUDA_VISIBLE_DEVICES=1 trl vllm-serve --model Qwen/Qwen2.5-0.5B-Instruct --port 8000
    CUDA_VISIBLE_DEVICES=0 python -m trl_ada.gpu_async_check --model Qwen/Qwen2.5-0.5B-Instruct \\
        --dataset-name builtin:toy --reward-funcs toy --max-steps 5

`--serve` starts that server itself (on `--server-gpu`) and stops it at the end.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Any

from transformers import TrainerCallback

DEFAULT_RECIPE = "async-balanced"
SCRIPT_KEYS = ("model_name_or_path", "dataset_name", "dataset_config", "reward_funcs")
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


@dataclass
class AsyncRecipe:
    """An asynchronous recipe, split: the script's keys, `AsyncGRPOConfig`'s and `AdaRolloutConfig`'s."""

    script: dict[str, Any]
    trainer: dict[str, Any]
    ada: dict[str, Any] = field(default_factory=dict)


def load_recipe(name: str) -> AsyncRecipe:
    """Read a recipe by packaged name (`async-balanced`) or path, and check every key belongs somewhere."""
    import pathlib

    import yaml
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from ..adapter.async_worker import AdaRolloutConfig
    from .catalog import find

    path = pathlib.Path(name)
    data = yaml.safe_load((path if path.is_file() else find(name, "recipes")).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{name}: a recipe is a YAML mapping.")
    ada = data.pop("ada", None) or {}
    script = {key: data.pop(key) for key in SCRIPT_KEYS if key in data}
    trainer_fields = {f.name for f in fields(AsyncGRPOConfig)}
    ada_fields = {f.name for f in fields(AdaRolloutConfig)}
    unknown = sorted(set(data) - trainer_fields) + [f"ada.{k}" for k in sorted(set(ada) - ada_fields)]
    if unknown:
        raise ValueError(f"{name}: not AsyncGRPOConfig, AdaRolloutConfig or script keys: {', '.join(unknown)}.")
    return AsyncRecipe(script, data, ada)


def build_configs(recipe: AsyncRecipe, overrides: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """`AsyncGRPOConfig` and `AdaRolloutConfig` from a recipe, with `overrides` on the trainer's fields; the Ada
    settings are checked against the group size."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from ..adapter.async_worker import AdaRolloutConfig

    args = AsyncGRPOConfig(**{**recipe.trainer, **(overrides or {})})
    ada = AdaRolloutConfig(**recipe.ada)
    ada.validate(args.num_generations)
    return args, ada


class AdaMetricsPrinter(TrainerCallback):
    """Prints each logged step's `ada/*` metrics (and the loss) on one line, and keeps them for the summary."""

    def __init__(self) -> None:
        self.logged: list[dict[str, float]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if not logs:
            return
        ada = {k: v for k, v in logs.items() if k.startswith("ada/")}
        self.logged.append({**ada, **({"loss": logs["loss"]} if "loss" in logs else {})})
        if ada or "loss" in logs:
            parts = [f"step {state.global_step}"] + [f"{k}={v:.4g}" for k, v in sorted(ada.items())]
            if "loss" in logs:
                parts.append(f"loss={logs['loss']:.4g}")
            print("  " + "  ".join(parts), flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trl_ada.gpu_async_check",
        description="AsyncGRPOTrainer with the Reinforce-Ada rollout worker, a few steps against a vLLM server.",
    )
    parser.add_argument("--config", default=DEFAULT_RECIPE, help="asynchronous recipe: packaged name or path")
    parser.add_argument("--model", help="overrides the recipe's model_name_or_path")
    parser.add_argument("--dataset-name", help="overrides dataset_name (e.g. builtin:toy)")
    parser.add_argument("--reward-funcs", nargs="+", help="overrides reward_funcs (e.g. toy, math)")
    parser.add_argument("--max-steps", type=_positive, default=5, help="optimizer steps (default 5)")
    parser.add_argument("--max-inflight-tasks", type=_positive, help="overrides max_inflight_tasks")
    parser.add_argument("--vllm-url", help="overrides vllm_server_base_url")
    parser.add_argument("--output-dir", help="trainer output folder (default: a temporary folder)")
    parser.add_argument(
        "--serve", action="store_true", help="start `trl vllm-serve` for the model, stop it at the end"
    )
    parser.add_argument("--server-gpu", default="1", help="CUDA_VISIBLE_DEVICES of the server --serve starts")
    parser.add_argument("--port", type=_positive, default=8000, help="the port --serve uses (default 8000)")
    parser.add_argument("--dry-run", action="store_true", help="read, build and check everything; no trainer, no GPU")
    parser.add_argument("--use-cpu", action="store_true", help="with --dry-run: build the config for a CPU (no bf16)")
    return parser.parse_args(argv)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _overrides(args: argparse.Namespace, output_dir: str) -> dict[str, Any]:
    out: dict[str, Any] = {"max_steps": args.max_steps, "output_dir": output_dir}
    if args.max_inflight_tasks:
        out["max_inflight_tasks"] = args.max_inflight_tasks
    if args.serve:
        out["vllm_server_base_url"] = f"http://localhost:{args.port}"
    if args.vllm_url:
        out["vllm_server_base_url"] = args.vllm_url
    if args.use_cpu:
        out.update(use_cpu=True, bf16=False)
    return out


def _script(recipe: AsyncRecipe, args: argparse.Namespace) -> dict[str, Any]:
    script = dict(recipe.script)
    if args.model:
        script["model_name_or_path"] = args.model
    if args.dataset_name:
        script["dataset_name"] = args.dataset_name
    if args.reward_funcs:
        script["reward_funcs"] = args.reward_funcs
    return script


def _prerequisites() -> list[str]:
    """What is missing for a GPU run (empty: nothing)."""
    import importlib.util

    import torch

    missing = []
    if not torch.cuda.is_available():
        missing.append("a CUDA GPU (torch.cuda.is_available() is False)")
    elif torch.cuda.get_device_capability() < (9, 0):
        major, minor = torch.cuda.get_device_capability()
        missing.append(f"a Hopper GPU for FlashAttention-3 (this one is sm_{major}{minor})")
    for package in ("kernels", "vllm"):
        if importlib.util.find_spec(package) is None:
            missing.append(f"the {package} package")
    return missing


def _start_server(model: str, args: argparse.Namespace) -> subprocess.Popen:
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "CUDA_VISIBLE_DEVICES": args.server_gpu}
    command = ["trl", "vllm-serve", "--model", model, "--port", str(args.port)]
    print(f"  server    {' '.join(command)} (CUDA_VISIBLE_DEVICES={args.server_gpu})", flush=True)
    server = subprocess.Popen(command, env=env)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"trl vllm-serve exited with status {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://localhost:{args.port}/health", timeout=5):
                return server
        except OSError:
            time.sleep(5)
    server.terminate()
    raise RuntimeError("trl vllm-serve did not answer /health within 600 s")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from ..adapter.async_worker import AdaRolloutWorker
    from .train_data import load_data, load_rewards

    try:
        recipe = load_recipe(args.config)
    except (ValueError, LookupError, OSError) as error:
        print(f"gpu_async_check: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not args.dry_run:
        missing = _prerequisites()
        if missing:
            print("gpu_async_check: missing " + "; ".join(missing) + " (--dry-run checks the rest)", file=sys.stderr)
            return EXIT_USAGE
    output_dir = args.output_dir or tempfile.mkdtemp(prefix="gpu_async_check_")
    script = _script(recipe, args)
    config, ada = build_configs(recipe, _overrides(args, output_dir))
    model = script["model_name_or_path"]
    data_args = SimpleNamespace(
        dataset_name=script.get("dataset_name"),
        dataset_config=script.get("dataset_config"),
        dataset_streaming=False,
        reward_funcs=script.get("reward_funcs"),
        reward_model_name_or_path=None,
    )
    train = load_data(data_args, SimpleNamespace(datasets=None))["train"]
    rewards = load_rewards(data_args)
    worker = AdaRolloutWorker.from_trainer_args(config, ada, model_name=model, dataset=train, reward_funcs=rewards)
    kwargs = worker._loop_kwargs
    print("trl-ada asynchronous GPU check" + (" (dry run: no trainer, no server)" if args.dry_run else ""))
    print(f"  recipe    {args.config}; model {model}; {len(train)} prompts; rewards {script.get('reward_funcs')}")
    print(
        f"  worker    num_generations {kwargs['num_generations']}, max_inflight_tasks {kwargs['max_inflight_tasks']}, "
        f"max_tokens {kwargs['max_tokens']}, temperature {kwargs['temperature']}, server {kwargs['vllm_server_url']}"
    )
    print(
        f"  ada       {ada.sampling_strategy}, rounds of {ada.samples_per_round}, at most {ada.max_rounds}, "
        f"{ada.max_in_flight or ada.samples_per_round} in flight per prompt, baseline {ada.advantage_baseline}, "
        f"scale_rewards {ada.scale_rewards}"
    )
    print(f"  training  {config.max_steps} steps, output {config.output_dir}", flush=True)
    if args.dry_run:
        return EXIT_OK

    from trl.experimental.async_grpo import AsyncGRPOTrainer

    server = _start_server(model, args) if args.serve else None
    printer = AdaMetricsPrinter()
    try:
        trainer = AsyncGRPOTrainer(
            model,
            reward_funcs=rewards,
            args=config,
            train_dataset=train,
            processing_class=kwargs["processing_class"],
            callbacks=[printer],
            rollout_worker=worker,
        )
        start = time.monotonic()
        trainer.train()
        steps = trainer.state.global_step
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
    losses = [row["loss"] for row in printer.logged if "loss" in row]
    saw_ada = any("ada/samples_per_prompt" in row for row in printer.logged)
    passed = steps == config.max_steps and saw_ada and bool(losses) and all(math.isfinite(x) for x in losses)
    print(
        f"{'PASS' if passed else 'FAIL'}: {steps} of {config.max_steps} steps, ada/* metrics logged: "
        f"{'yes' if saw_ada else 'no'}, losses finite: {'yes' if losses and all(map(math.isfinite, losses)) else 'no'}"
        f" ({time.monotonic() - start:.0f} s)"
    )
    return EXIT_OK if passed else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
