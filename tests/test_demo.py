"""The main job runs GRPO and Ada end to end and summarises both honestly; `trl-ada demo` reproduces bit for bit, and
the README shows what it prints."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_ada.tools import reproducible
from trl_ada.tools.demo import main
from trl_ada.tools.reproducible import PINNED_ENV

pytestmark = pytest.mark.slow


def test_demo_compares_grpo_and_ada_from_the_same_start(tmp_path, capsys):
    """In this process, on the untrained toy model for speed."""
    steps, prompts = 2, 4
    paths = ["--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / "out")]
    flags = ["--steps", str(steps), "--prompts-per-step", str(prompts), "--heldout", "8", "--log-every", "1"]
    runs = main([*flags, "--no-warmup", *paths])
    out = capsys.readouterr().out
    grpo, ada = runs["grpo-4"], runs["seq-balanced-8x4"]

    # One line per logged step and method, then the side-by-side summary.
    training, summary = out.split("GRPO vs Reinforce-Ada")
    for label in ("grpo-4", "seq-balanced-8x4"):
        lines = [line for line in training.splitlines() if line.strip().startswith(label) and "step" not in line]
        assert [int(line.split()[-6]) for line in lines] == list(range(1, steps + 1))
    assert f"{grpo.generated.completion_tokens:,}" in summary and f"{ada.generated.completion_tokens:,}" in summary

    # GRPO draws exactly 4 per prompt; Ada between one round of 8 and four rounds.
    assert grpo.generated.completions == steps * prompts * 4 and grpo.samples_per_prompt == 4
    assert 8 <= ada.samples_per_prompt <= 32
    assert ada.generated.completions == pytest.approx(ada.samples_per_prompt * steps * prompts)
    # Same start: the held-out accuracy before training is the same number for both.
    assert grpo.accuracy_before == ada.accuracy_before
    assert 0.0 <= grpo.accuracy_after <= 1.0 and 0.0 <= ada.accuracy_after <= 1.0
    for run in (grpo, ada):
        assert 0.0 <= run.frac_zero_std <= 1.0 and 0.0 <= run.frac_zero_std_first_round <= 1.0


# -------------------------------------------------------------------------------------------------------------------
# Reproducibility: `trl-ada demo` (what `make demo` runs) pins torch's numerics and prints the same bits every time
# -------------------------------------------------------------------------------------------------------------------

README = Path(__file__).resolve().parent.parent / "README.md"
SMALL = ["--steps", "3", "--prompts-per-step", "8", "--heldout", "32", "--log-every", "1"]


def demo_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "trl_ada.tools.cli", "demo", *args]


def clean_env(cache: Path) -> dict[str, str]:
    """The caller's environment minus anything that pins or unpins numerics itself, with an empty cache of its own."""
    env = {key: value for key, value in os.environ.items() if key not in (*PINNED_ENV, "PYTHONPATH")}
    return env | {"TRL_ADA_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}


def without_times(stdout: str) -> str:
    """Everything the demo prints except the wall-time line after the summary."""
    kept = [line for line in stdout.splitlines() if not line.startswith("Training time: ")]
    assert len(kept) == len(stdout.splitlines()) - 1, "expected exactly one time line"
    return "\n".join(kept)


def summary_block(text: str) -> list[str]:
    """The summary block: from its title line to the "No signal" line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GRPO vs Reinforce-Ada on the toy task"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("  No signal: "))
    return lines[start : end + 1]


def test_demo_prints_the_same_twice_from_empty_caches(tmp_path):
    """Two runs at once (one thread each), each in its own process with an empty cache: identical output."""
    runs = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        command = demo_command(*SMALL, "--output-dir", str(tmp_path / name / "out"))
        env = clean_env(tmp_path / name / "cache")
        runs.append(
            subprocess.Popen(command, cwd=tmp_path / name, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        )
    outputs = []
    for process in runs:
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr.decode()[-3000:]
        assert b"not pinned" not in stderr, stderr.decode()[-3000:]
        outputs.append(stdout.decode())
    first, second = map(without_times, outputs)
    assert first == second
    assert len(summary_block(first)) == 8 and "3 steps x 8 prompts" in first
    assert first.splitlines()[-8:] == summary_block(first), "the summary is the last thing the demo prints"
    assert first.count("grpo-4 ") >= 3 and first.count("seq-balanced-8x4 ") >= 3  # a line per step per method


def test_python_m_demo_restarts_itself_pinned(tmp_path):
    def run(*command):
        return subprocess.run(command, capture_output=True, text=True, timeout=300, env=clean_env(tmp_path))

    restarted = run(
        sys.executable, "-c", "from trl_ada.tools import reproducible as r; r.restart_pinned(r.__name__, [])"
    )
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert "pinned: the toy model's runs reproduce bit for bit" in restarted.stdout
    demo_help = run(sys.executable, "-m", "trl_ada.demo", "--help")
    assert demo_help.returncode == 0 and "usage: " in demo_help.stdout
    assert "[trl_ada] restarting `python -m trl_ada.demo` with OMP_NUM_THREADS=1" in demo_help.stderr


def test_problems_name_every_setting_that_is_not_pinned(monkeypatch):
    import torch

    for name in PINNED_ENV:
        monkeypatch.delenv(name, raising=False)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        found = reproducible.problems()
        assert "OMP_NUM_THREADS is None, not '1'" in found[0] and "MKL_CBWR is None, not 'COMPATIBLE'" in found[2]
        assert "torch runs 2 threads, not 1" in found
        for name, value in PINNED_ENV.items():
            monkeypatch.setenv(name, value)
        torch.set_num_threads(1)
        capability = torch.backends.cpu.get_cpu_capability()  # chosen when torch loaded: AVX-512 on such a CPU
        kernels = f"torch runs its {capability} kernels, not AVX2 (this CPU has no AVX2?)"
        assert reproducible.problems() == ([] if capability == "AVX2" else [kernels])
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(RuntimeError, match="torch is already imported"):
        for name in PINNED_ENV:
            monkeypatch.delenv(name)
        reproducible.pin()


def test_readme_demo_block_is_what_make_demo_prints(tmp_path):
    """The README's block, character for character, from a fresh 100-step run (the numbers, not a look-alike)."""
    result = subprocess.run(
        demo_command("--output-dir", str(tmp_path / "out")),
        cwd=tmp_path,
        env=clean_env(tmp_path / "cache"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "not pinned" not in result.stderr
    assert summary_block(result.stdout) == summary_block(README.read_text())
    # It ends with that block, as the README says (the wall times come just before it).
    assert result.stdout.rstrip("\n").splitlines()[-8:] == summary_block(README.read_text())
