"""The realistic-size step-time command (`python -m trl_ada.gpu_step_time`) in its CPU dry run, its budget, and the
model and workload it builds (`trl_ada.tools.sized_model`). What only a GPU can show (the times, peak memory) is not
checked here."""

import json
import re
import zlib

import pytest
import torch

from trl_ada.tools import gpu_step_time
from trl_ada.tools.gpu_step_time import RUNS, Row, estimate, parse_args, plan
from trl_ada.tools.sized_model import (
    EOS,
    PAD,
    SHAPES,
    build_model,
    eos_margin,
    pass_rate_reward,
    prompt_dataset,
    random_prompts,
    word_tokenizer,
)

TINY = ["--device", "cpu", "--model", "tiny", "--prompts", "2", "--prompt-length", "8", "--max-tokens", "8"]
ROW = re.compile(
    r"^  (?P<label>.{31}) (?P<lengths>fixed|varied) +(?P<engine>generate|cb) +(?P<steps>\d+\*?) "
    r"+(?P<seconds>\d+\.\d\d) +(?P<ratio>-|\d+\.\d\d) +(?P<samples>\d+\.\d\d) +(?P<calls>\d+\.\d\d) "
    r"+(?P<length>\d+\.\d) +(?P<peak>-|[\d,]+)$"
)


def test_the_shapes_are_the_real_models_and_the_count_is_what_torch_builds():
    """Qwen2.5-0.5B has 494.0M parameters with its tied embedding (the H200 run's figure); 1.5B 1,543.7M. The formula
    is checked against the tiny model torch builds."""
    assert SHAPES["qwen2.5-0.5b"].parameters() == 494_032_768
    assert SHAPES["qwen2.5-1.5b"].parameters() == 1_543_714_304
    tiny = build_model(SHAPES["tiny"], seed=0, mean_length=None, device="cpu")
    assert sum(p.numel() for p in tiny.parameters()) == SHAPES["tiny"].parameters()
    assert tiny.get_output_embeddings().weight is tiny.get_input_embeddings().weight  # tied: one margin moves both


def test_the_tokenizer_has_one_token_per_id():
    tokenizer = word_tokenizer(32)
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, len(tokenizer)) == (PAD, EOS, 32)
    assert tokenizer("t5 t31 t2")["input_ids"] == [5, 31, 2]
    assert tokenizer.decode([5, 31, 2]) == "t5 t31 t2"
    prompts = random_prompts(50, 10, 32, seed=3)
    assert all(2 <= i < 32 for ids in prompts for i in ids) and prompts == random_prompts(50, 10, 32, seed=3)


def test_the_reward_is_the_crc_of_the_text_against_the_prompts_pass_rate():
    texts = ["t5 t6", "t7", "t8 t9 t10"]
    expected = [float(zlib.crc32(t.encode()) / 2**32 < 0.5) for t in texts]
    assert pass_rate_reward(texts, pass_rate=[0.5] * 3) == expected
    assert pass_rate_reward(texts, pass_rate=[0.0, 1.0, 1.0]) == [0.0, 1.0, 1.0]
    rates = prompt_dataset(4000, 4, 64, seed=0)["pass_rate"]
    # Beta(0.337, 0.298): U-shaped, mean 0.531; about a third of prompts below 0.05 or above 0.95
    assert abs(sum(rates) / len(rates) - 0.3372 / (0.3372 + 0.2984)) < 0.02
    extreme = sum(p < 0.05 or p > 0.95 for p in rates) / len(rates)
    assert 0.3 < extreme < 0.5


def test_the_end_of_sequence_margin_gives_the_asked_rate_on_fresh_prompts():
    """The margin is fitted on one set of random prompts; on others, the full model's softmax gives end-of-sequence
    about the asked probability (1 / 4) a position, and with the margin set very low it is never likely."""
    shape = SHAPES["tiny"]
    varied = build_model(shape, seed=1, mean_length=4, device="cpu")
    fixed = build_model(shape, seed=1, mean_length=None, device="cpu")
    ids = torch.tensor(random_prompts(8, 32, shape.vocab, seed=99))
    with torch.no_grad():
        p_varied = varied(input_ids=ids).logits.softmax(-1)[..., EOS].mean().item()
        p_fixed = fixed(input_ids=ids).logits.softmax(-1)[..., EOS].max().item()
    assert 0.2 < p_varied < 0.3 and p_fixed < 1e-12
    again = build_model(shape, seed=1, mean_length=4, device="cpu", margin=varied.eos_margin)  # reused, no fit
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), varied.parameters(), strict=True))
    assert eos_margin(fixed, shape, 0.5, seed=1) > varied.eos_margin  # a higher rate needs a larger margin


def test_a_bias_coordinate_that_does_not_stay_positive_is_an_error(monkeypatch):
    """Without the shared embedding value the coordinate's sign varies across positions, so no margin could set the
    rate: the build says so instead of training on a workload that is not the one asked for."""
    import trl_ada.tools.sized_model as sized_model

    monkeypatch.setattr(sized_model, "BIAS_VALUE", 0.0)
    for mean_length in (None, 4):
        with pytest.raises(RuntimeError, match="bias coordinate is not positive everywhere"):
            build_model(SHAPES["tiny"], seed=0, mean_length=mean_length, device="cpu")


def test_arguments_and_what_this_machine_cannot_run(monkeypatch, capsys):
    args = parse_args([])
    assert (args.model, args.device, args.dtype, args.max_tokens, args.steps, args.budget_seconds) == (
        "qwen2.5-0.5b",
        "cuda",
        "bf16",
        256,
        2,
        480.0,
    )
    assert args.runs == list(RUNS) and args.lengths == ["fixed", "varied"]
    for bad, message in [(["--runs", "grpo-5"], "--runs: grpo-5"), (["--device", "cpu", "--dtype", "bf16"], "fp32")]:
        with pytest.raises(SystemExit):
            parse_args(bad)
        assert message in capsys.readouterr().err
    import transformers

    monkeypatch.setattr(transformers, "__version__", "5.7.0")
    monkeypatch.setitem(__import__("sys").modules, "peft", None)
    runs, notes = plan(parse_args(["--lengths", "fixed"]))
    expected = ["grpo-4", "seq-positive-4x2", "seq-balanced-8x4", "grpo-16", "one-round", "posterior", "grpo-8"]
    assert [run.key for run, _ in runs] == expected
    assert notes == [
        "seq-positive-4x2 + LoRA r=16 (fixed): peft is not installed",
        "seq-balanced-8x4, streaming (fixed, continuous batching): transformers 5.7.0 < 5.8.0",
        "grpo-4 (fixed, continuous batching): transformers 5.7.0 < 5.8.0",
    ]


def row(key, lengths, seconds, setup=3.0):
    return Row(key, RUNS[key].label, lengths, "generate", 2, [9.0, seconds], seconds, True, 4.0, 1.0, 8.0, None, setup)


def test_the_budget_estimate_is_grpo_n4s_step_times_the_runs_factor_plus_setup():
    assert estimate(RUNS["seq-balanced-8x4"], "fixed", [], steps=2) is None  # nothing measured: run GRPO n=4 first
    rows = [row("grpo-4", "fixed", 10.0, setup=5.0), row("seq-positive-4x2", "fixed", 16.0, setup=7.0)]
    assert estimate(RUNS["seq-balanced-8x4"], "fixed", rows, steps=2) == pytest.approx(2 * 10.0 * 5.3 + 7.0)
    assert estimate(RUNS["grpo-16"], "varied", rows, steps=3) == pytest.approx(3 * 10.0 * 2.0 + 7.0)  # other lengths
    rows.append(row("grpo-4", "varied", 8.0))
    assert estimate(RUNS["grpo-16"], "varied", rows, steps=3) == pytest.approx(3 * 8.0 * 2.0 + 7.0)


def test_a_budget_that_runs_out_skips_the_rest_with_their_estimates(capsys):
    """With a millisecond of budget, GRPO n=4 runs (nothing to estimate from), stops after its first step, and every
    other run is skipped with its estimate."""
    assert (
        gpu_step_time.main([*TINY, "--runs", "grpo-4,paper", "--lengths", "fixed", "--budget-seconds", "0.001"]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert "renamed: paper is now seq-balanced-8x4" in lines  # an earlier record's name still runs
    rows = [m for m in map(ROW.match, lines) if m]
    assert [(m["label"].strip(), m["steps"]) for m in rows] == [("grpo-4", "1*")]
    assert "  *: stopped early, at the budget" in lines
    assert re.search(
        r"^  skipped: seq-balanced-8x4 \(fixed, generate\): estimated \d+ s, 0 s left$", "\n".join(lines), re.M
    )


@pytest.mark.slow
def test_cpu_dry_run_prints_a_table_that_matches_its_json(tmp_path, capsys):
    """Five configurations, each at both lengths, two steps on the tiny shape: each one's samples, generation calls
    and lengths are what its settings imply, and every printed number is its JSON twin's."""
    runs = "grpo-4,seq-positive-4x2,one-round,streaming,lora"
    path = tmp_path / "table.json"
    assert gpu_step_time.main([*TINY, "--steps", "2", "--runs", runs, "--json", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "trl-ada step time at a realistic size"
    assert lines[3].startswith("  model     tiny shape, 0.1M parameters, random weights (seed 0)")
    printed = {(m["label"].strip(), m["lengths"], m["engine"]): m for m in map(ROW.match, lines) if m}
    data = json.loads(path.read_text())
    assert len(printed) == len(data["runs"]) == 10 and data["skipped"] == []
    for run in data["runs"]:
        m = printed[run["label"], run["lengths"], run["engine"]]
        assert run["steps"] == 2 and run["losses_finite"] and run["peak_memory_mib"] is None
        assert f"{run['median_step_seconds']:.2f}" == m["seconds"] and float(m["seconds"]) > 0
        assert f"{run['samples_per_prompt']:.2f}" == m["samples"] and f"{run['calls_per_step']:.2f}" == m["calls"]
        ratio = data["ratios"].get(f"{run['key']} / {run['lengths']}")
        assert m["ratio"] == f"{ratio:.2f}"
        grpo = next(r for r in data["runs"] if r["key"] == "grpo-4" and r["lengths"] == run["lengths"])
        assert ratio == pytest.approx(run["median_step_seconds"] / grpo["median_step_seconds"])
        if run["lengths"] == "fixed":  # the end-of-sequence token is never drawn: every completion is 8 tokens
            assert run["mean_completion_length"] == 8.0
        else:
            assert 1.0 <= run["mean_completion_length"] < 8.0
    calls = {(r["key"], r["lengths"]): r["calls_per_step"] for r in data["runs"]}
    samples = {(r["key"], r["lengths"]): r["samples_per_prompt"] for r in data["runs"]}
    for lengths in ("fixed", "varied"):
        assert calls["grpo-4", lengths] == calls["one-round", lengths] == 1.0
        assert samples["grpo-4", lengths] == 4.0 and samples["one-round", lengths] == 16.0
        for key in ("seq-positive-4x2", "lora"):  # rounds of 4, at most 2
            assert 1.0 <= calls[key, lengths] <= 2.0 and 4.0 <= samples[key, lengths] <= 8.0
        assert calls["streaming", lengths] == 1.0  # one engine session a step
        assert 4.0 <= samples["streaming", lengths] <= 32.0
