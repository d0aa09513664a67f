"""The side stream of training prompts that refill and prompt selection draw replacements from.

Each epoch is a permutation of the dataset's row indices, shuffled with the run's seed and the epoch number; process
`rank` of `world_size` takes every `world_size`-th position of it, so processes draw disjoint rows and no process
draws a row twice within an epoch. The state (epoch and position) is two integers per process, saved with each
checkpoint, so a resumed run draws exactly the rows an uninterrupted one would.
"""

from __future__ import annotations

import random
from typing import Any

from .selection import keep_probability


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
    selection test of `prompt_selection="pass_rate"` (`trl_ada.selection`) on the pass-rate memory's counts.

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
