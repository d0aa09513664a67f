"""The side stream of training prompts that refill and prompt selection draw replacements from.

Each epoch is a permutation of the dataset's row indices, shuffled with the run's seed and the epoch number; process
`rank` of `world_size` takes every `world_size`-th position of it, so processes draw disjoint rows and no process
draws a row twice within an epoch. The state (epoch and position) is two integers per process, saved with each
checkpoint (`save_stream_states`, `load_stream_state`), so a run resumed from any checkpoint continues the sequence
exactly where an uninterrupted run was, given the same dataset, seed and number of processes (otherwise loading
raises). A checkpoint saved inside a generation batch, whose refills were drawn already, also holds that batch
(`trl_ada.adapter.checkpoints`): the resumed run trains it without drawing them again. How many rows a later step draws
depends on its completions (refill replaces groups without signal; selection reads the memory), so a run resumed
with generation whose RNG no checkpoint holds (vLLM's) draws the same sequence but may split it across steps
differently, as another run would.

`SidePrompts` is what the trainer draws from: the stream over the dataset's rows, prompt selection's test
(`select`), refill's callback (`refill_fn`), and `retarget_rows`, which points a group of the step's rows at the
prompt that replaced its own.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from typing import Any

from .engine import Pool, Schedule
from .selection import keep_probability

STREAM_STATE_FILE = "prompt_stream.json"


class PromptStream:
    """An endless, sharded, per-epoch shuffled sequence of row indices into a dataset of `size` rows."""

    def __init__(self, size: int, seed: int, rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}.")
        if size < world_size:
            raise ValueError(
                f"The training set has {size} rows, fewer than the {world_size} processes that each need a share of "
                "it to draw replacement prompts from."
            )
        self.size, self.seed, self.rank, self.world_size = size, seed, rank, world_size
        self.epoch = 0
        self.position = 0  # rows of this epoch's shard already drawn
        self._shard = self._make_shard()

    def _make_shard(self) -> list[int]:
        order = list(range(self.size))
        random.Random(f"trl-ada-prompt-stream-{self.seed}-{self.epoch}").shuffle(order)
        return order[self.rank :: self.world_size]

    def next(self) -> int:
        """The next row index; a new epoch (a new permutation) starts when this process's shard is used up."""
        if self.position == len(self._shard):
            self.epoch += 1
            self.position = 0
            self._shard = self._make_shard()
        index = self._shard[self.position]
        self.position += 1
        return index

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "size": self.size, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume where `state_dict()` was taken. The dataset size and process count must be the same, or the
        permutations would differ."""
        for name in ("size", "world_size"):
            if state.get(name) != getattr(self, name):
                raise ValueError(
                    f"The saved prompt stream was made with {name}={state.get(name)}, this run has "
                    f"{getattr(self, name)}; it cannot resume the same sequence."
                )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._shard = self._make_shard()
        if not 0 <= self.position <= len(self._shard):
            raise ValueError(f"Saved position {self.position} is outside this process's shard of {len(self._shard)}.")


class SidePrompts:
    """Rows of the training set drawn from a `PromptStream`, for refill and for replacing skipped prompts, and the
    selection test of `prompt_selection="pass_rate"` (`trl_ada.core.selection`) on the pass-rate memory's counts.

    `key(row)` is the row's memory key; `group_size` the completions of a prompt's first group (what the test
    predicts the signal of). Without selection (`threshold=None`) every prompt is kept.
    """

    MAX_CANDIDATES = 8  # per replacement: after this many rejected candidates the last one is taken anyway

    def __init__(
        self,
        dataset: Any,
        stream: PromptStream,
        memory: Any,
        key: Any,
        group_size: int,
        threshold: float | None = None,
        floor: float = 1.0,
    ) -> None:
        self.dataset, self.stream, self.memory, self.key = dataset, stream, memory, key
        self.group_size, self.threshold, self.floor = group_size, threshold, floor

    def keep(self, key: str, rng: random.Random) -> bool:
        """Whether to sample the prompt with this memory key (always, without selection)."""
        if self.threshold is None:
            return True
        num_positive, num_total = self.memory.counts(key)
        probability = keep_probability(num_positive, num_total, self.group_size, self.threshold, self.floor)
        return probability >= 1.0 or rng.random() < probability

    def draw(self, rng: random.Random) -> dict[str, Any]:
        """The next stream row that passes `keep`."""
        for _ in range(self.MAX_CANDIDATES):
            row = self.dataset[self.stream.next()]
            if self.keep(self.key(row), rng):
                break
        return row

    @classmethod
    def for_dataset(
        cls,
        dataset: Any,
        memory: Any,
        key: Callable[[dict[str, Any]], str],
        schedule: Schedule,
        seed: int,
        selection: tuple[float, float] | None = None,
        rank: int = 0,
        world_size: int = 1,
        environments: bool = False,
    ) -> SidePrompts:
        """Side prompts over a training set, drawn by process `rank` of `world_size` from a stream seeded with
        `seed`; the selection test (`selection`: its threshold and floor, None without prompt selection) predicts the
        signal of the schedule's first round. The training set must be a map-style `datasets.Dataset` of text or
        conversational prompts (a replacement is another row's `prompt` column, found by index)."""
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")) or not hasattr(
            dataset, "column_names"
        ):
            raise ValueError(
                "refill and prompt_selection draw replacement prompts from the training set by index, so they need a "
                f"map-style datasets.Dataset; got {type(dataset).__name__}."
            )
        columns = dataset.column_names
        if "prompt" not in columns or {"image", "images"} & set(columns) or environments:
            raise NotImplementedError(
                "refill and prompt_selection replace a prompt by another row's `prompt` column; they support text "
                f"or conversational prompts without images or environments (dataset columns: {columns})."
            )
        stream = PromptStream(len(dataset), seed, rank, world_size)
        group_size = schedule.round_size(Pool(schedule.positive_threshold), 0)
        threshold, floor = selection if selection is not None else (None, 1.0)
        return cls(dataset, stream, memory, key, group_size, threshold, floor)

    def prepare(
        self,
        prompts: list,
        inputs: list[dict[str, Any]],
        keys: list[str],
        select_rng: random.Random,
        refill_rng: random.Random,
        refill: bool,
        max_refills: int | None = None,
    ) -> tuple[int, Callable[[int], int | None] | None]:
        """A batch's prompts before sampling: with prompt selection (a threshold), skipped prompts are replaced in
        place (`select`); with `refill`, the engine gets a refill callback (`refill_fn`, at most `max_refills`).
        Returns (skipped, refill)."""
        skipped = self.select(prompts, inputs, keys, select_rng) if self.threshold is not None else 0
        refill_fn = self.refill_fn(prompts, inputs, keys, refill_rng, max_refills) if refill else None
        return skipped, refill_fn

    def select(self, prompts: list, inputs: list[dict[str, Any]], keys: list[str], rng: random.Random) -> int:
        """`prompt_selection="pass_rate"`: replace, in place, each prompt the selection test skips by the next
        stream prompt that passes it. Returns how many were skipped."""
        skipped = 0
        for i, key in enumerate(keys):
            if self.keep(key, rng):
                continue
            row = self.draw(rng)
            prompts[i], inputs[i], keys[i] = row["prompt"], row, self.key(row)
            skipped += 1
        return skipped

    def refill_fn(
        self, prompts: list, inputs: list[dict[str, Any]], keys: list[str], rng: random.Random, limit: int | None
    ) -> Callable[[int], int | None]:
        """The engine's refill callback: append the next stream prompt (one that passes prompt selection, if on) to
        the step's `prompts`, `inputs` and `keys`, at most `limit` times (None: once per prompt of the step)."""
        left = len(prompts) if limit is None else limit

        def refill(index: int) -> int | None:
            nonlocal left
            if left == 0:
                return None
            left -= 1
            row = self.draw(rng)
            prompts.append(row["prompt"])
            inputs.append(row)
            keys.append(self.key(row))
            return len(prompts) - 1

        return refill

    def load_stream(self, checkpoint: str | os.PathLike, num_processes: int = 1, process_index: int = 0) -> bool:
        """Put this process's stream where it was when `checkpoint` was written; False when it holds no state."""
        state = load_stream_state(checkpoint, num_processes, process_index)
        if state is not None:
            self.stream.load_state_dict(state)
        return state is not None


def retarget_rows(
    step_prompts: list,
    step_inputs: list[dict[str, Any]],
    starts: list[int],
    slots: list[int],
    prompts: list,
    inputs: list[dict[str, Any]],
    group_size: int,
) -> None:
    """Point each row group whose prompt was replaced (selection or refill) at its new prompt, in the step's lists
    GRPOTrainer goes on to log and to hand to reward functions: one copy of the row per completion, as GRPOTrainer's
    sampler makes them (a rollout_func's extra fields are written per row). Group `g` starts at row `starts[g]`
    and trains on `prompts[slots[g]]`."""
    for slot, start in enumerate(starts):
        index = slots[slot]
        if index == slot and prompts[slot] is step_prompts[start]:
            continue
        for row in range(start, start + group_size):
            step_prompts[row] = prompts[index]
            step_inputs[row] = dict(inputs[index])


def save_stream_states(directory: str | os.PathLike, states: list[dict[str, Any]]) -> None:
    """Write every process's stream state (in rank order) into a checkpoint folder."""
    with open(os.path.join(directory, STREAM_STATE_FILE), "w") as file:
        json.dump({"processes": states}, file)


def load_stream_state(checkpoint: str | os.PathLike, num_processes: int, process_index: int) -> dict[str, Any] | None:
    """This process's stream state saved in `checkpoint`, or None when the checkpoint has none."""
    path = os.path.join(checkpoint, STREAM_STATE_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as file:
        states = json.load(file)["processes"]
    if len(states) != num_processes:
        raise ValueError(
            f"{path} holds the prompt streams of {len(states)} processes; this run has "
            f"{num_processes}. Resume with as many processes as wrote the checkpoint."
        )
    return states[process_index]
