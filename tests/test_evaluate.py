"""`trl-ada eval`: avg@k arithmetic, benchmark selection, the Markdown table, and an end-to-end run on the toy task."""

import json
import re

import pytest

from trl_ada.adapter.errors import UsageError
from trl_ada.tools.evaluate import (
    BENCHMARKS,
    BenchmarkResult,
    build_parser,
    evaluate,
    main,
    markdown_table,
    parse_local_benchmarks,
    select_benchmarks,
    summarise,
    weighted_average,
)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_builtin_benchmarks_are_the_papers_four_sets():
    assert {name: spec.size for name, spec in BENCHMARKS.items()} == {
        "math500": 500,
        "minerva": 272,
        "olympiadbench": 675,
        "aime_like": 230,
    }
    assert BENCHMARKS["math500"].source == "HuggingFaceH4/MATH-500"


def test_summarise_and_weighted_average_hand_worked():
    # problem means 1.0, 0.5, 0.0 (a None sample is left out), and one problem with no gradable sample
    result = summarise("a", "A", [[1.0, 1.0], [1.0, 0.0], [0.0, None], [None, None]])
    assert (result.num_problems, result.num_unscorable, result.avg_at_k) == (3, 1, 0.5)
    other = BenchmarkResult("b", "B", num_problems=1, num_unscorable=0, avg_at_k=1.0)
    assert weighted_average([result, other]) == pytest.approx((3 * 0.5 + 1 * 1.0) / 4)


def test_markdown_table_matches_the_papers_layout():
    results = [
        BenchmarkResult("math500", "Math500", 500, 0, 0.5),
        BenchmarkResult("minerva", "Minerva Math", 272, 0, 0.25),
    ]
    # (0.5 * 500 + 0.25 * 272) / 772 = 318 / 772 = 0.41192...
    assert markdown_table("Qwen2.5-Math-1.5B", results, weighted_average(results)) == (
        "| Model | Math500 | Minerva Math | Weighted Avg. |\n"
        "|---|---|---|---|\n"
        "| Qwen2.5-Math-1.5B | 50.0 | 25.0 | 41.2 |"
    )


def test_benchmark_selection():
    assert parse_local_benchmarks(["x=a.jsonl", "aime_like = b.jsonl"]) == {"x": "a.jsonl", "aime_like": "b.jsonl"}
    with pytest.raises(ValueError, match="use NAME=PATH"):
        parse_local_benchmarks(["a.jsonl"])
    # default: the three Hub sets; the AIME-like set exists only as a local file, so it is not in the default ...
    chosen = select_benchmarks(None, {})
    assert [(spec.name, source) for spec, source in chosen] == [
        ("math500", "HuggingFaceH4/MATH-500"),
        ("minerva", "math-ai/minervamath"),
        ("olympiadbench", "Hothan/OlympiadBench"),
    ]
    # ... and naming it without a file says how to give one
    with pytest.raises(UsageError, match=r"'aime_like' has no Hub dataset: pass --benchmark aime_like=PATH"):
        select_benchmarks(["math500", "aime_like"], {})
    chosen = select_benchmarks(None, {"aime_like": "aime.jsonl"})
    assert [(spec.name, source) for spec, source in chosen] == [("aime_like", "aime.jsonl")]
    chosen = select_benchmarks(["math500", "aime_like"], {"aime_like": "aime.jsonl"})
    assert [(spec.title, source) for spec, source in chosen] == [
        ("Math500", "HuggingFaceH4/MATH-500"),
        ("AIME-like", "aime.jsonl"),
    ]
    with pytest.raises(ValueError, match="built-in benchmarks: math500"):
        select_benchmarks(["gsm8k"], {})


class CannedSampler:
    def __init__(self, by_question):
        self.by_question = by_question

    def sample(self, prompts, settings, desc=""):
        return [self.by_question[prompt[-1]["content"]][: settings.num_samples] for prompt in prompts]


def test_eval_with_math_grading_hand_worked(tmp_path):
    first = write_jsonl(
        tmp_path / "m.jsonl", [{"problem": "p1", "answer": "2"}, {"problem": "p2", "answer": "\\frac{1}{2}"}]
    )
    second = write_jsonl(tmp_path / "o.jsonl", [{"question": "q1", "answer": "7"}, {"question": "q2", "answer": ""}])
    sampler = CannedSampler(
        {
            "p1": ["\\boxed{2}", "\\boxed{2.0}"],  # 1.0
            "p2": ["\\boxed{0.5}", "\\boxed{2}"],  # 0.5
            "q1": ["\\boxed{8}", "7"],  # 0.0: the second has no box
            "q2": ["\\boxed{1}", "\\boxed{1}"],  # ungradable gold: left out
        }
    )
    argv = ["--model", "some/model", "-k", "2", "--no-template", "--output-dir", str(tmp_path / "out")]
    argv += ["--benchmark", f"math500={first}", "--benchmark", f"other={second}"]
    output = evaluate(build_parser().parse_args(argv), sampler=sampler)
    assert output["benchmarks"]["math500"] | {"source": None} == {
        "title": "Math500",
        "source": None,
        "num_problems": 2,
        "num_unscorable": 0,
        "avg_at_k": 0.75,
    }
    assert output["benchmarks"]["other"]["num_problems"] == 1
    assert output["benchmarks"]["other"]["num_unscorable"] == 1
    assert output["benchmarks"]["other"]["avg_at_k"] == 0.0
    assert output["weighted_average"] == pytest.approx((2 * 0.75 + 1 * 0.0) / 3)
    assert (tmp_path / "out" / "results.md").read_text().splitlines()[-1] == "| model | 75.0 | 0.0 | 50.0 |"


@pytest.mark.slow
def test_eval_end_to_end_on_the_toy_task(tmp_path, capsys):
    from trl_ada.toy import make_arithmetic_dataset, toy_model_dir

    files = {}
    for name, levels, size in (("easy", (1,), 12), ("hard", (2, 3), 20)):
        rows = make_arithmetic_dataset(size, seed=11, levels=levels, split="eval").to_list()
        files[name] = write_jsonl(
            tmp_path / f"{name}.jsonl", [{"prompt": r["prompt"], "answer": r["answer"]} for r in rows]
        )
    out = tmp_path / "out"
    argv = ["--model", str(toy_model_dir()), "--reward", "toy", "--no-template", "-k", "4", "--max-new-tokens", "4"]
    argv += ["--backend", "transformers", "--batch-size", "256", "--label", "toy", "--save-samples"]
    argv += ["--benchmark", f"easy={files['easy']}", "--benchmark", f"hard={files['hard']}", "--output-dir", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out

    results = json.loads((out / "results.json").read_text())
    per_benchmark = results["benchmarks"]
    assert [per_benchmark[name]["num_problems"] for name in ("easy", "hard")] == [12, 20]
    # The weighted average is the size-weighted mean of the per-benchmark numbers ...
    assert results["weighted_average"] == pytest.approx(
        (12 * per_benchmark["easy"]["avg_at_k"] + 20 * per_benchmark["hard"]["avg_at_k"]) / 32
    )
    # ... and every number matches a recount from the per-sample records with the task's own rule.
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 32 * 4
    problem_means = {}
    for name in ("easy", "hard"):
        answers = [row["answer"] for row in read_jsonl(files[name])]
        means = []
        for i, answer in enumerate(answers):
            texts = [s["completion"] for s in samples if s["benchmark"] == name and s["id"] == str(i)]
            assert len(texts) == 4
            correct = [[int(n) for n in re.findall(r"(?<!\d)-?\d+", t)[-1:]] == [int(answer)] for t in texts]
            means.append(sum(correct) / 4)
        problem_means[name] = means
        assert per_benchmark[name]["avg_at_k"] == pytest.approx(sum(means) / len(means))
    everything = problem_means["easy"] + problem_means["hard"]
    assert results["weighted_average"] == pytest.approx(sum(everything) / len(everything))
    # The easy set is easier for the warm model (a sanity check that the two files were kept apart).
    assert per_benchmark["easy"]["avg_at_k"] > per_benchmark["hard"]["avg_at_k"]

    table = (out / "results.md").read_text().splitlines()
    assert table[:2] == ["| Model | easy | hard | Weighted Avg. |", "|---|---|---|---|"]
    values = [per_benchmark["easy"]["avg_at_k"], per_benchmark["hard"]["avg_at_k"], results["weighted_average"]]
    assert table[2] == "| toy | " + " | ".join(f"{100 * v:.1f}" for v in values) + " |"
    assert table[2] in printed
