"""When a prompt stops: the exit rules (a pool with enough positives and negatives), registered by name in one table
(`EXIT_RULES`, `register_exit_rule`), and pilot-then-commit (a prompt whose pilot agrees stops there when the
caller's prediction says the rest of its group would agree too)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .pool import Pool, has_signal


@dataclass(frozen=True)
class ExitRuleSpec:
    """One exit rule in the registry: its name (a `sampling_strategy` value), the counts it asks for by default for a
    group of `group_size` (`defaults(group_size) -> (min_positives, min_negatives)`) and whether it samples
    adaptively (rounds until the rule holds) or draws one round of exactly the group (`adaptive=False`: plain GRPO)."""

    name: str
    defaults: Callable[[int], tuple[int, int]]
    adaptive: bool = True
    summary: str = ""


# The exit rules, by name, in the order they are offered: the one table the config's choices and checks, the
# asynchronous worker, the simulator and the documentation test read. A new rule is one `register_exit_rule` call.
EXIT_RULES: dict[str, ExitRuleSpec] = {}
ESTIMATE = "estimate"  # Reinforce-Ada-Est: not an exit rule, one round sized by the caller (accepts what it gives)


def register_exit_rule(spec: ExitRuleSpec) -> ExitRuleSpec:
    """Add an exit rule to the registry (a name already there is refused: rules are never silently replaced)."""
    if spec.name in EXIT_RULES or spec.name == ESTIMATE:
        raise ValueError(f"An exit rule named {spec.name!r} is registered already.")
    EXIT_RULES[spec.name] = spec
    return spec


def unregister_exit_rule(name: str) -> None:
    """Remove a registered rule (a test's own rule, once the test is done)."""
    del EXIT_RULES[name]


register_exit_rule(ExitRuleSpec("balanced", lambda g: (g // 2, g - g // 2), summary="half positive, half negative"))
register_exit_rule(ExitRuleSpec("positive", lambda g: (1, 0), summary="one positive"))
register_exit_rule(ExitRuleSpec("uniform", lambda g: (0, 0), adaptive=False, summary="plain GRPO: one group"))


class _Names(Sequence[str]):
    """A live, read-only view of registry names (a field's `choices`): a rule registered later is in it too."""

    def __init__(self, select: Callable[[], list[str]]) -> None:
        self._select = select

    def __getitem__(self, index):  # type: ignore[override]
        return self._select()[index]

    def __len__(self) -> int:
        return len(self._select())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


STRATEGIES: Sequence[str] = _Names(lambda: list(EXIT_RULES))  # the exit rules
ADAPTIVE_STRATEGIES: Sequence[str] = _Names(lambda: [name for name, spec in EXIT_RULES.items() if spec.adaptive])
SAMPLING_STRATEGIES: Sequence[str] = _Names(lambda: [*EXIT_RULES, ESTIMATE])  # `sampling_strategy`'s values


def is_adaptive(strategy: str) -> bool:
    """Whether `strategy` samples in rounds until its exit rule holds (not plain GRPO, not Est)."""
    spec = EXIT_RULES.get(strategy)
    return spec is not None and spec.adaptive


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
        """The registered rule's counts (`EXIT_RULES`): the paper's `balanced` waits for a half-positive,
        half-negative group, `positive` for one correct answer; `uniform` (plain GRPO) and `estimate`
        (Reinforce-Ada-Est, one round sized in advance) accept whatever one round gives. Explicit counts override."""
        if strategy == ESTIMATE:
            default_pos, default_neg = 0, 0
        elif strategy in EXIT_RULES:
            default_pos, default_neg = EXIT_RULES[strategy].defaults(group_size)
        else:
            raise ValueError(f"Unknown sampling strategy {strategy!r}; expected one of {tuple(SAMPLING_STRATEGIES)}.")
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
