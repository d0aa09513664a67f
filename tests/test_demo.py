"""The main job runs GRPO and Ada end to end (on the untrained toy model, for speed) and summarises both honestly."""

import pytest

from trl_ada.demo import main

pytestmark = pytest.mark.slow


def test_demo_compares_grpo_and_ada_from_the_same_start(tmp_path, capsys):
    steps, prompts = 2, 4
    paths = ["--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / "out")]
    flags = ["--steps", str(steps), "--prompts-per-step", str(prompts), "--heldout", "8", "--log-every", "1"]
    runs = main([*flags, "--no-warmup", *paths])
    out = capsys.readouterr().out
    grpo, ada = runs["grpo-4"], runs["ada-balanced"]

    # One line per logged step and method, then the side-by-side summary.
    training, summary = out.split("GRPO vs Reinforce-Ada")
    for label in ("GRPO n=4", "Ada-balanced"):
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
