"""The two errors a user can act on, raised by the trainer's input checks (a model name that names no model) and by
the command line: each is reported as one message without a traceback, with the exit code `trl_ada.tools.cli` gives
it (docs/cli.md's table). Several problems found together are reported together, numbered on one line
(`numbered`, `combined`)."""

from __future__ import annotations

from collections.abc import Sequence


class UsageError(ValueError):
    """Input the user can fix on the command line; reported as one message, without a traceback, exit code 2."""


class RunError(RuntimeError):
    """A well-formed command that cannot run here (no network, a model that does not load); one message, exit 1."""


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces made single spaces (TRL's and yaml's messages span lines)."""
    return " ".join(str(text).split())


def numbered(problems: Sequence[str], what: str = "") -> str:
    """One line for ``problems``: the problem itself when there is one, else ``N problems[ with WHAT]: (1) ... (2)
    ...``, so that every problem found is reported in the same run."""
    problems = [one_line(problem) for problem in problems]
    if len(problems) == 1:
        return problems[0]
    heading = f"{len(problems)} problems" + (f" with {what}" if what else "")
    return f"{heading}: " + " ".join(f"({number}) {problem}" for number, problem in enumerate(problems, 1))


def combined(errors: Sequence[UsageError | RunError], what: str = "") -> UsageError | RunError:
    """One error for several: a usage error (exit code 2) when any of them is one, since the command must change
    anyway, else a run error (exit code 1)."""
    kind = UsageError if any(isinstance(error, UsageError) for error in errors) else RunError
    return kind(numbered([str(error) for error in errors], what))
