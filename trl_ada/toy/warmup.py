"""The supervised warm-up every toy task shares: train on a task's worked examples until the sampled held-out accuracy
reaches the task's target, so that RL starts from a partly-right policy."""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import datasets
import torch
import transformers

from .sampling import sampled_accuracy
from .threads import TOY_NUM_THREADS

# The recipe is calibrated on 2 CPU cores (see the project notes): a larger lr learned slower or not at all.
_WARMUP_BATCH_SIZE = 64
_WARMUP_LR = 1.5e-3
# Clipping made the step where learning clicks less seed-dependent: on 2 cores, steps to the target for seeds 0, 1, 2,
# 4 were 600, 1000, 1050, 1050 with clipping and 2900, 950, 1250, 1650 without.
_WARMUP_MAX_GRAD_NORM = 1.0
_WARMUP_CHECK_SAMPLES = 4  # 256 samples: a less noisy stopping signal than one sample per prompt, still ~0.2 s
# Where learning "clicks" is sensitive to tiny numeric differences, and the thread count can change the float
# summation order, so it is fixed whatever OMP_NUM_THREADS says. 1 and 2 threads built bitwise-identical models here
# (500 steps); 1 thread does not crawl when another process holds a core.
_WARMUP_NUM_THREADS = TOY_NUM_THREADS


def _log(message: str) -> None:
    print(f"[trl_ada.toy] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class WarmupRecipe:
    """A supervised warm-up that stops on accuracy: what :func:`supervised_warmup` trains on and when it stops.

    ``examples(seed)`` yields (user message, completion text) pairs forever; the model learns
    "prompt -> completion<|im_end|>". An example may carry a third item, a leading part of its completion that is
    shown but not learned (no loss on its tokens). Every ``check_every`` steps it samples ``check_samples``
    completions per prompt of ``check_set()`` (``max_new_tokens`` at most, scored by ``reward``) and stops at the
    first check whose mean reward is >= ``target_accuracy``, or at ``max_steps``.

    ``stop_check(model, tokenizer)``, when given, replaces that check: it measures what it needs and returns a dict
    with ``stop`` (whether to stop now), ``accuracy`` (the number logged and returned as ``check_accuracy``) and any
    other measurements, which are kept in the returned ``checks``; or None, to measure nothing at this check (a check
    that keeps its own, coarser schedule).
    """

    examples: Callable[[int], Iterator[tuple[str, ...]]]
    check_set: Callable[[], datasets.Dataset]
    target_accuracy: float
    reward: Callable[..., list[float]]
    max_new_tokens: int
    check_every: int
    max_steps: int
    check_samples: int = _WARMUP_CHECK_SAMPLES
    batch_size: int = _WARMUP_BATCH_SIZE
    lr: float = _WARMUP_LR
    max_grad_norm: float = _WARMUP_MAX_GRAD_NORM
    stop_check: Callable[[transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase], dict | None] | None = (
        None
    )
    # The learning rate of the next step, when it changes during the warm-up (a curriculum's phases); None: ``lr``.
    current_lr: Callable[[], float] | None = None


def supervised_warmup(
    model: transformers.Qwen2ForCausalLM,
    tokenizer: transformers.PreTrainedTokenizerBase,
    seed: int,
    recipe: WarmupRecipe,
) -> dict:
    """Train ``model`` in place on ``recipe``'s examples until the sampled held-out accuracy reaches its target.

    Returns a summary (steps, accuracy, seconds, whether the step cap was hit, the accuracy at every check).
    """
    torch.manual_seed(seed)
    stream = recipe.examples(seed)
    check_set = recipe.check_set()
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    prompt_cache: dict[str, list[int]] = {}  # thousands of distinct train problems: skip re-rendering the template

    def encode(expression: str, completion: str, unlearned: str = "") -> tuple[list[int], list[int], int]:
        """(prompt ids, completion ids with EOS, how many leading completion ids take no loss)."""
        if expression not in prompt_cache:
            message = [{"role": "user", "content": expression}]
            text = tokenizer.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
            prompt_cache[expression] = tokenizer.encode(text, add_special_tokens=False)
        if not completion.startswith(unlearned):
            raise ValueError(f"the unlearned part {unlearned!r} must begin the completion {completion!r}")
        head = tokenizer.encode(unlearned, add_special_tokens=False) if unlearned else []
        tail = tokenizer.encode(completion[len(unlearned) :], add_special_tokens=False)
        return prompt_cache[expression], [*head, *tail, eos_id], len(head)

    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr)
    model.train()
    start, step, accuracy, loss_value, stopped = time.perf_counter(), 0, 0.0, math.nan, False
    checks: list[dict] = []
    while step < recipe.max_steps:
        batch = [next(stream) for _ in range(recipe.batch_size)]
        examples = [encode(*example) for example in batch]
        length = max(len(p) + len(c) for p, c, _ in examples)
        input_ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        labels = torch.full_like(input_ids, -100)  # loss only on the completion tokens
        for row, (prompt_ids, completion_ids, unlearned) in enumerate(examples):
            ids = prompt_ids + completion_ids
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
            learned = len(prompt_ids) + unlearned
            labels[row, learned : len(ids)] = torch.tensor(completion_ids[unlearned:])
        if recipe.current_lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = recipe.current_lr()
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step, loss_value = step + 1, loss.item()

        if step % recipe.check_every == 0:
            if recipe.stop_check is None:
                accuracy = sampled_accuracy(
                    model,
                    tokenizer,
                    check_set,
                    num_samples=recipe.check_samples,
                    max_new_tokens=recipe.max_new_tokens,
                    seed=0,
                    reward=recipe.reward,
                )
                check = {"step": step, "accuracy": accuracy}
                stopped = accuracy >= recipe.target_accuracy
            else:
                measured = recipe.stop_check(model, tokenizer)
                model.train()
                if measured is None:
                    continue
                stopped, accuracy = bool(measured.pop("stop")), measured["accuracy"]
                check = {"step": step, **measured}
            checks.append(check)
            elapsed = time.perf_counter() - start
            details = "".join(
                f" {k} {v:.3f}" if isinstance(v, float) else f" {k} {v}"
                for k, v in check.items()
                if k not in ("step", "accuracy")
            )
            label = "held-out sampled acc" if recipe.stop_check is None else "check accuracy"
            _log(f"warm-up step {step:4d} loss {loss_value:.4f} {label} {accuracy:.3f}{details} ({elapsed:.0f}s)")
            if stopped:
                break
    capped = not stopped
    if capped:
        rule = f"< {recipe.target_accuracy}" if recipe.stop_check is None else "its stop rule not met"
        warnings.warn(
            f"toy warm-up hit the {recipe.max_steps}-step cap at held-out accuracy {accuracy:.3f} "
            f"({rule}); saving it anyway",
            RuntimeWarning,
            stacklevel=4,
        )
    model.eval()
    return {
        "steps": step,
        "final_loss": loss_value,
        "check_accuracy": accuracy,
        "seconds": round(time.perf_counter() - start, 2),
        "hit_step_cap": capped,
        "checks": checks,
    }
