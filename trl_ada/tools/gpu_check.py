"""`python -m trl_ada.gpu_check`: GRPO and Reinforce-Ada a few steps each on one device, offline, with a report.

Takes the toy model shipped with the package, or builds it locally (`trl_ada.toy`: no model hub, no dataset hub), then
trains it with plain `GRPOTrainer` and with `ReinforceAdaTrainer` (balanced, rounds of 8, at most 4) through each
generation backend the installed transformers has: plain `model.generate`, and continuous batching (transformers >=
5.8), where Reinforce-Ada runs both under rounds and under `rollout_schedule="streaming"`. Each run starts from the
same weights. It checks that every logged loss is finite and that training moved the weights, and reports the median
step time (the first step, which pays for CUDA's start-up, left out when there are more), Ada / GRPO step-time ratios
and each run's peak GPU memory. Exit status 0 when every run passed, 1 when one did not, 2 on bad arguments.

On a GPU (the default, `--device cuda`) training is in bf16 mixed precision (`--dtype`); `--device cpu` runs the
same code in float32, which is how the tests check the report on a machine without a GPU. vLLM is not used here
(scripts/gpu_smoke.sh runs it, when it is installed). Installs nothing and downloads nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import json
import math
import os
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# No hub: fail at once instead of waiting on a network that is not there.
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")

from transformers import TrainerCallback  # noqa: E402  (after the offline settings)

BACKENDS = ("transformers", "continuous_batching")
# transformers' default sizes the KV cache from free memory (gigabytes to zero-fill on a CPU, most of a GPU, which
# would swamp the peak-memory reading): the check sizes it from the model and the step instead
# (`trl_ada.adapter.engines.continuous_batching.cache_size`), for every row a run can have in flight at once.
ADA_BUDGET = 8 * 4  # samples_per_round x max_rounds: the most draws of one prompt
MIN_CB_TRANSFORMERS = "5.8.0"  # TRL's `use_transformers_continuous_batching` needs it
NEW_TOKENS = 8  # max_completion_length


@dataclass(frozen=True)
class RunSpec:
    backend: str  # one of BACKENDS
    method: str  # "GRPO", "Ada rounds" or "Ada streaming"

    @property
    def label(self) -> str:
        return f"{self.backend.replace('_', ' ')} / {self.method}"


@dataclass
class RunResult:
    backend: str
    method: str
    steps: int
    step_seconds: list[float]
    median_step_seconds: float
    losses: list[float]
    loss_finite: bool
    weights_moved: bool
    weight_change: float  # L2 norm of (after - before), over every parameter
    peak_memory_mib: float | None  # CUDA only
    samples_per_prompt: float
    passed: bool = field(init=False)

    def __post_init__(self) -> None:
        self.passed = self.loss_finite and self.weights_moved and len(self.step_seconds) == self.steps


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trl_ada.gpu_check",
        description="Train GRPO and Reinforce-Ada a few steps each on the offline toy model, through each generation "
        "backend transformers has (plain generate, continuous batching), and report step-time ratios (Ada / GRPO), "
        "peak GPU memory, and whether every loss is finite and every run moved the weights.",
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a dry run of the same code")
    parser.add_argument("--steps", type=positive_int, default=8, help="optimizer steps per run (default 8)")
    parser.add_argument("--prompts", type=positive_int, default=16, help="prompts per step (default 16)")
    parser.add_argument(
        "--dtype",
        choices=("bf16", "fp16", "fp32"),
        default=None,
        help="mixed precision: bf16 on CUDA by default (fp16 for GPUs without bf16), fp32 on CPU (the only choice)",
    )
    parser.add_argument(
        "--model",
        choices=("warm", "cold"),
        default="warm",
        help="warm (default): the toy model after its supervised warm-up (shipped with the package for seed 0, "
        "else built once, about 30 s on CPU, then cached), trained on the arithmetic reward; cold: the untrained "
        "model, trained on a reward that is 1 for about half the completions (a hash of their text), so that it has a "
        "gradient (fast: for dry runs)",
    )
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help=f"comma-separated, from {', '.join(BACKENDS)} (default: both; continuous batching is skipped, with a "
        f"note, on transformers older than {MIN_CB_TRANSFORMERS})",
    )
    parser.add_argument(
        "--cache-dir", default=None, help="toy model cache (default: $TRL_ADA_CACHE or ~/.cache/trl_ada)"
    )
    parser.add_argument("--output-dir", default=None, help="trainer output folders (default: a temporary folder)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results to PATH as JSON")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.backends = comma_choices(parser, "--backends", args.backends, BACKENDS)
    resolve_dtype(parser, args)
    return args


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def comma_choices(parser: argparse.ArgumentParser, flag: str, text: str, known: Sequence[str]) -> list[str]:
    """The names of a comma-separated option, each one of `known` (else a usage error naming the unknown ones)."""
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        parser.error(f"{flag}: {','.join(unknown) or 'none given'}; choose from {', '.join(known)}")
    return chosen


def resolve_dtype(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`args.dtype`'s default for `args.device` (bf16 on CUDA, fp32 on CPU); a usage error for a half precision on
    CPU."""
    if args.dtype is None:
        args.dtype = "bf16" if args.device == "cuda" else "fp32"
    if args.device == "cpu" and args.dtype != "fp32":
        parser.error(f"--dtype {args.dtype} needs --device cuda; the CPU dry run trains in fp32")


def coin_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1 for about half the completions, by a hash of their text: a reward with signal for the untrained model."""
    texts = [c if isinstance(c, str) else (c[-1].get("content", "") if c else "") for c in completions]
    return [float(zlib.crc32(str(text).encode()) % 2) for text in texts]


def versions() -> dict[str, str]:
    found = {}
    for name in ("torch", "transformers", "trl", "accelerate", "datasets", "peft", "vllm"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def continuous_batching_available() -> tuple[bool, str]:
    """(available, why not) for TRL's `use_transformers_continuous_batching`."""
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__) < Version(MIN_CB_TRANSFORMERS):
        return False, f"transformers {transformers.__version__} < {MIN_CB_TRANSFORMERS}"
    try:
        from transformers.generation import ContinuousBatchingConfig  # noqa: F401
    except ImportError as error:
        return False, f"transformers {transformers.__version__} has no ContinuousBatchingConfig ({error})"
    return True, ""


def plan(backends: Sequence[str]) -> tuple[list[RunSpec], list[str]]:
    """The runs to do, and a note for each backend skipped."""
    runs, skipped = [], []
    for backend in backends:
        if backend == "continuous_batching":
            available, why = continuous_batching_available()
            if not available:
                skipped.append(f"continuous batching: {why}")
                continue
            methods = ("GRPO", "Ada rounds", "Ada streaming")
        else:
            methods = ("GRPO", "Ada rounds")
        runs.extend(RunSpec(backend, method) for method in methods)
    return runs, skipped


class StepTimer(TrainerCallback):
    """Wall time of each optimizer step (generation, scoring, backward, update), the device synchronised at both
    ends."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self.synchronize = synchronize
        self.seconds: list[float] = []
        self._started = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self.synchronize()
        self._started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.synchronize()
        self.seconds.append(time.perf_counter() - self._started)


def train_one(spec: RunSpec, model_dir: str, args: argparse.Namespace, output_dir: str) -> RunResult:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from ..toy import arithmetic_reward, make_arithmetic_dataset

    cuda = args.device == "cuda"
    reward = arithmetic_reward if args.model == "warm" else coin_reward
    dataset = make_arithmetic_dataset(args.steps * args.prompts, seed=args.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    prompt_length = max(len(tokenizer.apply_chat_template(p, add_generation_prompt=True)) for p in dataset["prompt"])
    config, trainer_class = _run_config(spec, args, output_dir, model.config, prompt_length)
    before = {name: p.detach().float().cpu().clone() for name, p in model.named_parameters()}
    trainer = trainer_class(model, reward, args=config, train_dataset=dataset, processing_class=tokenizer)
    for noisy in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(noisy)
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    timer = StepTimer(synchronize)
    trainer.add_callback(timer)
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    result = _run_result(spec, args, trainer, before, timer.seconds, peak)
    del trainer, model, before
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return result


def _run_config(
    spec: RunSpec, args: argparse.Namespace, output_dir: str, model_config: Any, prompt_length: int
) -> tuple[Any, type]:
    """The run's trainer config and class: the same settings for every run but its backend and method."""
    from trl import GRPOConfig, GRPOTrainer

    from .. import ReinforceAdaConfig, ReinforceAdaTrainer

    name = f"{spec.backend}-{spec.method.replace(' ', '-')}"
    settings = timing_run_settings(os.path.join(output_dir, name), args, learning_rate=2e-4)
    settings.update(per_device_train_batch_size=args.prompts * 4, num_generations=4, max_completion_length=NEW_TOKENS)
    if spec.backend == "continuous_batching":
        rows = args.prompts * (4 if spec.method == "GRPO" else ADA_BUDGET)
        settings.update(continuous_batching_settings(model_config, rows, prompt_length, NEW_TOKENS, args.dtype))
    if spec.method == "GRPO":
        return GRPOConfig(**settings), GRPOTrainer
    schedule = "streaming" if spec.method == "Ada streaming" else "rounds"
    ada = dict(sampling_strategy="balanced", samples_per_round=8, max_rounds=4, rollout_schedule=schedule)
    return ReinforceAdaConfig(**settings, **ada), ReinforceAdaTrainer


def timing_run_settings(output_dir: str, args: argparse.Namespace, learning_rate: float) -> dict[str, Any]:
    """The trainer settings every run of a timing check shares: `args`' device, precision, steps and seed, one log
    row a step and nothing else logged or saved, temperature 1, no KL term, no std scaling, a constant learning
    rate."""
    return dict(
        output_dir=output_dir,
        use_cpu=args.device != "cuda",
        bf16=args.dtype == "bf16",
        fp16=args.dtype == "fp16",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=args.seed,
        max_steps=args.steps,
        temperature=1.0,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        beta=0.0,
        scale_rewards="none",
    )


def continuous_batching_settings(
    model_config: Any, rows: int, prompt_length: int, completion_length: int, dtype: str
) -> dict[str, Any]:
    """`use_transformers_continuous_batching` with a KV cache sized from the model for `rows` sequences in flight
    (`trl_ada.adapter.engines.continuous_batching.cache_size`), in the installed transformers' names."""
    from ..adapter.compat import continuous_batching_cache
    from ..adapter.engines.continuous_batching import cache_size

    size = cache_size(model_config, rows, prompt_length, completion_length, dtype_bytes=4 if dtype == "fp32" else 2)
    cache = continuous_batching_cache(size.num_blocks, size.page_size, size.max_batch_tokens)
    return dict(use_transformers_continuous_batching=True, transformers_continuous_batching_config=cache)


def _run_result(
    spec: RunSpec,
    args: argparse.Namespace,
    trainer: Any,
    before: dict[str, Any],
    step_seconds: list[float],
    peak_memory_mib: float | None,
) -> RunResult:
    """What a trained run measured: its losses, step times, and how far the weights moved from ``before``."""
    # Against the starting weights cast to each parameter's final dtype: the continuous-batching path casts the model
    # to bf16 or fp16 for generation (as TRL's does), and that rounding alone is no training.
    after = {name: p.detach().cpu() for name, p in trainer.model.named_parameters()}
    change = math.sqrt(
        sum(float((after[n].float() - p.to(after[n].dtype).float()).pow(2).sum()) for n, p in before.items())
    )
    losses = [float(row["loss"]) for row in trainer.state.log_history if "loss" in row]
    samples = [row["ada/samples_per_prompt"] for row in trainer.state.log_history if "ada/samples_per_prompt" in row]
    timed = step_seconds[1:] if len(step_seconds) > 1 else step_seconds
    return RunResult(
        backend=spec.backend,
        method=spec.method,
        steps=args.steps,
        step_seconds=step_seconds,
        median_step_seconds=statistics.median(timed) if timed else float("nan"),
        losses=losses,
        loss_finite=bool(losses) and all(math.isfinite(loss) for loss in losses),
        weights_moved=change > 0,
        weight_change=change,
        peak_memory_mib=peak_memory_mib,
        samples_per_prompt=statistics.fmean(samples) if samples else 4.0,
    )


def ratios(results: Sequence[RunResult]) -> dict[str, float]:
    """Median step time of each Ada run over the GRPO run of the same backend."""
    grpo = {r.backend: r.median_step_seconds for r in results if r.method == "GRPO"}
    return {
        f"{r.backend} / {r.method}": r.median_step_seconds / grpo[r.backend]
        for r in results
        if r.method != "GRPO" and grpo.get(r.backend)
    }


def device_description(device: str, dtype: str) -> str:
    import torch

    if device == "cpu":
        return f"cpu, {dtype} (dry run: no GPU)"
    return f"cuda:{torch.cuda.current_device()} {torch.cuda.get_device_name()}, {dtype} mixed precision"


def report(
    header: dict[str, str], results: Sequence[RunResult], skipped: Sequence[str], seconds: float
) -> Iterator[str]:
    yield "trl-ada GPU check"
    for key, value in header.items():
        yield f"  {key:<9} {value}"
    yield ""
    columns = f"  {'backend':<20} {'method':<14} {'steps':>5} {'s/step':>8} {'last loss':>10} {'finite':>6} "
    yield columns + f"{'moved':>6} {'peak MiB':>9} {'samples/prompt':>14}"
    for r in results:
        peak = "-" if r.peak_memory_mib is None else f"{r.peak_memory_mib:.0f}"
        last = f"{r.losses[-1]:.4g}" if r.losses else "-"
        yield (
            f"  {r.backend:<20} {r.method:<14} {r.steps:>5} {r.median_step_seconds:>8.3f} {last:>10} "
            f"{_yes(r.loss_finite):>6} {_yes(r.weights_moved):>6} {peak:>9} {r.samples_per_prompt:>14.2f}"
        )
    yield ""
    for name, ratio in ratios(results).items():
        yield f"  step time, Ada / GRPO: {name:<36} {ratio:.2f}x"
    for note in skipped:
        yield f"  skipped: {note}"
    failed = [r for r in results if not r.passed]
    verdict = "PASS" if results and not failed else "FAIL"
    detail = (
        "every loss finite, every run moved the weights"
        if not failed
        else "; ".join(f"{r.backend} / {r.method}: {_why(r)}" for r in failed)
    )
    if not results:
        detail = "no run"
    yield f"{verdict}: {len(results)} runs, {detail} ({seconds:.0f} s in all)"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def _why(result: RunResult) -> str:
    reasons = []
    if not result.loss_finite:
        reasons.append(f"loss not finite ({result.losses})")
    if not result.weights_moved:
        reasons.append("weights did not move")
    if len(result.step_seconds) != result.steps:
        reasons.append(f"{len(result.step_seconds)} of {result.steps} steps ran")
    return ", ".join(reasons)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    problem = _device_problem(args)
    if problem is not None:
        print(f"gpu_check: {problem}", file=sys.stderr)
        return 2

    from ..adapter.compat import seam_report
    from ..toy import toy_model_dir

    built = time.perf_counter()
    model_dir = str(toy_model_dir(args.cache_dir, warmup=args.model == "warm", seed=args.seed))
    built = time.perf_counter() - built
    import transformers

    model_config = transformers.AutoConfig.from_pretrained(model_dir)
    found = versions()
    runs, skipped = plan(args.backends)
    header = {
        "device": device_description(args.device, args.dtype),
        "versions": ", ".join(f"{name} {version}" for name, version in found.items()),
        "trl seams": "; ".join(seam_report()),
        "model": f"toy ({'after its warm-up, arithmetic reward' if args.model == 'warm' else 'untrained, coin reward'}"
        f"), {model_config.num_hidden_layers} layers, hidden {model_config.hidden_size}, built or loaded in "
        f"{built:.1f} s: {model_dir}",
        "workload": f"{_count(args.steps, 'step')} x {_count(args.prompts, 'prompt')}, group 4, {NEW_TOKENS} new "
        "tokens; Ada: balanced, rounds of 8, at most 4; same start and prompts for every run",
    }
    results = []
    with _output_dir(args.output_dir) as output_dir:
        for spec in runs:
            print(f"gpu_check: training {spec.label} ...", file=sys.stderr, flush=True)
            results.append(train_one(spec, model_dir, args, output_dir))
    seconds = time.perf_counter() - started
    lines = list(report(header, results, skipped, seconds))
    print("\n".join(lines), flush=True)
    passed = bool(results) and all(r.passed for r in results)
    if args.json:
        _write_json(args, header, found, results, skipped, passed, seconds)
    return 0 if passed else 1


def _device_problem(args: argparse.Namespace) -> str | None:
    """Why the device asked for cannot run the check, or None when it can."""
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        return (
            "no CUDA device visible to torch (check CUDA_VISIBLE_DEVICES, the driver, a CUDA build of torch); "
            "`--device cpu` runs the same code on the CPU as a dry run."
        )
    if args.dtype == "bf16" and not torch.cuda.is_bf16_supported():
        return "this GPU has no bf16; pass --dtype fp16."
    return None


def _write_json(
    args: argparse.Namespace,
    header: dict[str, str],
    found: dict[str, str],
    results: Sequence[RunResult],
    skipped: Sequence[str],
    passed: bool,
    seconds: float,
) -> None:
    payload = {
        "header": header,
        "versions": found,
        "device": args.device,
        "dtype": args.dtype,
        "runs": [asdict(r) for r in results],
        "ratios": ratios(results),
        "skipped": skipped,
        "passed": passed,
        "seconds": seconds,
    }
    with open(args.json, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2)
        handle.write("\n")


@contextlib.contextmanager
def _output_dir(path: str | None) -> Iterator[str]:
    if path is not None:
        os.makedirs(path, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="trl-ada-gpu-check-") as tmp:
        yield tmp


if __name__ == "__main__":
    sys.exit(main())
