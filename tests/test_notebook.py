"""The quickstart notebook runs end to end, offline on CPU, computes what its prose claims, and is stored with the
outputs a fresh run gives.

The notebook is executed as `make notebook` executes it (notebooks/execute.py: nbclient, a kernel that is this
interpreter, a temporary working directory). A probe cell appended in memory (the file on disk is untouched) reads
back the notebook's variables as JSON.
"""

import copy
import json
import math
import os
import pathlib
import re
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
from execute import NOTEBOOK, execute, for_the_page  # noqa: E402  (notebooks/ is not a package)

pytestmark = [pytest.mark.notebook, pytest.mark.slow]

PROBE = """
import json, sys
print(json.dumps({
    "executable": sys.executable,
    "pass_rates": pass_rates,
    "group_sizes": group_sizes,
    "collapse": [collapse[p] for p in pass_rates],
    "history": [{k: v for k, v in row.items() if isinstance(v, (int, float))} for row in history],
    "max_steps": config.max_steps,
    "accuracy_before": accuracy_before,
    "accuracy_after": accuracy_after,
    "grpo_accuracy_after": grpo_accuracy_after,
    "grpo_history": [{k: v for k, v in row.items() if isinstance(v, (int, float))} for row in grpo_history],
    "grpo_tokens": grpo_tokens,
    "ada_tokens": ada_tokens,
    "ada_config": config.to_dict(),
    "grpo_config": grpo_config.to_dict(),
    "grpo_trainer": type(grpo_trainer).__name__,
}, default=str))
"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Run the notebook once; return the executed notebook, the probe's JSON and the kernel's working dir."""
    tmp = tmp_path_factory.mktemp("notebook")
    workdir = tmp / "work"
    workdir.mkdir()
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:  # the stored outputs must not leak into what this run shows
        if cell.cell_type == "code":
            cell.outputs = []
    notebook.cells.append(nbformat.v4.new_code_cell(PROBE))
    # The kernel inherits this process's environment, so the hub stays offline (conftest.py) and $TRL_ADA_CACHE,
    # if set, is honoured.
    execute(notebook, workdir, tmp)
    probe_text = "".join(out.get("text", "") for out in notebook.cells[-1].outputs if out.output_type == "stream")
    return notebook, json.loads(probe_text), workdir


def test_kernel_is_this_interpreter(executed):
    _, probe, _ = executed
    assert os.path.realpath(probe["executable"]) == os.path.realpath(sys.executable)


def test_collapse_table_matches_the_binomial_formula(executed):
    _, probe, _ = executed
    for p, values in zip(probe["pass_rates"], probe["collapse"], strict=True):
        for n, value in zip(probe["group_sizes"], values, strict=True):
            # 1 - P(a Binomial(n, p) is strictly between 0 and n)
            mixed = sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(1, n))
            assert value == pytest.approx(1 - mixed, abs=1e-12)
    table = dict(zip(probe["pass_rates"], probe["collapse"], strict=True))
    n_4 = probe["group_sizes"].index(4)
    # Hand-worked: 0.1^4 + 0.9^4 = 0.6562 and 0.15^4 + 0.85^4 = 0.5226 (the README's 66% and 52%).
    assert table[0.1][n_4] == pytest.approx(0.6562, abs=1e-4)
    assert table[0.15][n_4] == pytest.approx(0.5226, abs=1e-4)


def test_training_logged_ada_metrics_in_range(executed):
    _, probe, _ = executed
    history = probe["history"]
    assert [row["step"] for row in history] == list(range(1, probe["max_steps"] + 1))
    for row in history:
        assert row["ada/rounds"] in (1, 2, 3, 4)
        # every prompt draws one round of 8, at most 4 rounds of 8
        assert 8 <= row["ada/samples_per_prompt"] <= row["ada/samples_per_prompt_max"] <= 32
        assert row["ada/samples_per_prompt_max"] == 8 * row["ada/rounds"]  # the last round had someone active
        for name in ("ada/frac_resolved", "ada/frac_zero_std_first_round", "frac_reward_zero_std"):
            assert 0.0 <= row[name] <= 1.0
        # A kept group has zero std only if its whole pool does, and then so did the pool's first round.
        assert row["frac_reward_zero_std"] <= row["ada/frac_zero_std_first_round"] + 1e-9
    for name in ("accuracy_before", "accuracy_after"):
        assert 0.0 <= probe[name] <= 1.0


def test_notebook_draws_its_plots_and_stays_in_its_working_dir(executed):
    notebook, _, workdir = executed
    images = [out for cell in notebook.cells for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]
    assert len(images) == 2  # the collapse curves and the four metric panels
    errors = [out for cell in notebook.cells for out in cell.get("outputs", []) if out.output_type == "error"]
    assert not errors
    assert (workdir / "outputs" / "quickstart").is_dir()  # relative paths resolved in the temporary directory


def test_grpo_baseline_is_plain_grpo_with_the_same_settings(executed):
    _, probe, _ = executed
    assert probe["grpo_trainer"] == "GRPOTrainer"
    ada, grpo = probe["ada_config"], probe["grpo_config"]
    differ = {name for name in grpo if name in ada and grpo[name] != ada[name]}
    # Only where each run writes and what it is called may differ.
    assert differ <= {"output_dir", "logging_dir", "run_name", "hub_model_id"}, differ
    assert [row["step"] for row in probe["grpo_history"]] == list(range(1, probe["max_steps"] + 1))
    assert 0.0 <= probe["grpo_accuracy_after"] <= 1.0


def test_token_axes_count_what_each_run_generated(executed):
    _, probe, _ = executed
    ada_per_step = [row["ada/completion_tokens"] for row in probe["history"]]
    assert probe["ada_tokens"][-1] == pytest.approx(sum(ada_per_step))
    # GRPO: 16 prompts x 4 completions per step, each of its logged mean length; at most 8 tokens each.
    grpo_per_step = [row["completions/mean_length"] * 64 for row in probe["grpo_history"]]
    assert probe["grpo_tokens"][-1] == pytest.approx(sum(grpo_per_step))
    assert all(0 < tokens <= 64 * 8 for tokens in grpo_per_step)
    # Ada draws at least 8 completions per prompt: more tokens than GRPO's groups of 4 over the run.
    assert probe["ada_tokens"][-1] > probe["grpo_tokens"][-1]


# -------------------------------------------------------------------------------------------------------------------
# The stored notebook: its outputs are on the repository page, and they are what a fresh run prints
# -------------------------------------------------------------------------------------------------------------------

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def printed(cell) -> list[str]:
    """The lines a code cell printed on stdout."""
    return [
        line
        for out in cell.outputs
        if out.output_type == "stream" and out.name == "stdout"
        for line in out.text.splitlines()
    ]


def images(notebook) -> list:
    return [out for cell in notebook.cells for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]


def test_the_stored_notebook_shows_its_outputs_from_one_run_top_to_bottom():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), "regenerate: make notebook"
    assert all(cell.outputs for cell in code)
    assert len(images(notebook)) == 2  # the collapse curves and the four panels, as PNG: visible on the page
    outputs = [out for cell in code for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    assert not [out for out in outputs if out.output_type == "stream" and out.name == "stderr"]
    assert notebook.metadata["kernelspec"]["name"] == "python3"  # not the kernel spec the run made for itself


def test_the_stored_outputs_are_what_a_fresh_run_prints(executed):
    """The same cells, the same printed lines with numbers in the same places, the numbers close (the notebook leaves
    torch's numerics unpinned, so another CPU may print other last digits); the same kinds of output per cell."""
    fresh = for_the_page(copy.deepcopy(executed[0]), {})
    stored = nbformat.read(NOTEBOOK, as_version=4)
    for stored_cell, fresh_cell in zip(stored.cells, fresh.cells[:-1], strict=True):  # the probe cell comes last
        assert stored_cell.source == fresh_cell.source
        if stored_cell.cell_type != "code":
            continue
        assert [out.output_type for out in stored_cell.outputs] == [out.output_type for out in fresh_cell.outputs]
        want, got = printed(stored_cell), printed(fresh_cell)
        assert [NUMBER.sub("#", line) for line in got] == [NUMBER.sub("#", line) for line in want]
        for got_line, want_line in zip(got, want, strict=True):
            for a, b in zip(NUMBER.findall(got_line), NUMBER.findall(want_line), strict=True):
                a, b = float(a.replace(",", "")), float(b.replace(",", ""))
                assert abs(a - b) <= 0.1 + 0.1 * abs(b), (got_line, want_line)


def test_the_notebook_quotes_the_benchmarks_as_they_give_them():
    text = "\n".join(
        cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells if cell.cell_type == "markdown"
    )
    quoted = re.findall(r"[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", text)
    assert len(quoted) >= 3  # the toy task's own two, and the current benchmark's recommended configuration
    studies = sorted((ROOT / "benchmarks" / "results").glob("*/README.md"))
    benchmarks = " ".join(" ".join(path.read_text().split()) for path in [ROOT / "benchmarks" / "README.md", *studies])
    assert not [number for number in quoted if number not in benchmarks]
    assert not re.findall(r"\d+(?:\.\d+)? points\b", text)  # as the claims table writes them


def test_the_files_and_sections_the_notebook_points_to_exist():
    """The prose sends readers to result files and to sections of them (`path`, "Section title"): both must be there,
    so a renamed study or heading cannot leave the notebook pointing nowhere."""
    text = " ".join(
        " ".join(cell.source.split())
        for cell in nbformat.read(NOTEBOOK, as_version=4).cells
        if cell.cell_type == "markdown"
    )
    paths = re.findall(r"`((?:benchmarks|docs|recipes)/[\w./-]+\.(?:md|json))`", text)
    assert "benchmarks/results/columns/skill_verdicts.md" in paths  # where the current benchmark's verdicts are
    assert not [path for path in paths if not (ROOT / path).is_file()]
    sections = re.findall(r"`([\w./-]+\.md)`, \"([^\"]+)\"", text)
    assert sections, 'expected a pointer to a section: `file.md`, "Heading"'
    for path, title in sections:
        headings = [
            line.lstrip("#").strip() for line in (ROOT / path).read_text().splitlines() if line.startswith("#")
        ]
        assert any(heading.startswith(title) for heading in headings), (path, title)
