"""One name per configuration: its key in benchmarks/learning_catalog.py, used as is in the README, docs, recipes,
notebook, the tables made from the reports and the reports' labels; older names only where records are read."""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import learning_catalog as catalog  # noqa: E402  (benchmarks/ is not a package)
import learning_report  # noqa: E402

NAMES = ROOT / "docs" / "names.md"
# The text a user reads today. docs/names.md lists the older names on purpose; the study READMEs under
# benchmarks/results/ are records, written under the names of their day.
CURRENT = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "benchmarks" / "README.md",
    ROOT / "recipes" / "README.md",
    ROOT / "notebooks" / "quickstart.ipynb",
    *sorted(path for path in (ROOT / "docs").glob("*.md") if path != NAMES),
    *sorted((ROOT / "recipes").rglob("*.yaml")),
]
# Older labels and names (docs/names.md): "Ada-positive 8x4", "Seq-positive", "Ada-Est" (Reinforce-Ada-Est, the
# paper's algorithm, stays), "recommended" as a name, the memory baseline's report label.
RETIRED_WORDS = (
    r"(?<!Reinforce-)\bAda-(positive|balanced|Est)\b",
    r"\bSeq-(positive|balanced|pos|balance)\b",
    r"`recommended`",
    r"\*\*recommended\*\*",
    r"\brecommended \(",
    r"\bthe recommended configuration\b",
    r"n=2 \+ memory baseline",
)


def current_text(path: Path) -> str:
    """The text of ``path`` as a reader sees it: link targets left out (they name older study sections' anchors)."""
    text = path.read_text()
    if path.suffix == ".ipynb":
        text = "".join(line for cell in json.loads(text)["cells"] for line in cell["source"])
    return re.sub(r"\]\([^)]*\)", "]()", text)


def backticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def assert_named_by_key(name: str) -> None:
    assert name in catalog.CATALOG, f"{name!r} is not a key of benchmarks/learning_catalog.py"
    assert catalog.CATALOG[name][0].label == name, f"{name}'s label is {catalog.CATALOG[name][0].label!r}"


def table_rows(text: str, marker: str) -> list[list[str]]:
    block = text.split(f"<!-- {marker} -->", 1)[1].split(f"<!-- /{marker} -->", 1)[0]
    rows = [line for line in block.strip().splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]


def test_every_catalog_label_is_its_key_and_every_retired_key_names_a_live_one():
    for key, (method, _) in catalog.CATALOG.items():
        assert method.label == key and catalog.DESCRIPTIONS[key]
    assert catalog.RENAMED and not set(catalog.RENAMED) & set(catalog.CATALOG)
    assert all(new in catalog.CATALOG for new in catalog.RENAMED.values()), catalog.RENAMED
    assert all(new in catalog.CATALOG for new in catalog.RECOMMENDED_LABELS.values())
    assert catalog.RENAMED["recommended"] == catalog.RENAMED["ada-positive-4x2"] == catalog.EFFICIENT
    # The paper's naming: Seq with its exit rule and its rounds, Est with its mean budget.
    for key, (method, _) in catalog.CATALOG.items():
        if key.startswith("seq-"):
            rule, shape = key.split("-")[1:3]
            rounds, most = (int(n) for n in shape.split("x"))
            options = dict(method.options)
            assert method.strategy == rule, key
            assert (options.get("samples_per_round", 8), options.get("max_rounds", 4)) == (rounds, most), key
        if key.startswith("est-"):
            assert method.strategy == "estimate"
            assert dict(method.options)["samples_per_prompt_mean"] == int(key.split("-")[1]), key


def test_the_readme_tables_and_the_verdicts_use_the_catalog_s_names():
    """ "When it pays" (README.md) and the claims table (benchmarks/README.md) name every configuration by its key,
    whose label is the key; skill_verdicts.json, which they are made from, uses the same names."""
    pays = table_rows((ROOT / "README.md").read_text(), "when-it-pays")
    claims = table_rows((ROOT / "benchmarks" / "README.md").read_text(), "claims-table")
    assert len(pays) >= 8 and len(claims) >= 20
    shown = set()
    for row in pays:
        (partner,), (method, *_) = backticked(row[0]), backticked(row[1])
        shown |= {(method, partner)}
    for row in claims:
        method, partner, _task = backticked(row[1])
        shown |= {(method, partner)}
    for method, partner in shown:
        assert_named_by_key(method)
        assert_named_by_key(partner)
    verdicts = json.loads((ROOT / "benchmarks" / "results" / "columns" / "skill_verdicts.json").read_text())
    in_json = {(r["method"], r["partner"]) for r in verdicts["comparisons"]}
    in_json |= {(e["method"], e["partner"]) for family in verdicts["family"].values() for e in family}
    for method, partner in in_json:
        assert_named_by_key(method)
        assert_named_by_key(partner)
    not_run = {(backticked(r[1])[0], backticked(r[1])[1]) for r in claims if r[3] == "not run yet"}
    assert shown - not_run <= in_json, "every number the tables show is a comparison the JSON holds"


@pytest.mark.parametrize("path", CURRENT, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_current_text_uses_a_retired_name(path):
    text = current_text(path)
    found = [m.group(0) for pattern in RETIRED_WORDS for m in re.finditer(pattern, text)]
    for old in catalog.RENAMED:
        if old != "recommended":  # an English word too: its uses as a name are the patterns above
            found += re.findall(rf"(?<![\w-]){re.escape(old)}(?![\w.-])", text)
    # "the paper's defaults" describes seq-balanced-8x4: it may follow the name, never stand for it.
    for m in re.finditer(r"the paper's defaults", text, re.IGNORECASE):
        if "seq-balanced-8x4" not in text[max(0, m.start() - 120) : m.start()]:
            found.append(f"{m.group(0)!r} without seq-balanced-8x4 before it: ...{text[m.start() - 60 : m.end()]}")
    assert not found, found


def test_docs_names_lists_every_configuration_and_every_older_key():
    text = NAMES.read_text()
    for key in catalog.CATALOG:
        assert f"| `{key}` |" in text or f"`{key}`," in text, key
    for old, new in catalog.RENAMED.items():
        assert f"| `{old}` | `{new}` |" in text, old
    for path in sorted((ROOT / "benchmarks" / "results").rglob("README.md")):
        record = path.read_text()
        if any(re.search(rf"(?<![\w-]){re.escape(old)}(?![\w.-])", record) for old in catalog.RENAMED):
            assert "docs/names.md" in record.split("\n\n", 2)[1], f"{path}: no pointer to docs/names.md at its top"


def old_report() -> dict:
    """A report as the benchmark wrote it before the renaming: older keys and labels in its runs, summary,
    pairings and pairing floors, and `recommended` under two of the configurations it named."""
    runs = [
        {"key": "grpo-4", "method": "GRPO n=4", "seed": 0, "samples_per_prompt": 4.0},
        {"key": "ada-positive", "method": "Ada-positive 8x4", "seed": 0, "samples_per_prompt": 10.6},
        {"key": "ada-est-noweight", "method": "Ada-Est, 8/prompt, no weights", "seed": 1, "samples_per_prompt": 8.0},
        {"key": "recommended", "method": "recommended (Ada-positive 4x2)", "seed": 0, "samples_per_prompt": 4.9},
        {"key": "no-longer-listed", "method": "Something else", "seed": 0, "samples_per_prompt": 1.0},
    ]
    return {
        "command": "python benchmarks/learning_per_token.py --methods grpo-4 ada-positive recommended",
        "runs": runs,
        "summary": [{"key": run["key"], "method": run["method"], "auc_delta": 0.01 * i} for i, run in enumerate(runs)],
        "pairings": [
            {"key": "ada-est", "method": "Ada-Est, 8/prompt, 1/sqrt(p) budgets and weights"}
            | {"reference": "ada-est-noweight", "reference_method": "Ada-Est, 8/prompt, no weights", "auc_delta": 0.2}
        ],
        "pairing_floors": {"ada-est-noweight": {"aa_floor": {"seeds": 10}}, "grpo-16": {"aa_floor": {"seeds": 10}}},
    }


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_reading_an_old_report_gives_the_current_names_and_the_same_numbers(tmp_path, suffix):
    written = old_report()
    path = tmp_path / f"old{suffix}"
    if suffix == ".json.gz":
        with gzip.open(path, "wt") as file:
            json.dump(written, file)
    else:
        path.write_text(json.dumps(written))
    read = learning_report.read_report(path)

    def expected(key: str, label: str) -> str:
        if key == "recommended":
            return catalog.RECOMMENDED_LABELS[label]
        return catalog.RENAMED.get(key, key)

    for before, after in zip(written["runs"] + written["summary"], read["runs"] + read["summary"], strict=True):
        assert after["key"] == expected(before["key"], before["method"])
        if after["key"] in catalog.CATALOG:
            assert after["method"] == after["key"]
        else:  # not in the catalog any more: its own label stays
            assert after["method"] == before["method"]
        assert {k: v for k, v in after.items() if k not in ("key", "method")} == {
            k: v for k, v in before.items() if k not in ("key", "method")
        }
    assert [r["key"] for r in read["runs"]][:4] == ["grpo-4", "seq-positive-8x4", "est-8-noweight", "seq-positive-4x2"]
    (pairing,) = read["pairings"]
    assert (pairing["key"], pairing["method"], pairing["reference"], pairing["reference_method"]) == (
        "est-8",
        "est-8",
        "est-8-noweight",
        "est-8-noweight",
    )
    assert pairing["auc_delta"] == 0.2
    assert read["pairing_floors"] == {
        "est-8-noweight": {"aa_floor": {"seeds": 10}},
        "grpo-16": {"aa_floor": {"seeds": 10}},
    }
    assert read["command"] == written["command"]  # the record of what was run stays as written
    assert all(learning_report.runs_by_method(read["runs"]))


def test_recommended_in_a_report_is_the_configuration_its_label_names():
    for label, key in catalog.RECOMMENDED_LABELS.items():
        read = catalog.rename_report({"runs": [{"key": "recommended", "method": label}]})
        assert read["runs"] == [{"key": key, "method": key}]


def test_the_committed_reports_read_under_current_names_only():
    """Every committed learning report, read as the benchmarks read it, names only catalog keys (or keys the catalog
    never held, with their own labels), and no retired key."""
    paths = sorted((ROOT / "benchmarks" / "results").rglob("learning_per_token*.json*"))
    assert paths
    for path in paths:
        report = learning_report.read_report(path)
        for run in report.get("runs", []):
            assert run["key"] not in catalog.RENAMED, (path.name, run["key"])
            if run["key"] in catalog.CATALOG:
                assert run["method"] == run["key"], (path.name, run["key"], run["method"])


def test_retired_method_names_on_a_command_line_run_their_configuration(capsys):
    import learning_per_token

    args = learning_per_token.parse_args(["--methods", "grpo-4", *catalog.RENAMED])
    assert args.methods == ["grpo-4", *catalog.RENAMED.values()]
    out = capsys.readouterr().out
    assert out.count("renamed: ") == len(catalog.RENAMED)
    assert all(f"renamed: {old} is now {new}" in out for old, new in catalog.RENAMED.items())


def test_the_tools_rows_are_the_catalog_s_names():
    """The demo's methods and the GPU step-time rows that are catalog configurations carry the catalog's key as their
    name and its settings."""
    from trl_ada.tools import gpu_step_time
    from trl_ada.tools.demo import METHODS

    for key, method in METHODS.items():
        assert_named_by_key(key)
        assert method.label == key
        measured = catalog.CATALOG[key][0]
        assert (method.num_generations, method.strategy) == (measured.num_generations, measured.strategy)
    for key, run in gpu_step_time.RUNS.items():
        if key not in catalog.CATALOG:
            continue
        measured = catalog.CATALOG[key][0]
        assert run.label == key
        if run.grpo is not None:
            assert (measured.strategy, measured.num_generations) == (None, run.grpo)
            continue
        defaults = {"samples_per_round": 8, "max_rounds": 4}  # ReinforceAdaConfig's, which the catalog leaves unset
        assert run.ada == {"sampling_strategy": measured.strategy, **defaults, **dict(measured.options)}
