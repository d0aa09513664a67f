"""Reinforce-Ada adaptive sampling for TRL's GRPOTrainer.

`ReinforceAdaConfig` and `ReinforceAdaTrainer` import TRL (several seconds), so they load on first use; the
model-free engine (`trl_ada.engine`, `trl_ada.advantages`) imports without it.
"""

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["ReinforceAdaConfig", "ReinforceAdaTrainer"]

if TYPE_CHECKING:
    from .config import ReinforceAdaConfig
    from .trainer import ReinforceAdaTrainer


def __getattr__(name: str):
    if name == "ReinforceAdaConfig":
        from .config import ReinforceAdaConfig

        return ReinforceAdaConfig
    if name == "ReinforceAdaTrainer":
        from .trainer import ReinforceAdaTrainer

        return ReinforceAdaTrainer
    raise AttributeError(f"module 'trl_ada' has no attribute {name!r}")
