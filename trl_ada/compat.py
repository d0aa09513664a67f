"""Where TRL releases differ at the seams trl-ada uses, and the one place that adapts to them.

`ReinforceAdaTrainer` overrides private `GRPOTrainer` methods and calls private helpers. Read from each release's
installed source (TRL 1.14.0, 1.14.1, 1.14.2, 1.15.0 and 1.16.0), the seams are the same in every supported release
except these, each handled by one function below:

- `unwrap_model_for_generation` takes `gradient_checkpointing_kwargs` from TRL 1.16.0 on (it re-enables gradient
  checkpointing with them after generation). Before, it re-enables it without kwargs, and GRPOTrainer passes none.
- `parse_response` takes `tools` from TRL 1.16.0 on (tool-call arguments typed from each tool's schema). Before,
  GRPOTrainer decodes without them.
- `GRPOTrainer.eos_token_ids` (every EOS id the model's generation config declares) exists from TRL 1.14.2 on.
  Before, GRPOTrainer counts a completion as terminated only on the tokenizer's EOS.

One transformers difference matters too: `ContinuousBatchingConfig` names its page size `page_size` from transformers
5.18 on and `block_size` before (5.18 still takes `block_size`, with a deprecation warning);
`continuous_batching_cache` writes the installed one's name.

In every case trl-ada does what the installed GRPOTrainer does, so its streamed completions are decoded, counted and
logged exactly as TRL's own would be. Unchanged across the range, and relied on as is: `_generate`,
`_generate_single_turn` (1.14.0 reads the run length from `self.num_generations`, later releases take it as an
argument that `_generate` fills from `self.num_generations`: trl-ada sets that attribute for each round either way),
`_calculate_rewards` (ending with the module-level `gather` that streaming makes local), `_tokenize_prompts`,
`_generate_and_score_completions`, `_pending_extra_logs`, `_metrics`, `_logs`, `vllm_generation.sync_weights`,
`_last_loaded_step`, `_dist.summon_full_params` and `continuous_batching_config`.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import trl
import trl.models
import trl.trainer.grpo_trainer as grpo_trainer
from packaging.specifiers import SpecifierSet
from packaging.version import Version

# Keep in step with `install_requires` in setup.cfg and the matrix in README.md (Compatibility).
SUPPORTED_TRL = SpecifierSet(">=1.14.0,<1.17")
TRL_VERSION = Version(trl.__version__)


def _accepts(function: Any, name: str) -> bool:
    return name in inspect.signature(function).parameters


_UNWRAP_TAKES_CHECKPOINTING_KWARGS = _accepts(trl.models.unwrap_model_for_generation, "gradient_checkpointing_kwargs")
_PARSE_RESPONSE_TAKES_TOOLS = _accepts(grpo_trainer.parse_response, "tools")


def check_trl_version(version: Version = TRL_VERSION) -> bool:
    """Warn (and return False) when the installed TRL is outside the range whose seams were read and tested."""
    if SUPPORTED_TRL.contains(version, prereleases=True):
        return True
    warnings.warn(
        f"trl-ada is tested with TRL {SUPPORTED_TRL}, and TRL {version} is installed. ReinforceAdaTrainer overrides "
        "private GRPOTrainer methods, which change between TRL releases: check the results, or install a "
        f"supported TRL (pip install 'trl{SUPPORTED_TRL}').",
        stacklevel=2,
    )
    return False


def unwrap_model_for_generation(trainer: Any) -> AbstractContextManager[Any]:
    """TRL's `unwrap_model_for_generation` for `trainer`'s model, with the arguments GRPOTrainer's own
    continuous-batching path passes in the installed release."""
    args = trainer.args
    kwargs: dict[str, Any] = {"gather_deepspeed3_params": args.ds3_gather_for_generation}
    if _UNWRAP_TAKES_CHECKPOINTING_KWARGS:  # TRL >= 1.16.0
        kwargs["gradient_checkpointing_kwargs"] = args.gradient_checkpointing_kwargs
    return trl.models.unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator, **kwargs)


def parse_response(tokenizer: Any, ids: list[int], prefix: list[int], tools: list | None) -> dict:
    """TRL's `parse_response`, given the prompt's tools where the installed release takes them (as its
    GRPOTrainer does)."""
    if _PARSE_RESPONSE_TAKES_TOOLS:  # TRL >= 1.16.0
        return grpo_trainer.parse_response(tokenizer, ids, prefix=prefix, tools=tools)
    return grpo_trainer.parse_response(tokenizer, ids, prefix=prefix)


def eos_token_ids(trainer: Any) -> list[int]:
    """The token ids that end a completion, as the installed GRPOTrainer counts them."""
    ids = getattr(trainer, "eos_token_ids", None)  # TRL >= 1.14.2
    return list(ids) if ids is not None else [trainer._tokenizer.eos_token_id]


def continuous_batching_cache(num_blocks: int, page_size: int, max_batch_tokens: int) -> dict[str, int]:
    """A `transformers_continuous_batching_config` sizing the KV cache, in the installed transformers' words."""
    from transformers.generation import ContinuousBatchingConfig

    page = "page_size" if _accepts(ContinuousBatchingConfig, "page_size") else "block_size"  # transformers < 5.18
    return {"num_blocks": num_blocks, page: page_size, "max_batch_tokens": max_batch_tokens}


def seam_report() -> Iterator[str]:
    """One line per adapted seam: which form the installed TRL has (printed by `python -m trl_ada.gpu_check`)."""
    yield f"TRL {TRL_VERSION} ({'supported' if SUPPORTED_TRL.contains(TRL_VERSION, prereleases=True) else 'untested'})"
    yield f"unwrap_model_for_generation(gradient_checkpointing_kwargs=): {_UNWRAP_TAKES_CHECKPOINTING_KWARGS}"
    yield f"parse_response(tools=): {_PARSE_RESPONSE_TAKES_TOOLS}"
    yield f"GRPOTrainer.eos_token_ids: {'eos_token_ids' in inspect.getsource(grpo_trainer.GRPOTrainer.__init__)}"


check_trl_version()
