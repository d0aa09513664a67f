"""TRL's asynchronous GRPO names this worker builds on (`trl.experimental.async_grpo`, private), the releases they
were read in (`SUPPORTED_ASYNC_TRL`), and where those releases differ (`RolloutSample`'s arrays: `_as_row`).
Importing this module under a TRL without those names raises an ImportError that names the supported range."""

from __future__ import annotations

from typing import Any

import numpy as np
import trl
from packaging.specifiers import SpecifierSet
from packaging.version import Version

# The TRL releases whose asynchronous GRPO worker was read and tested (`make test-compat`). Kept apart from
# `trl_ada.adapter.compat.SUPPORTED_TRL`: `trl.experimental` may change in a release whose GRPOTrainer does not.
_ASYNC_TRL_RANGE = ">=1.14.0,<1.17"  # written out: SpecifierSet's str() reorders it
SUPPORTED_ASYNC_TRL = SpecifierSet(_ASYNC_TRL_RANGE)


def _unsupported_trl(installed: str) -> str:
    return (
        f"trl_ada.adapter.async_worker supports TRL {_ASYNC_TRL_RANGE} (trl.experimental.async_grpo as read in those "
        f"releases), and TRL {installed} is installed: its private rollout-loop seams may differ. Install a "
        f"supported TRL (pip install 'trl{_ASYNC_TRL_RANGE}')."
    )


try:
    from trl.experimental.async_grpo.async_rollout_worker import (
        AsyncRolloutWorker,
        RolloutSample,
        TrainingSequence,
        _AsyncRolloutLoop,
    )
except ImportError as error:  # a TRL without the seams: say which TRL is needed, not which name is missing
    raise ImportError(_unsupported_trl(trl.__version__)) from error


def check_async_trl_version() -> None:
    """Raise a RuntimeError unless the installed TRL is one whose asynchronous worker this package was built on."""
    if not SUPPORTED_ASYNC_TRL.contains(Version(trl.__version__), prereleases=True):
        raise RuntimeError(_unsupported_trl(trl.__version__))


_ARRAY_ROWS = RolloutSample.__dataclass_fields__["input_ids"].type is np.ndarray  # TRL >= 1.16.0


def _as_row(values: list[Any], dtype: Any) -> Any:
    """A `RolloutSample` array field as the installed TRL declares it: a NumPy array (1.16) or a list (1.14)."""
    return np.asarray(values, dtype=dtype) if _ARRAY_ROWS else list(values)


# What the other modules of this package import from here: TRL's names, through the one guarded import above.
__all__ = [
    "SUPPORTED_ASYNC_TRL",
    "AsyncRolloutWorker",
    "RolloutSample",
    "TrainingSequence",
    "_AsyncRolloutLoop",
    "_as_row",
    "check_async_trl_version",
]
