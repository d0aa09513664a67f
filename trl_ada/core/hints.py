"""The fixes error messages suggest: the closest valid names for a misspelt one, the fields that fill a budget.

Pure functions, no imports from the rest of the package, so the config, the engine and the command line share them.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Sequence


def close_names(wanted: str, choices: Iterable[str], limit: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to `limit` of `choices` closest to `wanted`, best first (difflib's ratio, at least `cutoff`); none when none
    is close. Dashes count as underscores, as on a command line where `--max-steps` means `--max_steps`."""
    by_key: dict[str, str] = {}
    for choice in choices:
        by_key.setdefault(choice.replace("-", "_"), choice)
    return [
        by_key[key]
        for key in difflib.get_close_matches(wanted.replace("-", "_"), list(by_key), n=limit, cutoff=cutoff)
    ]


def did_you_mean(wanted: Sequence[str], choices: Iterable[str], cutoff: float = 0.6) -> str:
    """A note to append to the message naming `wanted`: ` (did you mean 'x'?)` for the names with a match in
    `choices` at least `cutoff` close (the best one each; with several names, which one it is for), or an empty
    string when none has one."""
    choices = list(choices)
    matches = {name: close_names(name, choices, limit=1, cutoff=cutoff) for name in wanted}
    found = [(name, match[0]) for name, match in matches.items() if match]
    if not found:
        return ""
    if len(wanted) == 1:
        return f" (did you mean {found[0][1]!r}?)"
    return " (did you mean " + ", ".join(f"{match!r} for {name!r}" for name, match in found) + "?)"


def budget_hint(samples_per_round: int, max_rounds: int, group: int, group_field: str = "num_generations") -> str:
    """What fills a group that a per-prompt budget of `samples_per_round * max_rounds` draws cannot: each field's
    smallest value that would, with the other unchanged, or a group no larger than the budget."""
    return (
        f"Raise max_rounds to {math.ceil(group / samples_per_round)} or samples_per_round to "
        f"{math.ceil(group / max_rounds)}, or lower {group_field} to {samples_per_round * max_rounds}."
    )
