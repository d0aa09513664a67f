"""benchmarks/skill_frames.py against independent computations: the trapezoid weights against
`learning_stats.area_under_curve`, per-prompt differences on synthetic runs whose skill and retention gaps are set by
hand, the mix as the mean of the two, and a method exactly twice as fast per token reading 0.5x over whole runs."""

import pathlib
import random
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import learning_stats
import paired_stats
import skill_frames as sf

SAMPLES, PER_RULE = 32, 8  # a small held-out set: 8 prompts per rule, rule by rule (+, -, &, ~)
RULES = "+-&~"
STRATA = {rule: list(range(i * PER_RULE, (i + 1) * PER_RULE)) for i, rule in enumerate(RULES)}
TOKEN_GRID = [100.0, 200.0, 400.0, 800.0]
GRID = {"tokens": TOKEN_GRID, "steps": [1, 2, 4, 8]}


@pytest.mark.parametrize("seed", range(20))
def test_trapezoid_weights_are_the_area_under_the_curve(seed):
    rng = random.Random(seed)
    xs = sorted({0.0, *(rng.uniform(1, 100) for _ in range(rng.randint(1, 8)))})
    ys = [rng.random() for _ in xs]
    hold = xs[-1] < 60 or rng.random() < 0.5
    end = rng.uniform(1, 120) if hold else rng.uniform(1, xs[-1])
    expected = learning_stats.area_under_curve(xs, ys, end, hold=hold)
    assert sf.trapezoid_weights(xs, end, hold=hold) @ np.array(ys) == pytest.approx(expected)


def test_trapezoid_weights_refuse_a_curve_short_of_its_end():
    with pytest.raises(ValueError):
        sf.trapezoid_weights([0.0, 10.0], 20.0)


def checkpoint(step, tokens, rates, token_points=(), step_point=True):
    """A checkpoint whose prompt j has ``rates[rule]`` of its samples right (all prompts of a rule alike)."""
    counts = [round(rates[rule] * SAMPLES) for rule in RULES for _ in range(PER_RULE)]
    by_rule = {rule: round(rates[rule] * SAMPLES) / SAMPLES for rule in RULES}
    return {
        "step": step,
        "tokens": tokens,
        "chain_correct": counts,
        "chain_accuracy_by_label": by_rule,
        "chain_accuracy": sum(by_rule.values()) / 4,
        "token_points": list(token_points),
        "step_point": step_point,
    }


def run(seed, hard, easy, tokens_per_step=100.0, steps=8):
    """A run whose hard-rule rate rises by ``hard`` per step and easy-rule rate falls by ``easy``, evaluated at each
    step (serving the token grid's points it reaches)."""
    checkpoints, served = [], 0
    for step in range(steps + 1):
        tokens = step * tokens_per_step
        points = []
        while served < len(TOKEN_GRID) and step > 0 and tokens >= TOKEN_GRID[served]:
            points.append(served)
            served += 1
        rates = {"+": 0.75 - easy * step, "-": 0.75 - easy * step, "&": 0.25 + hard * step, "~": 0.25 + hard * step}
        checkpoints.append(checkpoint(step, tokens, rates, points, step in GRID["steps"] or step == 0))
    return {"seed": seed, "checkpoints": checkpoints}


def test_skill_and_retention_split_the_mix():
    runs = sf.with_skill_and_retention([run(0, 1 / 32, 1 / 32)])
    for c in runs[0]["checkpoints"]:
        assert c["skill_accuracy"] == pytest.approx(0.25 + c["step"] / 32)
        assert c["retention_accuracy"] == pytest.approx(0.75 - c["step"] / 32)
        assert c["chain_accuracy"] == pytest.approx((c["skill_accuracy"] + c["retention_accuracy"]) / 2)


def test_prompt_differences_read_the_gaps_set_by_hand():
    """The method gains 2/32 a step on the hard rules where the partner gains 1/32, and loses nothing on the easy
    rules where the partner loses 1/32 a step: at step 8 the skill differs by 8/32 and the retention by 8/32; over
    tokens [0, 800] (steps 0 to 8, linear) the mean differences are half that."""
    base = [run(s, 1 / 32, 1 / 32) for s in range(3)]
    method = [run(s, 2 / 32, 0.0) for s in range(3)]
    strata = sf.measure_strata(STRATA)
    for frame, expected in (("budget", 4 / 32), ("whole", 4 / 32), ("equal_steps", 8 / 32)):
        end = sf.frame_end(base, method, frame, GRID)
        seeds, d = sf.prompt_differences(base, method, frame, end, SAMPLES, len(TOKEN_GRID))
        assert seeds == [0, 1, 2]
        skill = paired_stats.two_way_estimate(*sf.restrict(d, strata["skill"]))
        retention = paired_stats.two_way_estimate(*sf.restrict(d, strata["retention"]))
        mix = paired_stats.two_way_estimate(*sf.restrict(d, strata["mix"]))
        assert skill["estimate"] == pytest.approx(expected) and retention["estimate"] == pytest.approx(expected)
        assert mix["estimate"] == pytest.approx(expected)
        assert skill["se"] == pytest.approx(0.0, abs=1e-12)  # every seed and prompt alike
    identical = sf.prompt_differences(base, base, "budget", 800.0, SAMPLES, len(TOKEN_GRID))[1]
    assert not identical.any()
    floor = sf.aa_floor(
        base + [run(s, 1 / 32, 1 / 32) for s in range(3, 6)], "budget", 800.0, SAMPLES, 4, strata["skill"]
    )
    assert floor == pytest.approx([0.0, 0.0])  # six identical seeds: no seed-to-seed range


def test_heldout_strata_checks_the_layout():
    report = {"settings": {"heldout_samples": SAMPLES}, "runs": [run(0, 1 / 32, 1 / 32)]}
    with pytest.MonkeyPatch.context() as patch:
        import testbeds.columns.problems as problems

        patch.setattr(problems, "RULES", {rule: None for rule in RULES})
        assert sf.heldout_strata(report) == STRATA
        report["runs"][0]["checkpoints"][0]["chain_accuracy_by_label"]["&"] = 0.9  # not what its prompts hold
        with pytest.raises(ValueError, match="not where"):
            sf.heldout_strata(report)


def smooth_run(seed, speed, steps=64, tokens_per_step=100.0):
    """Skill rising as 1 - exp(-speed * tokens / 2000), evaluated every step: ``speed`` 2 is twice as fast per
    token."""
    checkpoints = []
    for step in range(steps + 1):
        tokens = step * tokens_per_step
        skill = 0.2 + 0.6 * (1 - np.exp(-speed * tokens / 2000))
        c = checkpoint(step, tokens, {"+": 0.5, "-": 0.5, "&": skill, "~": skill})
        c["skill_accuracy"] = skill  # exact, not rounded to counts
        checkpoints.append(c)
    return {"seed": seed, "checkpoints": checkpoints}


def test_twice_as_fast_per_token_reads_half_over_whole_runs():
    base = [smooth_run(s, 1.0) for s in range(4)]
    fast = [smooth_run(s, 2.0, steps=32) for s in range(4)]  # ends at half the tokens: the same final skill
    ratios = sf.whole_run_ratios(base, fast, "skill_accuracy")
    for share in (50, 75, 90):
        value, resolved = ratios[f"tokens_to_{share}"]
        assert resolved and value == pytest.approx(0.5, abs=0.01)
        assert ratios[f"steps_to_{share}"][0] == pytest.approx(0.5, abs=0.01)  # the same tokens per step
    level = sf.whole_run_ratio_intervals(base, base, "skill_accuracy", resamples=50)
    assert level["tokens_to_75"]["ratio"] == pytest.approx(1.0) and level["tokens_to_75"]["ci"] == pytest.approx(
        [1.0, 1.0]
    )


def noisy_run(seed, hard, easy, offset):
    """`run` with a per-seed offset on every rate (seed-to-seed noise)."""
    result = run(seed, hard, easy)
    for c in result["checkpoints"]:
        rates = {rule: c["chain_accuracy_by_label"][rule] + offset for rule in RULES}
        c.update({k: v for k, v in checkpoint(c["step"], c["tokens"], rates).items() if k.startswith("chain")})
    return result


def synthetic_report(warm, gain, seeds=6):
    """A columns report of GRPO n=4 and `seq-positive-4x2` on one warm model: the method gains ``gain`` more skill per
    step and loses as much retention, seed by seed with noise."""
    rng = random.Random(warm)
    runs = []
    for s in range(seeds):
        offset = rng.choice([0, 1, 2]) / SAMPLES
        runs.append(
            {"key": "grpo-4", "method": "GRPO n=4", "samples_per_prompt": 4.0, **noisy_run(s, 1 / 64, 0, offset)}
        )
        runs.append(
            {"key": "seq-positive-4x2", "method": "seq-positive-4x2", "samples_per_prompt": 4.9}
            | noisy_run(s, 1 / 64 + gain, gain, offset + rng.choice([0, 1]) / SAMPLES)
        )
    settings = {"task": "columns", "warm_seed": warm, "heldout_samples": SAMPLES, "token_grid": TOKEN_GRID}
    return {"settings": settings | {"step_grid": GRID["steps"]}, "runs": runs}


def test_the_skill_report_pools_warm_models_and_corrects_the_family(tmp_path, monkeypatch):
    """Three warm models on which `seq-positive-4x2` learns the skill faster and forgets the easy rules faster, by the
    same margin: P1 reads ahead on the skill and behind on retention, pooled over the three and after Holm; the
    comparisons not run are listed as such."""
    import json

    import skill_report

    monkeypatch.setattr(skill_report, "RATIO_RESAMPLES", 50)  # the ratios' intervals are tested above
    paths = []
    for warm in (0, 1, 2):
        path = tmp_path / f"warm{warm}.json"
        path.write_text(json.dumps(synthetic_report(warm, 2 / 64)))
        paths.append(path)
    skill_report.main(["--reports", *map(str, paths), "--output", str(tmp_path / "verdicts")])
    result = json.loads((tmp_path / "verdicts.json").read_text())
    skill = {e["id"]: e for e in result["family"]["skill"]}
    retention = {e["id"]: e for e in result["family"]["retention"]}
    assert skill["P1"]["warm_models"] == [0, 1, 2] and skill["P1"]["verdict"] == "ahead on every warm model"
    assert retention["P1"]["verdict"] == "behind on every warm model"
    # shown on every warm model: the largest of the three warm models' p values, Holm over the one comparison run
    assert skill["P1"]["every_model_p"] == max(w["p"] for w in skill["P1"]["per_warm"].values())
    assert skill["P1"]["holm_p"] == skill["P1"]["every_model_p"]
    mix = {e["id"]: e for e in result["family"]["mix"]}
    for warm in ("0", "1", "2"):  # the mix is the mean of the two, warm model by warm model
        halves = skill["P1"]["per_warm"][warm]["estimate"] + retention["P1"]["per_warm"][warm]["estimate"]
        assert mix["P1"]["per_warm"][warm]["estimate"] == pytest.approx(halves / 2)
    assert {skill[i]["verdict"] for i in ("P2", "P3", "P4")} == {"not run"}
    assert "| P1 | seq-positive-4x2 vs grpo-4 (columns, budget) |" in (tmp_path / "verdicts.md").read_text()
    level = tmp_path / "level.json"
    level.write_text(json.dumps(synthetic_report(0, 0.0)))
    skill_report.main(["--reports", str(level), "--output", str(tmp_path / "one")])
    one = json.loads((tmp_path / "one.json").read_text())["family"]["skill"][0]
    assert one["verdict"].endswith("(one warm model)") and one["warm_models"] == [0]
