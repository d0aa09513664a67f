"""The learning-per-token and overhead benchmarks: their arithmetic on hand-made inputs, and tiny real runs whose
measurements are checked against independent recounts (TRL's own token count, the prompts each trainer was given)."""

import itertools
import json
import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import learning_catalog
import learning_per_token
import learning_report
import learning_runs
import learning_stats
import overhead

# --------------------------------------------------------------------------------------------------------------------
# Arithmetic on hand-made curves
# --------------------------------------------------------------------------------------------------------------------


def fake_run(key, seed, tokens, accuracies, seconds=None, zero_std=0.5):
    seconds = seconds or [t / 100 for t in tokens]
    checkpoints = [
        {"step": 10 * i, "tokens": t, "seconds": s, "accuracy": a}
        for i, (t, s, a) in enumerate(zip(tokens, seconds, accuracies, strict=True))
    ]
    return {
        "key": key,
        "method": key if key in learning_catalog.CATALOG else key.upper(),  # a catalog method's label is its key
        "seed": seed,
        "checkpoints": checkpoints,
        "samples_per_prompt": 4.0,
        "frac_zero_std": zero_std,
        "frac_zero_std_first_round": zero_std,
        "completions_per_trained_prompt": 4.0,
        "refills_per_step": 0.0,
        "skipped_per_step": 0.0,
    }


def test_summary_ratios_on_seed_averaged_curves():
    runs = [
        # GRPO n=4, seeds averaged: tokens [0, 1000, 2000], accuracy [0.40, 0.45, 0.50] -> target 0.50 at 2000.
        fake_run("grpo-4", 0, [0, 900, 1900], [0.40, 0.44, 0.52]),
        fake_run("grpo-4", 1, [0, 1100, 2100], [0.40, 0.46, 0.48]),
        # Averaged: tokens [0, 3000, 6000], accuracy [0.40, 0.60, 0.62] -> 0.50 halfway to 3000, i.e. 1500.
        fake_run("seq-balanced-8x4", 0, [0, 3000, 6000], [0.40, 0.58, 0.60], zero_std=0.1),
        fake_run("seq-balanced-8x4", 1, [0, 3000, 6000], [0.40, 0.62, 0.64], zero_std=0.2),
        # Never reaches 0.50.
        fake_run("grpo-16", 0, [0, 4000, 8000], [0.40, 0.42, 0.44]),
    ]
    rows = {row["key"]: row for row in learning_report.summarise(runs)}
    assert rows["grpo-4"]["target_accuracy"] == pytest.approx(0.50)
    assert rows["grpo-4"]["tokens_to_target"] == pytest.approx(2000)
    assert rows["grpo-4"]["tokens_ratio"] == pytest.approx(1.0)
    assert rows["seq-balanced-8x4"]["tokens_to_target"] == pytest.approx(1500)
    assert rows["seq-balanced-8x4"]["tokens_ratio"] == pytest.approx(0.75)
    assert rows["seq-balanced-8x4"]["seconds_ratio"] == pytest.approx(0.75)  # seconds are tokens / 100 here
    assert rows["seq-balanced-8x4"]["final_accuracy"] == pytest.approx(0.62)
    assert rows["seq-balanced-8x4"]["final_accuracy_per_seed"] == [0.60, 0.64]
    assert rows["seq-balanced-8x4"]["frac_zero_std"] == pytest.approx(0.15)
    assert rows["grpo-16"]["tokens_to_target"] is None and rows["grpo-16"]["tokens_ratio"] is None
    # Seed by seed: GRPO n=4 crosses 0.50 at 900 + 0.06/0.08 * 1000 = 1650 (seed 0) and never (seed 1);
    # ada-balanced at 3000 * 0.10/0.18 and 3000 * 0.10/0.22.
    grpo_seeds = rows["grpo-4"]["tokens_to_target_per_seed"]
    assert grpo_seeds["values"] == [pytest.approx(1650), None] and grpo_seeds["missing"] == 1
    assert grpo_seeds["std"] is None
    ada_seeds = rows["seq-balanced-8x4"]["tokens_to_target_per_seed"]
    first, second = 3000 * 0.10 / 0.18, 3000 * 0.10 / 0.22
    assert ada_seeds["mean"] == pytest.approx((first + second) / 2)
    assert ada_seeds["std"] == pytest.approx(abs(first - second) / 2**0.5)
    # Areas up to the fewest tokens any run reached (1900, GRPO n=4 seed 0): seed 0 of GRPO n=4 is two trapezoids,
    # (900 * 0.42 + 1000 * 0.48) / 1900.
    assert rows["grpo-4"]["auc_token_budget"] == 1900
    assert rows["grpo-4"]["auc_tokens"]["values"][0] == pytest.approx((900 * 0.42 + 1000 * 0.48) / 1900)
    table = learning_report.markdown_table(list(rows.values()))
    assert "not reached" in table and "1,500 (0.75x [" in table and "1,650 (1 not)" in table


def fake_report(seeds, runs, settings=None):
    settings = {
        **{"task": "reasoning", "steps": 2, "eval_every": 1, "heldout": 8, "heldout_samples": 1},
        **{"prompts_per_step": 16, "learning_rate": 1e-4, "match_tokens": None},
        **(settings or {}),
    }
    return {
        "command": f"seeds {seeds}",
        "settings": settings,
        "seeds": seeds,
        "machine": learning_per_token.machine_info(),
        "load_average_1min_after": 1.0,
        "elapsed_seconds": 60.0,
        "testbed": {
            **{"prompts": 4 * len(seeds), "samples_per_prompt": 16, "accuracy": 0.5, "frac_all_correct_n4": 0.3},
            **{"frac_all_wrong_n4": 0.3, "mean_len_right": 20.0, "mean_len_wrong": 40.0, "len_p90_over_p10": 4.0},
            **{"frac_truncated": 0.0, "visits_per_prompt": 8.0, "visits_per_prompt_min": 8},
        },
        "runs": runs,
    }


def test_baseline_from_reuses_an_earlier_reports_grpo_runs(tmp_path, monkeypatch):
    trained = []

    def fake_run_all(seeds, methods, settings, jobs):
        trained.append(list(methods))
        lift = {"grpo-4": 0.0, "seq-positive-8x4": 0.05}
        return [
            fake_run(k, s, [0, 1000, 2000], [0.40, 0.50 + lift[k], 0.60 + 0.01 * s]) for k in methods for s in seeds
        ]

    testbed = {**fake_report([0], [])["testbed"], "per_prompt": {}}
    monkeypatch.setattr(learning_per_token, "run_all", fake_run_all)
    measured = []

    def fake_measure(settings, seed):
        measured.append(seed)
        return dict(testbed)

    monkeypatch.setattr(learning_per_token, "measure_testbed", fake_measure)
    checked = []  # the runs are made up here: record the reproduction check instead of training again
    monkeypatch.setattr(learning_per_token, "check_reproduces", lambda *args: checked.append(args[2:]))
    common = ["--steps", "2", "--eval-every", "1", "--heldout", "8", "--heldout-samples", "1", "--jobs", "1"]
    common += ["--output-dir", str(tmp_path)]
    first = learning_per_token.main([*common, "--seeds", "0", "1", "2", "--methods", "grpo-4", "--name", "grpo"])
    reuse = [*common, "--baseline-from", str(tmp_path / "grpo.json")]
    report = learning_per_token.main([*reuse, "--seeds", "0", "1", "--methods", "seq-positive-8x4", "--name", "ada"])
    assert trained == [["grpo-4"], ["seq-positive-8x4"]]  # GRPO n=4 trained once
    assert checked == [("grpo-4", [0, 1])]  # ... after checking that each of its seeds reproduces here
    # Same first seed, model and settings: the testbed is the earlier report's, not measured again.
    assert measured == [0] and report["testbed"]["from"] == str(tmp_path / "grpo.json")
    assert [(r["key"], r["seed"]) for r in report["runs"]] == [
        ("grpo-4", 0),
        ("grpo-4", 1),
        ("seq-positive-8x4", 0),
        ("seq-positive-8x4", 1),
    ]
    assert report["runs"][:2] == first["runs"][:2] and report["baseline_from"] == str(tmp_path / "grpo.json")
    # The method's last seed in a chunk of its own, then all three reports combined: the copies of GRPO n=4's runs
    # count once, and each combined entry still names the report its GRPO n=4 runs came from.
    learning_per_token.main([*reuse, "--seeds", "2", "--methods", "seq-positive-8x4", "--name", "ada2"])
    paths = [str(tmp_path / f"{stem}.json") for stem in ("grpo", "ada", "ada2")]
    both = learning_per_token.main(["--combine", *paths, "--output-dir", str(tmp_path)])
    assert sorted((r["key"], r["seed"]) for r in both["runs"]) == [
        ("grpo-4", 0),
        ("grpo-4", 1),
        ("grpo-4", 2),
        ("seq-positive-8x4", 0),
        ("seq-positive-8x4", 1),
        ("seq-positive-8x4", 2),
    ]
    assert "baseline_from" not in both["combined"][0]
    assert [c["baseline_from"] for c in both["combined"][1:]] == [str(tmp_path / "grpo.json")] * 2
    # The method is GRPO n=4's curve with 0.05 more at the middle checkpoint: a quarter of that in mean accuracy.
    assert report["summary"][1]["auc_delta"] == pytest.approx(0.025)
    with pytest.raises(SystemExit, match=r"settings differ in \['steps'\]"):
        learning_per_token.main([*reuse, "--steps", "3", "--seeds", "0", "--methods", "seq-positive-8x4"])
    with pytest.raises(SystemExit, match=r"no grpo-4 run of seeds \[3\]"):
        learning_per_token.main([*reuse, "--seeds", "0", "3", "--methods", "seq-positive-8x4"])
    with pytest.raises(SystemExit, match="drop it from --methods"):
        learning_per_token.main([*reuse, "--methods", "grpo-4", "seq-positive-8x4"])
    # The shipped warm model's folder differs between clones; the same --warm-seed is the same model.
    moved = dict(first["settings"], model_dir="/elsewhere/toy_warm")
    assert learning_per_token.settings_differences(first["settings"], moved) == []
    named = dict(moved, warm_seed=None)  # a --model-dir run: the folder is what names the model
    assert learning_per_token.settings_differences(first["settings"], named) == ["model_dir", "warm_seed"]


def test_combine_reports_summarises_chunks_of_seeds_as_one_run(tmp_path):
    # Seeds 0-1 in one report, 2-3 in another. GRPO n=4 ends at 0.50, 0.52, 0.54, 0.56 (mean 0.53); "ada" at
    # 0.60 on every seed, from 0.40 at 1000 tokens per checkpoint, so it crosses 0.53 at 1000 + 0.13 / 0.2 * 1000.
    def grpo(seed):
        return fake_run("grpo-4", seed, [0, 1000, 2000], [0.40, 0.45, 0.50 + 0.02 * seed])

    def ada(seed):
        return fake_run("seq-positive-8x4", seed, [0, 1000, 2000], [0.40, 0.40, 0.60])

    first = fake_report([0, 1], [grpo(0), grpo(1), ada(0), ada(1), fake_run("grpo-8", 0, [0, 1], [0.4, 0.5])])
    second = fake_report([2, 3], [ada(2), ada(3), grpo(2), grpo(3)])
    paths = []
    for i, report in enumerate((first, second)):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(report))
    argv = ["--combine", *map(str, paths), "--methods", "grpo-4", "seq-positive-8x4"]
    report = learning_per_token.main([*argv, "--output-dir", str(tmp_path), "--name", "all"])
    rows = {row["key"]: row for row in report["summary"]}
    assert list(rows) == ["grpo-4", "seq-positive-8x4"]  # grpo-8 left out by --methods; the baseline first
    assert rows["grpo-4"]["target_accuracy"] == pytest.approx(0.53)
    assert rows["grpo-4"]["seeds"] == rows["seq-positive-8x4"]["seeds"] == [0, 1, 2, 3]
    assert rows["seq-positive-8x4"]["tokens_to_target"] == pytest.approx(1000 + 0.13 / 0.20 * 1000)
    assert report["seeds"] == [0, 1, 2, 3] and report["elapsed_seconds"] == 120.0
    assert report["testbed"]["prompts"] == 8  # the first report's
    assert [c["seeds"] for c in report["combined"]] == [[0, 1], [2, 3]]
    assert json.loads((tmp_path / "all.json").read_text())["summary"] == report["summary"]
    assert "Summarised from 2 reports; the testbed is the first's." in (tmp_path / "all.md").read_text()


def test_combine_summarises_a_report_from_before_the_testbed_and_tasks_existed(tmp_path):
    runs = [
        fake_run(key, seed, [0, 1000, 2000], [0.40, 0.45, 0.50]) for key in ("grpo-4", "dapo-4") for seed in (0, 1)
    ]
    old = fake_report([0, 1], runs)
    del old["testbed"], old["settings"]["task"], old["settings"]["match_tokens"]  # none of these recorded yet
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    report = learning_per_token.main(["--combine", str(path), "--output-dir", str(tmp_path), "--name", "old"])
    assert report["testbed"] is None and report["combined"][0]["testbed"] is None
    assert report["settings"]["task"] == "arithmetic" and report["settings"]["match_tokens"] is None
    assert [row["key"] for row in report["summary"]] == ["grpo-4", "dapo-4"]
    text = (tmp_path / "old.md").read_text()
    assert "Testbed at the start" not in text and "| dapo-4 | 2 |" in text
    assert "Summarised from 1 report." in text


def test_combine_reports_refuses_runs_that_do_not_pair():
    def runs(key, seeds):
        return [fake_run(key, seed, [0, 1000], [0.4, 0.5]) for seed in seeds]

    combine = learning_per_token.combine_reports
    with pytest.raises(SystemExit, match=r"differ in \['learning_rate'\]"):
        combine(
            [fake_report([0], runs("grpo-4", [0])), fake_report([1], runs("grpo-4", [1]), {"learning_rate": 2})], None
        )
    other = [fake_run("grpo-4", 0, [0, 1000], [0.4, 0.6])]
    with pytest.raises(SystemExit, match="grpo-4 seed 0 is in more than one report"):
        combine([fake_report([0], runs("grpo-4", [0])), fake_report([0], other)], None)
    # The same run twice, as a --baseline-from report carries GRPO n=4's runs of the report it names: kept once.
    chunk = fake_report([0], runs("grpo-4", [0]) + runs("dapo-4", [0]))
    later = fake_report([0], runs("grpo-4", [0]) + runs("est-8", [0]))
    assert [run["key"] for run in combine([chunk, later], None)] == ["grpo-4", "dapo-4", "est-8"]
    with pytest.raises(SystemExit, match=r"dapo-4 ran seeds \[0\], grpo-4 \[0, 1\]"):
        combine([fake_report([0, 1], runs("grpo-4", [0, 1]) + runs("dapo-4", [0]))], None)
    with pytest.raises(SystemExit, match="no grpo-4 runs"):
        combine([fake_report([0], runs("dapo-4", [0]))], None)
    # Without --methods every method found is kept.
    kept = combine([fake_report([0], runs("dapo-4", [0]) + runs("grpo-4", [0]))], None)
    assert [run["key"] for run in kept] == ["grpo-4", "dapo-4"]


def test_summary_leads_with_the_auc_delta_and_the_table_with_the_aa_floor():
    # GRPO n=4 over four seeds, two of them 0.02 above the other two; the method is each seed's GRPO curve + 0.01.
    offsets = [0.0, 0.0, 0.02, 0.02]
    base = [fake_run("grpo-4", s, [0, 1000, 2000], [0.40 + a, 0.50 + a, 0.60 + a]) for s, a in enumerate(offsets)]
    better = [fake_run("better", s, [0, 1000, 2000], [0.41 + a, 0.51 + a, 0.61 + a]) for s, a in enumerate(offsets)]
    rows = {row["key"]: row for row in learning_report.summarise([*base, *better])}
    assert list(rows["better"])[:5] == ["key", "method", "seeds", "auc_delta", "auc_delta_ci"]
    assert rows["better"]["auc_delta"] == pytest.approx(0.01)
    assert rows["better"]["auc_delta_ci"] == [pytest.approx(0.01), pytest.approx(0.01)]  # paired: the seeds cancel
    assert rows["better"]["acc_delta_at_25"] == pytest.approx(0.01)
    assert rows["better"]["comparison_token_budget"] == 2000 and rows["better"]["short_of_budget"] is False
    floor = learning_stats.aa_floor(base)
    table = learning_report.markdown_table(list(rows.values()), floor)
    assert "| grpo-4 | 4 | baseline |" in table
    assert "| BETTER | 4 | +0.010 [+0.010, +0.010] | +0.010 [+0.010, +0.010] |" in table
    # Two seeds on each side: +0.02, 0 or -0.02 for the split that puts both high seeds on one side.
    assert "| *A/A floor: GRPO n=4 against itself, 95% range* | 2 vs 2 | [-0.020, +0.020] |" in table
    assert "A/A floor: GRPO n=4's 4 seeds split at random into two halves of 2" in table
    assert "pass@" not in table  # no run recorded per-prompt counts
    few = learning_report.summarise([*base[:2], *better[:2]])
    assert "cannot be computed from 2 GRPO n=4 seeds" in learning_report.markdown_table(few, None)


def test_the_papers_pairings_compare_each_method_with_its_own_reference():
    # GRPO n=8 over four seeds, two 0.02 above the other two; Ada-Est is each seed's GRPO n=8 curve + 0.03 and its
    # unweighted variant each seed's + 0.02, all at twice GRPO n=4's tokens. Against GRPO n=8 (its budget, 2000
    # tokens, and its last step): +0.03 everywhere; against the unweighted variant: +0.01. GRPO n=16 did not run, so
    # neither did any pairing with it; the floor is GRPO n=8's own seeds against themselves, as for GRPO n=4.
    offsets = [0.0, 0.0, 0.02, 0.02]

    def runs(key, lift, tokens=(0, 1000, 2000)):
        return [
            fake_run(key, s, list(tokens), [0.40 + a + lift, 0.50 + a + lift, 0.60 + a + lift])
            for s, a in enumerate(offsets)
        ]

    everything = [
        *runs("grpo-4", 0.0, (0, 500, 1000)),
        *runs("grpo-8", 0.0),
        *runs("est-8", 0.03),
        *runs("est-8-noweight", 0.02),
        *runs("seq-positive-8x4", 0.05),
    ]
    rows, floors = learning_report.paired_comparisons(everything)
    assert [(row["key"], row["reference"]) for row in rows] == [("est-8", "grpo-8"), ("est-8", "est-8-noweight")]
    versus_grpo8, versus_noweight = rows
    assert versus_grpo8["comparison_token_budget"] == 2000 and versus_grpo8["seeds"] == [0, 1, 2, 3]
    assert versus_grpo8["auc_delta"] == pytest.approx(0.03)
    assert versus_grpo8["auc_delta_ci"] == [pytest.approx(0.03)] * 2  # paired: the seeds' offsets cancel
    assert versus_grpo8["acc_delta_equal_steps"] == pytest.approx(0.03)
    assert versus_noweight["auc_delta"] == pytest.approx(0.01)
    assert versus_noweight["acc_delta_at_50"] == pytest.approx(0.01)
    assert set(floors) == {"grpo-8", "est-8-noweight"}
    assert floors["grpo-8"]["aa_floor"]["auc_delta"]["range"] == [pytest.approx(-0.02), pytest.approx(0.02)]
    assert floors["grpo-8"]["heldout_aa_floor"] is None  # no held-out samples given
    section = learning_report.pairings_section(rows, floors)
    assert "Against grpo-8 (`grpo-8`):" in section and "Against est-8-noweight (`est-8-noweight`):" in section
    assert "| est-8 | 4 | +0.030 [+0.030, +0.030] |" in section
    assert "| *A/A floor: grpo-8 against itself, 95% range* | 2 vs 2 | [-0.020, +0.020] |" in section
    assert learning_report.pairings_section([], {}) is None


def test_summary_reads_heldout_measures_where_every_run_recorded_them():
    def recorded(key, seed, correct, entropy):
        run = fake_run(key, seed, [0, 1000, 2000], [0.40, 0.50, 0.60])
        for point in run["checkpoints"]:
            point |= {"correct": correct, "accuracy_by_label": {"2": 0.5}, "entropy": entropy}
        return run

    # Two prompts, 8 samples: 1 and 8 right, pass@1 (1 + 8) / 16, pass@8 1 for both, pass@32 undefined.
    runs = [recorded("grpo-4", s, [1, 8], 1.2) for s in (0, 1)] + [recorded("ada", s, [1, 8], 0.6) for s in (0, 1)]
    runs.append(fake_run("old", 0, [0, 1000, 2000], [0.4, 0.5, 0.6]))
    runs.append(fake_run("old", 1, [0, 1000, 2000], [0.4, 0.5, 0.6]))
    rows = {row["key"]: row for row in learning_report.summarise(runs, heldout_samples=8)}
    assert rows["ada"]["pass_at_k"] == {"1": pytest.approx(9 / 16), "8": 1.0, "32": None}
    assert rows["ada"]["entropy"] == pytest.approx(0.6) and rows["ada"]["heldout_step"] == 20
    assert rows["old"]["pass_at_k"] == {"1": None, "8": None, "32": None} and rows["old"]["entropy"] is None
    table = learning_report.markdown_table(list(rows.values()))
    assert "| method | at step | pass@1 | pass@8 | pass@32 |" in table
    assert "| ADA | 20 | 0.562 | 1.000 |  | 0.600 → 0.600 | 2: 0.500 |" in table
    assert "| OLD | 20 |  |  |  |  |  |" in table
    # Against GRPO n=4 in both frames: entropy 0.6 against 1.2 on every seed, -0.6 with an interval of one point;
    # pass@1 and pass@8 level. The runs without these measures get no row.
    versus = rows["ada"]["heldout_vs_baseline"]
    assert versus["equal_tokens"]["entropy"] == {"delta": pytest.approx(-0.6), "ci": [pytest.approx(-0.6)] * 2}
    assert versus["equal_steps"]["pass@8"]["delta"] == pytest.approx(0.0)
    assert "heldout_vs_baseline" not in rows["grpo-4"]
    assert "| method | frame | Δ pass@1 | Δ pass@8 | Δ entropy | Δ accuracy:2 |" in table
    assert (
        "| ADA | equal steps | +0.000 [+0.000, +0.000] | +0.000 [+0.000, +0.000] | -0.600 [-0.600, -0.600] |" in table
    )
    assert "| OLD | equal" not in table


def test_combine_summarises_a_committed_report_and_reproduces_its_aa_floor(tmp_path):
    # A report written before the comparison existed: its new columns come from its curves alone. Point estimates
    # as benchmarks/README.md's reasoning-task section reads them; the A/A ranges as 2,000 splits give them.
    report = learning_catalog.RESULTS / "reasoning" / "learning_per_token_reasoning_memory.json.gz"
    argv = ["--combine", str(report), "--output-dir", str(tmp_path), "--name", "memory"]
    combined = learning_per_token.main(argv)
    rows = {row["key"]: row for row in combined["summary"]}
    memory = rows["memory-2"]
    assert memory["auc_delta"] == pytest.approx(0.0031, abs=1e-4)
    assert (
        memory["tokens_to_final_ratio"] == pytest.approx(0.83, abs=0.005)
        and memory["tokens_to_final_ratio_ci"][1] is None
    )
    floor = combined["aa_floor"]
    assert floor["auc_delta"]["range"] == [pytest.approx(-0.006, abs=5e-4), pytest.approx(0.006, abs=5e-4)]
    assert floor["tokens_to_75_ratio"]["range"] == [pytest.approx(0.75, abs=0.005), pytest.approx(1.30, abs=0.005)]
    assert floor["tokens_to_final_ratio"]["never_reached"] == pytest.approx(0.47, abs=0.01)
    assert "| *A/A floor" in (tmp_path / "memory.md").read_text()


def test_combine_pools_reports_that_differ_only_in_what_they_measure():
    def runs(seeds):
        return [fake_run("grpo-4", seed, [0, 1000], [0.4, 0.5]) for seed in seeds]

    old, new = fake_report([0], runs([0])), fake_report([1], runs([1]), {"heldout_entropy": True})
    assert len(learning_per_token.combine_reports([old, new], None)) == 2


def test_combine_drop_seeds_leaves_those_seeds_out_of_every_method(tmp_path, capsys):
    # "ada" ends 0.10 above GRPO n=4 on seeds 0-2 and 0.10 below on seed 3: over all four seeds its final accuracy is
    # +0.05 ahead; without seed 3, +0.10.
    def grpo(seed):
        return fake_run("grpo-4", seed, [0, 1000, 2000], [0.40, 0.45, 0.50])

    def ada(seed):
        return fake_run("seq-positive-8x4", seed, [0, 1000, 2000], [0.40, 0.45, 0.40 if seed == 3 else 0.60])

    path = tmp_path / "r.json"
    path.write_text(json.dumps(fake_report([0, 1, 2, 3], [*map(grpo, range(4)), *map(ada, range(4))])))
    out = ["--output-dir", str(tmp_path)]
    every = learning_per_token.main(["--combine", str(path), *out, "--name", "every"])
    kept = learning_per_token.main(["--combine", str(path), "--drop-seeds", "3", *out, "--name", "kept"])
    final = {
        name: {row["key"]: row["final_accuracy"] for row in report["summary"]}
        for name, report in (("every", every), ("kept", kept))
    }
    assert final["every"]["seq-positive-8x4"] - final["every"]["grpo-4"] == pytest.approx(0.05)
    assert final["kept"]["seq-positive-8x4"] - final["kept"]["grpo-4"] == pytest.approx(0.10)
    assert kept["seeds"] == [0, 1, 2] and kept["dropped_seeds"] == [3] and "dropped_seeds" not in every
    assert all(row["seeds"] == [0, 1, 2] for row in kept["summary"])
    # Without --combine it would be ignored: refused.
    with pytest.raises(SystemExit) as exit_info:
        learning_per_token.parse_args(["--seeds", "0", "1", "--drop-seeds", "1"])
    assert exit_info.value.code == 2 and "--drop-seeds leaves seeds out of a --combine" in capsys.readouterr().err


def test_combine_refuses_training_flags_it_would_ignore(capsys):
    with pytest.raises(SystemExit) as exit_info:
        learning_per_token.parse_args(["--combine", "a.json", "--seeds", "0", "1", "--learning-rate", "2e-4"])
    assert exit_info.value.code == 2
    assert "drop --seeds, --learning-rate" in capsys.readouterr().err
    # The options that shape the summary stay allowed.
    args = learning_per_token.parse_args(["--combine", "a.json", "--methods", "grpo-4", "--name", "all"])
    assert args.methods == ["grpo-4"] and args.name == "all"


def test_paired_bootstrap_intervals_hand_worked():
    base = [fake_run("grpo-4", s, [0, 1000, 2000], [0.40, 0.40 + a, 0.50 + a]) for s, a in enumerate([0.0, 0.04])]
    # Final accuracies 0.60 and 0.68 on seeds 0 and 1: a resample's mean final is 0.60, 0.64 or 0.68, the two ends
    # each with probability 1/4, so the 95% interval is [0.60, 0.68].
    fast = [fake_run("ada", s, [0, 500, 1000], [0.40, 0.40 + a, 0.60 + 2 * a]) for s, a in enumerate([0.0, 0.04])]
    intervals = learning_stats.paired_bootstrap(base, fast, resamples=400)
    assert intervals["final_accuracy_ci"] == [pytest.approx(0.60), pytest.approx(0.68)]
    # The baseline's curves at half the tokens, seed by seed: every resample's ratio is 0.5.
    copies = [fake_run("ada", s, [0, 500, 1000], [0.40, 0.40 + a, 0.50 + a]) for s, a in enumerate([0.0, 0.04])]
    same_shape = learning_stats.paired_bootstrap(base, copies, resamples=400)
    assert same_shape["tokens_ratio_ci"] == [pytest.approx(0.5), pytest.approx(0.5)]
    assert same_shape["seconds_ratio_ci"] == [pytest.approx(0.5), pytest.approx(0.5)]
    # A method that never reaches the target has no finite upper bound.
    slow = [fake_run("slow", s, [0, 1000, 2000], [0.40, 0.41, 0.42]) for s in range(2)]
    assert learning_stats.paired_bootstrap(base, slow, resamples=50)["tokens_ratio_ci"] == [None, None]
    with pytest.raises(ValueError, match="no seed"):
        learning_stats.paired_bootstrap(base, [fake_run("ada", 7, [0, 10], [0.4, 0.5])])
    rows = {row["key"]: row for row in learning_report.summarise([*base, *copies])}
    assert (
        rows["ada"]["tokens_ratio"] == pytest.approx(0.5)
        and rows["ada"]["tokens_ratio_ci"] == same_shape["tokens_ratio_ci"]
    )
    assert rows["grpo-4"]["tokens_ratio_ci"] == [1.0, 1.0]  # the baseline against itself


def test_token_matched_summary_reads_every_curve_at_the_baselines_tokens():
    base = [fake_run("grpo-4", s, [0, 1000, 2000], [0.40, 0.45 + a, 0.50 + a]) for s, a in enumerate([0.0, 0.02])]
    # Half the tokens per step, three times the steps: seed-averaged tokens [0, 500, ..., 3000], accuracy
    # 0.40, 0.44, 0.48, 0.52, 0.56, 0.58, 0.60 (+0.01 on average). Target 0.51 (GRPO's mean final) is crossed at
    # 1000 + (0.51 - 0.49) / (0.53 - 0.49) * 500 = 1250 tokens; the budget, 2000 tokens, lands on the checkpoint
    # at step 40 with accuracy 0.57.
    cheap = [
        fake_run(
            "cheap",
            s,
            [0, 500, 1000, 1500, 2000, 2500, 3000],
            [0.40] + [v + a for v in (0.44, 0.48, 0.52, 0.56, 0.58, 0.60)],
        )
        for s, a in enumerate([0.0, 0.02])
    ]
    rows = {row["key"]: row for row in learning_report.summarise([*base, *cheap], match_tokens=True)}
    assert rows["cheap"]["token_budget"] == pytest.approx(2000)
    assert rows["cheap"]["tokens_to_target"] == pytest.approx(1250)
    assert rows["cheap"]["tokens_ratio"] == pytest.approx(1250 / 2000)
    assert rows["cheap"]["final_accuracy"] == pytest.approx(0.57)
    assert rows["cheap"]["final_accuracy_per_seed"] == [pytest.approx(0.56), pytest.approx(0.58)]
    assert rows["cheap"]["steps_at_budget"] == 40 and rows["cheap"]["steps"] == 60
    assert rows["cheap"]["tokens_total"] == pytest.approx(2000)
    # Read to their ends instead, the curves give the final accuracy after 60 steps.
    whole = {row["key"]: row for row in learning_report.summarise([*base, *cheap])}
    assert whole["cheap"]["final_accuracy"] == pytest.approx(0.61) and whole["cheap"]["token_budget"] is None
    # Every resample's final accuracy is read at its own baseline budget (2000 tokens here, for every resample).
    ci = learning_stats.paired_bootstrap(base, cheap, resamples=400, match_tokens=True)
    assert ci["final_accuracy_ci"] == [pytest.approx(0.56), pytest.approx(0.58)]
    table = learning_report.markdown_table(list(rows.values()))
    assert "| CHEAP | 40 of 60 |" in table


def test_method_steps_extends_all_but_the_baseline_to_whole_evaluation_intervals(tmp_path):
    settings = {"steps": 200, "eval_every": 10, "match_tokens": 1.37}
    assert learning_runs.method_steps(settings, "grpo-4") == 200
    assert learning_runs.method_steps(settings, "seq-positive-4x2") == 280  # 274 rounded up to a multiple of 10
    # At least twice GRPO n=4's tokens a step: they pass its budget within its steps, so they train its steps.
    for key in ("grpo-8", "grpo-16", "seq-balanced-8x4", "est-8"):
        assert learning_runs.method_steps(settings, key) == 200
    assert learning_runs.method_steps({**settings, "match_tokens": None}, "seq-positive-4x2") == 200
    with pytest.raises(SystemExit, match="at least 1"):
        learning_per_token.main(["--match-tokens", "0.5"])
    with pytest.raises(SystemExit, match="give one"):
        learning_per_token.main(["--model-dir", "somewhere", "--warm-seed", "1", "--output-dir", str(tmp_path)])


def test_list_tasks_prints_one_task_a_line(capsys):
    tasks = ["arithmetic", "columns", "columns-epochs"]
    assert learning_per_token.main(["--list-tasks"]) == {"tasks": tasks}
    assert capsys.readouterr().out == "".join(f"{task}\n" for task in tasks)


def test_method_shape_keeps_completions_per_run_and_evaluation_points():
    settings = {"steps": 200, "eval_every": 10, "match_tokens": 1.4, "prompts_per_step": 16}
    # GRPO n=4: 16 prompts x 4 = 64 completions a step. n=2 over 32 prompts: also 64, so the same steps (extended as
    # every non-baseline method's are). n=4 over 8 prompts: 32, so twice the steps, evaluated every 20.
    assert learning_runs.method_shape(settings, "grpo-4") == (200, 16, 10)
    assert learning_runs.method_shape(settings, "memory-2") == (280, 32, 10)
    assert learning_runs.method_shape(settings, "grpo-2-wide") == (280, 32, 10)
    assert learning_runs.method_shape(settings, "memory-2-select") == (280, 32, 10)
    assert learning_runs.method_shape(settings, "memory-2-lr2") == (280, 32, 10)
    assert learning_runs.method_shape(settings, "memory-2-lr1.25") == (280, 32, 10)
    assert learning_runs.method_shape(settings, "grpo-4-narrow") == (560, 8, 20)
    assert learning_runs.method_shape({**settings, "prompts_per_step": 8}, "grpo-4-narrow") == (560, 4, 20)
    with pytest.raises(SystemExit, match="grpo-4-narrow"):
        learning_runs.method_shape({**settings, "prompts_per_step": 5}, "grpo-4-narrow")


def test_memory_methods_use_the_memory_baseline(tmp_path):
    from trl_ada.tools.demo import _toy_config, _toy_settings

    method, _ = learning_catalog.CATALOG["memory-2"]
    settings = _toy_settings(method, 64, 10, 32, 0, 1e-4, "none", tmp_path, 1)
    config, _ = _toy_config(method, settings, 8, 4)
    assert (config.advantage_baseline, config.num_generations, config.sampling_strategy) == ("memory", 2, "uniform")
    assert config.per_device_train_batch_size == 64
    method, _ = learning_catalog.CATALOG["memory-2-select"]
    config, _ = _toy_config(method, _toy_settings(method, 64, 10, 32, 0, 1e-4, "none", tmp_path, 1), 8, 4)
    assert (config.advantage_baseline, config.prompt_selection, config.selection_threshold) == (
        "memory",
        "pass_rate",
        0.75,
    )


def test_a_methods_own_learning_rate_overrides_the_shared_one(tmp_path):
    from trl import GRPOConfig

    from trl_ada import ReinforceAdaConfig
    from trl_ada.tools.demo import _toy_config, _toy_settings

    def config_of(key):
        method, _ = learning_catalog.CATALOG[key]
        return _toy_config(method, _toy_settings(method, 64, 10, 16, 0, 1e-4, "none", tmp_path, 1), 8, 4)[0]

    assert type(config_of("grpo-4-lr2")) is GRPOConfig and config_of("grpo-4-lr2").learning_rate == 2e-4
    assert config_of("grpo-4-lr1.5").learning_rate == 1.5e-4
    assert config_of("grpo-4-lr1.25").learning_rate == config_of("memory-2-lr1.25").learning_rate == 1.25e-4
    dapo = config_of("dapo-4-lr2")
    assert isinstance(dapo, ReinforceAdaConfig) and dapo.refill and dapo.learning_rate == 2e-4
    memory = config_of("memory-2-lr2")
    assert (memory.learning_rate, memory.advantage_baseline, memory.num_generations) == (2e-4, "memory", 2)
    # Everything else keeps the task's rate.
    assert config_of("grpo-4").learning_rate == config_of("memory-2").learning_rate == 1e-4


def test_a_retired_method_name_runs_its_configuration_under_its_current_name(capsys):
    """Every command a study wrote still runs: a retired key (`learning_catalog.RENAMED`) is accepted, said once and
    replaced by its configuration's current key."""
    methods = learning_per_token.parse_args(["--methods", "grpo-4", "recommended", "ada-est-noweight"]).methods
    assert methods == ["grpo-4", "seq-positive-4x2", "est-8-noweight"]
    out = capsys.readouterr().out
    assert "renamed: recommended is now seq-positive-4x2" in out
    assert "renamed: ada-est-noweight is now est-8-noweight" in out
    assert learning_catalog.EFFICIENT == "seq-positive-4x2"
    with pytest.raises(SystemExit):
        learning_per_token.parse_args(["--methods", "grpo-4", "no-such-method"])


def test_grpo_methods_take_grpo_config_fields_and_train_with_grpo_trainer(tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    from trl_ada import ReinforceAdaConfig
    from trl_ada.tools.demo import _toy_config, _toy_settings

    def config_of(key):
        method, _ = learning_catalog.CATALOG[key]
        settings = _toy_settings(method, 64, 10, 16, 0, 1e-4, "none", tmp_path, 1)
        return _toy_config(method, settings, 8, 4)

    reuse, reuse_class = config_of("grpo-4-reuse2")
    assert reuse_class is GRPOTrainer and type(reuse) is GRPOConfig and reuse.num_iterations == 2
    plain, _ = config_of("grpo-4")
    assert plain.num_iterations == 1
    pilot, _ = config_of("grpo-4-pilot")
    assert isinstance(pilot, ReinforceAdaConfig) and pilot.num_iterations == 1 and pilot.pilot_size == 2


def test_group_signal_probability_hand_worked():
    # 16 samples, 8 right: C(8, 4) = 70 all-right and 70 all-wrong groups of 4 among C(16, 4) = 1820.
    assert learning_runs.group_signal_probability(8, 16) == pytest.approx(1 - 140 / 1820)
    assert learning_runs.group_signal_probability(0, 16) == 0.0
    # 3 right: no group of 4 is all right (C(3, 4) = 0); C(13, 4) = 715 are all wrong.
    assert learning_runs.group_signal_probability(3, 16) == pytest.approx(1 - 715 / 1820)
    assert learning_runs.group_signal_probability(16, 16) == 0.0


def test_oracle_subsets_hand_worked():
    # Four prompts of 8 samples (groups of 4, C(8, 4) = 70): right 0, 4, 2, 8; mean lengths 40, 10, 20, 30.
    # P(signal): 0; 1 - (1 + 1) / 70 = 34/35; 1 - (0 + C(6, 4) = 15) / 70 = 11/14; 0.
    # Average signal per token: (34/35 + 11/14) / 100 = 0.01757; P / L: 0.0971 (kept), 0.0393 (kept), 0 and 0.
    subsets = learning_runs.oracle_subsets(["a", "b", "c", "d"], [0, 4, 2, 8], [40.0, 10.0, 20.0, 30.0], 8)
    assert subsets["agree"]["prompts"] == ["b", "c"]
    assert subsets["agree"]["token_share"] == pytest.approx(0.3) and subsets["agree"]["signal_share"] == 1.0
    assert subsets["signal_per_token"]["prompts"] == ["b", "c"]
    # With prompt c twice as long (40), its 11/14 / 40 = 0.0196 still beats (34/35 + 11/14) / 120 = 0.0146; at 80 it
    # does not (0.0098 against 0.0110), and the subset is b alone, holding 34/35 / (34/35 + 11/14) of the signal.
    longer = learning_runs.oracle_subsets(["a", "b", "c", "d"], [0, 4, 2, 8], [40.0, 10.0, 80.0, 30.0], 8)
    assert longer["signal_per_token"]["prompts"] == ["b"]
    assert longer["signal_per_token"]["signal_share"] == pytest.approx((34 / 35) / (34 / 35 + 11 / 14))
    assert longer["signal_per_token"]["token_share"] == pytest.approx(10 / 160)


def test_training_rows_keep_whole_epochs_over_the_subset_in_the_seeds_order():
    import random

    from testbeds.columns import problems

    from trl_ada.toy import toy_task

    task = toy_task("columns-epochs")
    full = task.train_rows(800, 3)
    contents = [prompt[-1]["content"] for prompt in full["prompt"]]
    keep = sorted(set(contents))[:50]  # 50 of the fixed set's 1,200 prompts
    rows = learning_runs.training_rows(task, 120, 3, keep)
    picked = [prompt[-1]["content"] for prompt in rows["prompt"]]
    # The seed's epochs, rebuilt as the task documents them: each a random.Random(seed) shuffle of the fixed set.
    fixed = problems.make_columns_dataset(problems.EPOCH_PROMPTS, seed=problems.TRAIN_SEED, split="train")
    train = [prompt[-1]["content"] for prompt in fixed["prompt"]]
    rng, expected = random.Random(3), []
    while len(expected) < 120:
        epoch = list(range(len(train)))
        rng.shuffle(epoch)
        expected += [train[i] for i in epoch if train[i] in set(keep)]
    assert picked == expected[:120]
    assert [sorted(picked[k : k + 50]) for k in (0, 50)] == [keep, keep]  # whole epochs over the subset
    assert learning_runs.training_rows(task, 16, 3)["prompt"] == full.select(range(16))["prompt"]


def test_summary_needs_the_baseline():
    with pytest.raises(ValueError, match="grpo-4"):
        learning_report.summarise([fake_run("seq-balanced-8x4", 0, [0, 10], [0.4, 0.5])])


def test_section_clock_charges_nested_time_to_the_inner_section(monkeypatch):
    now = iter([0.0, 1.0, 4.0, 6.0, 6.5, 7.0])  # enter A, enter B, exit B, exit A, enter C, exit C
    monkeypatch.setattr(time, "perf_counter", lambda: next(now))
    clock = overhead.SectionClock()
    with clock.section("A"):
        with clock.section("B"):
            pass
    with clock.section("C"):
        pass
    assert dict(clock.seconds) == {"A": 1.0 + 2.0, "B": 3.0, "C": 0.5}
    assert clock.calls == {"A": 1, "B": 1, "C": 1}


def test_breakdown_shares_exclude_evaluation():
    seconds = {"engine": 1.0, "generation": 6.0, "loss forward + backward": 3.0, overhead.EVALUATION: 100.0}
    result = overhead.breakdown(seconds, steps=2)
    assert result["step_seconds"] == pytest.approx(5.0)
    assert result["ours_over_total"] == pytest.approx(0.1)
    assert result["share"]["generation"] == pytest.approx(0.6)
    assert result["ms_per_step"]["engine"] == pytest.approx(500.0)


# --------------------------------------------------------------------------------------------------------------------
# Tiny real runs (untrained toy model)
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_token_counter_and_prompts_agree_with_independent_records(toy_cold_dir, tmp_path):
    from trl import GRPOTrainer

    from trl_ada import ReinforceAdaTrainer
    from trl_ada.tools.demo import train_toy
    from trl_ada.toy import make_arithmetic_dataset

    steps, prompts_per_step = 3, 4
    train = make_arithmetic_dataset(steps * prompts_per_step, seed=5, split="train")
    heldout = make_arithmetic_dataset(8, seed=6, split="eval")
    prompts_seen: dict[str, list[list[str]]] = {}
    trainers = {}

    def recording(base, key):
        class Recording(base):  # the distinct prompts of every training step, in order
            def _generate_and_score_completions(self, inputs):
                contents = list(dict.fromkeys(row["prompt"][-1]["content"] for row in inputs))
                prompts_seen.setdefault(key, []).append(sorted(contents))
                return super()._generate_and_score_completions(inputs)

        return Recording

    runs = {}
    for key, base in (("grpo-4", GRPOTrainer), ("grpo-16", GRPOTrainer), ("seq-balanced-8x4", ReinforceAdaTrainer)):
        runs[key] = train_toy(
            key,
            toy_cold_dir,
            train,
            heldout,
            steps=steps,
            prompts_per_step=prompts_per_step,
            eval_every=2,
            heldout_samples=1,
            output_dir=tmp_path / key,
            verbose=False,
            trainer_class=recording(base, key),
            before_train=lambda trainer, key=key: trainers.__setitem__(key, trainer),
        )

    for key, run in runs.items():
        state = trainers[key].state
        # TRL adds prompt + completion tokens of every generation call to num_input_tokens_seen.
        assert run.generated.prompt_tokens + run.generated.completion_tokens == state.num_input_tokens_seen
        assert [c.step for c in run.checkpoints] == [0, 2, 3]
        assert run.checkpoints[0].tokens == 0 and run.checkpoints[-1].tokens == run.generated.completion_tokens
        pairs = list(itertools.pairwise(run.checkpoints))
        assert all(a.tokens <= b.tokens and a.seconds <= b.seconds for a, b in pairs)
        assert run.accuracy_before == runs["grpo-4"].accuracy_before  # same start, same evaluation seed
    assert runs["grpo-4"].generated.completions == steps * prompts_per_step * 4
    assert runs["grpo-16"].generated.completions == steps * prompts_per_step * 16
    # Ada: the logged samples per prompt, step by step, times the prompts of the step.
    ada_logs = [row for row in trainers["seq-balanced-8x4"].state.log_history if "ada/samples_per_prompt" in row]
    assert len(ada_logs) == steps
    drawn = sum(row["ada/samples_per_prompt"] * prompts_per_step for row in ada_logs)
    assert runs["seq-balanced-8x4"].generated.completions == pytest.approx(drawn)
    assert runs["seq-balanced-8x4"].samples_per_prompt == pytest.approx(drawn / (steps * prompts_per_step))
    # Same prompts at every step for every method.
    assert len(prompts_seen["grpo-4"]) == steps
    assert prompts_seen["grpo-16"] == prompts_seen["grpo-4"] == prompts_seen["seq-balanced-8x4"]
    # shuffle=False (token-matched benchmark runs): the rows in their own order, so longer runs share the prefix.
    train_toy(
        "grpo-4",
        toy_cold_dir,
        train,
        heldout,
        steps=2,
        prompts_per_step=prompts_per_step,
        heldout_samples=1,
        output_dir=tmp_path / "ordered",
        verbose=False,
        trainer_class=recording(GRPOTrainer, "ordered"),
        shuffle=False,
    )
    contents = [row["prompt"][-1]["content"] for row in train]
    assert prompts_seen["ordered"] == [sorted(contents[:4]), sorted(contents[4:8])]
    assert prompts_seen["grpo-4"][:2] != prompts_seen["ordered"]  # TRL's seeded shuffle otherwise


@pytest.mark.slow
def test_learning_per_token_tiny_run_writes_consistent_results(toy_cold_dir, tmp_path):
    argv = ["--steps", "2", "--eval-every", "1", "--heldout", "8", "--heldout-samples", "1", "--seeds", "0", "1"]
    argv += ["--methods", "grpo-4", "seq-positive-8x4", "--jobs", "1", "--model-dir", str(toy_cold_dir)]
    report = learning_per_token.main([*argv, "--output-dir", str(tmp_path), "--name", "tiny"])
    saved = json.loads((tmp_path / "tiny.json").read_text())
    assert saved["summary"] == report["summary"]
    assert (tmp_path / "tiny.png").stat().st_size > 0
    assert "| seq-positive-8x4 |" in (tmp_path / "tiny.md").read_text()
    assert [(run["key"], run["seed"]) for run in saved["runs"]] == [
        ("grpo-4", 0),
        ("grpo-4", 1),
        ("seq-positive-8x4", 0),
        ("seq-positive-8x4", 1),
    ]
    for row in saved["summary"]:
        runs = [run for run in saved["runs"] if run["key"] == row["key"]]
        # Recount the totals from the runs' own counters.
        assert row["tokens_total"] == pytest.approx(sum(r["generated"]["completion_tokens"] for r in runs) / 2)
        assert row["final_accuracy_per_seed"] == [r["checkpoints"][-1]["accuracy"] for r in runs]
        assert row["target_accuracy"] == pytest.approx(
            sum(r["checkpoints"][-1]["accuracy"] for r in saved["runs"] if r["key"] == "grpo-4") / 2
        )
        # One sample per held-out prompt: pass@1 is the accuracy, pass@8 and pass@32 undefined; entropy on by default.
        assert row["pass_at_k"]["1"] == pytest.approx(row["final_accuracy"]) and row["pass_at_k"]["8"] is None
        assert row["entropy"] > 0 and row["entropy_before"] > 0
    for point in (c for run in saved["runs"] for c in run["checkpoints"]):
        assert len(point["correct"]) == 8 and sum(point["correct"]) / 8 == pytest.approx(point["accuracy"])
        assert set(point["accuracy_by_label"]) <= {"1", "2", "3"} and point["entropy"] > 0
    assert saved["aa_floor"] is None  # two seeds


@pytest.mark.slow
def test_learning_per_token_token_matched_run_reports_its_testbed(tmp_path):
    """The arithmetic task on its untrained model, token-matched: 8-token completions, and the start's measured
    testbed in the report."""
    from trl_ada.toy import toy_model_dir

    cold = toy_model_dir(tmp_path / "cache", warmup=False, task="arithmetic")
    argv = ["--task", "arithmetic", "--steps", "2", "--eval-every", "2", "--heldout", "4", "--heldout-samples", "1"]
    argv += ["--seeds", "0", "--methods", "grpo-4", "grpo-4-pilot", "--jobs", "1", "--model-dir", str(cold)]
    argv += ["--prompts-per-step", "2", "--match-tokens", "1.4"]
    report = learning_per_token.main([*argv, "--output-dir", str(tmp_path), "--name", "tiny"])
    testbed = json.loads((tmp_path / "tiny.json").read_text())["testbed"]
    assert (
        testbed == report["testbed"] and testbed["task"] == "arithmetic" and report["settings"]["task"] == "arithmetic"
    )
    for key in ("frac_all_correct_n4", "frac_all_wrong_n4", "len_p90_over_p10"):
        assert 0 <= testbed[key] < float("inf")
    assert testbed["prompts"] == 4 and testbed["visits_per_prompt"] == 1.0  # 2 steps x 2 prompts: a part epoch
    assert testbed["mean_len_wrong"] > 0 and testbed["mean_len"] <= 8
    assert report["runs"][0]["generated"]["completion_tokens"] <= 2 * 2 * 4 * 8
    # Token-matched: the other method trains 1.4 x 2 steps, rounded up to 4, and every curve is read up to GRPO n=4's
    # tokens.
    grpo, pilot = report["runs"]
    assert report["settings"]["match_tokens"] == 1.4
    assert [c["step"] for c in grpo["checkpoints"]] == [0, 2] and [c["step"] for c in pilot["checkpoints"]] == [
        0,
        2,
        4,
    ]
    rows = {row["key"]: row for row in report["summary"]}
    budget = grpo["generated"]["completion_tokens"]
    assert rows["grpo-4-pilot"]["token_budget"] == pytest.approx(budget)
    assert rows["grpo-4-pilot"]["tokens_total"] == pytest.approx(min(budget, pilot["generated"]["completion_tokens"]))
    assert "Testbed at the start" in (tmp_path / "tiny.md").read_text()


@pytest.mark.slow
def test_columns_task_runs_on_one_grid_and_a_baseline_must_reproduce(tmp_path):
    """The columns task on its untrained model: every run evaluated on the shared grid with its chain measures, the
    grid report's rows and floors, and --baseline-from's check that the baseline's first seed trains the same
    numbers here (passes as it is, refuses a report whose numbers were altered)."""
    from learning_reproduce import check_reproduces

    from trl_ada.toy import toy_model_dir

    cold = toy_model_dir(tmp_path / "cache", warmup=False, task="columns")
    argv = ["--task", "columns", "--steps", "3", "--heldout", "8", "--heldout-samples", "2", "--prompts-per-step", "2"]
    argv += ["--seeds", "0", "1", "2", "3", "--methods", "grpo-4", "seq-positive-4x2", "--jobs", "1"]
    argv += ["--model-dir", str(cold), "--no-heldout-entropy"]
    report = learning_per_token.main([*argv, "--output-dir", str(tmp_path), "--name", "tiny"])
    settings = report["settings"]
    grid = {"tokens": settings["token_grid"], "steps": settings["step_grid"]}
    # B: 0.97 of 3 steps x 2 prompts x 4 completions x 14 tokens; the steps, geometric up to the 3rd.
    assert grid["tokens"][-1] == round(0.97 * 3 * 2 * 4 * 14) and grid["steps"] == [1, 2, 3]
    for run in report["runs"]:
        served = sorted(i for c in run["checkpoints"] for i in c.get("token_points", ()))
        assert served == sorted(set(served))  # no point served twice
        for c in run["checkpoints"]:
            assert 0 <= c["chain_accuracy"] <= c["accuracy"] <= 1  # a correct chain is always rewarded
            assert len(c["chain_correct"]) == 8 and sum(c["chain_correct"]) / 16 == pytest.approx(c["chain_accuracy"])
            assert "flawed_rewarded_share" in c
            # the mix splits into the hard rules' skill and the easy rules' retention
            assert c["chain_accuracy"] == pytest.approx((c["skill_accuracy"] + c["retention_accuracy"]) / 2)
        trained = run["checkpoints"][-1]["step"] * 2  # prompts, over the steps the run trained
        assert run["completions_per_trained_prompt"] == pytest.approx(run["generated"]["completions"] / trained)
        steps = [c["step"] for c in run["checkpoints"] if c.get("step_point")]
        assert steps == [0, 1, 2, 3]
    grpo = [run for run in report["runs"] if run["key"] == "grpo-4"]
    assert all(sorted(i for c in run["checkpoints"] for i in c["token_points"]) == list(range(len(grid["tokens"])))
               for run in grpo)  # fmt: skip
    rows = {row["key"]: row for row in report["summary"]}
    assert set(rows["grpo-4"]["hard_chain_gain"]) == {"&", "~"}
    assert "auc_delta" in rows["seq-positive-4x2"] and "steps_to_90_ratio_resolved" in rows["seq-positive-4x2"]
    assert report["aa_floor"]["splits"] == 6  # C(4, 2) ordered pairs of halves
    assert report["testbed"]["instrument_samples_per_prompt"] == 128
    assert report["testbed"]["heldout_fact_overlap"] == 0.0
    assert "Correct-chain accuracy" in (tmp_path / "tiny.md").read_text()
    (skill,) = report["skill"]  # recommended against GRPO n=4, read on skill, retention and mix in every frame
    assert (skill["method"], skill["partner"], skill["warm_models"]) == ("seq-positive-4x2", "grpo-4", [None])
    measures = skill["per_warm"]["None"]["measures"]
    assert sorted(measures) == ["mix", "retention", "skill"]
    assert all(sorted(measures[m]) == ["budget", "equal_steps", "whole"] for m in measures)
    assert (
        len(report["retention_drop"]["per_seed"]) == 4
        and "GRPO n=4's retention drop" in (tmp_path / "tiny.md").read_text()
    )

    check_reproduces(report, settings, "grpo-4", [0, 1])  # the same code and kernels: the same numbers
    # --combine pools a chunk made at another commit only if this code trains its numbers again
    saved = json.loads((tmp_path / "tiny.json").read_text())
    for name, seeds, code in (("early", {0, 1}, saved["machine"]["code"]), ("late", {2, 3}, "0000000")):
        chunk = saved | {"runs": [r for r in saved["runs"] if r["seed"] in seeds], "seeds": sorted(seeds)}
        (tmp_path / f"{name}.json").write_text(json.dumps(chunk | {"machine": saved["machine"] | {"code": code}}))
    chunks = [str(tmp_path / "early.json"), str(tmp_path / "late.json")]
    both = learning_per_token.main(["--combine", *chunks, "--output-dir", str(tmp_path), "--name", "both"])
    assert [c["machine"]["code"] for c in both["combined"]] == [saved["machine"]["code"], "0000000"]
    late = json.loads((tmp_path / "late.json").read_text())
    late["runs"][0]["checkpoints"][1]["entropy"] = 0.5  # a number this code does not train
    (tmp_path / "late.json").write_text(json.dumps(late))
    with pytest.raises(SystemExit, match=r"--combine \(late.json\): grpo-4 seed 2 does not reproduce"):
        learning_per_token.main(["--combine", *chunks, "--output-dir", str(tmp_path), "--name", "refused"])
    report["runs"][0]["checkpoints"][1]["chain_accuracy"] += 0.25
    with pytest.raises(SystemExit, match="does not reproduce"):
        check_reproduces(report, settings, "grpo-4", [0])


def test_learning_per_token_testbed_only_trains_nothing(tmp_path):
    from trl_ada.toy import toy_model_dir

    cold = toy_model_dir(tmp_path / "cache", warmup=False, task="arithmetic")
    argv = ["--task", "arithmetic", "--steps", "2", "--prompts-per-step", "2", "--model-dir", str(cold)]
    report = learning_per_token.main([*argv, "--testbed-only", "--output-dir", str(tmp_path), "--name", "bed"])
    saved = json.loads((tmp_path / "bed.json").read_text())
    assert saved == report and "runs" not in saved and "summary" not in saved
    assert saved["testbed"]["prompts"] == 4 and saved["testbed"]["samples_per_prompt"] == 16
    assert not (tmp_path / "bed.md").exists()


@pytest.mark.slow
def test_overhead_tiny_run_times_both_layers_and_restores_the_trainer(toy_cold_dir, tmp_path):
    from trl_ada.adapter.schedules import rounds
    from trl_ada.core import advantages, engine, step

    originals = {"of": engine.Tally.__dict__["of"], "metrics": engine.Tally.metrics, "add": rounds.Rollouts.add}
    argv = ["--steps", "2", "--repeats", "1", "--threads", "1", "--model-dir", str(toy_cold_dir)]
    report = overhead.main([*argv, "--output-dir", str(tmp_path), "--name", "tiny"])
    ada, grpo = report["results"]["Ada-balanced"], report["results"]["GRPO n=4"]
    assert grpo["completions_per_step"] == 16 * 4  # one round of 4 per prompt
    assert 16 * 8 <= ada["completions_per_step"] <= 16 * 32  # between one and four rounds of 8
    assert ada["ms_per_step"]["engine"] > 0 and ada["ms_per_step"]["advantages"] > 0
    assert all(grpo["ms_per_step"][name] == 0 for name in overhead.OURS)  # GRPO never enters our code
    assert grpo["ms_per_step"]["generation"] > 0 and grpo["ms_per_step"]["loss forward + backward"] > 0
    assert report["ada_over_grpo_step_time"] == pytest.approx(ada["step_seconds"] / grpo["step_seconds"])
    # The patched names are back to the originals.
    assert rounds.sample is engine.sample and step.downsample is engine.downsample
    assert step.pool_advantages is advantages.pool_advantages
    assert engine.Tally.__dict__["of"] is originals["of"] and engine.Tally.metrics is originals["metrics"]
    assert rounds.Rollouts.add is originals["add"]
    assert "ours / Ada step time" in (tmp_path / "tiny.md").read_text()


def test_the_claims_methods_build_the_papers_configurations():
    """Each method of the claims table builds the configuration its row names, and the ones that generate at least
    twice GRPO n=4's tokens a step train its steps."""
    import warnings

    from trl_ada.tools.demo import _toy_config, _toy_settings

    expected = {  # key -> (trainer, strategy, weighting, allocation, group)
        "est-8": ("ReinforceAdaTrainer", "estimate", "inv_sqrt_p", "inv_sqrt_p", 4),
        "est-8-noweight": ("ReinforceAdaTrainer", "estimate", "none", "inv_sqrt_p", 4),
        "est-8-invp": ("ReinforceAdaTrainer", "estimate", "inv_sqrt_p", "inv_p", 4),
        "seq-positive-8x4-weight": ("ReinforceAdaTrainer", "positive", "inv_sqrt_p", None, 4),
        "seq-balanced-8x4-weight": ("ReinforceAdaTrainer", "balanced", "inv_sqrt_p", None, 4),
        "grpo-6": ("GRPOTrainer", None, None, None, 6),
        "grpo-10": ("GRPOTrainer", None, None, None, 10),
        "grpo-12": ("GRPOTrainer", None, None, None, 12),
        "grpo-26": ("GRPOTrainer", None, None, None, 26),
        "grpo-11": ("GRPOTrainer", None, None, None, 11),
        "grpo-20": ("GRPOTrainer", None, None, None, 20),
    }
    for key, (trainer, strategy, weighting, allocation, group) in expected.items():
        spec = learning_catalog.CATALOG[key][0]
        settings = _toy_settings(spec, 32, 10, 16, 0, 1e-4, "none", "unused", 1)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no "field ignored" or "budget equals the group" warning
            config, trainer_class = _toy_config(spec, settings, 8, 4)
        assert trainer_class.__name__ == trainer and config.num_generations == group
        if strategy is not None:
            assert (config.sampling_strategy, config.difficulty_weighting) == (strategy, weighting)
        if allocation is not None:
            assert (config.allocation_rule, config.samples_per_prompt_mean) == (allocation, 8)
        assert key in learning_catalog.EQUAL_STEPS


def test_reproduction_checks_compare_every_measured_field_and_the_checkpoint_count():
    from learning_reproduce import first_difference, start_model

    from trl_ada.toy import toy_model_dir

    stored = [{"step": 0, "tokens": 0, "entropy": 0.25}, {"step": 8, "tokens": 900, "entropy": 0.2}]
    assert first_difference(stored, [dict(c) for c in stored]) is None
    drifted = [dict(stored[0]), dict(stored[1], entropy=0.21)]  # entropy is measured, and compared
    assert first_difference(stored, drifted) == {
        "checkpoint": 1,
        "step": 8,
        "field": "entropy",
        "stored": 0.2,
        "rerun": 0.21,
    }
    shorter = first_difference(stored, stored[:1])  # every shared checkpoint matches, one is missing
    assert shorter == {"checkpoint": 1, "step": 8, "field": "checkpoints", "stored": 2, "rerun": 1}
    # A report names its start model by task and warm seed: a rerun finds it on this checkout, not at the folder of
    # the machine that made the report; a report started from a named folder keeps it.
    elsewhere = {"task": "columns", "warm_seed": 0, "model_dir": "/another/machine/toy_warm_columns"}
    assert start_model(elsewhere)["model_dir"] == toy_model_dir(seed=0, task="columns")
    named = dict(elsewhere, warm_seed=None)
    assert start_model(named) == named


def test_a_gzipped_report_reads_as_the_plain_one(tmp_path):
    """Chunks kept as ``.json.gz`` combine as their plain JSON does."""
    import gzip

    report = fake_report([0, 1], [])
    (tmp_path / "plain.json").write_text(json.dumps(report))
    with gzip.open(tmp_path / "chunk.json.gz", "wt") as file:
        json.dump(report, file)
    plain = learning_report.read_report(tmp_path / "plain.json")
    assert learning_report.read_report(tmp_path / "chunk.json.gz") == plain == json.loads(json.dumps(report))


def test_a_report_named_as_written_reads_its_gzipped_copy_and_its_plot_is_drawn_again(tmp_path):
    """The results keep reports as ``.json.gz`` and a plot only where a study shows it: a command naming ``r.json``
    reads ``r.json.gz``, and ``--plot`` draws the report's plot again, next to it, as the run drew it."""
    import gzip

    runs = [fake_run("grpo-4", seed, [0, 1000], [0.4, 0.5 + seed / 100]) for seed in (0, 1)]
    (tmp_path / "in.json").write_text(json.dumps(fake_report([0, 1], runs)))
    learning_per_token.main(["--combine", str(tmp_path / "in.json"), "--output-dir", str(tmp_path), "--name", "r"])
    plain = (tmp_path / "r.json").read_bytes()
    (tmp_path / "r.json.gz").write_bytes(gzip.compress(plain, mtime=0))  # as `gzip -n` keeps them
    (tmp_path / "r.json").unlink()
    (tmp_path / "r.png").unlink()
    assert learning_report.read_report(tmp_path / "r.json") == json.loads(plain)
    assert learning_report.read_report(tmp_path / "r.json.gz") == json.loads(plain)
    assert learning_per_token.main(["--plot", str(tmp_path / "r.json.gz")]) == {"plots": [str(tmp_path / "r.png")]}
    assert (tmp_path / "r.png").stat().st_size > 0
    elsewhere = tmp_path / "plots"
    learning_per_token.main(["--plot", str(tmp_path / "r.json.gz"), "--output-dir", str(elsewhere)])
    assert (elsewhere / "r.png").stat().st_size > 0
    with pytest.raises(SystemExit):  # it trains nothing: a training flag would be ignored
        learning_per_token.parse_args(["--plot", str(tmp_path / "r.json.gz"), "--seeds", "3"])
