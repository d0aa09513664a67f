"""Checkpoints on two processes: each saves its own share of a generation batch in flight, the main process renames
the staged checkpoint once both have written, and a resume from inside the batch matches an uninterrupted run."""

import pytest
from test_multiprocess import launch_two_processes, run_two_processes

from trl_ada.adapter.checkpoints import CPU_RESUME_FIXED_IN
from trl_ada.adapter.compat import TRANSFORMERS_VERSION

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]
# Older transformers load a two-process CPU run's optimizer state onto "cpu:0", which torch cannot restore.
RESUMES_ON_CPU = TRANSFORMERS_VERSION >= CPU_RESUME_FIXED_IN


@pytest.mark.skipif(RESUMES_ON_CPU, reason=f"transformers {TRANSFORMERS_VERSION} resumes several CPU processes")
def test_two_processes_resume_on_an_older_transformers_fails_first_saying_why(toy_cold_dir, tmp_path):
    result = launch_two_processes("mp_resume.py", tmp_path, toy_cold_dir)
    assert result.returncode != 0
    assert f"transformers {TRANSFORMERS_VERSION} cannot resume a run on 2 CPU processes" in result.stderr
    assert "don't know how to restore data location" not in result.stderr  # it never reached Trainer's load


@pytest.mark.skipif(not RESUMES_ON_CPU, reason=f"transformers {TRANSFORMERS_VERSION} cannot resume on CPU processes")
def test_two_processes_resume_inside_a_generation_batch_as_an_uninterrupted_run(toy_cold_dir, tmp_path):
    ranks = run_two_processes("mp_resume.py", tmp_path, toy_cold_dir)

    # checkpoint-1, saved inside the first generation batch, holds both processes' buffers and RNG states: both
    # wrote into the staging folder before the main process renamed it, and no staging folder is left.
    saved = ranks[0]["saved"]
    for name in ("generation_batch_0.pt", "generation_batch_1.pt", "rng_state_0.pth", "rng_state_1.pth"):
        assert name in saved
    for rank in ranks:
        for run, steps in (("straight", [1, 2, 3]), ("resumed", [2, 3])):
            assert [f for f in rank[run]["folders"] if "checkpoint" in f] == [f"checkpoint-{s}" for s in steps]
    for rank in ranks:
        straight, resumed = rank["straight"], rank["resumed"]
        # Each process trains the same rows at steps 2 and 3 (the buffered half of batch 1, then batch 2) ...
        assert [step for step, *_ in straight["trained"]] == [0, 1, 2]
        assert resumed["trained"] == straight["trained"][1:]
        # ... and ends with the same memory, the same side-stream position and the same logged metrics.
        assert resumed["memory"] == straight["memory"]
        assert resumed["stream"] == straight["stream"]
        assert resumed["logs"] == straight["logs"] and sorted(straight["logs"]) == ["1", "2", "3"]
    assert ranks[0]["straight"]["memory"] == ranks[1]["straight"]["memory"]
    assert ranks[0]["straight"]["logs"] == ranks[1]["straight"]["logs"]
