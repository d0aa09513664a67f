r"""``trl-ada prepare``: build a training set the way the Reinforce-Ada authors did.

Load problems (local file or Hub), wrap them in the prompt template, estimate each prompt's pass rate under the
base model from ``--num-samples`` samples, and keep the prompts whose pass rate lies in a band ``(lo, hi]``:
``hard`` = (0, 0.125], ``easy`` = (0, 0.313] over 16 samples in the paper (OpenR1-Math-220k, default subset).

Writes to ``--output-dir``:

- ``train.jsonl``: the kept prompts, one JSON object a line: ``id``, ``prompt`` (a conversation) and ``answer``;
  ready for ``trl-ada train`` and ``datasets.load_dataset("json", ...)``.
- ``pass_rates.jsonl`` (or ``.csv``): EVERY prompt, kept or not, with ``id``, ``prompt`` (the question text),
  ``answer``, ``num_correct``, ``num_samples`` (scored samples), ``pass_rate`` (= num_correct / num_samples, empty
  when the gold answer cannot be graded) and ``kept``.
- ``summary.json``: the settings and how many prompts fell below, in and above the band.
- ``samples.jsonl`` with ``--save-samples``: every completion and its reward.

A sample counts as correct when its reward is above ``--positive-threshold`` (0.5; rewards are 0/1 by default).
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..adapter.errors import RunError, UsageError
from ..adapter.model_names import check_model_name
from .cli import EXIT_FAILURE, EXIT_USAGE, show_defaults
from .datasets_io import Problem, add_template_arguments, build_prompt, load_problems, template_from_args
from .generation import Sampler, SamplingSettings, add_generation_arguments, sampler_from_args
from .rewards import RewardFunc, resolve_reward, score_groups

BANDS: dict[str, tuple[float, float]] = {"hard": (0.0, 0.125), "easy": (0.0, 0.313)}
REGIONS = ("unscorable", "below", "band", "above")


def parse_band(text: str) -> tuple[float, float]:
    """``"hard"``, ``"easy"`` or ``"LO,HI"`` as the half-open band ``(lo, hi]`` of pass rates to keep."""
    if text in BANDS:
        return BANDS[text]
    try:
        lo, hi = (float(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"Bad band {text!r}: use {' or '.join(BANDS)}, or 'LO,HI' such as '0,0.5'.") from None
    if not 0 <= lo < hi <= 1:
        raise UsageError(f"Bad band {text!r}: need 0 <= LO < HI <= 1 (the band is (LO, HI]).")
    return lo, hi


@dataclass(frozen=True)
class PassRate:
    """One prompt's estimate: ``num_correct`` of ``num_samples`` scored samples were correct."""

    id: str
    prompt: str
    answer: str
    num_correct: int
    num_samples: int

    @property
    def pass_rate(self) -> float | None:
        return self.num_correct / self.num_samples if self.num_samples else None


def region(rate: float | None, band: tuple[float, float]) -> str:
    """Where a pass rate falls: "unscorable" (None), "below" (<= lo), "band" (lo, hi] or "above" (> hi)."""
    lo, hi = band
    if rate is None:
        return "unscorable"
    return "below" if rate <= lo else "band" if rate <= hi else "above"


def estimate_pass_rates(
    problems: Sequence[Problem],
    prompts: Sequence[Any],
    sampler: Sampler,
    settings: SamplingSettings,
    reward: RewardFunc,
    positive_threshold: float = 0.5,
) -> tuple[list[PassRate], list[list[str]], list[list[float | None]]]:
    """Sample and grade ``settings.num_samples`` completions per prompt: (pass rates, completions, rewards)."""
    groups = sampler.sample(prompts, settings, desc="sampling for pass rates")
    scores = score_groups(reward, prompts, groups, [problem.answer for problem in problems])
    rates = [
        PassRate(
            id=problem.id,
            prompt=problem.question,
            answer=problem.answer,
            num_correct=sum(1 for s in group if s is not None and s > positive_threshold),
            num_samples=sum(1 for s in group if s is not None),
        )
        for problem, group in zip(problems, scores, strict=True)
    ]
    return rates, groups, scores


def write_pass_rates(path: pathlib.Path, rates: Sequence[PassRate], kept: Sequence[bool]) -> None:
    """The per-prompt pass-rate file: JSONL, or CSV when ``path`` ends with ``.csv``."""
    rows = [asdict(rate) | {"pass_rate": rate.pass_rate, "kept": keep} for rate, keep in zip(rates, kept, strict=True)]
    if path.suffix.lower() == ".csv":
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["id"])
            writer.writeheader()
            writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    else:
        _write_jsonl(path, rows)


def _write_jsonl(path: pathlib.Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trl-ada prepare",
        description="Build a training set: prompt template, pass-rate estimate under a model, difficulty band.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  trl-ada prepare --dataset open-r1/OpenR1-Math-220k --subset default "
        "--model Qwen/Qwen2.5-Math-1.5B --band hard --output-dir data/openr1-hard",
    )
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", required=True, help="Hub dataset name, or a local .jsonl/.json/.parquet/.csv file")
    data.add_argument("--subset", default=None, help="Hub dataset config, e.g. 'default'")
    data.add_argument("--split", default="train")
    data.add_argument("--question-column", default=None, help="default: detected (problem, question, prompt, ...)")
    data.add_argument("--answer-column", default=None, help="default: detected (answer, ground_truth, solution, ...)")
    data.add_argument("--id-column", default=None, help="default: detected (id, unique_id, ...), else the row index")
    data.add_argument("--max-prompts", type=int, default=None, help="only the first N rows (quick runs)")
    add_template_arguments(parser)
    add_generation_arguments(parser, num_samples=16, max_new_tokens=2048)
    selection = parser.add_argument_group("selection and output")
    selection.add_argument("--reward", default="math", help="'math' (math-verify), 'toy', or a dotted import path")
    selection.add_argument("--positive-threshold", type=float, default=0.5, help="reward above it counts as correct")
    selection.add_argument("--band", default="easy", help="'hard' = (0,0.125], 'easy' = (0,0.313], or 'LO,HI'")
    selection.add_argument("--output-dir", required=True, type=pathlib.Path)
    selection.add_argument("--pass-rates-format", choices=("jsonl", "csv"), default="jsonl")
    selection.add_argument("--save-samples", action="store_true", help="also write samples.jsonl (every completion)")
    return show_defaults(parser)


def prepare(args: argparse.Namespace, sampler: Sampler | None = None) -> dict[str, Any]:
    """Run the pipeline for parsed ``args``; return the summary. Raises ValueError when nothing is kept.

    ``sampler`` replaces the one ``args`` would load (``--model`` then only labels the summary).
    """
    band = parse_band(args.band)
    reward = reward_from_args(args.reward)
    if sampler is None:
        args.model = check_model_name(args.model, flag="--model")  # a missing folder or unreachable Hub: seconds
    problems = load_problems(
        args.dataset,
        split=args.split,
        subset=args.subset,
        question_column=args.question_column,
        answer_column=args.answer_column,
        id_column=args.id_column,
        max_problems=args.max_prompts,
    )
    if not problems:
        raise ValueError(f"{args.dataset!r} has no rows.")
    system_prompt, suffix = template_from_args(args)
    prompts = [build_prompt(problem.question, system_prompt, suffix) for problem in problems]
    sampler, settings = sampler_from_args(args, sampler)
    rates, groups, scores = estimate_pass_rates(problems, prompts, sampler, settings, reward, args.positive_threshold)

    regions = [region(rate.pass_rate, band) for rate in rates]
    kept = [r == "band" for r in regions]
    output_dir: pathlib.Path = args.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    write_pass_rates(output_dir / f"pass_rates.{args.pass_rates_format}", rates, kept)
    if args.save_samples:
        _write_jsonl(
            output_dir / "samples.jsonl",
            [
                {"id": rate.id, "sample": j, "completion": text, "reward": score}
                for rate, group, group_scores in zip(rates, groups, scores, strict=True)
                for j, (text, score) in enumerate(zip(group, group_scores, strict=True))
            ],
        )
    counts = Counter(regions)
    summary = {
        "dataset": args.dataset,
        "model": args.model,
        "reward": args.reward,
        "band": list(band),
        "num_samples": settings.num_samples,
        "temperature": settings.temperature,
        "max_new_tokens": settings.max_new_tokens,
        "seed": settings.seed,
        "system_prompt": system_prompt,
        "prompt_suffix": suffix,
        "num_prompts": len(problems),
        "counts": {name: counts.get(name, 0) for name in REGIONS},
    }
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    lo, hi = band
    if not any(kept):
        raise ValueError(
            f"No prompt has a pass rate in ({lo:g}, {hi:g}]: {counts['below']} at or below {lo:g}, "
            f"{counts['above']} above {hi:g}, {counts['unscorable']} with an ungradable answer "
            f"(of {len(problems)}). Widen --band, use more --num-samples, or check the model and --reward. "
            f"Pass rates are in {output_dir / f'pass_rates.{args.pass_rates_format}'}."
        )
    _write_jsonl(
        output_dir / "train.jsonl",
        [
            {"id": problem.id, "prompt": prompt, "answer": problem.answer}
            for problem, prompt, keep in zip(problems, prompts, kept, strict=True)
            if keep
        ],
    )
    return summary


def reward_from_args(name: str) -> RewardFunc:
    """``--reward`` as a function; an unknown name is a usage error."""
    try:
        return resolve_reward(name)
    except ValueError as error:
        raise UsageError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trl-ada prepare``; exit code 0 done, 1 the run failed (no Hub, no prompt in the band), 2 bad input."""
    args = build_parser().parse_args(argv)
    try:
        summary = prepare(args)
    except (UsageError, FileNotFoundError) as error:  # a bad flag value, or a file named on the command line
        print(f"trl-ada prepare: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (RunError, ValueError, ConnectionError) as error:  # bad data or no Hub: a message, no trace
        print(f"trl-ada prepare: error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    counts, (lo, hi) = summary["counts"], summary["band"]
    print(
        f"{summary['num_prompts']} prompts, {summary['num_samples']} samples each: {counts['band']} kept in "
        f"({lo:g}, {hi:g}], {counts['below']} at or below {lo:g}, {counts['above']} above {hi:g}, "
        f"{counts['unscorable']} ungradable -> {args.output_dir / 'train.jsonl'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
