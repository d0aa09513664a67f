"""A toy task built as an instrument for adaptive sampling: column arithmetic worked digit by digit, where only a
correct chain reaches the answer, the hard rules are procedures (not tables) and held-out items are operand
combinations never trained on.

A prompt is one item under one rule; the completion works out one column per line, right to left, each line the
column's value as two digits in the rule's base (the carry, then the digit), and ends with the result after ``#``::

    647&222          rule "&": 647 + 222 in base 8
    11               7 + 2 = 9 = 11 in octal: digit 1, carry 1
    07               4 + 2 + 1 = 7: digit 7, carry 0
    10               6 + 2 + 0 = 8 = 10 in octal
    #1071<|im_end|>  the last line's value, then the earlier lines' digits, last to first

Rules ``+`` and ``-`` (decimal addition and subtraction of three-digit numbers) are easy: the warm-up drills them to
mastery first. Rules ``&`` and ``~`` (the same in base 8, operands and results written in octal) are hard: their
items are the ones whose columns carry or borrow at 8 (two columns of three), where decimal habit gives a wrong digit,
so each column needs a fact of the rule's own table that the easy rules never exercise. The warm-up then shows each
hard rule rarely, until its median correct-chain pass rate is a few in a hundred (:mod:`.curriculum`), so learning a
hard rule is learning from its own rare positives.

Why this shape (each point answers a fault of the ``rules`` task, benchmarks/results/rules/README.md, and the
designs tried on the way are in benchmarks/results/columns/README.md):

- **Real positives.** A line holds only the column's value, nothing copied from the prompt, and the answer spells
  the lines: the warm-up also shows chains with one wrong line and the answer they spell (the wrong line unlearned),
  so the answer follows the chain instead of computing the top column again. A completion whose chain went wrong
  then rarely earns the reward (:func:`check_chain` names a chain's first error; the learning benchmark measures the
  share of rewarded completions with one, before and during training).
- **No answer prior.** Results are three- and four-digit numbers spread over hundreds of values per rule
  (:func:`answer_prior_max`).
- **A procedure, not a table.** Every column of every item exercises the rule's digit facts, so what a hard item
  teaches transfers to others; held-out items are operand combinations on the "eval" side of the fixed partition,
  never in training or warm-up data (:func:`heldout_fact_overlap`).

:func:`columns_reward` reads only the final answer, as math RL reads the boxed answer. Two settings draw training rows
differently (:data:`SETTINGS`): ``columns`` visits fresh prompts, ``columns-epochs`` makes :data:`EPOCHS` passes over a
fixed set. The modules: :mod:`.problems` (rules, items, solutions, the chain checker, the reward, the datasets),
:mod:`.curriculum` (the warm-up) and :mod:`.instrument` (the properties measured).
"""

from __future__ import annotations

import pathlib

from trl_ada.toy.task import ToyTask

from .curriculum import (
    WARMUP_BAND,
    WARMUP_CHECK_PROMPTS_PER_RULE,
    WARMUP_CHECK_SAMPLES,
    Curriculum,
    spell,
    spelled_from_a_wrong_line,
    warmup,
    warmup_recipe,
    warmup_should_stop,
)
from .instrument import (
    HARD_BAND_LOW,
    INSTRUMENT_SAMPLES,
    LOW_P,
    answer_prior_max,
    heldout_fact_overlap,
    instrument_properties,
    measure_instrument,
)
from .problems import (
    CHAIN_ERRORS,
    EASY_RULES,
    EOS_TOKEN_ID,
    EPOCH_PROMPTS,
    EPOCHS,
    HARD_RULES,
    HELDOUT_PER_RULE,
    MAX_COMPLETION_LENGTH,
    RULES,
    TRAIN_RULE_WEIGHTS,
    VERSION,
    Rule,
    chain_verdicts,
    check_chain,
    column_values,
    columns_heldout,
    columns_reward,
    columns_train_rows,
    correct_chains,
    make_columns_dataset,
    parse,
    sample_expression,
    solve,
)

__all__ = [
    "CHAIN_ERRORS",
    "EASY_RULES",
    "EOS_TOKEN_ID",
    "EPOCHS",
    "EPOCH_PROMPTS",
    "HARD_BAND_LOW",
    "HARD_RULES",
    "HELDOUT_PER_RULE",
    "INSTRUMENT_SAMPLES",
    "LOW_P",
    "MAX_COMPLETION_LENGTH",
    "RULES",
    "SETTINGS",
    "SHIPPED_WARM_DIR",
    "TRAIN_RULE_WEIGHTS",
    "VERSION",
    "WARMUP_BAND",
    "WARMUP_CHECK_PROMPTS_PER_RULE",
    "WARMUP_CHECK_SAMPLES",
    "Curriculum",
    "Rule",
    "answer_prior_max",
    "chain_verdicts",
    "check_chain",
    "column_values",
    "columns_epochs_task",
    "columns_heldout",
    "columns_reward",
    "columns_task",
    "columns_train_rows",
    "correct_chains",
    "heldout_fact_overlap",
    "instrument_properties",
    "make_columns_dataset",
    "measure_instrument",
    "parse",
    "sample_expression",
    "solve",
    "spell",
    "spelled_from_a_wrong_line",
    "warmup",
    "warmup_recipe",
    "warmup_should_stop",
]

# The warm model for seed 0, kept next to the task, bit for bit the one the committed results were measured from;
# other warm seeds are built into the toy model cache (`toy_model_dir(seed=..., task="columns")`, folders named
# `toy-columns-c1-seedN-warm`).
SHIPPED_WARM_DIR = pathlib.Path(__file__).resolve().parent / "warm"
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
