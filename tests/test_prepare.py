"""`trl-ada prepare`: loaders and layouts, band selection, and an end-to-end run on the toy task."""

import csv
import json
import pathlib
import re
import sys

import datasets
import pytest
import torch

from trl_ada.tools.datasets_io import (
    DEFAULT_PROMPT_SUFFIX,
    DEFAULT_SYSTEM_PROMPT,
    build_prompt,
    load_problems,
    to_problems,
)
from trl_ada.tools.generation import SamplingSettings, TransformersSampler
from trl_ada.tools.prepare import build_parser, main, parse_band, prepare, region

# --------------------------------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------------------------------

VERL_ROWS = [
    {
        "data_source": "openr1",
        "prompt": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": f"What is 6 times 7? {DEFAULT_PROMPT_SUFFIX}"},
        ],
        "ability": "math",
        "reward_model": {"ground_truth": "42", "style": "rule"},
        "extra_info": {"index": 17, "split": "train"},
    },
    {
        "data_source": "openr1",
        "prompt": [{"role": "user", "content": "Simplify 2/4."}],
        "ability": "math",
        "reward_model": {"ground_truth": "\\frac{1}{2}", "style": "rule"},
        "extra_info": {"index": 18, "split": "train"},
    },
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_verl_layout_maps_ground_truth_and_index(tmp_path, suffix):
    path = tmp_path / f"verl{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, VERL_ROWS)
    else:
        datasets.Dataset.from_list(VERL_ROWS).to_parquet(str(path))
    problems = load_problems(str(path))
    assert [(p.id, p.answer) for p in problems] == [("17", "42"), ("18", "\\frac{1}{2}")]
    assert problems[0].question == f"What is 6 times 7? {DEFAULT_PROMPT_SUFFIX}"  # the last user message
    assert problems[1].question == "Simplify 2/4."


def test_template_appends_the_suffix_once_and_adds_the_system_prompt():
    already = build_prompt(f"What is 6 times 7? {DEFAULT_PROMPT_SUFFIX}", DEFAULT_SYSTEM_PROMPT, DEFAULT_PROMPT_SUFFIX)
    fresh = build_prompt("Simplify 2/4.", DEFAULT_SYSTEM_PROMPT, DEFAULT_PROMPT_SUFFIX)
    assert already == [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": f"What is 6 times 7? {DEFAULT_PROMPT_SUFFIX}"},
    ]
    assert fresh[1]["content"] == f"Simplify 2/4. {DEFAULT_PROMPT_SUFFIX}"
    assert build_prompt("1+2", None, None) == [{"role": "user", "content": "1+2"}]


def test_openr1_layout_falls_back_to_the_solution_box_when_answer_is_empty():
    table = datasets.Dataset.from_dict(
        {
            "problem": ["p1", "p2"],
            "solution": ["so \\boxed{3}", "hence \\boxed{\\frac{1}{3}}"],
            "answer": ["3", ""],
            "uuid": ["a", "b"],
        }
    )
    problems = to_problems(table)
    assert [(p.id, p.question, p.answer) for p in problems] == [("a", "p1", "3"), ("b", "p2", "\\frac{1}{3}")]
    # a solution named as the answer column is reduced to its last box
    assert [p.answer for p in to_problems(table, answer_column="solution")] == ["3", "\\frac{1}{3}"]


def test_list_answers_are_joined_and_conversational_prompts_read():
    table = datasets.Dataset.from_dict(
        {"question": ["q"], "final_answer": [["1", "2"]], "prompt": [[{"role": "user", "content": "unused"}]]}
    )
    assert to_problems(table)[0].answer == "1, 2"
    assert to_problems(table)[0].question == "q"  # "question" ranks before "prompt"
    assert to_problems(table, question_column="prompt")[0].question == "unused"


def test_missing_columns_are_named_with_the_available_ones():
    table = datasets.Dataset.from_dict({"text": ["x"], "label": ["1"]})
    with pytest.raises(ValueError, match=r"question column among \['text', 'label'\].*--question-column"):
        to_problems(table)
    with pytest.raises(ValueError, match=r"answer column among \['text', 'label'\].*--answer-column"):
        to_problems(table, question_column="text")
    with pytest.raises(ValueError, match=r"'gold' is not in the dataset; available columns: \['text', 'label'\]"):
        to_problems(table, question_column="text", answer_column="gold")
    assert to_problems(table, question_column="text", answer_column="label")[0].answer == "1"


def test_missing_local_file_is_not_sent_to_the_hub(tmp_path):
    with pytest.raises(FileNotFoundError, match="No such file"):
        load_problems(str(tmp_path / "absent.jsonl"))


# --------------------------------------------------------------------------------------------------------------------
# Band selection
# --------------------------------------------------------------------------------------------------------------------


def test_bands():
    assert parse_band("hard") == (0.0, 0.125)
    assert parse_band("easy") == (0.0, 0.313)
    assert parse_band("0.2,0.6") == (0.2, 0.6)
    for bad in ("medium", "0.5", "0.6,0.2", "0,1.5"):
        with pytest.raises(ValueError, match="Bad band"):
            parse_band(bad)
    # (lo, hi]: 2 of 16 is in the hard band, 3 of 16 is not, 0 never is
    hard = parse_band("hard")
    assert [region(r, hard) for r in (0.0, 1 / 16, 2 / 16, 3 / 16, 1.0, None)] == [
        "below",
        "band",
        "band",
        "above",
        "above",
        "unscorable",
    ]
    assert region(5 / 16, parse_band("easy")) == "band"  # 0.3125 <= 0.313


class CannedSampler:
    """Returns fixed completions per question (matched on the start of the user message)."""

    def __init__(self, by_question):
        self.by_question = by_question
        self.calls = []

    def sample(self, prompts, settings, desc=""):
        self.calls.append(settings)
        out = []
        for prompt in prompts:
            user = prompt[-1]["content"]
            out.append(next(v for q, v in self.by_question.items() if user.startswith(q)))
        return out


def test_prepare_with_math_grading_hand_worked(tmp_path):
    rows = [
        {"problem": "all right", "answer": "4"},
        {"problem": "all wrong", "answer": "4"},
        {"problem": "one in four", "answer": "\\frac{1}{2}"},
        {"problem": "ungradable gold", "answer": ""},
    ]
    data = write_jsonl(tmp_path / "openr1.jsonl", rows)
    sampler = CannedSampler(
        {
            "all right": ["\\boxed{4}", "\\boxed{4.0}", "\\boxed{2+2}", "\\boxed{4}"],
            "all wrong": ["\\boxed{5}", "4", "no answer", "\\boxed{3}"],
            "one in four": ["\\boxed{0.5}", "\\boxed{1}", "\\boxed{2}", "1/2 without a box"],
            "ungradable gold": ["\\boxed{1}"] * 4,
        }
    )
    out = tmp_path / "out"
    args = build_parser().parse_args(
        ["--dataset", str(data), "--model", "unused", "-k", "4", "--band", "0,0.25", "--output-dir", str(out)]
    )
    summary = prepare(args, sampler=sampler)
    assert summary["counts"] == {"unscorable": 1, "below": 1, "band": 1, "above": 1}
    rates = read_jsonl(out / "pass_rates.jsonl")
    assert [(r["id"], r["num_correct"], r["num_samples"], r["pass_rate"], r["kept"]) for r in rates] == [
        ("0", 4, 4, 1.0, False),
        ("1", 0, 4, 0.0, False),
        ("2", 1, 4, 0.25, True),
        ("3", 0, 0, None, False),
    ]
    assert [r["prompt"] for r in rates] == [row["problem"] for row in rows]
    (kept,) = read_jsonl(out / "train.jsonl")
    assert kept == {
        "id": "2",
        "prompt": [
            {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
            {"role": "user", "content": f"one in four {DEFAULT_PROMPT_SUFFIX}"},
        ],
        "answer": "\\frac{1}{2}",
    }
    assert sampler.calls[0].num_samples == 4 and sampler.calls[0].temperature == 1.0

    # Nothing in (0.5, 0.9]: the error counts every region, and the pass rates are still written.
    args.band, args.output_dir = "0.5,0.9", tmp_path / "empty"
    with pytest.raises(ValueError, match=r"2 at or below 0\.5, 1 above 0\.9, 1 with an ungradable answer \(of 4\)"):
        prepare(args, sampler=sampler)
    assert len(read_jsonl(tmp_path / "empty" / "pass_rates.jsonl")) == 4
    assert not (tmp_path / "empty" / "train.jsonl").exists()


# --------------------------------------------------------------------------------------------------------------------
# End to end on the toy task
# --------------------------------------------------------------------------------------------------------------------


def last_integer_matches(completion: str, answer: str) -> bool:
    """The toy task's rule, written out again: the last integer in the completion equals the answer."""
    numbers = re.findall(r"(?<!\d)-?\d+", completion)
    return bool(numbers) and int(numbers[-1]) == int(answer)


@pytest.fixture(scope="module")
def warm_dir():
    from trl_ada.toy import toy_model_dir

    return toy_model_dir()  # cached after the first build


TOY_FILE = pathlib.Path(__file__).parent / "data" / "toy_arith.jsonl"  # 64 held-out toy problems


@pytest.mark.slow
def test_prepare_end_to_end_on_the_toy_task(tmp_path, warm_dir, capsys):
    out = tmp_path / "toy"
    argv = ["--dataset", str(TOY_FILE), "--max-prompts", "32", "--model", str(warm_dir), "--reward", "toy", "-k", "8"]
    argv += ["--max-new-tokens", "4", "--band", "0,0.5", "--backend", "transformers", "--batch-size", "256"]
    argv += ["--no-template", "--seed", "3"]
    assert main([*argv, "--output-dir", str(out), "--save-samples"]) == 0
    assert "kept in (0, 0.5]" in capsys.readouterr().out

    rows = read_jsonl(TOY_FILE)[:32]
    questions = [row["prompt"][0]["content"] for row in rows]
    answers = [row["answer"] for row in rows]
    samples = read_jsonl(out / "samples.jsonl")
    rates = read_jsonl(out / "pass_rates.jsonl")
    assert [r["id"] for r in rates] == [str(i) for i in range(32)]  # every prompt, kept or not
    # Recount each pass rate from the raw completions with the task's rule.
    expected = {}
    for i, answer in enumerate(answers):
        mine = [s["completion"] for s in samples if s["id"] == str(i)]
        assert len(mine) == 8
        expected[str(i)] = sum(last_integer_matches(c, answer) for c in mine) / 8
    assert {r["id"]: r["pass_rate"] for r in rates} == expected
    assert all(r["num_samples"] == 8 and r["prompt"] == q for r, q in zip(rates, questions, strict=True))
    # The kept set is exactly the band (0, 0.5], in file order, with template-free prompts.
    kept = read_jsonl(out / "train.jsonl")
    assert [row["id"] for row in kept] == [i for i, p in expected.items() if 0 < p <= 0.5]
    assert all(row["prompt"] == [{"role": "user", "content": questions[int(row["id"])]}] for row in kept)
    assert all(row["answer"] == answers[int(row["id"])] for row in kept)
    # The warm model's pass rates spread: something on each side of the band, so the filter was exercised.
    assert 0 < len(kept) < 32 and any(p > 0.5 for p in expected.values())

    # Seeded: the same seed gives the same pass rates, here written as CSV.
    assert main([*argv, "--output-dir", str(tmp_path / "again"), "--pass-rates-format", "csv"]) == 0
    with (tmp_path / "again" / "pass_rates.csv").open() as handle:
        again = {row["id"]: float(row["pass_rate"]) for row in csv.DictReader(handle)}
    assert again == expected


@pytest.mark.slow
def test_transformers_sampler_batches_match_one_prompt_at_a_time(warm_dir):
    """Left padding, length-sorted batches and reordering must not change what each prompt gets.

    At temperature 1e-4 sampling is argmax decoding, so each row can be compared with an unbatched greedy run.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    model = AutoModelForCausalLM.from_pretrained(warm_dir)
    prompts = [[{"role": "user", "content": q}] for q in ("3+4", "87-9", "56+38", "9-9", "70-11")]
    groups = TransformersSampler(model, tokenizer, batch_size=3).sample(
        prompts, SamplingSettings(num_samples=2, temperature=1e-4, max_new_tokens=4)
    )
    assert [len(g) for g in groups] == [2] * 5
    for prompt, group in zip(prompts, groups, strict=True):
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.no_grad():
            greedy = model.generate(**ids, do_sample=False, max_new_tokens=4)
        text = tokenizer.decode(greedy[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        assert group == [text, text]


def test_vllm_branch_against_a_stand_in_engine(monkeypatch):
    """vLLM is not installed here: a stand-in with vLLM's offline API checks the request and the output assembly."""
    import importlib.machinery
    import types
    from dataclasses import dataclass

    from trl_ada.tools.generation import load_sampler

    @dataclass
    class SamplingParams:
        n: int
        temperature: float
        top_p: float
        max_tokens: int
        seed: int

    engines = []

    class LLM:
        def __init__(self, model, seed, **kwargs):
            self.init = {"model": model, "seed": seed, **kwargs}
            engines.append(self)

        def chat(self, messages, sampling_params, use_tqdm=True, add_generation_prompt=True):
            self.requests = list(zip(messages, sampling_params, strict=True))
            return [
                types.SimpleNamespace(
                    outputs=[types.SimpleNamespace(text=f"{m[-1]['content']}#{j}") for j in range(p.n)]
                )
                for m, p in self.requests
            ]

    fake = types.ModuleType("vllm")
    fake.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    fake.LLM, fake.SamplingParams = LLM, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", fake)

    sampler = load_sampler("org/model", backend="auto", seed=5, tensor_parallel_size=2)
    prompts = [[{"role": "user", "content": q}] for q in ("a", "b", "c")]
    groups = sampler.sample(prompts, SamplingSettings(num_samples=3, max_new_tokens=9, seed=5))
    assert groups == [["a#0", "a#1", "a#2"], ["b#0", "b#1", "b#2"], ["c#0", "c#1", "c#2"]]
    (engine,) = engines
    assert engine.init == {"model": "org/model", "seed": 5, "dtype": "auto", "tensor_parallel_size": 2}
    params = [p for _, p in engine.requests]
    assert {(p.n, p.temperature, p.top_p, p.max_tokens) for p in params} == {(3, 1.0, 1.0, 9)}
    # vLLM seeds a request's n samples seed, seed+1, ...: per-prompt seeds k apart give every sample its own stream
    assert [p.seed for p in params] == [5, 8, 11]
