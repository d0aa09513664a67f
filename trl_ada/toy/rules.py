"""A toy task built as an instrument for adaptive sampling: rules marked in the prompt, the hard ones rarely seen in
the warm-up, an answer that only a correct chain reaches, and fresh prompts.

A prompt is two pairs under one rule; the completion works out each pair on its own line, then lists the
results after ``#``::

    38%7 23%4        rule "%": the remainder of a by b
    38%7=3
    23%4=3
    #3,3<|im_end|>

Every pair is a two-digit number and a digit. Rules ``+`` and ``-`` are easy (they change only the units digit): the
warm-up sees them often, and the warm model nearly always gets them right. Rules ``%`` (the remainder of a by b) and
``@`` (the remainder of a x b by 6) are hard: each is a table of 210 facts of its own that prompts of the easy rules
never exercise, and the warm-up sees them rarely. It stops on the hard rules' correct-chain pass rate
(:func:`warmup_should_stop`), where a hard prompt's chain is right a few times in a hundred, so learning a hard rule is
learning from its own rare positives.

:func:`rules_reward` reads only the final answer, as math RL reads the boxed answer. The answer lists every pair's
result, so a completion whose chain went wrong rarely lands on it (:func:`check_chain` names a chain's first error,
and the learning benchmark's testbed measures the share of rewarded completions with one).

Two settings draw training rows differently (:data:`SETTINGS`): ``rules`` visits fresh prompts (a pool about 22 times
the 4,800 prompts of a 300-step run), ``rules-epochs`` makes :data:`EPOCHS` passes over a fixed set, the regime in
which prompt selection, the pass-rate memory and Reinforce-Ada-Est's budgets have earlier visits to act on.
"""

from __future__ import annotations

import pathlib
import random
import re
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import datasets
import transformers

from .arithmetic import Split, problem_split
from .rewards import final_answer_rewards
from .sampling import sample_completions
from .task import ToyTask
from .warmup import WarmupRecipe, supervised_warmup

__all__ = [
    "EASY_RULES",
    "HARD_RULES",
    "MAX_COMPLETION_LENGTH",
    "RULES",
    "RULES_VERSION",
    "check_chain",
    "make_rules_dataset",
    "measure_instrument",
    "rules_heldout",
    "rules_reward",
    "rules_train_rows",
    "solve",
    "warmup_should_stop",
]

# Part of the cached folders' names: bump it whenever anything that changes the warm model changes.
RULES_VERSION = "u1"


@dataclass(frozen=True)
class Rule:
    """One rule: ``symbol`` joins a pair ``a`` and ``b`` drawn from the inclusive ranges ``left`` and ``right`` where
    ``allowed(a, b)``."""

    symbol: str
    meaning: str
    apply: Callable[[int, int], int]
    left: tuple[int, int]
    right: tuple[int, int]
    hard: bool
    allowed: Callable[[int, int], bool] = lambda a, b: True

    def facts(self) -> list[tuple[int, int]]:
        """Every pair this rule draws from."""
        return [
            (a, b)
            for a in range(self.left[0], self.left[1] + 1)
            for b in range(self.right[0], self.right[1] + 1)
            if self.allowed(a, b)
        ]


# The easy rules change only the units digit (no carry, no borrow): copying the tens digit and one small sum, which
# the warm-up masters early. Each hard rule needs the whole two-digit number.
RULES: dict[str, Rule] = {
    rule.symbol: rule
    for rule in (
        Rule("+", "a + b", lambda a, b: a + b, (10, 39), (0, 9), hard=False, allowed=lambda a, b: a % 10 + b <= 9),
        Rule("-", "a - b", lambda a, b: a - b, (10, 39), (0, 9), hard=False, allowed=lambda a, b: b <= a % 10),
        Rule("@", "the remainder of a x b by 6", lambda a, b: a * b % 6, (10, 39), (3, 9), hard=True),
        Rule("%", "the remainder of a by b", lambda a, b: a % b, (10, 39), (3, 9), hard=True),
    )
}
EASY_RULES = tuple(symbol for symbol, rule in RULES.items() if not rule.hard)
HARD_RULES = tuple(symbol for symbol, rule in RULES.items() if rule.hard)
PAIRS = (2,)  # pairs per prompt, drawn uniformly: with three, a hard prompt's chain is right too rarely to learn from
# The longest right completion: two lines such as "39+0=39" (8 tokens with the newline), "#39,39" and EOS: 23 tokens.
# Every character of this task is one token.
MAX_COMPLETION_LENGTH = 32
EOS_TOKEN_ID = 2  # the toy tokenizer's "<|im_end|>"

TRAIN_SEED = 4242
HELDOUT_SEED = 1_000_003
HELDOUT_PER_RULE = 64  # 256 held-out prompts, the same number from every rule
# The RL training mix: mostly hard prompts, as math RL sets are filtered towards problems the model mostly fails.
TRAIN_RULE_WEIGHTS = {"+": 0.125, "-": 0.125, "@": 0.375, "%": 0.375}
# The warm-up's mix: the hard rules rarely.
WARMUP_RULE_WEIGHTS = {"+": 0.425, "-": 0.425, "@": 0.075, "%": 0.075}

# --------------------------------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------------------------------

_PAIR = re.compile(r"(\d+)([-+@%])(\d+)")


def sample_expression(rng: random.Random, rule: str, pairs: int) -> str:
    """Draw ``pairs`` pairs of ``rule`` uniformly from its facts: ``"38%7 23%4"``."""
    facts = _FACTS[rule]
    return " ".join(f"{a}{rule}{b}" for a, b in (rng.choice(facts) for _ in range(pairs)))


_FACTS = {symbol: rule.facts() for symbol, rule in RULES.items()}


def parse(expression: str) -> tuple[str, list[tuple[int, int]]]:
    """The rule and the pairs of a prompt such as ``"38%7 23%4"``; ValueError if it is not one this task makes."""
    pieces = expression.split(" ")
    matches = [_PAIR.fullmatch(piece) for piece in pieces]
    if any(m is None for m in matches) or len({m[2] for m in matches}) != 1:
        raise ValueError(f"expected pairs such as '38%7 23%4' under one rule, got {expression!r}")
    rule = matches[0][2]
    pairs = [(int(m[1]), int(m[3])) for m in matches]
    if any(f"{a}{rule}{b}" != piece for (a, b), piece in zip(pairs, pieces, strict=True)):
        raise ValueError(f"operands must be written without leading zeros: {expression!r}")
    return rule, pairs


def solve(expression: str) -> tuple[str, str]:
    """(worked solution, answer) for a prompt: ``("38%7=3\\n23%4=3\\n#3,3", "3,3")``.

    The solution is the completion the warm-up teaches, without the EOS token; the answer is what
    :func:`rules_reward` compares with."""
    rule, pairs = parse(expression)
    results = [RULES[rule].apply(a, b) for a, b in pairs]
    answer = ",".join(map(str, results))
    lines = [f"{a}{rule}{b}={r}" for (a, b), r in zip(pairs, results, strict=True)]
    return "\n".join([*lines, f"#{answer}"]), answer


# --------------------------------------------------------------------------------------------------------------------
# Chain checker and reward
# --------------------------------------------------------------------------------------------------------------------

CHAIN_ERRORS = ("operand_error", "arith_error", "malformed", "stopped_early", "answer_mismatch", "extra_text")
_LINE = re.compile(r"(\d+)([-+@%])(\d+)=(\d+)")


def check_chain(expression: str, completion: str) -> str:
    """``"correct"`` when ``completion`` is the worked solution of ``expression`` line for line, else its first error:

    - ``operand_error``: a line's operator or operands are not the prompt's pair at that position;
    - ``arith_error``: a line copies its pair right and computes its result wrong;
    - ``malformed``: a line that is not ``a<op>b=c`` where a pair's line should be;
    - ``stopped_early``: fewer lines than pairs, or no final ``#`` line after them;
    - ``answer_mismatch``: every line right, then a final answer that does not list their results;
    - ``extra_text``: the right chain and answer with more text around them.

    The completion is the decoded text without EOS (as reward functions receive it). Truncation is not seen here:
    the reward checks it.
    """
    rule, pairs = parse(expression)
    solution, answer = solve(expression)
    if completion == solution:
        return "correct"
    lines = completion.split("\n")
    for index, (a, b) in enumerate(pairs):
        if index >= len(lines) or lines[index].startswith("#") or lines[index:] == [""]:
            return "stopped_early"
        match = _LINE.fullmatch(lines[index])
        if match is None:
            return "malformed"
        if (match[1], match[2], match[3]) != (str(a), rule, str(b)):
            return "operand_error"
        if match[4] != str(RULES[rule].apply(a, b)):
            return "arith_error"
    rest = lines[len(pairs) :]
    if not rest or not rest[0].startswith("#"):
        return "stopped_early" if not rest or not rest[0].strip() else "extra_text"
    if rest[0] != f"#{answer}":
        return "answer_mismatch" if _FINAL.fullmatch(rest[0]) else "malformed"
    return "extra_text"


_NUMBER = r"(?:0|[1-9][0-9]*)"  # one canonical form: ASCII digits, no sign, no leading zero
_FINAL = re.compile(rf"#({_NUMBER}(?:,{_NUMBER})*)")
_FINAL_AT_END = re.compile(rf"#({_NUMBER}(?:,{_NUMBER})*)\Z")


def rules_reward(
    completions: Sequence[Any],
    answer: Sequence[str],
    completion_ids: Sequence[Sequence[int]] | None = None,
    **kwargs: Any,
) -> list[float]:
    """TRL reward function: 1.0 when a completion ends with ``#`` and the answer list, and was not truncated.

    Only the final answer counts, in its one canonical form (ASCII digits, no leading zeros, no spaces). A completion
    was truncated when its ``completion_ids`` (GRPOTrainer passes them) do not end with EOS; without ids, when its
    text has :data:`MAX_COMPLETION_LENGTH` characters or more (each character is one token, so it left no room for
    EOS). Other keyword arguments are ignored.
    """
    return final_answer_rewards(
        completions, answer, completion_ids, _FINAL_AT_END, MAX_COMPLETION_LENGTH, EOS_TOKEN_ID
    )


rules_reward.__name__ = "rules_reward"


# --------------------------------------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------------------------------------


def _stream(rng: random.Random, weights: dict[str, float], split: Split | None) -> Iterator[tuple[str, str]]:
    """(expression, rule) forever: a rule by ``weights``, a pair count from :data:`PAIRS`, then the pairs; kept when on
    ``split``'s side of :func:`problem_split` (None: either)."""
    symbols, shares = list(weights), list(weights.values())
    while True:
        rule = rng.choices(symbols, shares)[0]
        expression = sample_expression(rng, rule, rng.choice(PAIRS))
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


def make_rules_dataset(
    num_prompts: int,
    seed: int = 0,
    weights: dict[str, float] | None = None,
    split: Split | None = None,
    distinct: bool = True,
) -> datasets.Dataset:
    """``num_prompts`` problems, deterministic given ``seed``, rules drawn by ``weights`` (default: the RL training
    mix), distinct unless ``distinct=False``. Columns: ``prompt`` (conversational), ``answer`` (``"1,0"``), ``rule``
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


def rules_heldout(num_prompts: int = 4 * HELDOUT_PER_RULE) -> datasets.Dataset:
    """Held-out prompts from the "eval" side, the same number from every rule (rule by rule), the same for every
    seed: never trained on, nor seen in the warm-up."""
    if num_prompts % len(RULES):
        raise ValueError(
            f"the held-out set holds the same number of prompts per rule: {num_prompts} is not a "
            f"multiple of {len(RULES)}"
        )
    per_rule = num_prompts // len(RULES)
    parts = [
        make_rules_dataset(per_rule, seed=HELDOUT_SEED + index, weights={rule: 1.0}, split="eval")
        for index, rule in enumerate(RULES)
    ]
    return datasets.concatenate_datasets(parts)


EPOCHS = 4  # passes over the fixed set in the "rules-epochs" setting, for the benchmark's 300 steps x 16 prompts
EPOCH_PROMPTS = 1200  # the fixed set's size: 300 x 16 / EPOCHS, the same whatever a run's length


def rules_train_rows(rows: int, seed: int = 0, epochs: int = 1) -> datasets.Dataset:
    """A run's ``rows`` training rows from the "train" side. ``epochs=1``: fresh prompts, distinct within the run,
    drawn in ``seed``'s order (a longer run's first rows are a shorter one's). ``epochs > 1``: passes over one fixed
    set of :data:`EPOCH_PROMPTS` prompts, the same for every seed and every run length, each pass in a seeded order
    (the last one cut short)."""
    if epochs == 1:
        return make_rules_dataset(rows, seed=seed, split="train")
    fixed = make_rules_dataset(EPOCH_PROMPTS, seed=TRAIN_SEED, split="train")
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < rows:
        epoch = list(range(len(fixed)))
        rng.shuffle(epoch)
        order += epoch
    return fixed.select(order[:rows])


def pool_size(split: Split | None = None) -> int:
    """How many distinct prompts the task can draw (every rule, every pair count), on ``split``'s side (None: both).

    Counted exactly for two pairs and estimated for three from the two-pair share on that side (the split is a
    hash)."""
    total = sum(len(facts) ** pairs for facts in _FACTS.values() for pairs in PAIRS)
    if split is None:
        return total
    two = [f"{a}{rule}{b} {c}{rule}{d}" for rule, facts in _FACTS.items() for a, b in facts for c, d in facts]
    share = sum(problem_split(e) == split for e in two) / len(two)
    return round(total * share)


# --------------------------------------------------------------------------------------------------------------------
# Warm-up stop rule
# --------------------------------------------------------------------------------------------------------------------

WARMUP_BAND = (0.02, 0.10)  # the hard rules' median correct-chain pass rate at which the warm-up stops
WARMUP_MAX_ZERO_SHARE = 0.15  # ... with fewer than this share of their check prompts at 0 of WARMUP_CHECK_SAMPLES
WARMUP_CHECK_SAMPLES = 64
WARMUP_CHECK_PROMPTS_PER_RULE = 32


def warmup_should_stop(correct: Sequence[int], samples: int = WARMUP_CHECK_SAMPLES) -> bool:
    """The warm-up's stop rule, from each hard check prompt's correct chains out of ``samples``: stop when their
    median pass rate is within :data:`WARMUP_BAND` and fewer than :data:`WARMUP_MAX_ZERO_SHARE` of them are at 0."""
    if not correct:
        raise ValueError("the stop rule needs at least one check prompt")
    median = statistics.median(c / samples for c in correct)
    zeros = sum(c == 0 for c in correct) / len(correct)
    return WARMUP_BAND[0] <= median <= WARMUP_BAND[1] and zeros < WARMUP_MAX_ZERO_SHARE


_WARMUP_CHECK_EVERY = 25
_WARMUP_MAX_STEPS = 3000
_WARMUP_CHECK_SEED = 777


def _warmup_examples(seed: int) -> Iterator[tuple[str, str]]:
    for expression, _ in _stream(random.Random(seed + 2_000_003), WARMUP_RULE_WEIGHTS, split="train"):
        yield expression, solve(expression)[0]


def _hard_check_set() -> datasets.Dataset:
    """The fixed "eval"-side prompts the stop rule samples: :data:`WARMUP_CHECK_PROMPTS_PER_RULE` of each hard rule."""
    parts = [
        make_rules_dataset(
            WARMUP_CHECK_PROMPTS_PER_RULE, seed=_WARMUP_CHECK_SEED + i, weights={rule: 1.0}, split="eval"
        )
        for i, rule in enumerate(HARD_RULES)
    ]
    return datasets.concatenate_datasets(parts)


def correct_chains(
    model: transformers.PreTrainedModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    dataset: datasets.Dataset,
    num_samples: int,
    seed: int = 0,
) -> tuple[list[int], list[int], list[str]]:
    """Sample ``num_samples`` completions per prompt; return per prompt how many were rewarded and how many have a
    correct chain, and every sample's :func:`check_chain` verdict (truncated samples: ``"truncated"``), prompt by
    prompt."""
    texts, ids = sample_completions(model, tokenizer, dataset, num_samples, MAX_COMPLETION_LENGTH, seed)
    expressions = [prompt[-1]["content"] for prompt in dataset["prompt"] for _ in range(num_samples)]
    answers = [answer for answer in dataset["answer"] for _ in range(num_samples)]
    rewards = rules_reward(texts, answers, completion_ids=ids)
    verdicts = [
        check_chain(expression, text) if row and row[-1] == EOS_TOKEN_ID else "truncated"
        for expression, text, row in zip(expressions, texts, ids, strict=True)
    ]
    rewarded = [int(sum(rewards[i : i + num_samples])) for i in range(0, len(rewards), num_samples)]
    correct = [verdicts[i : i + num_samples].count("correct") for i in range(0, len(verdicts), num_samples)]
    return rewarded, correct, verdicts


def _stop_check(model: transformers.PreTrainedModel, tokenizer: transformers.PreTrainedTokenizerBase) -> dict:
    """The warm-up's check: its "accuracy" is the hard check prompts' mean correct-chain pass rate."""
    _, correct, _ = correct_chains(model, tokenizer, _hard_check_set(), WARMUP_CHECK_SAMPLES)
    rates = [c / WARMUP_CHECK_SAMPLES for c in correct]
    return {
        "stop": warmup_should_stop(correct, WARMUP_CHECK_SAMPLES),
        "accuracy": statistics.fmean(rates),
        "hard_median_p": statistics.median(rates),
        "hard_zero_share": sum(c == 0 for c in correct) / len(correct),
    }


def warmup_recipe() -> WarmupRecipe:
    """The supervised warm-up: the arithmetic task's loop (batch 64, AdamW 1.5e-3, clipping 1.0) on worked solutions
    of "train"-side prompts in :data:`WARMUP_RULE_WEIGHTS`' mix, every 25 steps sampling 64 completions of each of 64
    held-out hard prompts, and stopping by :func:`warmup_should_stop`."""
    return WarmupRecipe(
        examples=_warmup_examples,
        check_set=_hard_check_set,
        target_accuracy=WARMUP_BAND[0],
        reward=rules_reward,
        max_new_tokens=MAX_COMPLETION_LENGTH,
        check_every=_WARMUP_CHECK_EVERY,
        max_steps=_WARMUP_MAX_STEPS,
        stop_check=_stop_check,
    )


def warmup(model: transformers.Qwen2ForCausalLM, tokenizer: transformers.PreTrainedTokenizerBase, seed: int) -> dict:
    """Train ``model`` in place until the hard rules' correct-chain pass rate meets :func:`warmup_should_stop`."""
    return supervised_warmup(model, tokenizer, seed, warmup_recipe())


# --------------------------------------------------------------------------------------------------------------------
# The instrument's properties, measured from a model's own samples
# --------------------------------------------------------------------------------------------------------------------

LOW_P = 0.1  # a prompt is "low p" at a pass rate of at most this
HARD_BAND = (0.01, 0.1)  # a hard prompt whose correct-chain pass rate is in (low, high] is where the paper's regime is


def instrument_properties(
    rewarded: Sequence[int],
    correct: Sequence[int],
    verdicts: Sequence[str],
    rules: Sequence[str],
    num_samples: int,
) -> dict[str, Any]:
    """The testbed's properties from per-prompt counts (see :func:`correct_chains`) and each prompt's rule:

    - ``flawed_rewarded_share_low_p``: among rewarded samples of prompts whose reward pass rate is at most
      :data:`LOW_P`, the share whose chain is not correct (None when there is none);
    - ``frac_hard_low_p``: the share of prompts of a hard rule whose correct-chain pass rate is in :data:`HARD_BAND`;
    - ``frac_hard_zero``: the share of prompts of a hard rule with no correct chain;
    - per rule: prompts, reward and correct-chain accuracy, the median correct-chain pass rate and its share at 0 and
      in the band; and the first errors of the chains that are not correct, as shares.
    """
    prompts = len(rewarded)
    low = [i for i in range(prompts) if rewarded[i] / num_samples <= LOW_P]
    rewarded_low = sum(rewarded[i] for i in low)
    # Every correct chain is rewarded (it ends with EOS and the right answer), so rewarded minus correct is flawed.
    flawed_low = sum(rewarded[i] - correct[i] for i in low)
    rates = [c / num_samples for c in correct]
    in_band = [HARD_BAND[0] < rate <= HARD_BAND[1] for rate in rates]
    hard = [RULES[rule].hard for rule in rules]
    errors = [v for v in verdicts if v != "correct"]
    by_rule = {}
    for symbol in RULES:
        members = [i for i in range(prompts) if rules[i] == symbol]
        if not members:
            continue
        by_rule[symbol] = {
            "prompts": len(members),
            "accuracy": sum(rewarded[i] for i in members) / (len(members) * num_samples),
            "correct_chain_accuracy": sum(correct[i] for i in members) / (len(members) * num_samples),
            "median_correct_p": statistics.median(rates[i] for i in members),
            "frac_zero": sum(correct[i] == 0 for i in members) / len(members),
            "frac_band": sum(in_band[i] for i in members) / len(members),
        }
    return {
        "instrument_samples_per_prompt": num_samples,
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
    num_samples: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """:func:`instrument_properties` of ``model`` on ``dataset`` (a ``rule`` column), from ``num_samples`` samples a
    prompt."""
    rewarded, correct, verdicts = correct_chains(model, tokenizer, dataset, num_samples, seed)
    return instrument_properties(rewarded, correct, verdicts, dataset["rule"], num_samples)


SHIPPED_WARM_DIR = pathlib.Path(__file__).resolve().parents[1] / "toy_warm_rules"
SETTINGS = {"rules": 1, "rules-epochs": EPOCHS}  # task name -> passes over the training prompts


def rules_task(name: str = "rules") -> ToyTask:
    """The task as :func:`trl_ada.toy.toy_task` describes it: "rules" (fresh prompts) or "rules-epochs"
    (:data:`EPOCHS` passes over a fixed set); both start from the same warm model."""
    epochs = SETTINGS[name]
    return ToyTask(
        name=name,
        version=RULES_VERSION,
        folder=f"toy-rules-{RULES_VERSION}",
        reward=rules_reward,
        max_completion_length=MAX_COMPLETION_LENGTH,
        warmup=lambda model, tokenizer, seed: warmup(model, tokenizer, seed),  # looked up late: tests patch it
        target_accuracy=WARMUP_BAND[0],
        shipped_dir=SHIPPED_WARM_DIR,
        train_rows=lambda rows, seed: rules_train_rows(rows, seed, epochs),
        heldout=rules_heldout,
        instrument=measure_instrument,
        warmup_stop=(
            f"the hard rules' median correct-chain pass rate in [{WARMUP_BAND[0]}, {WARMUP_BAND[1]}] with under "
            f"{WARMUP_MAX_ZERO_SHARE:.0%} of their check prompts at 0 of {WARMUP_CHECK_SAMPLES}"
        ),
    )


def rules_epochs_task() -> ToyTask:
    return rules_task("rules-epochs")
