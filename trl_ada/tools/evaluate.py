r"""``trl-ada eval``: avg@k accuracy on math benchmarks, as in the Reinforce-Ada paper.

avg@k: sample k completions per problem (the paper: k = 32, temperature 1.0, 4096 new tokens), grade each one
(math-verify on the last ``\boxed{}`` by default), average over the k samples and then over the problems of a
benchmark. The weighted average weights each benchmark by its number of problems, i.e. it is the mean over all
problems of all benchmarks. Problems whose gold answer cannot be graded (every reward None) are left out of both
and counted as ``num_unscorable``.

Writes ``results.json``, ``results.md`` (a Markdown table in the paper's layout, percentages) and, with
``--save-samples``, ``samples.jsonl`` (every completion with its reward) to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..adapter.errors import RunError, UsageError
from ..adapter.model_names import check_model_name
from .cli import EXIT_FAILURE, EXIT_USAGE, show_defaults
from .datasets_io import Problem, add_template_arguments, build_prompt, load_problems, template_from_args
from .generation import Sampler, add_generation_arguments, sampler_from_args
from .rewards import resolve_reward, score_groups


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a benchmark lives on the Hub and which columns hold the question and the answer."""

    name: str
    title: str  # column header in the Markdown table
    source: str | None  # Hub dataset; None: only from a local file
    subset: str | None = None
    split: str = "test"
    question_column: str | None = None
    answer_column: str | None = None
    id_column: str | None = None
    size: int | None = None  # number of problems the paper evaluates


# The paper's four sets. These Hub names and columns are written from the datasets' public cards and have not been
# downloaded in this repository's tests (they run offline on local files).
_SPECS = (
    BenchmarkSpec(
        "math500", "Math500", "HuggingFaceH4/MATH-500", question_column="problem", answer_column="answer",
        id_column="unique_id", size=500,
    ),
    BenchmarkSpec(
        "minerva", "Minerva Math", "math-ai/minervamath", question_column="question", answer_column="answer", size=272
    ),
    # English, text-only, open-ended competition maths; its final answers are lists (joined with ", ").
    BenchmarkSpec(
        "olympiadbench", "OlympiadBench", "Hothan/OlympiadBench", subset="OE_TO_maths_en_COMP", split="train",
        question_column="question", answer_column="final_answer", id_column="id", size=675,
    ),
    # AIME 24/25, HMMT, BRUMO, CMIMC and AMC 23 pooled by the authors: no single Hub dataset holds it.
    BenchmarkSpec("aime_like", "AIME-like", None, size=230),
)  # fmt: skip
BENCHMARKS: dict[str, BenchmarkSpec] = {spec.name: spec for spec in _SPECS}
# The default runs what can be loaded without a file: the Hub sets. The AIME-like set joins when given as a file.
DEFAULT_BENCHMARKS = tuple(name for name, spec in BENCHMARKS.items() if spec.source is not None)
LOCAL_ONLY = tuple(name for name, spec in BENCHMARKS.items() if spec.source is None)


@dataclass(frozen=True)
class BenchmarkResult:
    """avg@k of one benchmark over its ``num_problems`` gradable problems."""

    name: str
    title: str
    num_problems: int
    num_unscorable: int
    avg_at_k: float


def problem_scores(scores: Sequence[Sequence[float | None]]) -> list[float | None]:
    """Each problem's mean reward over its graded samples; None when no sample could be graded."""
    means = []
    for group in scores:
        graded = [s for s in group if s is not None]
        means.append(sum(graded) / len(graded) if graded else None)
    return means


def summarise(name: str, title: str, scores: Sequence[Sequence[float | None]]) -> BenchmarkResult:
    means = [m for m in problem_scores(scores) if m is not None]
    return BenchmarkResult(
        name=name,
        title=title,
        num_problems=len(means),
        num_unscorable=len(scores) - len(means),
        avg_at_k=sum(means) / len(means) if means else float("nan"),
    )


def weighted_average(results: Sequence[BenchmarkResult]) -> float:
    """Mean over all gradable problems: each benchmark weighted by its number of problems."""
    total = sum(result.num_problems for result in results)
    if total == 0:
        return float("nan")
    return sum(result.avg_at_k * result.num_problems for result in results if result.num_problems) / total


def markdown_table(label: str, results: Sequence[BenchmarkResult], average: float) -> str:
    """One-row Markdown table, percentages with one decimal: ``| Model | Math500 | ... | Weighted Avg. |``."""
    header = ["Model", *(result.title for result in results), "Weighted Avg."]
    values = [label, *(f"{100 * result.avg_at_k:.1f}" for result in results), f"{100 * average:.1f}"]
    return "\n".join(
        [
            "| " + " | ".join(header) + " |",
            "|" + "|".join("---" for _ in header) + "|",
            "| " + " | ".join(values) + " |",
        ]
    )


def parse_local_benchmarks(items: Sequence[str]) -> dict[str, str]:
    """``["name=path", ...]`` as ``{name: path}``."""
    local = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UsageError(f"Bad --benchmark {item!r}: use NAME=PATH, e.g. aime_like=data/aime_like.jsonl.")
        local[name.strip()] = path.strip()
    return local


def select_benchmarks(names: Sequence[str] | None, local: dict[str, str]) -> list[tuple[BenchmarkSpec, str]]:
    """The benchmarks to run with the source of each: a local file when given, else the spec's Hub dataset.

    ``names`` None: the local ones if any were given, else :data:`DEFAULT_BENCHMARKS` (those on the Hub; the AIME-like
    set exists only as a file, so it runs when named with ``--benchmark aime_like=PATH``).
    """
    if names is None:
        names = list(local) if local else list(DEFAULT_BENCHMARKS)
    chosen = []
    for name in names:
        spec = BENCHMARKS.get(name) or BenchmarkSpec(name, name, None)
        source = local.get(name, spec.source)
        if source is None:
            known = "" if name in BENCHMARKS else f" (built-in benchmarks: {', '.join(BENCHMARKS)})"
            raise UsageError(
                f"Benchmark {name!r} has no Hub dataset{known}: pass --benchmark {name}=PATH (a local "
                f".jsonl/.json/.parquet/.csv file), or leave it out of --benchmarks."
            )
        chosen.append((spec, source))
    return chosen


def load_benchmark(spec: BenchmarkSpec, source: str, args: argparse.Namespace) -> list[Problem]:
    """A benchmark's problems; local files use ``--question-column``/``--answer-column`` or auto-detection."""
    is_hub = source == spec.source
    problems = load_problems(
        source,
        split=spec.split,
        subset=spec.subset if is_hub else None,
        question_column=spec.question_column if is_hub else args.question_column,
        answer_column=spec.answer_column if is_hub else args.answer_column,
        id_column=spec.id_column if is_hub else None,
        max_problems=args.max_problems,
    )
    if not problems:
        raise ValueError(f"Benchmark {spec.name!r} ({source}) has no problems.")
    return problems


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trl-ada eval",
        description="avg@k accuracy on math benchmarks, written as JSON and a Markdown table.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  trl-ada eval --model Qwen2.5-Math-1.5B-Ada --benchmark aime_like=data/aime_like.jsonl "
        "--output-dir eval/ada\n\nbuilt-in benchmarks:\n"
        + "\n".join(
            f"  {s.name:<14} {s.source or 'local file only'}{f' ({s.subset})' if s.subset else ''}, {s.size} problems"
            for s in BENCHMARKS.values()
        ),
    )
    data = parser.add_argument_group("benchmarks")
    data.add_argument(
        "--benchmarks",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=None,
        help=f"comma-separated names (default: those given with --benchmark, else the Hub sets "
        f"{','.join(DEFAULT_BENCHMARKS)}; {', '.join(LOCAL_ONLY)} needs --benchmark NAME=PATH)",
    )
    data.add_argument(
        "--benchmark", action="append", default=[], metavar="NAME=PATH", help="a benchmark from a local file"
    )
    data.add_argument("--question-column", default=None, help="for local files (default: detected)")
    data.add_argument("--answer-column", default=None, help="for local files (default: detected)")
    data.add_argument("--max-problems", type=int, default=None, help="only the first N problems of each (quick runs)")
    add_template_arguments(parser)
    add_generation_arguments(parser, num_samples=32, max_new_tokens=4096)
    out = parser.add_argument_group("grading and output")
    out.add_argument("--reward", default="math", help="'math' (math-verify), 'toy', or a dotted import path")
    out.add_argument("--label", default=None, help="row label in the table (default: the model's folder name)")
    out.add_argument("--output-dir", required=True, type=pathlib.Path)
    out.add_argument("--save-samples", action="store_true", help="also write samples.jsonl (every completion)")
    return show_defaults(parser)


def evaluate(args: argparse.Namespace, sampler: Sampler | None = None) -> dict[str, Any]:
    """Run the evaluation for parsed ``args``, write the outputs, and return the results dict (``results.json``).

    ``sampler`` replaces the one ``args`` would load (``--model`` then only labels the results).
    """
    try:
        reward = resolve_reward(args.reward)
    except ValueError as error:
        raise UsageError(str(error)) from None
    chosen = select_benchmarks(args.benchmarks, parse_local_benchmarks(args.benchmark))
    if sampler is None:
        args.model = check_model_name(args.model, flag="--model")  # a missing folder or unreachable Hub: seconds
    # Load every benchmark before the model, so a bad path or column fails in seconds, not after loading weights.
    loaded = [(spec, source, load_benchmark(spec, source, args)) for spec, source in chosen]
    system_prompt, suffix = template_from_args(args)
    sampler, settings = sampler_from_args(args, sampler)
    args.output_dir.mkdir(parents=True, exist_ok=True)

    results, records = [], []
    for spec, _, problems in loaded:
        prompts = [build_prompt(problem.question, system_prompt, suffix) for problem in problems]
        groups = sampler.sample(prompts, settings, desc=spec.title)
        scores = score_groups(reward, prompts, groups, [problem.answer for problem in problems])
        results.append(summarise(spec.name, spec.title, scores))
        if args.save_samples:
            records += [
                {"benchmark": spec.name, "id": p.id, "answer": p.answer, "sample": j, "completion": c, "reward": s}
                for p, group, group_scores in zip(problems, groups, scores, strict=True)
                for j, (c, s) in enumerate(zip(group, group_scores, strict=True))
            ]

    average = weighted_average(results)
    label = args.label or pathlib.Path(args.model.rstrip("/")).name
    output = {
        "model": args.model,
        "label": label,
        "reward": args.reward,
        "num_samples": settings.num_samples,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "max_new_tokens": settings.max_new_tokens,
        "seed": settings.seed,
        "system_prompt": system_prompt,
        "prompt_suffix": suffix,
        "benchmarks": {
            r.name: {
                "title": r.title,
                "source": source,
                "num_problems": r.num_problems,
                "num_unscorable": r.num_unscorable,
                "avg_at_k": r.avg_at_k,
            }
            for r, (_, source, _) in zip(results, loaded, strict=True)
        },
        "num_problems": sum(r.num_problems for r in results),
        "weighted_average": average,
    }
    (args.output_dir / "results.json").write_text(json.dumps(output, indent=2) + "\n")
    table = markdown_table(label, results, average)
    (args.output_dir / "results.md").write_text(table + "\n")
    if args.save_samples:
        with (args.output_dir / "samples.jsonl").open("w") as handle:
            handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    output["table"] = table
    return output


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trl-ada eval``; exit code 0 done, 1 the run failed (no Hub, a benchmark with no problems), 2 bad input."""
    args = build_parser().parse_args(argv)
    try:
        output = evaluate(args)
    except (UsageError, FileNotFoundError) as error:  # a bad flag value, or a file named on the command line
        print(f"trl-ada eval: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (RunError, ValueError, ConnectionError) as error:  # bad data or no Hub: a message, no trace
        print(f"trl-ada eval: error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"avg@{output['num_samples']} ({output['num_problems']} problems) -> {args.output_dir / 'results.json'}")
    print(output["table"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
