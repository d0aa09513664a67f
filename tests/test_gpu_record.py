"""The first GPU run, as the docs print it, against its files (benchmarks/results/gpu/h200-2026-11-28): the check's
report in docs/gpu-check.md against its JSON, the step-time table against its JSON lines, and the ratios the
README, benchmarks/README.md and benchmarks/results/gpu/README.md quote."""

import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "results" / "gpu" / "h200-2026-11-28"
GPU_DOC = (ROOT / "docs" / "gpu-check.md").read_text()
CHECK = json.loads((RUN / "gpu_check.json").read_text())
STEP_TIME = {row["run"]: row for row in map(json.loads, (RUN / "step_time_05b.jsonl").read_text().splitlines())}
RATIO = {key: STEP_TIME[key]["median_step_s"] / STEP_TIME["grpo-4"]["median_step_s"] for key in STEP_TIME}


def section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def h200_report() -> list[str]:
    block = section(GPU_DOC, "## The first GPU run: NVIDIA H200, 2026-11-28")
    report = block[block.index("```\ntrl-ada GPU check") + 4 :]
    return report[: report.index("```")].splitlines()


def test_the_docs_print_the_checks_report_as_its_json_and_log_have_it():
    lines = h200_report()
    assert "\n".join(lines) in (RUN / "gpu_check.log").read_text()  # verbatim from the log
    header = {line[2:11].strip(): line[12:] for line in lines[1:6]}
    assert header == CHECK["header"]
    rows = [line.split() for line in lines if line.startswith(("  transformers ", "  continuous_batching "))]
    assert len(rows) == len(CHECK["runs"]) == 5
    for cells, run in zip(rows, CHECK["runs"], strict=True):
        backend, method, rest = cells[0], " ".join(cells[1:-7]), cells[-7:]
        assert (backend, method) == (run["backend"], run["method"])
        steps, seconds, last, finite, moved, peak, samples = rest
        assert int(steps) == run["steps"] == len(run["step_seconds"])
        assert seconds == f"{statistics.median(run['step_seconds'][1:]):.3f}" == f"{run['median_step_seconds']:.3f}"
        assert last == f"{run['losses'][-1]:.4g}" and (finite, moved) == ("yes", "yes")
        assert peak == f"{run['peak_memory_mib']:.0f}" and samples == f"{run['samples_per_prompt']:.2f}"
    ratios = dict(re.findall(r"step time, Ada / GRPO: (\S+ / Ada \w+) +(\d+\.\d\d)x", "\n".join(lines)))
    assert ratios == {name: f"{value:.2f}" for name, value in CHECK["ratios"].items()}
    verdict = f"PASS: 5 runs, every loss finite, every run moved the weights ({CHECK['seconds']:.0f} s in all)"
    assert lines[-1] == verdict


def test_the_warnings_the_docs_count_are_in_the_log():
    log = (RUN / "gpu_check.log").read_text()
    count = log.count("attempted to free blocks for non-existent request_id")
    assert count == 36
    assert f"among them {count} warnings" in " ".join(GPU_DOC.split())


def table_rows(text: str, first_cell: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith(f"| {first_cell}")
    ]


def test_the_step_time_table_is_its_json_lines():
    rows = {
        (cells[0], cells[1]): cells
        for cells in table_rows(GPU_DOC, "")
        if len(cells) == 6 and cells[1] in ("`model.generate`", "continuous batching")
    }
    expected = {
        ("`grpo-4`", "`model.generate`"): "grpo-4",
        ("`seq-balanced-8x4` (rounds of 8, at most 4: the paper's defaults)", "`model.generate`"): "ada-bal-8x4",
        ("`seq-positive-4x2` (rounds of 4, at most 2)", "`model.generate`"): "ada-pos-4x2",
        ("`grpo-4`", "continuous batching"): "cb-grpo-4",
    }
    for key, run in expected.items():
        _, _, seconds, ratio, samples, peak = rows[key]
        data = STEP_TIME[run]
        steps = ", ".join(f"{s:.1f}" for s in data["step_seconds"])
        assert seconds == f"{data['median_step_s']:.2f} ({steps})"
        assert data["median_step_s"] == pytest.approx(statistics.median(data["step_seconds"][1:]), abs=1e-3)
        assert ratio == f"{RATIO[run]:.2f}" and samples == f"{data['samples_per_prompt']:.2f}"
        assert peak == f"{data['peak_mib']:,}"
    streaming = rows['`seq-balanced-8x4`, `rollout_schedule="streaming"`', "continuous batching"]
    assert "did not finish" in streaming[2] and not any("stream" in run for run in STEP_TIME)


def test_the_prose_quotes_the_same_ratios():
    """docs/gpu-check.md's bullets, the README's first screen and benchmarks/README.md's GPU section."""
    completions = {run: STEP_TIME[run]["samples_per_prompt"] / 4 for run in STEP_TIME}
    doc = " ".join(GPU_DOC.split())
    assert f"drew {completions['ada-pos-4x2']:.2f}x GRPO n=4's completions" in doc
    assert f"in {RATIO['ada-pos-4x2']:.2f}x its step time" in doc
    assert f"drew {completions['ada-bal-8x4']:.2f}x ({STEP_TIME['ada-bal-8x4']['samples_per_prompt']:.2f})" in doc
    assert f"in {RATIO['ada-bal-8x4']:.2f}x, in 4 rounds" in doc
    assert f"{STEP_TIME['cb-grpo-4']['median_step_s']:.2f} s a step for GRPO n=4, {RATIO['cb-grpo-4']:.2f}x" in doc
    assert f"the same path was {CHECK['ratios']['continuous_batching / Ada streaming']:.2f}x" in doc
    readme = " ".join((ROOT / "README.md").read_text().split("\n## Contents\n")[0].split())
    # Ada's measured ratios stand in docs/gpu-check.md (above); README's GPU-time column is projected through the
    # step-time model fitted to these records (tests/test_docs.py recomputes one of its cells).
    assert f"{RATIO['cb-grpo-4']:.2f}x" in readme
    gpu = section((ROOT / "benchmarks" / "results" / "gpu" / "README.md").read_text(), "## On a GPU: what has run")
    for run in ("grpo-4", "ada-pos-4x2", "ada-bal-8x4", "cb-grpo-4"):
        assert f"| {RATIO[run]:.2f} |" in gpu
    index = " ".join(section((ROOT / "benchmarks" / "README.md").read_text(), "### On a GPU: what has run").split())
    for run in ("ada-pos-4x2", "ada-bal-8x4", "cb-grpo-4"):
        assert f"{RATIO[run]:.2f}x" in index


def test_the_peak_memory_and_length_ranges_are_the_runs():
    """ "Ada's equals GRPO's": the ranges the docs give are each set of runs' smallest and largest peak."""
    doc = " ".join(GPU_DOC.split())
    peaks = [row["peak_mib"] for row in STEP_TIME.values() if row["backend"] == "generate"]
    toy = [run["peak_memory_mib"] for run in CHECK["runs"] if run["backend"] == "transformers"]
    assert f"({min(peaks):,}-{max(peaks):,} MiB at 0.5B, {min(toy):.0f}-{max(toy):.0f} MiB on the toy)" in doc
    lengths = [row["metrics_last"]["completions/mean_length"] for row in STEP_TIME.values()]
    assert f"mean length was {min(lengths):.0f}-{max(lengths):.0f} tokens" in doc


def test_the_machine_and_versions_are_the_runs():
    """The section's first sentence against env.txt: the device and its memory, the commit, torch's build."""
    env = (RUN / "env.txt").read_text()
    gpu, memory = re.match(r"(NVIDIA \w+), (\d+) MiB", env).groups()
    commit = re.search(r"project (\w+)", env).group(1)
    torch_build = re.search(r"torch (\S+)", env).group(1)
    opening = " ".join(section(GPU_DOC, "## The first GPU run: NVIDIA H200, 2026-11-28").split())
    assert f"On one {gpu} ({int(memory):,} MiB), at commit {commit}, with torch {torch_build}," in opening
    for name, version in CHECK["versions"].items():
        if name not in ("torch", "vllm"):
            assert f"{name} {version}" in opening
    assert "no vLLM" in opening and CHECK["versions"]["vllm"] == "not installed"
