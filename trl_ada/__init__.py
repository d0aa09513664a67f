"""Reinforce-Ada adaptive sampling for TRL's GRPOTrainer.

`ReinforceAdaConfig` and `ReinforceAdaTrainer` import TRL (several seconds), so they load on first use; the
model-free core (`trl_ada.core`: the engine, the estimators) imports without it. The package's layers:
docs/architecture.md.
"""

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["ReinforceAdaConfig", "ReinforceAdaTrainer"]

if TYPE_CHECKING:
    from .adapter.config import ReinforceAdaConfig
    from .adapter.trainer import ReinforceAdaTrainer


def __getattr__(name: str):
    if name == "ReinforceAdaConfig":
        from .adapter.config import ReinforceAdaConfig

        return ReinforceAdaConfig
    if name == "ReinforceAdaTrainer":
        from .adapter.trainer import ReinforceAdaTrainer

        return ReinforceAdaTrainer
    raise AttributeError(f"module 'trl_ada' has no attribute {name!r}")
