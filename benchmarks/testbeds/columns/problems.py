"""The columns task's problems: the rules, items and their worked solutions, the chain checker, the reward and the
datasets (no model)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import datasets
import transformers

from trl_ada.toy.arithmetic import Split, problem_split
from trl_ada.toy.rewards import final_answer_rewards
from trl_ada.toy.sampling import sample_completions

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
    """Two of the three columns carry: octal sums differ from decimal ones only where a column reaches 8, so an item
    that never carries is right by decimal habit, and one that carries once is nearly so (and with three, an item
    needs more facts than its peers: two for every item keeps the rule's items alike)."""
    return sum(_carries(_add(8), 8, a, b)) == 2


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
            "&", "a + b in base 8, two columns carrying", 8, _add(8), lambda a, b: a + b, (64, 511),
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
# The RL training mix: mostly hard prompts, as the paper's training set is filtered to problems the base model mostly
# fails (pass rate at most 1/8 of 16 samples), with a few easy ones.
TRAIN_RULE_WEIGHTS = {"+": 0.0625, "-": 0.0625, "&": 0.4375, "~": 0.4375}

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


def column_values(expression: str) -> list[int]:
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
    values = column_values(expression)
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
    for index, value in enumerate(column_values(expression)):
        if index >= len(lines) or lines[index].startswith("#") or lines[index:] == [""]:
            return "stopped_early"
        if _LINE.fullmatch(lines[index]) is None:
            return "malformed"
        if lines[index] != _line(value, rule.base):
            return "step_error"
    rest = lines[len(column_values(expression)) :]
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
    return final_answer_rewards(
        completions, answer, completion_ids, _FINAL_AT_END, MAX_COMPLETION_LENGTH, EOS_TOKEN_ID
    )


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
