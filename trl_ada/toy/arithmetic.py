"""The arithmetic toy task: small-integer sums and differences such as ``47-8``, answered with one number.

Problems and datasets (with the fixed train/eval partition, :func:`problem_split`, that every task uses), the
exact-answer reward and the warm-up recipe that built the warm model shipped in ``trl_ada/toy_warm``.
"""

from __future__ import annotations

import pathlib
import random
import zlib
from collections.abc import Iterator, Sequence
from typing import Literal

import datasets
import transformers

from .rewards import arithmetic_reward
from .task import ToyTask
from .warmup import WarmupRecipe, supervised_warmup

# Bump whenever anything that changes the saved model changes (tokenizer, architecture, data, warm-up recipe):
# it is part of the cache folder name, so stale caches are never reused.
TOY_VERSION = "v2"  # v2: gradient clipping and 2 threads in the warm-up

# The warm model for seed 0, as built by the warm-up below (its toy_info.json says where and how).
SHIPPED_WARM_DIR = pathlib.Path(__file__).resolve().parent.parent / "toy_warm"

# --------------------------------------------------------------------------------------------------------------------
# Problems, datasets and reward
# --------------------------------------------------------------------------------------------------------------------

Split = Literal["train", "eval"]


def sample_problem(rng: random.Random, level: int) -> tuple[str, str]:
    """Draw one problem ``a op b`` (with a >= b, so answers are never negative) and return (expression, answer).

    Level 1: 1-digit op 1-digit; level 2: 2-digit op 1-digit; level 3: 2-digit op 2-digit.
    """
    if level == 1:
        a, b = rng.randint(0, 9), rng.randint(0, 9)
    elif level == 2:
        a, b = rng.randint(10, 99), rng.randint(0, 9)
    elif level == 3:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
    else:
        raise ValueError(f"unknown level {level!r}; expected 1, 2 or 3")
    a, b = max(a, b), min(a, b)
    op = rng.choice("+-")
    return f"{a}{op}{b}", str(a + b if op == "+" else a - b)


def problem_split(expression: str) -> Split:
    """Assign every problem for good to the "train" (~75%) or the "eval" (~25%) side of a fixed partition.

    A stable hash (not Python's salted ``hash``) of the expression decides, so the split is the same in every process.
    The warm-up never trains on "eval" problems, which keeps held-out numbers honest even for level 1, whose 110
    distinct problems would otherwise all be seen in training.
    """
    return "eval" if zlib.crc32(expression.encode()) % 4 == 0 else "train"


def _problem_stream(rng: random.Random, levels: Sequence[int], split: Split | None) -> Iterator[tuple[str, str, int]]:
    """Yield (expression, answer, level) forever: a level uniformly from ``levels``, then a problem of that level."""
    levels = tuple(levels)
    if not levels:
        raise ValueError("levels must not be empty")
    while True:
        level = rng.choice(levels)
        expression, answer = sample_problem(rng, level)
        if split is None or problem_split(expression) == split:
            yield expression, answer, level


def make_arithmetic_dataset(
    num_prompts: int, seed: int = 0, levels: tuple[int, ...] = (1, 2, 3), split: Split | None = None
) -> datasets.Dataset:
    """Return ``num_prompts`` random problems of mixed difficulty, deterministic given ``seed``.

    Columns: ``prompt`` (conversational, ``[{"role": "user", "content": "47-8"}]``), ``answer`` (str, e.g. ``"39"``)
    and ``level`` (int). Levels are drawn uniformly from ``levels``; problems may repeat (there are only 110 distinct
    level-1 problems). ``split`` restricts the draws to one side of :func:`problem_split` (None: no restriction).
    """
    stream = _problem_stream(random.Random(seed), levels, split)
    rows = [next(stream) for _ in range(num_prompts)]
    return datasets.Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": expression}] for expression, _, _ in rows],
            "answer": [answer for _, answer, _ in rows],
            "level": [level for _, _, level in rows],
        }
    )


def toy_dataset_split(
    num_train: int, num_eval: int, seed: int = 0, levels: tuple[int, ...] = (1, 2, 3)
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Return (train, eval) datasets whose problems are disjoint (see :func:`problem_split`).

    The eval problems are also disjoint from everything the warm-up trained on.
    """
    train = make_arithmetic_dataset(num_train, seed=seed, levels=levels, split="train")
    heldout = make_arithmetic_dataset(num_eval, seed=seed + 1_000_003, levels=levels, split="eval")
    return train, heldout


# --------------------------------------------------------------------------------------------------------------------
# Warm-up
# --------------------------------------------------------------------------------------------------------------------

_WARMUP_CHECK_EVERY = 50
_WARMUP_TARGET_ACCURACY = 0.40
_WARMUP_MAX_STEPS = 3000
_WARMUP_CHECK_PROMPTS = 64
_WARMUP_CHECK_SEED = 777  # picks the fixed held-out check set (eval side of the split); sampling uses seed 0


def _check_set() -> datasets.Dataset:
    """The fixed held-out prompts the warm-up measures its stopping accuracy on."""
    return make_arithmetic_dataset(_WARMUP_CHECK_PROMPTS, seed=_WARMUP_CHECK_SEED, split="eval")


def _arithmetic_examples(seed: int) -> Iterator[tuple[str, str]]:
    return (
        (expression, answer)
        for expression, answer, _ in _problem_stream(random.Random(seed + 2_000_003), (1, 2, 3), split="train")
    )


def _arithmetic_recipe() -> WarmupRecipe:
    # Read at call time, so tests can shorten the warm-up by patching the module constants.
    return WarmupRecipe(
        examples=_arithmetic_examples,
        check_set=_check_set,
        target_accuracy=_WARMUP_TARGET_ACCURACY,
        reward=arithmetic_reward,
        max_new_tokens=8,
        check_every=_WARMUP_CHECK_EVERY,
        max_steps=_WARMUP_MAX_STEPS,
    )


def _warmup(model: transformers.Qwen2ForCausalLM, tokenizer: transformers.PreTrainedTokenizerBase, seed: int) -> dict:
    """The arithmetic task's warm-up: "prompt -> answer<|im_end|>" until the sampled held-out accuracy reaches 0.40."""
    return supervised_warmup(model, tokenizer, seed, _arithmetic_recipe())


def arithmetic_task() -> ToyTask:
    """The task as :func:`trl_ada.toy.toy_task` ("arithmetic", the default) describes it."""
    return ToyTask(
        name="arithmetic",
        version=TOY_VERSION,
        folder=f"toy-{TOY_VERSION}",
        reward=arithmetic_reward,
        max_completion_length=8,
        warmup=lambda model, tokenizer, seed: _warmup(model, tokenizer, seed),  # looked up late: tests patch it
        target_accuracy=_WARMUP_TARGET_ACCURACY,
        shipped_dir=SHIPPED_WARM_DIR,
        train_rows=lambda rows, seed: make_arithmetic_dataset(rows, seed=seed, split="train"),
        heldout=lambda n: make_arithmetic_dataset(n, seed=1_000_003, split="eval"),
    )
