"""Held-out evaluations during a toy training run: accuracy against generated tokens, optionally on a fixed grid.

`HeldoutCurve` is a `TrainerCallback` that samples the held-out prompts before training and then either every few
steps or at fixed grid points: each point of a token grid (the end of the first optimizer step whose completion tokens
reach it) and each step of a step grid, so that methods that spend different tokens per step are evaluated at the same
token counts (`benchmarks/grid_stats.py` says why). For a task with a chain checker (the toy task's ``chain_verdicts``)
it also records how many samples have a correct chain and the share of rewarded samples whose chain is flawed.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import datasets
from transformers import PreTrainedTokenizerBase, TrainerCallback

from ..toy import sample_completions, toy_task
from .heldout import LABEL_COLUMNS, accuracy_by_label, mean_token_entropy

# The held-out entropy is taken over each prompt's first few samples: over all 32 of the rules task's, its forward
# passes took most of a run's time, and a mean over 1,024 completions of ~20 tokens is already precise.
ENTROPY_SAMPLES = 4


@dataclass
class GenerationCounter:
    """Completions and tokens produced by every generation call of one trainer (all Ada rounds included)."""

    calls: int = 0
    completions: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0


@dataclass(frozen=True)
class Checkpoint:
    """Held-out accuracy after ``step`` optimizer steps, ``tokens`` generated and ``seconds`` of training.

    Also, for analyses beyond the mean: ``correct``, each held-out prompt's count of correct samples (reward 1.0, of
    the curve's ``num_samples``; pass@k comes from these); ``accuracy_by_label``, the accuracy of each label of the
    held-out set's ``rule`` or ``level`` column (None without one); ``entropy``, the policy's mean token entropy over
    the sampled completions (`trl_ada.heldout.mean_token_entropy`; None unless asked for). For a task with a chain
    checker: ``chain_accuracy`` (the share of samples whose whole chain is right), ``chain_correct`` (per prompt),
    ``chain_accuracy_by_label`` and ``flawed_rewarded_share`` (the share of rewarded samples whose chain is not right;
    None when none was rewarded), also per label (``flawed_rewarded_share_by_label``: the easy labels' many rewarded
    samples would hide the hard ones' in the overall share). On a grid: ``token_points``, the indices of the
    token-grid points this evaluation serves (the first step at or past each), and ``step_point``, whether its step
    is on the step grid.
    """

    step: int
    tokens: int
    seconds: float
    accuracy: float
    correct: tuple[int, ...] | None = None
    accuracy_by_label: dict[str, float] | None = None
    entropy: float | None = None
    chain_accuracy: float | None = None
    chain_correct: tuple[int, ...] | None = None
    chain_accuracy_by_label: dict[str, float] | None = None
    flawed_rewarded_share: float | None = None
    flawed_rewarded_share_by_label: dict[str, float | None] | None = None
    token_points: tuple[int, ...] | None = None
    step_point: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields that were measured (an unmeasured one, None, is left out, except a flawed share with nothing
        rewarded), JSON-ready."""
        fields = {key: value for key, value in vars(self).items() if value is not None}
        for name in ("correct", "chain_correct", "token_points"):
            if name in fields:
                fields[name] = list(fields[name])
        if self.chain_accuracy is not None and self.flawed_rewarded_share is None:
            fields["flawed_rewarded_share"] = None
        return fields


ChainVerdicts = Callable[[Sequence[str], Sequence[str], Sequence[Sequence[int]]], list[str]]


class HeldoutCurve(TrainerCallback):
    """Evaluate held-out sampled accuracy before training, then every ``every`` steps (and after the last step), or,
    with ``token_grid`` and ``step_grid``, at those points (and after the last step).

    ``seconds`` is training wall time with the evaluations themselves taken out, so curves of methods that evaluate
    equally often stay comparable. Each checkpoint also keeps every prompt's count of correct samples and the accuracy
    per label of the held-out set's first column of `LABEL_COLUMNS` (``rule``, ``level``) if it has one; with
    ``entropy``, the policy's mean token entropy over each prompt's first `ENTROPY_SAMPLES` sampled completions, one
    teacher-forced forward pass more (no sampling, so the accuracies are the same with or without it). When the task
    has a chain checker (`trl_ada.toy.ToyTask.chain_verdicts`), its chain measures too (`Checkpoint`).

    A token-grid point is served by the end of the first step whose cumulative completion tokens reach it: one
    evaluation serves every point a step passes. Every evaluation samples with the same seed, for every method. With
    ``stop_when_covered``, training stops once every grid point has been evaluated (the run's ``max_steps`` is then
    a cap): a method that spends fewer tokens a step trains on until it reaches the token grid's end, and one that
    spends more stops at the step grid's end.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: PreTrainedTokenizerBase,
        heldout: datasets.Dataset,
        counter: GenerationCounter,
        every: int | None,
        num_samples: int,
        seed: int,
        task: str = "arithmetic",
        entropy: bool = False,
        token_grid: Sequence[int] | None = None,
        step_grid: Sequence[int] | None = None,
        stop_when_covered: bool = False,
    ) -> None:
        gridded = token_grid is not None or step_grid is not None
        if not gridded and (every is None or every < 1):
            raise ValueError(f"eval every {every} steps: expected a positive number of steps")
        for name, grid in (("token_grid", token_grid), ("step_grid", step_grid)):
            if grid is not None and (not grid or list(grid) != sorted(set(grid)) or grid[0] <= 0):
                raise ValueError(f"{name} must be increasing positive numbers, got {grid}")
        self.model, self.tokenizer, self.heldout, self.counter = model, tokenizer, heldout, counter
        self.every, self.num_samples, self.seed, self.entropy = every, num_samples, seed, entropy
        self.token_grid = None if token_grid is None else list(token_grid)
        self.step_grid = None if step_grid is None else set(step_grid)
        self._next_token_point = 0
        self.stop_when_covered = stop_when_covered
        self.task = toy_task(task)
        label_column = next((name for name in LABEL_COLUMNS if name in heldout.column_names), None)
        self.labels = None if label_column is None else list(heldout[label_column])
        self.checkpoints: list[Checkpoint] = []
        self._start = 0.0
        self._evaluating = 0.0

    def _evaluate(
        self, step: int, token_points: tuple[int, ...] | None = None, step_point: bool | None = None
    ) -> None:
        began = time.perf_counter()
        # Same sampling seed at every checkpoint and for every method: differences are the model's, not the dice's.
        # The mean reward per prompt and its mean over prompts, as `trl_ada.toy.sampled_accuracy` takes them.
        n = self.num_samples
        if len(self.heldout) == 0:
            raise ValueError("the held-out evaluation needs a non-empty dataset")
        texts, completion_ids = sample_completions(
            self.model, self.tokenizer, self.heldout, n, self.task.max_completion_length, self.seed
        )
        answers = [answer for answer in self.heldout["answer"] for _ in range(n)]
        rewards = self.task.reward(texts, answers, completion_ids=completion_ids)
        rates = [sum(rewards[i : i + n]) / n for i in range(0, len(rewards), n)]
        accuracy = sum(rates) / len(rates)
        correct = tuple(sum(r >= 1.0 for r in rewards[i : i + n]) for i in range(0, len(rewards), n))
        by_label = None if self.labels is None else accuracy_by_label(correct, n, self.labels)
        entropy = None
        if self.entropy:  # over each prompt's first ENTROPY_SAMPLES samples: the forward pass costs like sampling
            k = min(n, ENTROPY_SAMPLES)
            prompt_ids = [ids for ids in self._prompt_ids for _ in range(k)]
            firsts = [completion_ids[i * n + j] for i in range(len(self.heldout)) for j in range(k)]
            entropy = mean_token_entropy(self.model, self.tokenizer, prompt_ids, firsts, batch_size=256)
        chain = self._chain_measures(texts, completion_ids, rewards)
        seconds = began - self._start - self._evaluating
        checkpoint = Checkpoint(
            step,
            self.counter.completion_tokens,
            seconds,
            accuracy,
            correct,
            by_label,
            entropy,
            **chain,
            token_points=token_points,
            step_point=step_point,
        )
        self.checkpoints.append(checkpoint)
        self._evaluating += time.perf_counter() - began

    def _chain_measures(
        self, texts: list[str], completion_ids: list[list[int]], rewards: list[float]
    ) -> dict[str, Any]:
        """The chain measures of `Checkpoint` from the samples, or nothing for a task without a chain checker."""
        verdicts_of: ChainVerdicts | None = self.task.chain_verdicts
        if verdicts_of is None:
            return {}
        n = self.num_samples
        expressions = [prompt[-1]["content"] for prompt in self.heldout["prompt"] for _ in range(n)]
        right = [v == "correct" for v in verdicts_of(expressions, texts, completion_ids)]
        chain_correct = tuple(sum(right[i : i + n]) for i in range(0, len(right), n))
        flawed = [r >= 1.0 and not ok for r, ok in zip(rewards, right, strict=True)]
        rewarded = sum(r >= 1.0 for r in rewards)
        by_label = chain_by_label = None
        if self.labels is not None:
            chain_by_label = accuracy_by_label(chain_correct, n, self.labels)
            by_label = {}
            for label in sorted(set(self.labels), key=str):
                rows = [i for i in range(len(rewards)) if self.labels[i // n] == label]
                got = sum(rewards[i] >= 1.0 for i in rows)
                by_label[str(label)] = sum(flawed[i] for i in rows) / got if got else None
        return {
            "chain_accuracy": sum(right) / len(right),
            "chain_correct": chain_correct,
            "chain_accuracy_by_label": chain_by_label,
            "flawed_rewarded_share": sum(flawed) / rewarded if rewarded else None,
            "flawed_rewarded_share_by_label": by_label,
        }

    @functools.cached_property
    def _prompt_ids(self) -> list[list[int]]:
        """The held-out prompts' token ids as `sample_completions` feeds them to the model (unpadded); the same at
        every checkpoint, so rendered once."""
        texts = self.tokenizer.apply_chat_template(
            list(self.heldout["prompt"]), add_generation_prompt=True, tokenize=False
        )
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    @property
    def gridded(self) -> bool:
        return self.token_grid is not None or self.step_grid is not None

    def on_train_begin(self, args, state, control, **kwargs):
        self._start, self._evaluating, self._next_token_point = time.perf_counter(), 0.0, 0
        self._evaluate(0, () if self.gridded else None, self.gridded or None)

    def on_step_end(self, args, state, control, **kwargs):
        step, last = state.global_step, state.global_step == state.max_steps
        if not self.gridded:
            if step % self.every == 0 or last:
                self._evaluate(step)
            return
        served = []
        grid = self.token_grid or []
        while self._next_token_point < len(grid) and self.counter.completion_tokens >= grid[self._next_token_point]:
            served.append(self._next_token_point)
            self._next_token_point += 1
        on_step_grid = self.step_grid is not None and step in self.step_grid
        if served or on_step_grid or last:
            self._evaluate(step, tuple(served), on_step_grid)
        if self.stop_when_covered and self.covered(step):
            control.should_training_stop = True

    def covered(self, step: int) -> bool:
        """Whether every grid point has been evaluated by ``step``: each token point served and the last grid step
        reached."""
        tokens_done = self._next_token_point == len(self.token_grid or [])
        return tokens_done and step >= max(self.step_grid or [0])

    @property
    def train_seconds(self) -> float:
        return self.checkpoints[-1].seconds if self.checkpoints else math.nan
