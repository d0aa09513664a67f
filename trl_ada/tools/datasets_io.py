r"""Loading math problems as (id, question, answer) rows, from local files or the Hub, in the layouts people publish.

Recognised layouts, detected from the columns (explicit column names always win):

- verl / RL-data style: ``{"prompt": [{"role": "user", "content": ...}], "reward_model": {"ground_truth": ...},
  "data_source": ..., "extra_info": {"index": ...}}``. The question is the last user message, the answer
  ``reward_model.ground_truth``, the id ``extra_info.index`` when present.
- OpenR1-Math style: ``problem``, ``answer`` and ``solution`` (a worked solution; its last ``\boxed{}`` stands in for
  an empty ``answer``).
- Flat: a question column (``problem``, ``question``, ``prompt``, ``query``, ``input``) and an answer column
  (``answer``, ``final_answer``, ``ground_truth``, ``expected_answer``, ``target``, ``solution``). A ``prompt``
  column may be a string or a conversation (then its last user message is the question).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import datasets

from .rewards import last_boxed

# Searched in this order; the first column present is used.
QUESTION_COLUMNS = ("problem", "question", "prompt", "query", "input")
ANSWER_COLUMNS = ("answer", "final_answer", "ground_truth", "expected_answer", "target", "solution")
ID_COLUMNS = ("id", "unique_id", "uuid", "idx", "index", "problem_id")
# Columns holding a worked solution rather than a bare answer: the gold is their last \boxed{}.
SOLUTION_COLUMNS = frozenset({"solution"})

_LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


@dataclass(frozen=True)
class Problem:
    """One math problem: a stable ``id`` (str), the bare ``question`` text and the gold ``answer`` text."""

    id: str
    question: str
    answer: str


def load_table(source: str, split: str = "train", subset: str | None = None) -> datasets.Dataset:
    """Load a local ``.json``/``.jsonl``/``.parquet``/``.csv`` file (or a folder of them), or a Hub dataset by name.

    ``split`` and ``subset`` (the Hub "config") only matter for Hub datasets; a local file is one split.
    """
    path = pathlib.Path(source).expanduser()
    if path.is_file():
        file_format = _LOCAL_FORMATS.get(path.suffix.lower())
        if file_format is None:
            raise ValueError(
                f"Cannot read {source!r}: unknown extension {path.suffix!r}; use one of {sorted(_LOCAL_FORMATS)}."
            )
        return datasets.load_dataset(file_format, data_files=str(path), split="train")
    if path.is_dir():
        return datasets.load_dataset(str(path), split=split)
    if path.suffix.lower() in _LOCAL_FORMATS or source.startswith((".", "~", os.sep)):
        raise FileNotFoundError(f"No such file or folder: {source!r}.")
    return datasets.load_dataset(source, subset, split=split)


def _last_user_message(conversation: Sequence[dict[str, Any]]) -> str:
    for message in reversed(conversation):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    raise ValueError(f"A conversational prompt has no user message: {list(conversation)!r}")


def _as_text(value: Any) -> str:
    """A cell as question/answer text: conversations give their last user message, lists of answers are joined."""
    if value is None:
        return ""
    if isinstance(value, list):
        if value and isinstance(value[0], dict):
            return _last_user_message(value)
        # OlympiadBench stores final answers as a list (several parts of one answer)
        return ", ".join(str(part) for part in value)
    return str(value)


def _pick(columns: Sequence[str], candidates: Sequence[str]) -> str | None:
    return next((name for name in candidates if name in columns), None)


def _is_verl(dataset: datasets.Dataset) -> bool:
    feature = dataset.features.get("reward_model")
    return isinstance(feature, dict) and "ground_truth" in feature


def to_problems(
    dataset: datasets.Dataset,
    question_column: str | None = None,
    answer_column: str | None = None,
    id_column: str | None = None,
) -> list[Problem]:
    """Map every row of ``dataset`` to a :class:`Problem`, detecting the layout unless columns are named.

    Rows without an id column get their row index as id. An answer column listed in ``SOLUTION_COLUMNS`` (and an
    empty ``answer`` next to a ``solution``) is reduced to the solution's last ``\\boxed{}``.
    """
    columns = list(dataset.column_names)
    for given, role in ((question_column, "question"), (answer_column, "answer"), (id_column, "id")):
        if given is not None and given not in columns:
            raise ValueError(f"The {role} column {given!r} is not in the dataset; available columns: {columns}.")

    verl = _is_verl(dataset)
    question_column = question_column or _pick(columns, QUESTION_COLUMNS)
    if question_column is None:
        raise ValueError(
            f"Cannot find a question column among {columns}; looked for {list(QUESTION_COLUMNS)}. "
            "Name it with --question-column."
        )
    if answer_column is None and not verl:
        answer_column = _pick(columns, ANSWER_COLUMNS)
        if answer_column is None:
            raise ValueError(
                f"Cannot find an answer column among {columns}; looked for {list(ANSWER_COLUMNS)} and a verl-style "
                "'reward_model' with 'ground_truth'. Name it with --answer-column."
            )
    id_column = id_column or _pick(columns, ID_COLUMNS)
    fallback_solution = "solution" if answer_column != "solution" and "solution" in columns else None

    problems = []
    for index, row in enumerate(dataset):
        question = _as_text(row[question_column])
        if answer_column is not None:
            answer = _as_text(row[answer_column])
            if answer_column in SOLUTION_COLUMNS:
                answer = last_boxed(answer) or answer
        else:  # verl: the gold lives in reward_model.ground_truth
            answer = _as_text((row["reward_model"] or {}).get("ground_truth"))
        if not answer.strip() and fallback_solution is not None:
            answer = last_boxed(str(row[fallback_solution] or "")) or ""
        if id_column is not None:
            problem_id = str(row[id_column])
        elif verl and isinstance(row.get("extra_info"), dict) and row["extra_info"].get("index") is not None:
            problem_id = str(row["extra_info"]["index"])
        else:
            problem_id = str(index)
        problems.append(Problem(id=problem_id, question=question, answer=answer))
    return problems


def load_problems(
    source: str,
    split: str = "train",
    subset: str | None = None,
    question_column: str | None = None,
    answer_column: str | None = None,
    id_column: str | None = None,
    max_problems: int | None = None,
) -> list[Problem]:
    """:func:`load_table` then :func:`to_problems`; ``max_problems`` keeps the first rows (in file order)."""
    dataset = load_table(source, split=split, subset=subset)
    if max_problems is not None:
        dataset = dataset.select(range(min(max_problems, len(dataset))))
    return to_problems(dataset, question_column, answer_column, id_column)


# --------------------------------------------------------------------------------------------------------------------
# Prompt template
# --------------------------------------------------------------------------------------------------------------------

# The authors' template (Reinforce-Ada, Qwen2.5-Math recipes).
DEFAULT_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
DEFAULT_PROMPT_SUFFIX = "Let's think step by step and output the final answer within \\boxed{}."


def build_prompt(question: str, system_prompt: str | None, suffix: str | None) -> list[dict[str, str]]:
    """A conversational prompt: an optional system message, then the question with ``suffix`` appended.

    The suffix is not appended twice: published verl-style sets often already end their questions with it.
    """
    content = question.rstrip()
    if suffix and not content.endswith(suffix.strip()):
        content = f"{content} {suffix.strip()}" if content else suffix.strip()
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*messages, {"role": "user", "content": content}]


def add_template_arguments(parser: Any) -> None:
    """``--system-prompt``, ``--prompt-suffix`` and ``--no-template`` on an argparse parser (prepare and eval)."""
    group = parser.add_argument_group("prompt template (default: the authors')")
    group.add_argument("--system-prompt", default=DEFAULT_SYSTEM_PROMPT, help="system message ('' for none)")
    group.add_argument(
        "--prompt-suffix", default=DEFAULT_PROMPT_SUFFIX, help="appended to each question ('' for none)"
    )
    group.add_argument("--no-template", action="store_true", help="no system message and no suffix: the bare question")


def template_from_args(args: Any) -> tuple[str | None, str | None]:
    """(system prompt, suffix) chosen by :func:`add_template_arguments`'s flags; None where there is none."""
    if args.no_template:
        return None, None
    return args.system_prompt or None, args.prompt_suffix or None
