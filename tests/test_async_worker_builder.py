"""`AdaRolloutWorker.from_trainer_args`: the worker kwargs `AsyncGRPOTrainer.__init__` fills for its own
`AsyncRolloutWorker`, from an `AsyncGRPOConfig`, on CPU and without spawning the worker's child process.

The trainer's mapping is hand-listed below from TRL 1.16.0's source (`async_grpo_trainer.py`, the
`AsyncRolloutWorker(...)` call in `__init__`); one test checks the list against the installed trainer's source, the
others check the builder against the list, with values chosen by hand."""

import ast
import inspect
import json
import pickle
import shutil
import textwrap
from typing import Any

import pytest
from datasets import Dataset
from test_async_worker import child_channels
from transformers import AutoTokenizer
from trl.chat_template_utils import qwen3_template
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer
from trl.experimental.async_grpo import async_rollout_worker as trl_worker

from trl_ada.adapter.async_worker import AdaRolloutConfig, AdaRolloutLoop, AdaRolloutWorker
from trl_ada.toy import toy_model_dir

# Keyword -> expression of the trainer's `AsyncRolloutWorker(...)` call (TRL 1.16.0, async_grpo_trainer.py:1367-1390).
TRAINER_CALL = {
    "model_name": "get_config_model_id(model.config)",
    "lora_name": "self._lora_name if self._lora_sync else None",
    "dataset": "train_dataset",
    "reward_funcs": "reward_funcs",
    "processing_class": "processing_class",
    "eos_token_ids": "self.eos_token_ids",
    "tools": "tools",
    "environment_factory": "environment_factory",
    "num_generations": "self.args.num_generations",
    "max_inflight_tasks": "self.args.max_inflight_tasks",
    "queue_maxsize": "self.args.queue_maxsize",
    "vllm_server_url": "self.args.vllm_server_base_url",
    "max_tokens": "self.args.max_completion_length",
    "temperature": "self.args.temperature",
    "top_p": "self.args.top_p",
    "top_k": "self.args.top_k",
    "min_p": "self.args.min_p",
    "repetition_penalty": "self.args.repetition_penalty",
    "request_timeout": "self.args.request_timeout",
    "chat_template_kwargs": "self.args.chat_template_kwargs",
    "max_tool_calling_iterations": "self.args.max_tool_calling_iterations",
    "log_completions": "self.args.log_completions",
    "num_completions_to_print": "self.args.num_completions_to_print",
    "fork_threshold_tokens": "self.args.fork_threshold_tokens",
}

# TRL 1.14's loop takes no `eos_token_ids` and its trainer passes none (from 1.15.0 on it does).
TAKES_EOS = "eos_token_ids" in inspect.signature(trl_worker._AsyncRolloutLoop.__init__).parameters
INSTALLED_CALL = TRAINER_CALL if TAKES_EOS else {k: v for k, v in TRAINER_CALL.items() if k != "eos_token_ids"}
needs_eos = pytest.mark.skipif(not TAKES_EOS, reason="TRL < 1.15: the loop takes no eos_token_ids")

# Every AsyncGRPOConfig field the trainer reads for its worker, set away from its default.
CONFIG = {
    "num_generations": 6,
    "max_inflight_tasks": 48,
    "queue_maxsize": 77,
    "vllm_server_base_url": "http://gpu-node:9000",
    "max_completion_length": 321,
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 20,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "request_timeout": 33,
    "chat_template_kwargs": {"enable_thinking": False},
    "max_tool_calling_iterations": 3,
    "log_completions": True,
    "num_completions_to_print": 2,
    "fork_threshold_tokens": 99,
}
# What the worker must then receive, by hand from the two tables above.
EXPECTED = {
    "num_generations": 6,
    "max_inflight_tasks": 48,
    "queue_maxsize": 77,
    "vllm_server_url": "http://gpu-node:9000",
    "max_tokens": 321,
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 20,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "request_timeout": 33,
    "chat_template_kwargs": {"enable_thinking": False},
    "max_tool_calling_iterations": 3,
    "log_completions": True,
    "num_completions_to_print": 2,
    "fork_threshold_tokens": 99,
}


def exact_answer(completions: list[list[dict[str, str]]], **kwargs: Any) -> list[float]:
    return [1.0 if completion[-1]["content"].strip() == "4" else 0.0 for completion in completions]


def config(tmp_path, **fields: Any) -> AsyncGRPOConfig:
    return AsyncGRPOConfig(output_dir=str(tmp_path / "out"), bf16=False, report_to="none", **fields)


@pytest.fixture
def no_vllm_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL's worker refuses to build without the vllm package (the child only speaks HTTP to a server elsewhere)."""
    monkeypatch.setattr(trl_worker, "is_vllm_available", lambda: True)


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return Dataset.from_list([{"prompt": [{"role": "user", "content": "2+2"}]}])


def test_the_hand_listed_mapping_is_the_installed_trainers():
    """Read the installed trainer's `AsyncRolloutWorker(...)` call: the same keywords, filled from the same places."""
    source = textwrap.dedent(inspect.getsource(AsyncGRPOTrainer.__init__))
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "AsyncRolloutWorker"
    ]
    assert len(calls) == 1
    assert {kw.arg: ast.unparse(kw.value) for kw in calls[0].keywords} == INSTALLED_CALL


def test_the_builder_fills_what_the_trainer_fills(tmp_path, no_vllm_check, dataset):
    tokenizer = AutoTokenizer.from_pretrained(toy_model_dir())
    tokenizer.response_template = qwen3_template  # the toy's ChatML turns parse as Qwen3's (the loop needs one)
    ada = AdaRolloutConfig(sampling_strategy="positive")
    args = config(tmp_path, **CONFIG)
    worker = AdaRolloutWorker.from_trainer_args(
        args,
        ada,
        model_name=str(toy_model_dir()),
        dataset=dataset,
        reward_funcs=exact_answer,  # one function: the trainer makes it a list
        processing_class=tokenizer,
    )
    kwargs = worker._loop_kwargs
    assert worker._loop_cls is AdaRolloutLoop
    assert {key: kwargs[key] for key in EXPECTED} == EXPECTED
    assert kwargs["model_name"] == str(toy_model_dir())
    assert kwargs["lora_name"] is None
    assert kwargs["dataset"] is dataset and kwargs["processing_class"] is tokenizer
    assert kwargs["reward_funcs"] == [exact_answer] and kwargs["tools"] is None
    # The toy tokenizer's eos (<|im_end|>, id 2) is also the model's generation-config eos (2).
    assert kwargs.get("eos_token_ids") == ([2] if TAKES_EOS else None)
    assert kwargs["ada"] == ada and kwargs["dataset_start_index"] == 0
    assert kwargs["environment_factory"] is None  # forwarded as the trainer forwards it (none given here)
    # What the trainer passes and the worker keeps, nothing else: the loop's child kwargs plus `ada`.
    assert set(kwargs) == set(INSTALLED_CALL) | {"ada", "dataset_start_index"}
    pickle.dumps(kwargs)  # what `start()` checks before spawning
    # The child would build the loop from exactly these kwargs (plus the shared queues and values).
    loop = AdaRolloutLoop(
        **kwargs,
        **child_channels(),
    )
    loop._loop.close()
    assert (loop.num_generations, loop.max_tokens, loop.vllm_server_url) == (6, 321, "http://gpu-node:9000")
    assert loop.ada == ada
    # The trainer's adapter-only sync serves the adapter as "trl-policy-v<version>".
    lora = AdaRolloutWorker.from_trainer_args(
        args, model_name="m", dataset=dataset, processing_class=tokenizer, eos_token_ids=[2], lora_sync=True
    )
    assert lora._loop_kwargs["lora_name"] == "trl-policy"


def test_max_inflight_tasks_inferred_as_the_trainer_does(tmp_path, no_vllm_check, dataset):
    """Negative: max(max_staleness, 1) * per_device_train_batch_size * gradient_accumulation_steps * processes;
    5 * 3 * 2 * 2 = 60, and with max_staleness 0, 1 * 3 * 2 * 2 = 12. The config keeps its -1; an override wins."""
    tokenizer = AutoTokenizer.from_pretrained(toy_model_dir())
    common = {"model_name": "m", "dataset": dataset, "processing_class": tokenizer, "eos_token_ids": [2]}
    sizes = {"per_device_train_batch_size": 3, "gradient_accumulation_steps": 2, "max_inflight_tasks": -1}
    args = config(tmp_path, max_staleness=5, **sizes)
    worker = AdaRolloutWorker.from_trainer_args(args, num_processes=2, **common)
    assert worker._loop_kwargs["max_inflight_tasks"] == 60 and args.max_inflight_tasks == -1
    strict = config(tmp_path, max_staleness=0, **sizes)
    assert (
        AdaRolloutWorker.from_trainer_args(strict, num_processes=2, **common)._loop_kwargs["max_inflight_tasks"] == 12
    )
    override = AdaRolloutWorker.from_trainer_args(args, max_inflight_tasks=8, **common)
    assert override._loop_kwargs["max_inflight_tasks"] == 8


class Counter:
    """A toy environment: the trainer hands `environment_factory` to its worker; so must the builder."""

    def reset(self, **kwargs: Any) -> str:
        return "count"


def test_environment_factory_reaches_the_loop_and_the_dataset_may_be_left_out(tmp_path, no_vllm_check):
    tokenizer = AutoTokenizer.from_pretrained(toy_model_dir())
    worker = AdaRolloutWorker.from_trainer_args(
        config(tmp_path), model_name="m", processing_class=tokenizer, eos_token_ids=[2], environment_factory=Counter
    )
    assert worker._loop_kwargs["environment_factory"] is Counter and worker._loop_kwargs["dataset"] is None


@needs_eos
@pytest.mark.parametrize(
    ("generation_eos", "config_eos", "expected"),
    [
        ([5, 7], None, [2, 5, 7]),  # the tokenizer's eos first when the model does not declare it
        ([7, 2], None, [7, 2]),  # declared: the model's order
        (None, 9, [2, 9]),  # no generation_config.json: the one derived from config.json
    ],
)
def test_eos_token_ids_as_the_trainer_merges_them(
    tmp_path, no_vllm_check, dataset, generation_eos, config_eos, expected
):
    """The trainer's end-of-completion ids: the model's generation-config eos ids, with the tokenizer's (2) in front
    when missing. The model folder is a copy of the toy model's with its eos ids edited."""
    model = tmp_path / "model"
    shutil.copytree(toy_model_dir(), model)
    if generation_eos is None:
        (model / "generation_config.json").unlink()
        cfg = json.loads((model / "config.json").read_text())
        cfg["eos_token_id"] = config_eos
        (model / "config.json").write_text(json.dumps(cfg))
    else:
        gen = json.loads((model / "generation_config.json").read_text())
        gen["eos_token_id"] = generation_eos
        (model / "generation_config.json").write_text(json.dumps(gen))
    worker = AdaRolloutWorker.from_trainer_args(
        config(tmp_path), model_name=str(model), dataset=dataset, reward_funcs=[exact_answer]
    )
    assert worker._loop_kwargs["eos_token_ids"] == expected
    # No tokenizer given: loaded from the model folder, as the trainer does.
    assert worker._loop_kwargs["processing_class"].eos_token == "<|im_end|>"
