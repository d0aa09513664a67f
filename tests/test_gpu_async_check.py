"""`python -m trl_ada.gpu_async_check` on a CPU: its recipe, its arguments, its metric lines and its dry run.
The GPU run itself (AsyncGRPOTrainer.train() against a vLLM server) cannot run here and is not tested."""

import pytest
from trl.experimental.async_grpo import async_rollout_worker as trl_worker

from trl_ada.adapter.async_worker import AdaRolloutConfig
from trl_ada.tools import gpu_async_check
from trl_ada.toy import toy_model_dir


def test_the_async_recipe_builds_both_configs():
    """recipes/async-balanced.yaml, by its packaged name: the values it states, as configs."""
    recipe = gpu_async_check.load_recipe("async-balanced")
    assert recipe.script == {
        "model_name_or_path": "Qwen/Qwen2.5-Math-1.5B",
        "dataset_name": "data/qwen2.5-math-1.5b-hard/train.jsonl",
        "reward_funcs": ["math"],
    }
    config, ada = gpu_async_check.build_configs(recipe, {"use_cpu": True, "bf16": False})  # no bf16 on this CPU
    assert (config.num_generations, config.max_staleness, config.max_inflight_tasks) == (4, 4, 256)
    # 256 in flight is TRL's own rule for this recipe: max_staleness x rows per step = 4 x 16 x 4.
    assert config.max_staleness * config.per_device_train_batch_size * config.gradient_accumulation_steps == 256
    assert (config.max_completion_length, config.temperature, config.token_budget) == (2048, 1.0, 0)
    assert config.vllm_server_base_url == "http://localhost:8000"
    assert ada == AdaRolloutConfig(
        sampling_strategy="balanced",
        samples_per_round=8,
        max_rounds=4,
        advantage_baseline="pool",
        scale_rewards="none",
    )
    assert recipe.trainer["bf16"] is True  # the GPU run asks for bf16


def test_unknown_recipe_keys_are_named(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("num_generations: 4\nmax_rounds: 4\nada:\n  sampling_strategy: balanced\n  num_generations: 4\n")
    with pytest.raises(ValueError, match=r"max_rounds, ada\.num_generations"):
        gpu_async_check.load_recipe(str(path))


def test_arguments():
    args = gpu_async_check.parse_args([])
    assert (args.config, args.max_steps, args.port, args.server_gpu) == ("async-balanced", 5, 8000, "1")
    assert not (args.serve or args.dry_run)
    served = gpu_async_check.parse_args(["--serve", "--port", "9000", "--vllm-url", "http://h:1"])
    # --vllm-url wins over the URL --serve would use
    assert gpu_async_check._overrides(served, "out")["vllm_server_base_url"] == "http://h:1"
    assert gpu_async_check._overrides(gpu_async_check.parse_args(["--serve", "--port", "9000"]), "o")[
        "vllm_server_base_url"
    ] == ("http://localhost:9000")
    for bad in (["--max-steps", "0"], ["--port", "-1"]):
        with pytest.raises(SystemExit):
            gpu_async_check.parse_args(bad)


def test_metric_lines(capsys):
    printer = gpu_async_check.AdaMetricsPrinter()
    state = type("State", (), {"global_step": 3})()
    printer.on_log(None, state, None, logs={"loss": 0.25, "ada/samples_per_prompt": 9.5, "reward": 0.4})
    printer.on_log(None, state, None, logs={"train_runtime": 1.0})
    assert capsys.readouterr().out == "  step 3  ada/samples_per_prompt=9.5  loss=0.25\n"
    assert printer.logged == [{"ada/samples_per_prompt": 9.5, "loss": 0.25}, {}]


def test_dry_run_builds_the_worker_from_the_recipe(monkeypatch, capsys):
    """The toy model and data stand in for the recipe's; the worker gets the recipe's settings."""
    monkeypatch.setattr(trl_worker, "is_vllm_available", lambda: True)  # the worker checks for vllm; not installed
    argv = ["--dry-run", "--use-cpu", "--model", str(toy_model_dir()), "--dataset-name", "builtin:toy"]
    assert gpu_async_check.main([*argv, "--reward-funcs", "toy", "--max-steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "num_generations 4, max_inflight_tasks 256, max_tokens 2048, temperature 1.0" in out
    assert "balanced, rounds of 8, at most 4, 8 in flight per prompt, baseline pool, scale_rewards none" in out
    assert "training  3 steps" in out


def test_a_missing_recipe_is_a_usage_error(capsys):
    assert gpu_async_check.main(["--dry-run", "--config", "no-such-recipe"]) == 2
    assert "no-such-recipe" in capsys.readouterr().err
