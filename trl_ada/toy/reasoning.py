"""A second toy task whose completions reason step by step: multi-operand arithmetic such as ``7+5-3+8``.

The prompt holds 2 to 8 one-digit operands joined by ``+`` and ``-`` (never going below zero on the way). The
completion works it out one operation per line, carrying the running result, then gives the answer after ``#``::

    7+5=12
    12-3=9
    9+8=17
    #17<|im_end|>

More operands mean more steps: completions run from 9 tokens (two operands) to about 60 (eight), and every step is a
chance to go wrong, so long prompts fail more often. :func:`reasoning_reward` reads only the final answer: 1.0 when
the completion ends with ``#<answer>`` and was not cut at ``max_completion_length``, else 0.0.

The model, tokenizer and warm-up loop are the ones the arithmetic task uses (:mod:`trl_ada.toy.model`,
:mod:`trl_ada.toy.warmup`): the same ~0.53M-parameter Qwen2 (which the ~90-token prompt + completion fits in 128
positions), the same digit-per-token tokenizer (every character of this task is one token), the same supervised loop;
it stops at the first check where the sampled
held-out accuracy reaches :data:`WARMUP_TARGET_ACCURACY`, a point where short prompts are nearly always right and long
ones nearly always wrong. RL then trains on a finite set of :data:`TRAIN_PROMPTS` prompts, several epochs in a
benchmark run, and is measured on held-out prompts from the other side of the fixed train/eval partition.

    path = toy_model_dir(task="reasoning")  # shipped for seed 0; other seeds are built and cached
    train, heldout = reasoning_train_set(), reasoning_heldout(256)
"""

from __future__ import annotations

import pathlib
import random
import re
from collections.abc import Iterator, Sequence
from typing import Any

import datasets
import transformers

from .arithmetic import Split, problem_split
from .rewards import _completion_text
from .task import ToyTask
from .warmup import WarmupRecipe, supervised_warmup

__all__ = [
    "LEVELS",
    "MAX_COMPLETION_LENGTH",
    "REASONING_VERSION",
    "TRAIN_PROMPTS",
    "make_reasoning_dataset",
    "reasoning_heldout",
    "reasoning_reward",
    "reasoning_train_rows",
    "reasoning_train_set",
    "solve",
]

# Part of the cached folders' names: bump it whenever anything that changes the warm model changes.
REASONING_VERSION = "r2"  # r2: the warm-up favours short problems and checks every 25 steps
LEVELS = tuple(range(2, 9))  # operands per prompt; a level is drawn uniformly, so each holds 1/7 of the prompts
MAX_COMPLETION_LENGTH = 64  # the longest right completion (8 operands, two-digit results) is 60 tokens with EOS
TRAIN_PROMPTS = 400  # the finite RL training set: 200 steps x 16 prompts visit each prompt 8 times
TRAIN_SEED = 4242
HELDOUT_SEED = 1_000_003
# The toy tokenizer's "<|im_end|>" (special tokens come first: <|endoftext|> 0, <|im_start|> 1, <|im_end|> 2). The
# reward checks that a completion's token ids end with it, as GRPOTrainer passes them (EOS kept, nothing after it).
EOS_TOKEN_ID = 2

SHIPPED_WARM_DIR = pathlib.Path(__file__).resolve().parent.parent / "toy_warm_reasoning"

# --------------------------------------------------------------------------------------------------------------------
# Problems and datasets
# --------------------------------------------------------------------------------------------------------------------

_EXPRESSION = re.compile(r"\d(?:[+-]\d)+")
_TERM = re.compile(r"([+-])(\d)")


def _sample_expression(rng: random.Random, num_operands: int) -> str:
    """Draw ``num_operands`` one-digit operands and operators whose running result never goes below zero."""
    if num_operands < 2:
        raise ValueError(f"a problem needs at least 2 operands, got {num_operands}")
    value = rng.randint(0, 9)
    parts = [str(value)]
    for _ in range(num_operands - 1):
        op = rng.choice("+-")
        operand = rng.randint(0, 9) if op == "+" else rng.randint(0, min(9, value))
        value = value + operand if op == "+" else value - operand
        parts.append(f"{op}{operand}")
    return "".join(parts)


def solve(expression: str) -> tuple[str, int]:
    """Return (worked solution, answer) for an expression such as ``"7+5-3"``: ``("7+5=12\\n12-3=9\\n#9", 9)``.

    The solution is the completion the warm-up teaches (without the EOS token).
    """
    if not _EXPRESSION.fullmatch(expression):
        raise ValueError(f"expected one-digit operands joined by + and -, got {expression!r}")
    value = int(expression[0])
    lines = []
    for op, digit in _TERM.findall(expression[1:]):
        result = value + int(digit) if op == "+" else value - int(digit)
        lines.append(f"{value}{op}{digit}={result}")
        value = result
    return "\n".join([*lines, f"#{value}"]), value


def _problem_stream(
    rng: random.Random,
    levels: Sequence[int],
    split: Split | None,
    weights: Sequence[float] | None = None,
) -> Iterator[tuple[str, int]]:
    """Yield (expression, operands) forever: a level from ``levels`` (uniformly, or in proportion to ``weights``), then
    a problem with that many operands, kept if it falls on ``split``'s side of :func:`trl_ada.toy.problem_split` (None:
    any)."""
    levels = tuple(levels)
    if not levels:
        raise ValueError("levels must not be empty")
    if weights is not None and len(weights) != len(levels):
        raise ValueError(f"got {len(weights)} weights for {len(levels)} levels")
    while True:
        level = rng.choice(levels) if weights is None else rng.choices(levels, weights)[0]
        expression = _sample_expression(rng, level)
        if split is None or problem_split(expression) == split:
            yield expression, level


def make_reasoning_dataset(
    num_prompts: int,
    seed: int = 0,
    levels: Sequence[int] = LEVELS,
    split: Split | None = None,
    distinct: bool = True,
) -> datasets.Dataset:
    """Return ``num_prompts`` problems, deterministic given ``seed``; distinct ones unless ``distinct=False``.

    Columns: ``prompt`` (conversational, ``[{"role": "user", "content": "7+5-3+8"}]``), ``answer`` (str, ``"17"``)
    and ``level`` (the number of operands). With ``distinct``, a repeated draw is skipped, so the rarest level (only
    155 two-operand problems exist) thins out once its problems run out.
    """
    stream = _problem_stream(random.Random(seed), levels, split)
    rows: list[tuple[str, int]] = []
    seen: set[str] = set()
    while len(rows) < num_prompts:
        expression, level = next(stream)
        if distinct and expression in seen:
            continue
        seen.add(expression)
        rows.append((expression, level))
    return datasets.Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": expression}] for expression, _ in rows],
            "answer": [str(solve(expression)[1]) for expression, _ in rows],
            "level": [level for _, level in rows],
        }
    )


def reasoning_train_set() -> datasets.Dataset:
    """The finite RL training set: :data:`TRAIN_PROMPTS` distinct prompts from the "train" side, the same for every
    seed (a seed changes their order)."""
    return make_reasoning_dataset(TRAIN_PROMPTS, seed=TRAIN_SEED, split="train")


def reasoning_heldout(num_prompts: int) -> datasets.Dataset:
    """``num_prompts`` distinct held-out prompts from the "eval" side: never in the training set nor the warm-up.

    They come sorted by level (stably), so an evaluation's generation batches hold prompts of similar length and
    stop early instead of each running to the longest chain: about a quarter less time per evaluation."""
    heldout = make_reasoning_dataset(num_prompts, seed=HELDOUT_SEED, split="eval")
    levels = heldout["level"]
    return heldout.select(sorted(range(num_prompts), key=levels.__getitem__))


def reasoning_train_rows(rows: int, seed: int = 0) -> datasets.Dataset:
    """``rows`` training rows made of whole epochs over :func:`reasoning_train_set`, each epoch in a seeded order
    (the last one cut short when ``rows`` is not a multiple of :data:`TRAIN_PROMPTS`)."""
    train = reasoning_train_set()
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < rows:
        epoch = list(range(len(train)))
        rng.shuffle(epoch)
        order += epoch
    return train.select(order[:rows])


# --------------------------------------------------------------------------------------------------------------------
# Reward
# --------------------------------------------------------------------------------------------------------------------

# The final answer in its one canonical form: ASCII digits, no leading zero (but "0" itself), a minus sign only before
# a nonzero number. "#012", "#-0", "#+12" and full-width digits are not answers.
_FINAL_ANSWER = re.compile(r"#(0|-?[1-9][0-9]*)\s*\Z")


def reasoning_reward(
    completions: Sequence[Any],
    answer: Sequence[str | int],
    completion_ids: Sequence[Sequence[int]] | None = None,
    **kwargs: Any,
) -> list[float]:
    """TRL reward function: 1.0 if a completion ends with ``#<answer>`` and was not truncated, else 0.0.

    Only the final answer counts, not the steps, and only written in its canonical form: ASCII digits without leading
    zeros, a minus sign only before a nonzero number (``#012``, ``#-0`` and full-width digits score 0.0).
    ``completions`` may be strings or conversations; ``answer`` is the dataset column. Other keyword arguments are
    ignored.

    Truncation: ``completion_ids`` (which GRPOTrainer passes) decide it: a completion whose ids do not end with the
    toy tokenizer's EOS (:data:`EOS_TOKEN_ID`) was cut at ``max_completion_length`` and scores 0.0 whatever its text.
    Without them the text decides: a completion of :data:`MAX_COMPLETION_LENGTH` characters or more scores 0.0. Every
    character this task's completions are made of (digits, ``+``, ``-``, ``=``, ``#``, newline) is exactly one token
    of the toy tokenizer, so such a text took at least :data:`MAX_COMPLETION_LENGTH` tokens and its EOS would have been
    one token past the budget. (The tokenizer's only tokens that decode to several characters are a few merges of
    lowercase letters from the role names; special tokens, dropped from the text, and bytes of a split UTF-8
    character decode to fewer. Text outside the task's characters can therefore be miscounted: pass ``completion_ids``
    where they exist.)
    """
    if completion_ids is None:
        completion_ids = [None] * len(completions)
    rewards = []
    for completion, target, ids in zip(completions, answer, completion_ids, strict=True):
        text = _completion_text(completion)
        if ids is None:
            truncated = len(text) >= MAX_COMPLETION_LENGTH
        else:
            truncated = len(ids) == 0 or ids[-1] != EOS_TOKEN_ID
        if truncated:
            rewards.append(0.0)
            continue
        match = _FINAL_ANSWER.search(text)
        rewards.append(1.0 if match and int(match[1]) == int(target) else 0.0)
    return rewards


reasoning_reward.__name__ = "reasoning_reward"  # TRL logs rewards under the function's __name__


# --------------------------------------------------------------------------------------------------------------------
# Warm-up
# --------------------------------------------------------------------------------------------------------------------

WARMUP_TARGET_ACCURACY = 0.50
# The warm-up draws a problem with L operands with probability proportional to 1 / sqrt(L - 1): short problems are
# mastered first while long chains still mostly fail, so wherever a seed's warm-up stops the training prompts split
# into a mostly-right short end and a mostly-wrong long end. With uniform levels the mix depended on the seed: seed 1
# stopped with 23% all-right and 24% all-wrong groups of 4 (benchmarks/README.md#the-reasoning-task).
WARMUP_LEVEL_WEIGHTS = tuple(1 / (level - 1) ** 0.5 for level in LEVELS)
_WARMUP_CHECK_EVERY = 25  # accuracy jumps by up to 0.15 between checks 50 steps apart: finer checks overshoot less
_WARMUP_MAX_STEPS = 4000
_WARMUP_CHECK_PROMPTS = 128
_WARMUP_CHECK_SEED = 777


def _warmup_examples(seed: int) -> Iterator[tuple[str, str]]:
    rng = random.Random(seed + 2_000_003)
    for expression, _ in _problem_stream(rng, LEVELS, split="train", weights=WARMUP_LEVEL_WEIGHTS):
        yield expression, solve(expression)[0]


def _warmup_check_set() -> datasets.Dataset:
    return make_reasoning_dataset(_WARMUP_CHECK_PROMPTS, seed=_WARMUP_CHECK_SEED, split="eval")


def warmup_recipe() -> WarmupRecipe:
    """The supervised warm-up: the arithmetic task's loop (batch 64, AdamW 1.5e-3, clipping 1.0) on worked solutions
    of "train"-side problems, short ones more often (`WARMUP_LEVEL_WEIGHTS`), checked every 25 steps on 128 held-out
    prompts x 4 samples."""
    return WarmupRecipe(
        examples=_warmup_examples,
        check_set=_warmup_check_set,
        target_accuracy=WARMUP_TARGET_ACCURACY,
        reward=reasoning_reward,
        max_new_tokens=MAX_COMPLETION_LENGTH,
        check_every=_WARMUP_CHECK_EVERY,
        max_steps=_WARMUP_MAX_STEPS,
    )


def warmup(model: transformers.Qwen2ForCausalLM, tokenizer: transformers.PreTrainedTokenizerBase, seed: int) -> dict:
    """Train ``model`` in place until the sampled held-out accuracy reaches :data:`WARMUP_TARGET_ACCURACY`."""
    return supervised_warmup(model, tokenizer, seed, warmup_recipe())


def reasoning_task() -> ToyTask:
    """The task as :func:`trl_ada.toy.toy_task` ("reasoning") describes it."""
    return ToyTask(
        name="reasoning",
        version=REASONING_VERSION,
        folder=f"toy-reasoning-{REASONING_VERSION}",
        reward=reasoning_reward,
        max_completion_length=MAX_COMPLETION_LENGTH,
        warmup=lambda model, tokenizer, seed: warmup(model, tokenizer, seed),  # looked up late: tests patch it
        target_accuracy=WARMUP_TARGET_ACCURACY,
        shipped_dir=SHIPPED_WARM_DIR,
        train_rows=lambda rows, seed: reasoning_train_rows(rows, seed),
        heldout=reasoning_heldout,
    )
