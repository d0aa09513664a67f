"""The columns task's supervised warm-up: a curriculum in two phases (the easy rules to mastery, then each hard rule
until its correct-chain pass rate is in the band) and examples whose answer spells a wrong line."""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterator, Sequence

import datasets
import transformers

from trl_ada.toy.warmup import WarmupRecipe, supervised_warmup

from .problems import (
    EASY_RULES,
    HARD_RULES,
    MAX_COMPLETION_LENGTH,
    RULES,
    _in_base,
    _line,
    _stream,
    columns_reward,
    correct_chains,
    make_columns_dataset,
    parse,
    solve,
)

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
UNFAITHFUL_SHARE = 0.3
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
    # The last line half the time: its value opens the answer, and the answer is where the model would compute it
    # again instead of reading it (the earlier lines' digits it reads).
    index = len(lines) - 1 if rng.random() < 0.5 else rng.randrange(len(lines) - 1)
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
