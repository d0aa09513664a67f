"""When a prompt stops: the exit rules (a pool with enough positives and negatives) and pilot-then-commit (a prompt
whose pilot agrees stops there when the caller's prediction says the rest of its group would agree too)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .pool import Pool, has_signal

STRATEGIES = ("balanced", "positive", "uniform")  # exit rules; "estimate" (Est) is one round sized by the caller


@dataclass(frozen=True)
class ExitRule:
    """A prompt is resolved once its pool holds at least `min_positives` positives and `min_negatives` negatives."""

    min_positives: int
    min_negatives: int

    def __post_init__(self) -> None:
        if self.min_positives < 0 or self.min_negatives < 0:
            raise ValueError(f"Exit counts must be >= 0, got {self.min_positives=} and {self.min_negatives=}.")

    def holds(self, num_positive: int, num_negative: int) -> bool:
        return num_positive >= self.min_positives and num_negative >= self.min_negatives

    @classmethod
    def for_strategy(
        cls,
        strategy: str,
        group_size: int,
        min_positives: int | None = None,
        min_negatives: int | None = None,
    ) -> ExitRule:
        """The paper's rules: `balanced` waits for a half-positive, half-negative group; `positive` for one
        correct answer; `uniform` (plain GRPO) and `estimate` (Reinforce-Ada-Est, one round sized in advance) accept
        whatever one round gives. Explicit counts override."""
        defaults = {
            "balanced": (group_size // 2, group_size - group_size // 2),
            "positive": (1, 0),
            "uniform": (0, 0),
            "estimate": (0, 0),
        }
        if strategy not in defaults:
            raise ValueError(f"Unknown sampling strategy {strategy!r}; expected one of {(*STRATEGIES, 'estimate')}.")
        default_pos, default_neg = defaults[strategy]
        return cls(
            default_pos if min_positives is None else min_positives,
            default_neg if min_negatives is None else min_negatives,
        )


@dataclass(frozen=True)
class Pilot:
    """Pilot-then-commit. Every prompt first draws `size` completions (in rounds, a round of its own; streaming, at
    most `size` in flight until they have finished). A prompt whose pilot has no signal then stops when
    `stop(prompt_index, pool)` holds, else it goes on under the schedule, the pilot counting towards its group and
    budget. `stop` sees only the pilot's completions, so the decision never depends on a completion beyond them."""

    size: int
    stop: Callable[[int, Pool], bool]

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"A pilot draws at least one completion, got size={self.size}.")

    def stops(self, index: int, pool: Pool) -> bool:
        """Whether prompt `index`, whose pool is its finished pilot, stops here."""
        return not has_signal(pool) and self.stop(index, pool)
