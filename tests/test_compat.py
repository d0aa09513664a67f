"""The seams trl-ada relies on, checked against the installed TRL (`make test-compat` runs this under each release).

A failure here names the seam that moved, before the training tests fail somewhere downstream of it."""

import inspect
import re
import warnings
from types import SimpleNamespace

import pytest
import trl.trainer.grpo_trainer as grpo_trainer
from packaging.version import Version
from trl import GRPOTrainer

from trl_ada.adapter import compat


def parameters(function):
    return list(inspect.signature(function).parameters)


def test_overridden_and_called_methods_have_the_signatures_trl_ada_assumes():
    assert parameters(GRPOTrainer._generate) == ["self", "prompts"]
    assert parameters(GRPOTrainer._calculate_rewards) == [
        "self",
        "inputs",
        "prompts",
        "completions",
        "completion_ids_list",
    ]
    assert parameters(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    assert parameters(GRPOTrainer._tokenize_prompts) == ["self", "prompts"]
    # 1.14.0 reads the run length from self.num_generations; 1.14.1 on take it as an argument, which _generate fills
    # from self.num_generations. ReinforceAdaTrainer sets that attribute per round and passes the rest through.
    run_length = [] if compat.TRL_VERSION < Version("1.14.1") else ["num_generations"]
    assert parameters(GRPOTrainer._generate_single_turn) == [
        *["self", "prompt_ids", "images", "multimodal_fields"],
        *run_length,
        "has_tool_images",
    ]
    # Streaming makes this module-level gather local while it scores, and decodes with parse_response
    assert "gather(rewards_per_func)" in inspect.getsource(GRPOTrainer._calculate_rewards)
    assert callable(grpo_trainer.gather) and callable(grpo_trainer.parse_response)


def test_the_differences_compat_adapts_are_where_the_sources_put_them():
    at_least_1_16 = compat.TRL_VERSION >= Version("1.16.0")
    assert compat._UNWRAP_TAKES_CHECKPOINTING_KWARGS == at_least_1_16
    assert compat._PARSE_RESPONSE_TAKES_TOOLS == at_least_1_16
    has_eos_ids = "self.eos_token_ids = " in inspect.getsource(GRPOTrainer.__init__)
    assert has_eos_ids == (compat.TRL_VERSION >= Version("1.14.2"))


def test_eos_token_ids_as_the_installed_trainer_counts_them():
    tokenizer = SimpleNamespace(eos_token_id=7)
    assert compat.eos_token_ids(SimpleNamespace(_tokenizer=tokenizer)) == [7]  # TRL < 1.14.2
    assert compat.eos_token_ids(SimpleNamespace(_tokenizer=tokenizer, eos_token_ids=[7, 9])) == [7, 9]


@pytest.mark.parametrize("takes_tools", [True, False])
def test_parse_response_passes_tools_only_where_trl_takes_them(monkeypatch, takes_tools):
    calls = []
    monkeypatch.setattr(compat, "_PARSE_RESPONSE_TAKES_TOOLS", takes_tools)
    monkeypatch.setattr(grpo_trainer, "parse_response", lambda *args, **kwargs: calls.append((args, kwargs)) or {})
    compat.parse_response("tokenizer", [1, 2], [0], ["tool"])
    expected = {"prefix": [0], "tools": ["tool"]} if takes_tools else {"prefix": [0]}
    assert calls == [(("tokenizer", [1, 2]), expected)]


@pytest.mark.parametrize("takes_kwargs", [True, False])
def test_unwrap_passes_checkpointing_kwargs_only_where_trl_takes_them(monkeypatch, takes_kwargs):
    import trl.models

    calls = []
    monkeypatch.setattr(compat, "_UNWRAP_TAKES_CHECKPOINTING_KWARGS", takes_kwargs)
    monkeypatch.setattr(trl.models, "unwrap_model_for_generation", lambda *a, **k: calls.append((a, k)))
    args = SimpleNamespace(ds3_gather_for_generation=True, gradient_checkpointing_kwargs={"use_reentrant": False})
    compat.unwrap_model_for_generation(SimpleNamespace(args=args, model_wrapped="model", accelerator="accelerator"))
    expected = {"gather_deepspeed3_params": True}
    if takes_kwargs:
        expected["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    assert calls == [(("model", "accelerator"), expected)]


@pytest.mark.parametrize(
    ("version", "supported"),
    [
        ("1.13.0", False),
        ("1.14.0", True),
        ("1.15.0", True),
        ("1.16.9", True),
        ("1.17.0.dev0", False),
        ("1.17.0", False),
    ],
)
def test_a_trl_outside_the_tested_range_warns(version, supported):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert compat.check_trl_version(Version(version)) == supported
    assert (len(caught) == 0) == supported
    if not supported:
        assert f"TRL {version} is installed" in str(caught[0].message)


def test_the_range_is_the_one_setup_cfg_installs():
    import configparser
    from pathlib import Path

    from packaging.requirements import Requirement

    config = configparser.ConfigParser()
    config.read(Path(__file__).resolve().parent.parent / "setup.cfg")
    requires = [Requirement(line) for line in config["options"]["install_requires"].splitlines() if line.strip()]
    assert [r.specifier for r in requires if r.name == "trl"] == [compat.SUPPORTED_TRL]
    assert compat.check_trl_version()  # the installed TRL is one of them


def test_continuous_batching_cache_speaks_the_installed_transformers():
    import transformers
    from transformers.generation import ContinuousBatchingConfig

    cache = compat.continuous_batching_cache(num_blocks=64, page_size=32, max_batch_tokens=256)
    page = "page_size" if Version(transformers.__version__) >= Version("5.18.0") else "block_size"
    assert cache == {"num_blocks": 64, page: 32, "max_batch_tokens": 256}
    config = ContinuousBatchingConfig(**cache)
    assert (config.num_blocks, getattr(config, page), config.max_batch_tokens) == (64, 32, 256)


def test_the_step_logs_the_prompts_list_it_passed_to_generate():
    """Refill and prompt selection rewrite, in place, the `prompts` list GRPOTrainer hands to `_generate` (and the
    `inputs` list of the step): the step must go on to log and score those same lists, not copies made before."""
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    after_generate = source.split("= self._generate(prompts)", 1)
    assert len(after_generate) == 2, "the step no longer calls self._generate(prompts)"
    rest = after_generate[1]
    rebound = re.findall(r"(?<![\w.])(prompts|inputs)\s*=(?!=)", rest)
    assert not rebound, f"the step rebinds {rebound} after generation"
    assert "self._calculate_rewards(inputs, prompts, completions, completion_ids_list)" in rest
    # TRL 1.16 logs the prompts list itself; 1.14 and 1.15 log the text decoded from the returned prompt ids, which
    # are the kept rows' own (so they show the retargeted prompts too).
    logs_the_list = 'self._logs["prompt"].extend(gather_object(prompts))' in rest
    logs_the_ids = 'self._logs["prompt"].extend(gather_object(prompts_text))' in rest and (
        "prompts_text = self.processing_class.batch_decode(prompt_ids" in rest
    )
    assert logs_the_list or logs_the_ids


def test_the_rest_of_the_seam_list_is_where_compat_says():
    """Every other TRL-private name trl-ada reads, writes or overrides (compat.py's module docstring lists them)."""
    from transformers import Trainer

    from trl_ada.adapter.compat import ROLLOUT_STATE, ToolLoopOutput
    from trl_ada.adapter.step_io import GenerationOutput

    # Overridden and called: their signatures.
    assert parameters(GRPOTrainer._tool_call_loop) == [
        *["self", "prompts", "prompt_ids", "completion_ids", "completions", "logprobs", "images"],
        "multimodal_fields",
    ]
    assert parameters(Trainer._save_checkpoint) == ["self", "model", "trial"]
    assert parameters(Trainer._get_output_dir) == ["self", "trial"]
    # The output tuples read by name: the names trl-ada gives them are TRL's own, in order.
    tool_loop = inspect.getsource(GRPOTrainer._tool_call_loop)
    assert f"return {', '.join(ToolLoopOutput._fields)}" in tool_loop
    generate = inspect.getsource(GRPOTrainer._generate)
    returned = "prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images"
    assert f"return {returned}" in generate
    assert returned.split(", ") == list(GenerationOutput._fields)
    # Per-rollout state that rounds rebuild (GRPOTrainer's step sets it) and restore.
    step = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for name in ROLLOUT_STATE:
        assert f"self.{name} = " in step or f"self.{name}.append" in step, name
    # Attributes read or written.
    init = inspect.getsource(GRPOTrainer.__init__)
    for name in ("_pending_extra_logs", "_metrics", "_logs", "_last_loaded_step", "environment_factories"):
        assert f"self.{name} = " in init, name
    # A reward's `log_metric` appends to `_pending_metrics`, which the step flushes as sum over count.
    assert "self._pending_metrics[name].append(value)" in inspect.getsource(GRPOTrainer._log_metric)
    assert "total / count" in step and "self._pending_metrics = " in init
    assert "self._tokenizer" in inspect.getsource(GRPOTrainer._generate)
    from trl.generation import vllm_generation

    assert "self._llm_weights_sleeping = " in inspect.getsource(vllm_generation)


def test_checkpoint_seams_are_where_trl_ada_checkpoints_expects_them():
    """What a checkpoint saved inside a generation batch restores, and what the staged save redirects."""
    import transformers.trainer_utils
    from transformers import Trainer

    # GRPOTrainer's generation window: it generates when its micro-step count starts a window or its buffer is
    # empty (a fresh resume), else trains a slice of the buffer. Restoring both resumes inside the window.
    prepare = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in prepare
    assert "if self._step % generate_every == 0 or self._buffered_inputs is None:" in prepare
    assert "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]" in prepare
    assert "self._step += 1" in inspect.getsource(GRPOTrainer.training_step)
    init = inspect.getsource(GRPOTrainer.__init__)
    assert "self._step = 0" in init and "self._buffered_inputs = None" in init
    # Every folder Trainer's and TRL's save code write a checkpoint into comes from `_get_output_dir`.
    for save in (Trainer._save_checkpoint, GRPOTrainer._save_checkpoint):
        assert "self._get_output_dir(trial=trial)" in inspect.getsource(save)
    assert parameters(Trainer._push_from_checkpoint) == ["self", "checkpoint_folder"]
    assert hasattr(Trainer, "_rotate_checkpoints") or hasattr(transformers.trainer_utils, "rotate_checkpoints")
    # The training sampler: seeded once with the run's seed, one permutation per epoch, and no set_epoch of its own
    # (EpochSeededSampler adds it).
    assert parameters(GRPOTrainer._get_train_sampler) == ["self", "dataset"]
    sampler = inspect.getsource(GRPOTrainer._get_train_sampler)
    assert "return RepeatSampler(" in sampler and "seed=self.args.seed" in sampler
    repeat_sampler = grpo_trainer.RepeatSampler
    assert "self.generator.manual_seed(seed)" in inspect.getsource(repeat_sampler.__init__)
    iterate = inspect.getsource(repeat_sampler.__iter__)
    assert iterate.count("torch.randperm(self.num_samples, generator=self.generator)") == 1
    assert not hasattr(repeat_sampler, "set_epoch")


def test_local_reward_gather_patches_only_where_there_are_several_processes(monkeypatch):
    """One process: TRL's own gather already returns its input, so nothing is patched; several: the module-level
    gather is the identity inside the call and TRL's again after it, even when the call raises."""
    original = grpo_trainer.gather
    with compat.local_reward_gather(1):
        assert grpo_trainer.gather is original
    with pytest.raises(RuntimeError), compat.local_reward_gather(2):
        sentinel = object()
        assert grpo_trainer.gather(sentinel) is sentinel
        raise RuntimeError("reward failed")
    assert grpo_trainer.gather is original
