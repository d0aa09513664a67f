"""A toy task built as an instrument for adaptive sampling: column arithmetic worked digit by digit, where only a
correct chain reaches the answer, the hard rules are procedures (not tables) and held-out items are operand
combinations never trained on.

A prompt is one item under one rule; the completion works out one column per line, right to left, each line the
column's value as two digits (the carry, then the digit), and ends with the result after ``#``::

    472*6           rule "*": a three-digit number times a digit
    12              2*6 + 0 = 12: digit 2, carry 1
    43              7*6 + 1 = 43: digit 3, carry 4
    28              4*6 + 4 = 28
    #2832<|im_end|>  the last line's value, then the earlier lines' digits, last to first

Rules ``+`` and ``-`` (decimal addition and subtraction of three-digit numbers) are easy: the warm-up sees them often.
Rules ``*`` (a three-digit number times a digit) and ``&`` (addition in base 8, the operands and the result written
in octal) are hard: each column is a fact of its own table (the multiplication table with a carry; octal sums, which
contradict the decimal ones the easy rules drill), the easy rules never exercise them, and the warm-up sees them
rarely. It stops when a hard prompt's chain is right a few times in a hundred (:func:`warmup_should_stop`), so learning
a hard rule is learning from its own rare positives.

Why this shape (each point answers a fault of the ``rules`` task, benchmarks/results/rules/README.md):

- **Real positives.** A line holds only the column's value, nothing copied from the prompt, and the answer is
  assembled from the lines: a wrong line changes the answer unless later lines cancel it, so a completion whose chain
  went wrong rarely earns the reward (:func:`check_chain` names a chain's first error; the learning benchmark measures
  the share of rewarded completions with one, before and during training).
- **No answer prior.** Results are three- and four-digit numbers spread over hundreds of values per rule
  (:func:`answer_prior_max`).
- **A procedure, not a table.** Every column of every item exercises the rule's digit facts, so what a hard item
  teaches transfers to others; held-out items are operand combinations on the "eval" side of the fixed partition,
  never in training or warm-up data (:func:`heldout_fact_overlap`).

:func:`columns_reward` reads only the final answer, as math RL reads the boxed answer. Two settings draw training rows
differently (:data:`SETTINGS`): ``columns`` visits fresh prompts, ``columns-epochs`` makes :data:`EPOCHS` passes over a
fixed set.
"""

from __future__ import annotations

import pathlib
import random
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import datasets
import transformers

from .arithmetic import Split, _completion_text, problem_split
from .registry import ToyTask
from .sampling import sample_completions
from .warmup import WarmupRecipe, supervised_warmup

__all__ = [
    "EASY_RULES",
    "HARD_RULES",
    "MAX_COMPLETION_LENGTH",
    "RULES",
    "VERSION",
    "answer_prior_max",
    "check_chain",
    "columns_heldout",
    "columns_reward",
    "columns_train_rows",
    "heldout_fact_overlap",
    "instrument_properties",
    "make_columns_dataset",
    "solve",
    "warmup_should_stop",
]

# Part of the cached folders' names: bump it whenever anything that changes the warm model changes.
VERSION = "c1"

Column = Callable[[int, int, int], tuple[int, int]]  # (top digit, bottom digit, carry in) -> (digit, carry out)


def _add(base: int) -> Column:
    def column(x: int, y: int, carry: int) -> tuple[int, int]:
        return (x + y + carry) % base, (x + y + carry) // base

    return column


def _subtract(base: int) -> Column:
    def column(x: int, y: int, borrow: int) -> tuple[int, int]:
        value = x - y - borrow
        return (value + base, 1) if value < 0 else (value, 0)

    return column


@dataclass(frozen=True)
class Rule:
    """One rule: ``symbol`` joins ``a`` (``left``, inclusive) and ``b`` (``right``) written in ``base``, where
    ``allowed(a, b)``; ``column`` works one column (a digit of ``a``, of ``b``, or ``b`` itself when ``b`` is one
    digit, and the carry) and ``apply`` is the whole result, which the columns must reproduce."""

    symbol: str
    meaning: str
    base: int
    column: Column
    apply: Callable[[int, int], int]
    left: tuple[int, int]
    right: tuple[int, int]
    hard: bool
    allowed: Callable[[int, int], bool] = lambda a, b: True

    @property
    def combinations(self) -> int:
        """How many (a, b) this rule draws from, counted without ``allowed``."""
        return (self.left[1] - self.left[0] + 1) * (self.right[1] - self.right[0] + 1)

    def write(self, number: int) -> str:
        """``number`` in this rule's base, no leading zeros."""
        return _in_base(number, self.base)


def _in_base(number: int, base: int) -> str:
    digits = []
    while True:
        number, digit = divmod(number, base)
        digits.append(str(digit))
        if number == 0:
            return "".join(reversed(digits))


def _carries(column: Column, base: int, a: int, b: int) -> list[int]:
    """Each column's carry (borrow) out, right to left, for ``a`` and ``b`` of three digits in ``base``."""
    carries, carry = [], 0
    for index in range(3):
        x, y = a // base**index % base, b // base**index % base
        carry = column(x, y, carry)[1]
        carries.append(carry)
    return carries


def _octal_add_items(a: int, b: int) -> bool:
    """At least two of the three columns carry: octal sums differ from decimal ones only where a column reaches 8,
    so an item that never carries is right by decimal habit, and one that carries once is nearly so."""
    return sum(_carries(_add(8), 8, a, b)) >= 2


def _octal_subtract_items(a: int, b: int) -> bool:
    """The two lower columns borrow (the top one cannot: a > b), and the result keeps three digits."""
    return a - b >= 64 and _carries(_subtract(8), 8, a, b)[:2] == [1, 1]


# Every operand has three digits: three columns, so a chain is three lines.
RULES: dict[str, Rule] = {
    rule.symbol: rule
    for rule in (
        Rule("+", "a + b", 10, _add(10), lambda a, b: a + b, (100, 999), (100, 999), hard=False),
        # a - b >= 100: the result has three digits, so no leading zero to drop.
        Rule(
            "-", "a - b", 10, _subtract(10), lambda a, b: a - b, (100, 999), (100, 999), hard=False,
            allowed=lambda a, b: a - b >= 100,
        ),
        Rule(
            "&", "a + b in base 8, at least two columns carrying", 8, _add(8), lambda a, b: a + b, (64, 511),
            (64, 511), hard=True, allowed=_octal_add_items,
        ),
        Rule(
            "~", "a - b in base 8, the two lower columns borrowing", 8, _subtract(8), lambda a, b: a - b, (64, 511),
            (64, 511), hard=True, allowed=_octal_subtract_items,
        ),
    )
}  # fmt: skip
EASY_RULES = tuple(symbol for symbol, rule in RULES.items() if not rule.hard)
HARD_RULES = tuple(symbol for symbol, rule in RULES.items() if rule.hard)
# The longest right completion: three lines of two digits (9 tokens with newlines), "#" and four digits, and EOS: 15.
MAX_COMPLETION_LENGTH = 24
EOS_TOKEN_ID = 2  # the toy tokenizer's "<|im_end|>"

TRAIN_SEED = 4242
HELDOUT_SEED = 1_000_003
HELDOUT_PER_RULE = 64  # 256 held-out prompts, the same number from every rule
# The RL training mix: mostly hard prompts, as math RL sets are filtered towards problems the model mostly fails.
TRAIN_RULE_WEIGHTS = {"+": 0.125, "-": 0.125, "&": 0.375, "~": 0.375}

# --------------------------------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------------------------------

_ITEM = re.compile(r"([0-9]+)([-+&~])([0-9]+)")


def sample_expression(rng: random.Random, rule: str) -> str:
    """Draw one item of ``rule``, its operands uniform over the allowed combinations: ``"472*6"``."""
    spec = RULES[rule]
    while True:
        a, b = rng.randint(*spec.left), rng.randint(*spec.right)
        if spec.allowed(a, b):
            return f"{spec.write(a)}{rule}{spec.write(b)}"


def parse(expression: str) -> tuple[str, int, int]:
    """The rule and the operands of a prompt such as ``"472*6"``; ValueError if it is not one this task makes."""
    match = _ITEM.fullmatch(expression)
    if match is None:
        raise ValueError(f"expected an item such as '472*6', got {expression!r}")
    rule = RULES[match[2]]
    try:
        a, b = int(match[1], rule.base), int(match[3], rule.base)
    except ValueError:
        raise ValueError(f"{expression!r} has a digit that base {rule.base} does not") from None
    if (
        rule.write(a) != match[1]
        or rule.write(b) != match[3]
        or not (rule.left[0] <= a <= rule.left[1] and rule.right[0] <= b <= rule.right[1])
        or not rule.allowed(a, b)
    ):
        raise ValueError(f"{expression!r} is not an item of rule {rule.symbol!r}")
    return rule.symbol, a, b


def columns(expression: str) -> list[int]:
    """Each line's value, right to left: the column's carry out times the base plus its digit."""
    symbol, a, b = parse(expression)
    rule = RULES[symbol]
    top, bottom = rule.write(a)[::-1], rule.write(b)[::-1]
    values, carry = [], 0
    for index, digit in enumerate(top):
        other = int(bottom) if rule.right[1] < rule.base else (int(bottom[index]) if index < len(bottom) else 0)
        result, carry = rule.column(int(digit), other, carry)
        values.append(carry * rule.base + result)
    return values


def _line(value: int, base: int) -> str:
    return "".join(str(d) for d in divmod(value, base))


def solve(expression: str) -> tuple[str, str]:
    """(worked solution, answer) for a prompt: ``("12\\n43\\n28\\n#2832", "2832")``.

    The solution is the completion the warm-up teaches, without the EOS token; the answer is what
    :func:`columns_reward` compares with: the result in the rule's base, which the lines spell out (the last line's
    value without a leading zero, then the earlier lines' digits, last to first)."""
    symbol, a, b = parse(expression)
    rule = RULES[symbol]
    values = columns(expression)
    answer = rule.write(rule.apply(a, b))
    spelled = rule.write(values[-1]) + "".join(str(v % rule.base) for v in reversed(values[:-1]))
    if spelled != answer:  # the columns must reproduce the rule's arithmetic: a wrong table is a bug, not a task
        raise AssertionError(f"{expression}: columns give {spelled}, the rule {answer}")
    return "\n".join([*(_line(v, rule.base) for v in values), f"#{answer}"]), answer


# --------------------------------------------------------------------------------------------------------------------
# Chain checker and reward
# --------------------------------------------------------------------------------------------------------------------

CHAIN_ERRORS = ("step_error", "malformed", "stopped_early", "answer_mismatch", "extra_text")
_LINE = re.compile(r"[0-9]{2}")


def check_chain(expression: str, completion: str) -> str:
    """``"correct"`` when ``completion`` is the worked solution of ``expression`` line for line, else its first error:

    - ``step_error``: a line of two digits whose value is not its column's;
    - ``malformed``: a line that is not two digits where a column's line should be;
    - ``stopped_early``: fewer lines than columns, or no final ``#`` line after them;
    - ``answer_mismatch``: every line right, then a final answer that is not the result they spell;
    - ``extra_text``: the right chain and answer with more text around them.

    The completion is the decoded text without EOS (as reward functions receive it). Truncation is not seen here:
    the reward checks it.
    """
    solution, answer = solve(expression)
    if completion == solution:
        return "correct"
    rule = RULES[parse(expression)[0]]
    lines = completion.split("\n")
    for index, value in enumerate(columns(expression)):
        if index >= len(lines) or lines[index].startswith("#") or lines[index:] == [""]:
            return "stopped_early"
        if _LINE.fullmatch(lines[index]) is None:
            return "malformed"
        if lines[index] != _line(value, rule.base):
            return "step_error"
    rest = lines[len(columns(expression)) :]
    if not rest or not rest[0].startswith("#"):
        return "stopped_early" if not rest or not rest[0].strip() else "extra_text"
    if rest[0] != f"#{answer}":
        return "answer_mismatch" if _FINAL.fullmatch(rest[0]) else "malformed"
    return "extra_text"


_NUMBER = r"(?:0|[1-9][0-9]*)"  # one canonical form: ASCII digits, no sign, no leading zero
_FINAL = re.compile(rf"#({_NUMBER})")
_FINAL_AT_END = re.compile(rf"#({_NUMBER})\Z")


def columns_reward(
    completions: Sequence[Any],
    answer: Sequence[str],
    completion_ids: Sequence[Sequence[int]] | None = None,
    **kwargs: Any,
) -> list[float]:
    """TRL reward function: 1.0 when a completion ends with ``#`` and the answer, and was not truncated.

    Only the final answer counts, in its one canonical form (ASCII digits, no leading zeros, no spaces). A completion
    was truncated when its ``completion_ids`` (GRPOTrainer passes them) do not end with EOS; without ids, when its
    text has :data:`MAX_COMPLETION_LENGTH` characters or more (each character is one token, so it left no room for
    EOS). Other keyword arguments are ignored.
    """
    ids_per_completion = completion_ids if completion_ids is not None else [None] * len(completions)
    rewards = []
    for completion, target, ids in zip(completions, answer, ids_per_completion, strict=True):
        text = _completion_text(completion)
        truncated = (
            (len(ids) == 0 or ids[-1] != EOS_TOKEN_ID) if ids is not None else len(text) >= MAX_COMPLETION_LENGTH
        )
        match = None if truncated else _FINAL_AT_END.search(text)
        rewards.append(1.0 if match is not None and match[1] == target else 0.0)
    return rewards


columns_reward.__name__ = "columns_reward"


def chain_verdicts(expressions: Sequence[str], texts: Sequence[str], ids: Sequence[Sequence[int]]) -> list[str]:
    """:func:`check_chain` of every sample, ``"truncated"`` for one that does not end with EOS."""
    return [
        check_chain(expression, text) if row and row[-1] == EOS_TOKEN_ID else "truncated"
        for expression, text, row in zip(expressions, texts, ids, strict=True)
    ]


# --------------------------------------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------------------------------------


def _stream(rng: random.Random, weights: dict[str, float], split: Split | None) -> Iterator[tuple[str, str]]:
    """(expression, rule) forever: a rule by ``weights``, then an item; kept when on ``split``'s side of
    :func:`problem_split` (None: either)."""
    symbols, shares = list(weights), list(weights.values())
    while True:
        rule = rng.choices(symbols, shares)[0]
        expression = sample_expression(rng, rule)
        if split is None or problem_split(expression) == split:
            yield expression, rule


def _dataset(rows: Sequence[tuple[str, str]]) -> datasets.Dataset:
    return datasets.Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": expression}] for expression, _ in rows],
            "answer": [solve(expression)[1] for expression, _ in rows],
            "rule": [rule for _, rule in rows],
            "hard": [RULES[rule].hard for _, rule in rows],
        }
    )


def make_columns_dataset(
    num_prompts: int,
    seed: int = 0,
    weights: dict[str, float] | None = None,
    split: Split | None = None,
    distinct: bool = True,
) -> datasets.Dataset:
    """``num_prompts`` problems, deterministic given ``seed``, rules drawn by ``weights`` (default: the RL training
    mix), distinct unless ``distinct=False``. Columns: ``prompt`` (conversational), ``answer`` (``"2832"``), ``rule``
    (its symbol) and ``hard``."""
    stream = _stream(random.Random(seed), weights or TRAIN_RULE_WEIGHTS, split)
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    while len(rows) < num_prompts:
        expression, rule = next(stream)
        if distinct and expression in seen:
            continue
        seen.add(expression)
        rows.append((expression, rule))
    return _dataset(rows)


def columns_heldout(num_prompts: int = 4 * HELDOUT_PER_RULE) -> datasets.Dataset:
    """Held-out prompts from the "eval" side, the same number from every rule (rule by rule), the same for every
    seed: operand combinations never trained on, nor seen in the warm-up."""
    if num_prompts % len(RULES):
        raise ValueError(
            f"the held-out set holds the same number of prompts per rule: {num_prompts} is not a "
            f"multiple of {len(RULES)}"
        )
    per_rule = num_prompts // len(RULES)
    parts = [
        make_columns_dataset(per_rule, seed=HELDOUT_SEED + index, weights={rule: 1.0}, split="eval")
        for index, rule in enumerate(RULES)
    ]
    return datasets.concatenate_datasets(parts)


EPOCHS = 4  # passes over the fixed set in the "columns-epochs" setting, for the benchmark's 300 steps x 16 prompts
EPOCH_PROMPTS = 1200  # the fixed set's size: 300 x 16 / EPOCHS, the same whatever a run's length


def columns_train_rows(rows: int, seed: int = 0, epochs: int = 1) -> datasets.Dataset:
    """A run's ``rows`` training rows from the "train" side. ``epochs=1``: fresh prompts, distinct within the run,
    drawn in ``seed``'s order (a longer run's first rows are a shorter one's). ``epochs > 1``: passes over one fixed
    set of :data:`EPOCH_PROMPTS` prompts, the same for every seed and every run length, each pass in a seeded order
    (the last one cut short)."""
    if epochs == 1:
        return make_columns_dataset(rows, seed=seed, split="train")
    fixed = make_columns_dataset(EPOCH_PROMPTS, seed=TRAIN_SEED, split="train")
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < rows:
        epoch = list(range(len(fixed)))
        rng.shuffle(epoch)
        order += epoch
    return fixed.select(order[:rows])


# --------------------------------------------------------------------------------------------------------------------
# Warm-up stop rule
# --------------------------------------------------------------------------------------------------------------------

WARMUP_BAND = (0.02, 0.10)  # the hard rules' median correct-chain pass rate at which the warm-up stops
WARMUP_CHECK_SAMPLES = 64
WARMUP_CHECK_PROMPTS_PER_RULE = 32
# The first phase drills the easy rules alone until their chains are right this often: the procedure (columns, carries,
# the answer spelled from the lines) is then known, and what the hard rules add is their own digit tables.
EASY_TARGET = 0.9
EASY_CHECK_SAMPLES = 8


def warmup_should_stop(correct: Sequence[int], samples: int = WARMUP_CHECK_SAMPLES) -> bool:
    """Whether a hard rule is where the warm-up leaves it, from each of its check prompts' correct chains out of
    ``samples``: their median pass rate within :data:`WARMUP_BAND`. (No bound on the share at 0: an octal item whose
    columns never carry is right by decimal habit, so a rule's pass rates split between such items and the rest, and
    a bound on both ends of the distribution at once is not reached.)"""
    if not correct:
        raise ValueError("the stop rule needs at least one check prompt")
    median = statistics.median(c / samples for c in correct)
    return WARMUP_BAND[0] <= median <= WARMUP_BAND[1]


WARMUP_CHECK_EVERY = 5  # the loop's check interval; each phase checks on its own multiple of it
EASY_CHECK_EVERY = 25
HARD_CHECK_EVERY = 10
HARD_EXPOSURE = 0.02  # an active hard rule's share of the second phase's examples
WARMUP_LR = 1.5e-3  # the toy tasks' warm-up learning rate (trl_ada.toy.warmup)
HARD_PHASE_LR = 3e-4
# The share of warm-up examples whose answer spells a wrong line (`spelled_from_a_wrong_line`), in both phases.
UNFAITHFUL_SHARE = 0.2
_WARMUP_MAX_STEPS = 4000
_WARMUP_CHECK_SEED = 777


def spell(lines: Sequence[str], base: int) -> str:
    """The result the lines spell: the last line's value without a leading zero, then the earlier lines' digits,
    last to first."""
    return _in_base(int(lines[-1], base), base) + "".join(line[1] for line in reversed(lines[:-1]))


def spelled_from_a_wrong_line(expression: str, rng: random.Random) -> tuple[str, str, str]:
    """A warm-up example that teaches the answer to follow the lines: the worked solution with one line replaced by
    another value, and the answer those lines spell, as (prompt, completion, the lines, which take no loss). The
    wrong line is shown, never learned; what is learned is that the answer spells the lines above it, right or wrong.
    Without it the model also computes the top column again when it writes the answer, and a wrong last line then
    sits beside a right answer: a flawed chain that earns the reward."""
    rule = RULES[parse(expression)[0]]
    lines = solve(expression)[0].split("\n")[:-1]
    index = rng.randrange(len(lines))
    values = [_line(v, rule.base) for v in range(1 if index == len(lines) - 1 else 0, 2 * rule.base)]
    lines[index] = rng.choice([v for v in values if v != lines[index]])
    shown = "\n".join(lines) + "\n"
    return expression, f"{shown}#{spell(lines, rule.base)}", shown


def _check_set(rules: Sequence[str], seed: int) -> datasets.Dataset:
    """Fixed "eval"-side prompts for the warm-up's checks: :data:`WARMUP_CHECK_PROMPTS_PER_RULE` of each rule."""
    parts = [
        make_columns_dataset(WARMUP_CHECK_PROMPTS_PER_RULE, seed=seed + i, weights={rule: 1.0}, split="eval")
        for i, rule in enumerate(rules)
    ]
    return datasets.concatenate_datasets(parts)


def _hard_check_set() -> datasets.Dataset:
    return _check_set(HARD_RULES, _WARMUP_CHECK_SEED)


class Curriculum:
    """The warm-up's two phases, sharing one state between the examples it draws and the checks that end each phase.

    Phase "easy": "train"-side items of the easy rules only, until their correct-chain accuracy reaches
    :data:`EASY_TARGET` (checked every :data:`EASY_CHECK_EVERY` steps). The procedure is then known, and a hard rule
    differs only by its digit table, which a few dozen worked examples teach: so in phase "hard" each hard rule is
    mixed in at :data:`HARD_EXPOSURE` while it is *active*, until its median correct-chain pass rate reaches the band
    (checked every :data:`HARD_CHECK_EVERY` steps), then no more (it comes back should it fall below again). The
    warm-up stops when every hard rule meets :func:`warmup_should_stop` at one check. Deterministic for a seed: the
    mix changes only at a check, between batches."""

    def __init__(self) -> None:
        self.phase = "easy"
        self.active = set(HARD_RULES)
        self.switched_at: int | None = None
        self.step = 0

    def lr(self) -> float:
        """The learning rate of the next step: the warm-up's in the first phase, :data:`HARD_PHASE_LR` in the second,
        so that a hard rule's pass rate moves a little between checks instead of leaping past the band."""
        return WARMUP_LR if self.phase == "easy" else HARD_PHASE_LR

    def weights(self) -> dict[str, float]:
        """The mix of the next batch's examples."""
        if self.phase == "easy":
            return {rule: 1.0 for rule in EASY_RULES}
        hard = {rule: HARD_EXPOSURE for rule in HARD_RULES if rule in self.active}
        easy_share = (1.0 - sum(hard.values())) / len(EASY_RULES)
        return {**{rule: easy_share for rule in EASY_RULES}, **hard}

    def examples(self, seed: int) -> Iterator[tuple[str, ...]]:
        rng = random.Random(seed + 2_000_003)
        while True:
            expression, _ = next(_stream(rng, self.weights(), split="train"))
            if rng.random() < UNFAITHFUL_SHARE:
                yield spelled_from_a_wrong_line(expression, rng)
            else:
                yield expression, solve(expression)[0]

    def check(
        self, model: transformers.PreTrainedModel, tokenizer: transformers.PreTrainedTokenizerBase
    ) -> dict | None:
        self.step += WARMUP_CHECK_EVERY
        if self.phase == "easy":
            if self.step % EASY_CHECK_EVERY:
                return None
            check_set = _check_set(EASY_RULES, _WARMUP_CHECK_SEED + 100)
            _, correct, _, _ = correct_chains(model, tokenizer, check_set, EASY_CHECK_SAMPLES)
            accuracy = sum(correct) / (len(correct) * EASY_CHECK_SAMPLES)
            if accuracy >= EASY_TARGET:
                self.phase, self.switched_at = "hard", self.step
            return {"stop": False, "accuracy": accuracy, "easy_chain_accuracy": accuracy}
        if (self.step - self.switched_at) % HARD_CHECK_EVERY:
            return None
        measured = _stop_check(model, tokenizer)
        for rule in HARD_RULES:
            if measured[f"in_band:{rule}"]:
                self.active.discard(rule)
            elif measured[f"median_p:{rule}"] < WARMUP_BAND[0]:
                self.active.add(rule)
        return {**measured, "easy_phase_steps": self.switched_at, "active": "".join(sorted(self.active)) or "-"}


def correct_chains(
    model: transformers.PreTrainedModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    dataset: datasets.Dataset,
    num_samples: int,
    seed: int = 0,
) -> tuple[list[int], list[int], list[str], list[str]]:
    """Sample ``num_samples`` completions per prompt; return per prompt how many were rewarded and how many have a
    correct chain, and every sample's :func:`check_chain` verdict and final text, prompt by prompt."""
    texts, ids = sample_completions(model, tokenizer, dataset, num_samples, MAX_COMPLETION_LENGTH, seed)
    expressions = [prompt[-1]["content"] for prompt in dataset["prompt"] for _ in range(num_samples)]
    answers = [answer for answer in dataset["answer"] for _ in range(num_samples)]
    rewards = columns_reward(texts, answers, completion_ids=ids)
    verdicts = chain_verdicts(expressions, texts, ids)
    rewarded = [int(sum(rewards[i : i + num_samples])) for i in range(0, len(rewards), num_samples)]
    correct = [verdicts[i : i + num_samples].count("correct") for i in range(0, len(verdicts), num_samples)]
    return rewarded, correct, verdicts, texts


def _stop_check(model: transformers.PreTrainedModel, tokenizer: transformers.PreTrainedTokenizerBase) -> dict:
    """The second phase's check: its "accuracy" is the hard check prompts' mean correct-chain pass rate."""
    check_set = _hard_check_set()
    _, correct, _, _ = correct_chains(model, tokenizer, check_set, WARMUP_CHECK_SAMPLES)
    rates = [c / WARMUP_CHECK_SAMPLES for c in correct]
    per_rule = {
        rule: statistics.median(r for r, s in zip(rates, check_set["rule"], strict=True) if s == rule)
        for rule in HARD_RULES
    }
    rules = check_set["rule"]
    by_rule = {rule: [c for c, r in zip(correct, rules, strict=True) if r == rule] for rule in HARD_RULES}
    in_band = {rule: warmup_should_stop(counts, WARMUP_CHECK_SAMPLES) for rule, counts in by_rule.items()}
    return {
        "stop": all(in_band.values()),
        **{f"in_band:{rule}": value for rule, value in in_band.items()},
        "accuracy": statistics.fmean(rates),
        "hard_median_p": statistics.median(rates),
        "hard_zero_share": sum(c == 0 for c in correct) / len(correct),
        **{f"median_p:{rule}": value for rule, value in per_rule.items()},
    }


def warmup_recipe(curriculum: Curriculum) -> WarmupRecipe:
    """The supervised warm-up: the arithmetic task's loop (batch 64, AdamW 1.5e-3, clipping 1.0) on worked solutions
    of "train"-side items in ``curriculum``'s two phases, checking every 25 steps (64 completions of each of 64
    held-out hard prompts in the second phase) and stopping by :func:`warmup_should_stop`."""
    return WarmupRecipe(
        examples=curriculum.examples,
        check_set=_hard_check_set,
        target_accuracy=WARMUP_BAND[0],
        reward=columns_reward,
        max_new_tokens=MAX_COMPLETION_LENGTH,
        check_every=WARMUP_CHECK_EVERY,
        max_steps=_WARMUP_MAX_STEPS,
        stop_check=curriculum.check,
        current_lr=curriculum.lr,
    )


def warmup(model: transformers.Qwen2ForCausalLM, tokenizer: transformers.PreTrainedTokenizerBase, seed: int) -> dict:
    """Train ``model`` in place through the two phases of :class:`Curriculum`."""
    return supervised_warmup(model, tokenizer, seed, warmup_recipe(Curriculum()))


# --------------------------------------------------------------------------------------------------------------------
# The instrument's properties, measured from a model's own samples and from the data
# --------------------------------------------------------------------------------------------------------------------

LOW_P = 0.1  # a prompt is "low p" at a correct-chain pass rate of at most this
HARD_BAND_LOW = 1 / 128  # a hard prompt whose correct-chain pass rate is in (1/128, LOW_P] is in the paper's regime
INSTRUMENT_SAMPLES = 128  # samples a prompt: a pass rate of 1/128 is told from 0


def answer_prior_max(answers: Sequence[str], rules: Sequence[str]) -> dict[str, Any]:
    """The largest share of a rule's prompts that one constant answer would be rewarded on, over the rules: what a
    policy that always wrote that answer would earn there. Returns the maximum, its rule and answer, and per rule."""
    per_rule = {}
    for symbol in dict.fromkeys(rules):
        counts = Counter(a for a, r in zip(answers, rules, strict=True) if r == symbol)
        answer, count = counts.most_common(1)[0]
        per_rule[symbol] = {"answer": answer, "share": count / sum(counts.values())}
    worst = max(per_rule, key=lambda symbol: per_rule[symbol]["share"])
    return {"max": per_rule[worst]["share"], "rule": worst, "answer": per_rule[worst]["answer"], "by_rule": per_rule}


def heldout_fact_overlap(heldout: Iterable[str], seen: Iterable[str]) -> float:
    """The share of held-out hard items (prompts) whose operand combination also occurs in ``seen`` (training rows,
    warm-up examples): 0 means held-out accuracy on the hard rules is measured on combinations never trained on."""
    seen_set = set(seen)
    hard = [expression for expression in heldout if RULES[parse(expression)[0]].hard]
    if not hard:
        raise ValueError("the held-out set holds no hard item")
    return sum(expression in seen_set for expression in hard) / len(hard)


def instrument_properties(
    rewarded: Sequence[int],
    correct: Sequence[int],
    verdicts: Sequence[str],
    rules: Sequence[str],
    num_samples: int,
) -> dict[str, Any]:
    """The testbed's properties from per-prompt counts (see :func:`correct_chains`) and each prompt's rule:

    - ``flawed_rewarded_share``: among all rewarded samples, the share whose chain is not correct;
    - ``flawed_rewarded_share_low_p``: the same among rewarded samples of prompts whose correct-chain pass rate is at
      most :data:`LOW_P` (None when there is none);
    - ``frac_hard_low_p``: the share of prompts of a hard rule whose correct-chain pass rate is in
      (:data:`HARD_BAND_LOW`, :data:`LOW_P`];
    - ``frac_hard_zero``: the share of prompts of a hard rule with no correct chain;
    - per rule: prompts, reward and correct-chain accuracy, the median correct-chain pass rate and its share at 0 and
      in the band; and the first errors of the chains that are not correct, as shares.
    """
    prompts = len(rewarded)
    rates = [c / num_samples for c in correct]
    # Every correct chain is rewarded (it ends with EOS and the right answer), so rewarded minus correct is flawed.
    low = [i for i in range(prompts) if rates[i] <= LOW_P]
    rewarded_low = sum(rewarded[i] for i in low)
    flawed_low = sum(rewarded[i] - correct[i] for i in low)
    in_band = [HARD_BAND_LOW < rate <= LOW_P for rate in rates]
    hard = [RULES[rule].hard for rule in rules]
    errors = [v for v in verdicts if v != "correct"]
    by_rule = {}
    for symbol in RULES:
        members = [i for i in range(prompts) if rules[i] == symbol]
        if not members:
            continue
        rewarded_rule = sum(rewarded[i] for i in members)
        by_rule[symbol] = {
            "prompts": len(members),
            "accuracy": rewarded_rule / (len(members) * num_samples),
            "correct_chain_accuracy": sum(correct[i] for i in members) / (len(members) * num_samples),
            "flawed_rewarded_share": (rewarded_rule - sum(correct[i] for i in members)) / rewarded_rule
            if rewarded_rule
            else None,
            "median_correct_p": statistics.median(rates[i] for i in members),
            "frac_zero": sum(correct[i] == 0 for i in members) / len(members),
            "frac_band": sum(in_band[i] for i in members) / len(members),
        }
    total_rewarded = sum(rewarded)
    return {
        "instrument_samples_per_prompt": num_samples,
        "flawed_rewarded_share": (total_rewarded - sum(correct)) / total_rewarded if total_rewarded else None,
        "flawed_rewarded_share_low_p": flawed_low / rewarded_low if rewarded_low else None,
        "rewarded_low_p": rewarded_low,
        "frac_hard_low_p": sum(h and b for h, b in zip(hard, in_band, strict=True)) / prompts,
        "frac_hard_zero": sum(h and c == 0 for h, c in zip(hard, correct, strict=True)) / prompts,
        "frac_hard": sum(hard) / prompts,
        "by_rule": by_rule,
        "first_errors": {kind: errors.count(kind) / len(errors) for kind in sorted(set(errors))} if errors else {},
    }


def measure_instrument(
    model: transformers.PreTrainedModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    dataset: datasets.Dataset,
    num_samples: int = INSTRUMENT_SAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """:func:`instrument_properties` of ``model`` on ``dataset`` (a ``rule`` column), from ``num_samples`` samples a
    prompt, with the data's own properties beside them: :func:`answer_prior_max` over the held-out set and the
    training prompts, and :func:`heldout_fact_overlap` of the held-out set with ``dataset``."""
    rewarded, correct, verdicts, _ = correct_chains(model, tokenizer, dataset, num_samples, seed)
    heldout = columns_heldout()
    heldout_items = [prompt[-1]["content"] for prompt in heldout["prompt"]]
    train_items = [prompt[-1]["content"] for prompt in dataset["prompt"]]
    prior = answer_prior_max([*heldout["answer"], *dataset["answer"]], [*heldout["rule"], *dataset["rule"]])
    return {
        **instrument_properties(rewarded, correct, verdicts, dataset["rule"], num_samples),
        "answer_prior_max": prior["max"],
        "answer_prior": prior,
        "heldout_fact_overlap": heldout_fact_overlap(heldout_items, train_items),
    }


SHIPPED_WARM_DIR = pathlib.Path(__file__).resolve().parents[1] / "toy_warm_columns"
SETTINGS = {"columns": 1, "columns-epochs": EPOCHS}  # task name -> passes over the training prompts


def columns_task(name: str = "columns") -> ToyTask:
    """The task as :func:`trl_ada.toy.toy_task` describes it: "columns" (fresh prompts) or "columns-epochs"
    (:data:`EPOCHS` passes over a fixed set); both start from the same warm model."""
    epochs = SETTINGS[name]
    return ToyTask(
        name=name,
        version=VERSION,
        folder=f"toy-columns-{VERSION}",
        reward=columns_reward,
        max_completion_length=MAX_COMPLETION_LENGTH,
        warmup=lambda model, tokenizer, seed: warmup(model, tokenizer, seed),  # looked up late: tests patch it
        target_accuracy=WARMUP_BAND[0],
        shipped_dir=SHIPPED_WARM_DIR,
        train_rows=lambda rows, seed: columns_train_rows(rows, seed, epochs),
        heldout=columns_heldout,
        instrument=measure_instrument,
        chain_verdicts=chain_verdicts,
        warmup_stop=(
            f"each hard rule's median correct-chain pass rate in [{WARMUP_BAND[0]}, {WARMUP_BAND[1]}] over its "
            f"{WARMUP_CHECK_PROMPTS_PER_RULE} check prompts x {WARMUP_CHECK_SAMPLES} samples"
        ),
    )


def columns_epochs_task() -> ToyTask:
    return columns_task("columns-epochs")
