"""The main job runs end to end (on the untrained toy model, for speed) and reports a consistent summary."""

import math

import pytest

from trl_ada.demo import main

pytestmark = pytest.mark.slow


def test_demo_runs_and_summarises(tmp_path, capsys):
    paths = ["--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / "out")]
    summary = main(["--steps", "2", "--prompts-per-step", "4", "--heldout", "8", "--no-warmup", *paths])
    out = capsys.readouterr().out
    assert "samples drawn per prompt" in out
    assert len([line for line in out.splitlines() if line.strip().startswith(("1 ", "2 "))]) == 2  # one per step
    assert 0.0 <= summary["accuracy_before"] <= 1.0 and 0.0 <= summary["accuracy_after"] <= 1.0
    assert 8 <= summary["samples_per_prompt"] <= 32  # at least one round of 8, at most 4 rounds
    assert not math.isnan(summary["frac_zero_std_first_round"])
