"""What the trainer tests and the multi-process scripts (`mp_*.py`, run under `accelerate launch`) share: a small CPU
training config, and the scripts' teardown before exit."""

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
    """Gloo's worker threads abort the process (SIGABRT) if the process group outlives the interpreter's shutdown."""
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
