"""The offline GPU check (`python -m trl_ada.gpu_check`, `scripts/gpu_smoke.sh`) in its CPU dry mode: argument
parsing, the offline toy model, real training runs through each backend, and the report's format.

What only a GPU can show (CUDA, bf16, peak GPU memory, vLLM) is not checked here."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trl_ada.tools import gpu_check
from trl_ada.tools.gpu_check import RunResult, parse_args, report

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
RUN_ROW = re.compile(
    r"^  (?P<backend>transformers|continuous_batching) +(?P<method>GRPO|Ada rounds|Ada streaming) +(?P<steps>\d+) +"
    r"(?P<seconds>\d+\.\d{3}) +(?P<loss>\S+) +(?P<finite>yes|NO) +(?P<moved>yes|NO) +(?P<peak>-|\d+) +"
    r"(?P<samples>\d+\.\d\d)$"
)
RATIO_ROW = re.compile(r"^  step time, Ada / GRPO: (?P<name>\S+ / Ada (rounds|streaming)) +(?P<ratio>\d+\.\d\d)x$")


def dry_run_args(cache_dir, *extra):
    return [
        "--device",
        "cpu",
        "--steps",
        "1",
        "--prompts",
        "2",
        "--model",
        "cold",
        "--cache-dir",
        str(cache_dir),
        *extra,
    ]


def test_arguments_defaults_and_errors(capsys):
    args = parse_args([])
    assert (args.device, args.dtype, args.steps, args.prompts, args.model) == ("cuda", "bf16", 8, 16, "warm")
    assert args.backends == ["transformers", "continuous_batching"]
    args = parse_args(["--device", "cpu", "--backends", "continuous_batching"])
    assert (args.dtype, args.backends) == ("fp32", ["continuous_batching"])
    assert parse_args(["--dtype", "fp16"]).dtype == "fp16"
    for bad, message in [
        (["--steps", "0"], "must be >= 1"),
        (["--backends", "vllm"], "--backends: vllm; choose from transformers, continuous_batching"),
        (["--device", "cpu", "--dtype", "bf16"], "--dtype bf16 needs --device cuda"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
    ]:
        with pytest.raises(SystemExit) as info:
            parse_args(bad)
        assert info.value.code == 2
        assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_without_cuda_the_default_device_exits_2_and_names_the_dry_run(capsys):
    assert gpu_check.main([]) == 2
    assert "--device cpu" in capsys.readouterr().err


def test_coin_reward_gives_the_untrained_model_a_signal():
    completions = [[{"role": "assistant", "content": str(i)}] for i in range(200)]
    rewards = gpu_check.coin_reward(completions)
    assert set(rewards) == {0.0, 1.0} and 80 < sum(rewards) < 120
    assert gpu_check.coin_reward([str(i) for i in range(200)]) == rewards  # text or messages: the same reward


def test_continuous_batching_is_skipped_with_a_note_on_old_transformers(monkeypatch):
    import transformers

    runs, skipped = gpu_check.plan(["transformers", "continuous_batching"])
    assert [(r.backend, r.method) for r in runs] == [
        ("transformers", "GRPO"),
        ("transformers", "Ada rounds"),
        ("continuous_batching", "GRPO"),
        ("continuous_batching", "Ada rounds"),
        ("continuous_batching", "Ada streaming"),
    ]
    assert skipped == []
    monkeypatch.setattr(transformers, "__version__", "5.7.0")
    runs, skipped = gpu_check.plan(["transformers", "continuous_batching"])
    assert [r.backend for r in runs] == ["transformers", "transformers"]
    assert skipped == ["continuous batching: transformers 5.7.0 < 5.8.0"]


def result(method, seconds, losses=(0.5,), moved=True, backend="transformers"):
    finite = all(x == x for x in losses)
    return RunResult(
        backend, method, 2, [9.0, seconds], seconds, list(losses), finite, moved, float(moved), 123.4, 4.0
    )


def test_report_names_each_failure_and_the_ratios():
    results = [result("GRPO", 0.5), result("Ada rounds", 1.0, losses=(0.1, float("nan")), moved=False)]
    lines = list(report({"device": "cuda:0 X"}, results, ["continuous batching: why"], 3.2))
    assert lines[0] == "trl-ada GPU check" and lines[1] == "  device    cuda:0 X"
    rows = [RUN_ROW.match(line) for line in lines]
    assert [(m["method"], m["finite"], m["moved"], m["peak"]) for m in rows if m] == [
        ("GRPO", "yes", "yes", "123"),
        ("Ada rounds", "NO", "NO", "123"),
    ]
    assert RATIO_ROW.match(lines[-3])["ratio"] == "2.00"  # 1.0 s / 0.5 s, the median step times
    assert lines[-2] == "  skipped: continuous batching: why"
    assert lines[-1] == (
        "FAIL: 2 runs, transformers / Ada rounds: loss not finite ([0.1, nan]), weights did not move (3 s in all)"
    )
    assert result("GRPO", 0.5).passed and not results[1].passed
    short = RunResult("transformers", "GRPO", 3, [1.0], 1.0, [0.5], True, True, 1.0, None, 4.0)
    assert not short.passed  # a run that stopped early


@pytest.mark.slow
def test_cpu_dry_run_of_the_script_trains_every_backend_and_prints_the_report(toy_cold_dir, tmp_path):
    """scripts/gpu_smoke.sh on CPU: the check's five real training runs of one step, each checked, the report
    parsed back, its JSON twin compared with it, and the vLLM part skipped."""
    env = {**ENV, "OUTPUT_DIR": str(tmp_path / "out"), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_smoke.sh"), *dry_run_args(toy_cold_dir.parent)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.startswith("== part 1: python -m trl_ada.gpu_check --device cpu --steps 1")
    assert done.stdout.rstrip().endswith("gpu_smoke.sh: part 2 (vLLM) skipped: a --device cpu dry run")
    report_text = (tmp_path / "out" / "gpu_check.txt").read_text()
    assert report_text in done.stdout
    lines = report_text.splitlines()
    assert lines[0] == "trl-ada GPU check"
    header = {line[2:11].strip(): line[12:] for line in lines[1:6]}
    assert list(header) == ["device", "versions", "trl seams", "model", "workload"]
    assert header["device"] == "cpu, fp32 (dry run: no GPU)"
    assert re.search(r"torch \S+, transformers \S+, trl 1\.1[4-6]\.\d+, accelerate \S+", header["versions"])
    assert header["trl seams"].startswith("TRL 1.1") and "(supported)" in header["trl seams"]
    assert header["model"].startswith("toy (untrained, coin reward), 2 layers, hidden 128")
    assert header["workload"].startswith("1 step x 2 prompts, group 4")
    assert lines[7].split() == "backend method steps s/step last loss finite moved peak MiB samples/prompt".split()
    rows = [m for m in map(RUN_ROW.match, lines) if m]
    assert [(m["backend"], m["method"]) for m in rows] == [
        ("transformers", "GRPO"),
        ("transformers", "Ada rounds"),
        ("continuous_batching", "GRPO"),
        ("continuous_batching", "Ada rounds"),
        ("continuous_batching", "Ada streaming"),
    ]
    for m in rows:
        assert (m["steps"], m["finite"], m["moved"], m["peak"]) == ("1", "yes", "yes", "-")  # no GPU memory on CPU
        assert float(m["seconds"]) > 0
    assert [m["samples"] for m in rows if m["method"] == "GRPO"] == ["4.00", "4.00"]  # its group, nothing more
    ratios = [m for m in map(RATIO_ROW.match, lines) if m]
    assert [m["name"] for m in ratios] == [
        "transformers / Ada rounds",
        "continuous_batching / Ada rounds",
        "continuous_batching / Ada streaming",
    ]
    assert re.fullmatch(r"PASS: 5 runs, every loss finite, every run moved the weights \(\d+ s in all\)", lines[-1])

    data = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert data["passed"] and data["device"] == "cpu" and data["dtype"] == "fp32" and data["skipped"] == []
    assert [r["method"] for r in data["runs"]] == [m["method"] for m in rows]
    for run, m in zip(data["runs"], rows, strict=True):
        assert run["passed"] and run["peak_memory_mib"] is None and len(run["step_seconds"]) == 1
        assert run["weight_change"] > 0 and f"{run['median_step_seconds']:.3f}" == m["seconds"]
        assert f"{run['samples_per_prompt']:.2f}" == m["samples"]
    for m in ratios:  # each printed ratio is the runs' median step times divided
        backend, method = m["name"].split(" / ")
        times = {(r["backend"], r["method"]): r["median_step_seconds"] for r in data["runs"]}
        assert f"{times[backend, method] / times[backend, 'GRPO']:.2f}" == m["ratio"]
