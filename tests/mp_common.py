"""What the trainer tests and the multi-process scripts (`mp_*.py`, run under `accelerate launch`) share: a small CPU
training config, and the scripts' teardown before exit."""

import os
import sys

import torch

from trl_ada import ReinforceAdaConfig


def cpu_config(out_dir: str, config_cls: type = ReinforceAdaConfig, **overrides) -> ReinforceAdaConfig:
    """A ReinforceAdaConfig (or `config_cls`, e.g. GRPOConfig) for a short CPU run with groups of 4, logging every
    step and saving nothing."""
    settings = dict(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        num_generations=4,
    )
    return config_cls(**(settings | overrides))


def shut_down() -> None:
    """End a multi-process script that succeeded: exit 0 without the interpreter's shutdown.

    Gloo's C++ threads can still be alive while Python finalizes, and then abort the process (SIGABRT, "terminate
    called without an active exception") after everything the test checks has been written; destroying the process
    group does not always prevent it, since other references can keep the group alive. The barrier makes sure no
    rank tears down while the other is still in a collective; `os._exit` skips the finalization that aborts.
    """
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
