"""Downsampling: a prompt's pool cut to the group handed to the loss, balanced (half positive where it can) or
uniform (distributed as a fresh GRPO group)."""

from __future__ import annotations

import math
import random

from .pool import Pool, has_signal

DOWNSAMPLES = ("balanced", "uniform")


def downsample(pool: Pool, group_size: int, rng: random.Random, mode: str = "balanced") -> list[int]:
    """Pick `group_size` pool indices at random.

    `"balanced"`: `group_size // 2` positives and the rest negatives, topping up from the other kind when one is
    short. `"uniform"`: a uniform draw without replacement from the scorable completions, so the kept group is
    distributed as a fresh GRPO group (what an importance weight such as ODC's 1/p_hat assumes). In both modes
    unscorable completions are used only when nothing else is left.
    """
    if mode not in DOWNSAMPLES:
        raise ValueError(f"Unknown downsample mode {mode!r}; expected one of {DOWNSAMPLES}.")
    if len(pool) < group_size:
        # Only a pilot that stopped leaves a pool smaller than a group: its rewards all agree (no signal, so every
        # advantage is zero), and its completions fill the group in turn.
        if has_signal(pool) or not pool.samples:
            raise ValueError(f"A pool of {len(pool)} completions cannot fill a group of {group_size}.")
        return sorted(i % len(pool) for i in range(group_size))
    unscored = [i for i in range(len(pool)) if math.isnan(pool.rewards[i])]
    if mode == "uniform":
        scored = [i for i in range(len(pool)) if not math.isnan(pool.rewards[i])]
        num_scored = min(len(scored), group_size)
        return sorted(rng.sample(scored, num_scored) + rng.sample(unscored, group_size - num_scored))
    positives = [i for i in range(len(pool)) if pool.is_positive(i)]
    negatives = [i for i in range(len(pool)) if pool.is_negative(i)]
    num_pos = min(len(positives), group_size // 2)
    num_neg = min(len(negatives), group_size - num_pos)
    num_pos = min(len(positives), group_size - num_neg)
    chosen = (
        rng.sample(positives, num_pos)
        + rng.sample(negatives, num_neg)
        + rng.sample(unscored, group_size - num_pos - num_neg)
    )
    return sorted(chosen)
