"""`trl-ada train`: help, clear messages for bad input, data and model resolution, and real runs of toy-cpu.yaml."""

import dataclasses
import http.server
import json
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import datasets
import pytest
import torch
from trl import DatasetMixtureConfig, GRPOConfig, GRPOTrainer, ModelConfig

from trl_ada.adapter.config import ReinforceAdaConfig
from trl_ada.adapter.errors import RunError, UsageError
from trl_ada.adapter.model_names import HUB_CHECK_SECONDS
from trl_ada.tools import cli
from trl_ada.tools.reproducible import PINNED_ENV
from trl_ada.tools.train import (
    LOG_COLUMNS,
    describe,
    interrupted_message,
    log_header,
    log_line,
    main,
    resolve_resume,
    without_resume,
)
from trl_ada.tools.train_args import TrainScriptArguments, check_precision, parse_args
from trl_ada.tools.train_data import TOY_SPLIT_SIZES, load_data, resolve_model

REPO = Path(__file__).resolve().parent.parent
RECIPES_DIR = REPO / "recipes"
TOY_RECIPE = RECIPES_DIR / "toy-cpu.yaml"
HAS_BF16_GPU = torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_args(tmp_path, *extra):
    return ["--use_cpu", "true", "--bf16", "false", "--output_dir", str(tmp_path / "out"), *extra]


def with_model(tmp_path, name: str) -> list[str]:
    """Arguments where only the model is left to check: a reward and a small local dataset (every problem found
    before the model loads is reported together, so the others must be fine for a message to stand alone)."""
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    return cpu_args(tmp_path, "--reward_funcs", "toy", "--dataset_name", str(data), "--model_name_or_path", name)


def run_error(capsys, argv, code: int = cli.EXIT_USAGE) -> str:
    """Run main(argv), expect exit code `code` (a usage error unless said) and return the message (no traceback)."""
    assert main(argv) == code
    err = capsys.readouterr().err
    message = err.strip().splitlines()[-1]  # after any progress bars (datasets writes them to stderr)
    assert message.startswith("trl-ada train: error: ") and "Traceback" not in err
    return message


def write_rows(path: Path, rows: list[dict]) -> Path:
    table = datasets.Dataset.from_list(rows)
    writers = {".json": table.to_json, ".jsonl": table.to_json, ".parquet": table.to_parquet, ".csv": table.to_csv}
    writers[path.suffix](str(path), **({"index": False} if path.suffix == ".csv" else {}))
    return path


# Word answers: CSV would read digits back as integers.
ROWS = [{"prompt": "1+1", "answer": "two"}, {"prompt": "2+3", "answer": "five"}, {"prompt": "7-4", "answer": "three"}]


# -------------------------------------------------------------------------------------------------------------------
# Help and parsing
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["train.main", "cli.main"])
def test_help_lists_the_builtins_and_every_config_field(entry, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"]) if entry == "train.main" else cli.main(["train", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trl-ada train")
    for text in ("builtin:toy", "builtin:toy-cold", "--config", "--sampling_strategy", "--reward_funcs", "--use_peft"):
        assert text in out


def test_flags_override_the_yaml(tmp_path):
    script_args, config, model_args, _ = parse_args(
        ["--config", str(TOY_RECIPE), "--max_steps", "7", "--sampling_strategy", "positive", "--lora_r", "4"]
    )
    assert (config.max_steps, config.sampling_strategy, model_args.lora_r) == (7, "positive", 4)
    assert config.samples_per_round == 8 and script_args.reward_funcs == ["toy"]  # the rest still from the YAML


def test_log_line_lines_up_with_the_header():
    logs = {
        "reward": 0.5,
        "ada/completion_tokens": 1234.0,
        "ada/rounds": 2.0,
        "ada/samples_per_prompt": 12.5,
        "ada/frac_resolved": 0.75,
        "ada/frac_zero_std_first_round": 0.25,
    }  # frac_reward_zero_std missing: shown as "-"
    header, line = log_header(), log_line(3, logs)
    assert len(header) == len(line)
    assert header.split() == ["step"] + [name for _, name, _ in LOG_COLUMNS]
    assert line.split() == ["3", "0.500", "1234", "2", "12.50", "0.75", "0.25", "-"]


def train_help(capsys) -> list[str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out.splitlines()


def field_names(dtype) -> set[str]:
    return {item.name for item in dataclasses.fields(dtype) if item.init}


def test_help_lists_the_reinforce_ada_flags_first_under_their_own_heading(capsys):
    lines = train_help(capsys)
    lines = lines[lines.index("options:") :]  # after the description, whose examples name flags too
    listed = [match.group(1) for line in lines if (match := re.match(r"^  (--\w+)", line))]
    # Ada's flags: the fields ReinforceAdaConfig adds to GRPOConfig, and the one whose default it changes.
    grpo = {item.name: item.default for item in dataclasses.fields(GRPOConfig)}
    ada = {item.name for item in dataclasses.fields(ReinforceAdaConfig) if item.name not in grpo}
    ada |= {
        item.name for item in dataclasses.fields(ReinforceAdaConfig) if grpo.get(item.name) not in (None, item.default)
    }
    assert "scale_rewards" in ada and len(ada) > 20
    assert listed[0] == "--config"  # after -h, --help
    assert {flag[2:] for flag in listed[1 : 1 + len(ada)]} == ada  # right after --config, all together
    heading = next(i for i, line in enumerate(lines) if line.startswith("Reinforce-Ada sampling"))
    first_ada = next(i for i, line in enumerate(lines) if re.match(rf"^  {listed[1]}\b", line))
    assert heading < first_ada < 60 and not any(line.startswith("  --") for line in lines[heading:first_ada])
    # Regrouping lost no flag: every field of the four dataclasses is listed exactly once.
    everything = set().union(*map(field_names, (TrainScriptArguments, ReinforceAdaConfig, ModelConfig,
                                                 DatasetMixtureConfig)))  # fmt: skip
    assert everything <= {flag[2:] for flag in listed} and len(listed) == len(set(listed))
    assert train_help(capsys)[:2] == [
        "usage: trl-ada train [--config RECIPE] [--FIELD VALUE ...]  (`trl-ada train --help` lists every field)",
        "",
    ]  # one line, not 239


@pytest.mark.parametrize("entry", ["train.main", "cli.main"])
def test_a_usage_error_prints_one_usage_line_and_the_error(entry, capsys):
    argv = ["--config", str(TOY_RECIPE), "--sampling_strategy", "nope"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv) if entry == "train.main" else cli.main(["train", *argv])
    assert exit_info.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err  # was 239 lines of usage before the error
    assert err[0].startswith("usage: trl-ada train [--config RECIPE] [--FIELD VALUE ...]")
    assert (
        err[1].startswith("trl-ada train: error: argument --sampling_strategy") and "invalid choice: 'nope'" in err[1]
    )


# -------------------------------------------------------------------------------------------------------------------
# Hardware checks (the hardware is stubbed, so every branch runs on any machine)
# -------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def hardware(monkeypatch):
    import transformers.utils

    def set_hardware(cuda: bool, bf16: bool):
        monkeypatch.setattr(transformers.utils, "is_torch_cuda_available", lambda: cuda)
        monkeypatch.setattr(transformers.utils, "is_torch_bf16_gpu_available", lambda: bf16)
        monkeypatch.setattr(transformers.utils, "is_torch_xla_available", lambda: False)

    return set_hardware


def test_default_bf16_without_a_gpu_is_refused_with_the_fix(hardware):
    hardware(cuda=False, bf16=False)
    with pytest.raises(UsageError, match=r"no bf16-capable GPU.*--use_cpu true --bf16 false"):
        check_precision(bf16=None, fp16=False, use_cpu=False)  # None: GRPOConfig's default, which means bf16
    check_precision(bf16=False, fp16=False, use_cpu=False)  # fp32: fine anywhere
    check_precision(bf16=True, fp16=False, use_cpu=True)  # asked for CPU bf16 on purpose: transformers allows it
    with pytest.raises(UsageError, match="fp16 mixed precision needs a CUDA GPU"):
        check_precision(bf16=False, fp16=True, use_cpu=False)


def test_bf16_on_a_gpu_without_bf16_suggests_fp16(hardware):
    hardware(cuda=True, bf16=False)
    with pytest.raises(UsageError, match=r"This GPU has no bf16: pass `--bf16 false`"):
        check_precision(bf16=True, fp16=False, use_cpu=False)
    check_precision(bf16=False, fp16=True, use_cpu=False)
    hardware(cuda=True, bf16=True)
    check_precision(bf16=None, fp16=False, use_cpu=False)


@pytest.mark.skipif(HAS_BF16_GPU, reason="checks the message on a machine without a bf16 GPU")
def test_gpu_recipe_on_this_machine_says_how_to_run_on_cpu(capsys):
    err = run_error(capsys, ["--config", str(RECIPES_DIR / "qwen2.5-math-1.5b" / "hard-balanced.yaml")])
    assert "--use_cpu true --bf16 false" in err


# -------------------------------------------------------------------------------------------------------------------
# Bad input: one clear message each, before any model is loaded
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(bool(__import__("importlib").util.find_spec("vllm")), reason="vLLM is installed")
def test_use_vllm_without_vllm(tmp_path, capsys):
    err = run_error(capsys, cpu_args(tmp_path, "--use_vllm", "true", "--reward_funcs", "toy"))
    assert "vLLM is not installed" in err and "`pip install -e '.[vllm]'` in the trl-ada clone" in err
    assert "--use_vllm false" in err


def test_missing_reward(tmp_path, capsys):
    err = run_error(capsys, cpu_args(tmp_path, "--model_name_or_path", "builtin:toy", "--dataset_name", "builtin:toy"))
    assert "No reward: pass --reward_funcs" in err


def test_unknown_reward(tmp_path, capsys):
    err = run_error(capsys, cpu_args(tmp_path, "--reward_funcs", "no_such_reward"))
    assert "Unknown reward function 'no_such_reward'" in err


def test_missing_model_and_unknown_builtin(tmp_path, capsys):
    assert "No model: pass --model_name_or_path" in run_error(capsys, cpu_args(tmp_path, "--reward_funcs", "toy"))
    err = run_error(capsys, cpu_args(tmp_path, "--reward_funcs", "toy", "--model_name_or_path", "builtin:gpt"))
    assert "Unknown built-in model 'builtin:gpt'" in err and "builtin:toy-cold" in err


@pytest.fixture
def model_ok(tmp_path, toy_cold_dir):
    """Arguments that get past the reward and model checks (a local model folder), so data errors show."""
    return cpu_args(tmp_path, "--reward_funcs", "toy", "--model_name_or_path", str(toy_cold_dir))


def data_error(capsys, argv) -> str:
    """The message of a run stopped by its data (a missing split or column): exit code 1, as docs/cli.md says."""
    return run_error(capsys, argv, code=cli.EXIT_FAILURE)


def test_dataset_without_prompt_column_lists_the_columns(tmp_path, capsys, model_ok):
    data = write_rows(tmp_path / "q.jsonl", [{"question": "1+1", "answer": "2"}])
    err = data_error(capsys, [*model_ok, "--dataset_name", str(data)])
    assert "no 'prompt' column; its columns are ['question', 'answer']" in err
    assert "trl-ada prepare" in err


def test_dataset_errors(tmp_path, capsys, model_ok):
    assert "No dataset: pass --dataset_name" in run_error(capsys, model_ok)
    missing = str(tmp_path / "nope.jsonl")
    assert f"--dataset_name {missing}: no such file" in run_error(capsys, [*model_ok, "--dataset_name", missing])
    text = tmp_path / "data.txt"
    text.write_text("1+1\n")
    assert "unknown extension" in run_error(capsys, [*model_ok, "--dataset_name", str(text)])
    err = run_error(capsys, [*model_ok, "--dataset_name", "builtin:gsm8k"])
    assert "Unknown built-in dataset 'builtin:gsm8k': use 'builtin:toy'" in err


def test_eval_without_an_eval_split(tmp_path, capsys, model_ok):
    data = write_rows(tmp_path / "train.jsonl", ROWS)
    err = data_error(capsys, [*model_ok, "--dataset_name", str(data), "--eval_strategy", "steps"])
    assert "eval_strategy='steps' needs an evaluation split" in err and "it has ['train']" in err
    assert "--eval_strategy no" in err
    err = data_error(capsys, [*model_ok, "--dataset_name", str(data), "--eval_on_start", "true"])
    assert "eval_on_start=True needs an evaluation split" in err
    err = data_error(capsys, [*model_ok, "--dataset_name", str(data), "--dataset_train_split", "training"])
    assert "no 'training' split; it has ['train']" in err


def test_every_data_problem_is_reported_in_one_run(tmp_path, capsys, model_ok):
    # No eval split, no prompt column and no `answer` column for the toy reward: three problems, one run, one line.
    data = write_rows(tmp_path / "q.jsonl", [{"question": "1+1", "solution": "2"}])
    err = data_error(capsys, [*model_ok, "--dataset_name", str(data), "--eval_strategy", "steps"])
    assert err.startswith(
        "trl-ada train: error: 3 problems with the data: (1) eval_strategy='steps' needs an evaluation"
    )
    second, third = (
        err.index(" (2) The train split has no 'prompt' column"),
        err.index(" (3) Reward function 'toy_reward'"),
    )
    assert second < third
    assert "its columns are ['question', 'solution']" in err and "needs ['answer']" in err
    # Two: the train split named is not there (its columns cannot be checked), and no eval split either.
    data = write_rows(tmp_path / "train.jsonl", ROWS)
    err = data_error(
        capsys,
        [*model_ok, "--dataset_name", str(data), "--dataset_train_split", "training", "--eval_on_start", "true"],
    )
    assert err.startswith("trl-ada train: error: 2 problems with the data: (1) The dataset has no 'training' split")
    assert " (2) eval_on_start=True needs an evaluation split" in err


def test_a_reward_function_without_kwargs_is_one_line_before_any_model_loads(
    tmp_path, capsys, monkeypatch, toy_cold_dir
):
    (tmp_path / "my_rewards.py").write_text("def exact(completions, answer):\n    return [0.0] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = write_rows(tmp_path / "train.jsonl", ROWS)
    argv = cpu_args(tmp_path, "--reward_funcs", "my_rewards.exact", "--model_name_or_path", str(toy_cold_dir))
    err = run_error(capsys, [*argv, "--dataset_name", str(data)])
    assert "Reward function 'exact' does not accept the keyword argument(s) ['completion_ids', 'log_extra', " in err
    assert "Accept **kwargs: `def exact(completions, **kwargs)`" in err


@pytest.mark.parametrize("entry", ["train.main", "cli.main"])
def test_bare_train_says_what_is_missing_and_points_to_the_toy_recipe(entry, capsys):
    from trl_ada.tools.catalog import resolve_config

    argv = [] if entry == "train.main" else ["train"]
    assert (main if entry == "train.main" else cli.main)(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "trl-ada train: error: Nothing says what to train: no --config recipe, no model (--model_name_or_path), no "
        "dataset (--dataset_name), no reward (--reward_funcs). To try trl-ada, train the built-in toy task on this "
        "CPU: `trl-ada train --config toy-cpu`. Otherwise pass --config with a recipe (`trl-ada recipes` lists "
        "them), or those three (`trl-ada train --help` lists every flag)."
    )
    assert resolve_config("toy-cpu").name == "toy-cpu.yaml"  # the recipe it names exists
    # CPU flags alone say nothing about what to train either; one of the three given goes on to the later checks.
    assert "Nothing says what to train" in run_error(capsys, ["--use_cpu", "true", "--bf16", "false"])
    assert "Nothing says what to train" not in run_error(capsys, ["--use-cpu", "true", "--reward-funcs", "toy"])


def test_unknown_keys_and_flags_name_the_closest_field(tmp_path, capsys):
    recipe = tmp_path / "typo.yaml"
    recipe.write_text(TOY_RECIPE.read_text() + "learning_rat: 0.1\n")
    assert "unknown keys ['learning_rat'] (did you mean 'learning_rate'?)" in run_error(
        capsys, ["--config", str(recipe)]
    )
    recipe.write_text(TOY_RECIPE.read_text() + "samples_per_rond: 4\nno_such_knob: 1\n")
    err = run_error(capsys, ["--config", str(recipe)])
    assert "unknown keys ['samples_per_rond', 'no_such_knob'] (did you mean 'samples_per_round' for " in err
    assert "'no_such_knob'?" not in err  # nothing is close to it: no suggestion
    assert "Unknown arguments ['--max_stpes', '3'] (did you mean '--max_steps'?)" in run_error(
        capsys, ["--config", str(TOY_RECIPE), "--max_stpes", "3"]
    )
    assert "Unknown arguments ['--qqqq', '3']: check" in run_error(
        capsys, ["--config", str(TOY_RECIPE), "--qqqq", "3"]
    )
    assert "no such file" in run_error(capsys, ["--config", str(tmp_path / "missing.yaml")])


def test_config_validation_errors_are_reported_without_traceback(capsys):
    err = run_error(capsys, ["--config", str(TOY_RECIPE), "--samples_per_round", "1", "--max_rounds", "2"])
    assert "smaller than num_generations=4" in err  # ReinforceAdaConfig's own check, passed through


# -------------------------------------------------------------------------------------------------------------------
# Every problem found before the model loads, in one numbered line; recipe values named by file and key
# -------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if a trainer gets as far as loading a model."""

    def reached(self, *args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(GRPOTrainer, "__init__", reached)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        # a ZeroDivisionError inside GRPOConfig before
        (["--num_generations", "0"], "num_generations must be an integer >= 2 (GRPO compares the completions of a "
         "prompt with each other), got 0."),
        # refused by torch's optimizer, after the model loaded
        (["--learning_rate=-1e-4"], "learning_rate must be a number >= 0, got -0.0001."),
        # refused by transformers' generate, after the model loaded
        (["--temperature", "0"], "temperature must be a number > 0 (completions are sampled), got 0.0."),
        (["--max_completion_length", "0"], "max_completion_length must be an integer >= 1 or None, got 0."),
    ],
)  # fmt: skip
def test_values_refused_late_before_are_one_line_before_the_model_loads(capsys, no_model_load, flags, message):
    err = run_error(capsys, ["--config", str(TOY_RECIPE), *flags])
    assert err == f"trl-ada train: error: {message}"


def test_a_negative_number_after_a_flag_is_its_value(capsys, no_model_load):
    _, config, _, _ = parse_args(["--config", str(TOY_RECIPE), "--positive_threshold", "-1e-3", "--seed", "-3"])
    assert (config.positive_threshold, config.seed) == (-0.001, -3)
    _, config, _, _ = parse_args(["--config", str(TOY_RECIPE), "--positive_threshold", "-.5"])
    assert config.positive_threshold == -0.5
    err = run_error(capsys, ["--config", str(TOY_RECIPE), "--learning_rate", "-1e-4"])  # needed `=` before
    assert err == "trl-ada train: error: learning_rate must be a number >= 0, got -0.0001."


def test_every_settings_problem_is_reported_at_once_numbered(capsys, no_model_load):
    argv = ["--config", str(TOY_RECIPE), "--num_generations", "0", "--learning_rate", "-1", "--temperature", "0"]
    assert run_error(capsys, argv) == (
        "trl-ada train: error: 3 problems with the settings: (1) num_generations must be an integer >= 2 (GRPO "
        "compares the completions of a prompt with each other), got 0. (2) learning_rate must be a number >= 0, got "
        "-1.0. (3) temperature must be a number > 0 (completions are sampled), got 0.0."
    )


def recipe_with(tmp_path, **values) -> Path:
    """The toy recipe with some of its `key: value` lines replaced (YAML text: values as written in a file)."""
    text = TOY_RECIPE.read_text()
    for key, value in values.items():
        text, count = re.subn(rf"(?m)^{key}:.*$", f"{key}: {value}", text)
        assert count == 1, key
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


def test_bad_values_in_a_recipe_are_named_by_file_and_key_all_at_once(tmp_path, capsys, no_model_load):
    recipe = recipe_with(tmp_path, learning_rate="abc", use_cpu="maybe", max_steps="2.5", sampling_strategy="nope",
                         temperature="0", samples_per_round="0")  # fmt: skip
    err = run_error(capsys, ["--config", str(recipe)])
    assert err == (
        f"trl-ada train: error: 6 problems with the settings: (1) recipe {recipe}, key use_cpu: 'maybe' is not true "
        f"or false. (2) recipe {recipe}, key learning_rate: 'abc' is not a number. (3) recipe {recipe}, key "
        f"max_steps: 2.5 is not an integer. (4) recipe {recipe}, key sampling_strategy: 'nope' is not one of "
        "['balanced', 'positive', 'uniform', 'estimate']. (5) temperature must be a number > 0 (completions are "
        f"sampled), got 0. (recipe {recipe}, key temperature) (6) samples_per_round must be >= 1, got 0. (recipe "
        f"{recipe}, key samples_per_round)"
    )
    # The same value on the command line is the flag's, not the recipe's.
    err = run_error(capsys, ["--config", str(recipe_with(tmp_path, temperature="1.0")), "--temperature", "0"])
    assert err == "trl-ada train: error: temperature must be a number > 0 (completions are sampled), got 0.0."


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model_name_or_path: builtin:toy\nfoo: [1, 2\n", "is not valid YAML: expected ',' or ']', but got '<stream "
         "end>' at line 3, column 1."),
        ("learning_rate: 1e-4\n  bad indent: 1\n", "is not valid YAML: mapping values are not allowed here at line "
         "2, column 13."),
        ("- a\n- b\n", "holds a YAML list, not a mapping of `field: value` lines."),
    ],
)  # fmt: skip
def test_a_recipe_that_is_not_a_yaml_mapping_is_one_line(tmp_path, capsys, text, message):
    recipe = tmp_path / "broken.yaml"
    recipe.write_text(text)
    assert run_error(capsys, ["--config", str(recipe)]) == f"trl-ada train: error: --config {recipe} {message}"


@pytest.mark.skipif(bool(__import__("importlib").util.find_spec("vllm")), reason="vLLM is installed")
def test_a_gpu_recipe_on_a_cpu_names_every_problem_in_its_first_run(tmp_path, capsys, hub, hardware, monkeypatch):
    """The report's four attempts (bf16, then vLLM, then the model, then the data) are one run now."""
    hardware(cuda=False, bf16=False)
    monkeypatch.chdir(tmp_path)  # no data/ folder here
    recipe = RECIPES_DIR / "lora-1gpu.yaml"
    err = run_error(capsys, ["--config", "lora-1gpu"])
    assert err == (
        "trl-ada train: error: 4 problems: (1) bf16 mixed precision is on (GRPOConfig's default, or the recipe asks "
        "for it) but no bf16-capable GPU is visible. On a GPU machine, check that `python -c 'import torch; "
        "print(torch.cuda.is_available())'` prints True (CUDA_VISIBLE_DEVICES, driver, a CUDA build of torch). To "
        "train on the CPU on purpose, pass `--use_cpu true --bf16 false` (the toy-cpu recipe does). (recipe "
        f"{recipe}, key bf16) (2) use_vllm is true (vllm_mode='colocate') but vLLM is not installed. Install it with "
        "`pip install -e '.[vllm]'` in the trl-ada clone (it needs a CUDA GPU), or pass `--use_vllm false` to "
        "generate with transformers. (3) --model_name_or_path Qwen/Qwen2.5-Math-1.5B: not a local folder, and not "
        f"in the Hugging Face cache ({tmp_path / 'hub-cache'}), and HF_HUB_OFFLINE is set, so it cannot be "
        "downloaded: download it where there is network (`hf download Qwen/Qwen2.5-Math-1.5B`) and copy the cache "
        "here (or point HF_HOME at it), or pass a local folder. (4) --dataset_name "
        "data/qwen2.5-math-1.5b-hard/train.jsonl: no such file."
    )


def test_vllm_without_a_gpu_is_refused_in_either_mode(hardware, monkeypatch):
    import importlib.util

    from trl_ada.tools.train_args import vllm_problem

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else find_spec(name, *a)
    )
    hardware(cuda=False, bf16=False)
    assert vllm_problem(True, "colocate") == (
        "use_vllm is true but no CUDA GPU is visible: vllm_mode='colocate' runs vLLM in this process. Run on a GPU, "
        "or pass `--use_vllm false` to generate with transformers."
    )
    assert "vllm_mode='server' sends the weights to the server over NCCL" in vllm_problem(True, "server")
    assert vllm_problem(False, "colocate") is None
    hardware(cuda=True, bf16=True)
    assert vllm_problem(True, "colocate") is None


def test_the_async_recipe_says_what_runs_it_and_suggests_no_wrong_field(capsys):
    recipe = RECIPES_DIR / "async-balanced.yaml"
    assert "async-balanced" in __import__("trl_ada.tools.catalog", fromlist=["names"]).names("recipes")
    err = run_error(capsys, ["--config", "async-balanced"])
    assert err == (
        f"trl-ada train: error: {recipe} is a recipe for TRL's asynchronous trainer (AsyncGRPOTrainer with "
        "trl-ada's rollout worker: AsyncGRPOConfig fields and an `ada:` section), not for `trl-ada train`. Run it "
        "with `python -m trl_ada.gpu_async_check --config async-balanced` (docs/async.md: a Hopper GPU and a vLLM "
        "server), or train with a `trl-ada train` recipe (`trl-ada recipes` lists them)."
    )
    from trl_ada.tools.gpu_async_check import parse_args as async_check_args

    assert async_check_args(["--config", "async-balanced"]).config == "async-balanced"  # the command it names parses


def test_an_asynchronous_trainer_field_is_not_offered_a_distant_one(tmp_path, capsys):
    recipe = tmp_path / "async-keys.yaml"
    recipe.write_text(TOY_RECIPE.read_text() + "max_staleness: 4\nmax_inflight_tasks: 256\nweight_sync_steps: 1\n")
    err = run_error(capsys, ["--config", str(recipe)])
    assert err == (
        f"trl-ada train: error: {recipe} has unknown keys ['max_staleness', 'max_inflight_tasks', "
        "'weight_sync_steps']: check the spelling (`trl-ada train --help`)."
    )  # were offered max_steps, max_in_flight and ref_model_sync_steps


# -------------------------------------------------------------------------------------------------------------------
# Hub datasets: offline or unreachable, one line at once unless cached
# -------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", datasets.config.HF_HUB_OFFLINE)
    return tmp_path / "datasets-cache"


def test_a_hub_dataset_offline_and_not_cached_fails_at_once(tmp_path, capsys, hub, datasets_cache, toy_cold_dir):
    argv = cpu_args(tmp_path, "--reward_funcs", "toy", "--model_name_or_path", str(toy_cold_dir))
    start = time.monotonic()
    err = run_failure(capsys, [*argv, "--dataset_name", "nobody/nothing"])
    assert time.monotonic() - start < 5
    assert err == (
        "trl-ada train: error: --dataset_name nobody/nothing: not a local file or folder, and not in the datasets "
        f"cache ({datasets_cache}), and HF_HUB_OFFLINE is set, so it cannot be downloaded: load it once where there "
        "is network and copy the cache here (or point HF_HOME at it), or pass a local file or folder (`trl-ada "
        "prepare` writes one)."
    )


def test_a_hub_dataset_with_the_hub_unreachable_fails_in_seconds(tmp_path, capsys, hub, datasets_cache, toy_cold_dir):
    import datasets

    hub.HF_HUB_OFFLINE, hub.ENDPOINT = False, f"http://127.0.0.1:{free_port()}"  # nothing listens there
    datasets.config.HF_HUB_OFFLINE = False
    argv = cpu_args(tmp_path, "--reward_funcs", "toy", "--model_name_or_path", str(toy_cold_dir))
    start = time.monotonic()
    err = run_failure(capsys, [*argv, "--dataset_name", "nobody/nothing"])
    assert time.monotonic() - start < HUB_CHECK_SECONDS  # datasets' own retries took 30 s
    assert err.startswith(
        f"trl-ada train: error: --dataset_name nobody/nothing: not a local file or folder, and not in the datasets "
        f"cache ({datasets_cache}), and the Hub ({hub.ENDPOINT}) cannot be reached ("
    )
    assert err.endswith("check the network (and HF_ENDPOINT or a proxy), or load it once where there is network and "
                        "copy the cache here (or point HF_HOME at it), or pass a local file or folder (`trl-ada "
                        "prepare` writes one).")  # fmt: skip


def test_a_cached_hub_dataset_is_loaded_offline_when_the_hub_is_unreachable(capsys, hub, datasets_cache):
    import datasets

    from trl_ada.adapter.model_names import check_hub_dataset

    hub.HF_HUB_OFFLINE, hub.ENDPOINT = False, f"http://127.0.0.1:{free_port()}"
    datasets.config.HF_HUB_OFFLINE = False
    # datasets' layout of a dataset it has prepared: <namespace>___<name in snake case>/<config>/<version>/<hash>
    (datasets_cache / "somebody___my_set" / "default" / "0.0.0" / "abc123").mkdir(parents=True)
    check_hub_dataset("somebody/MySet")
    assert hub.HF_HUB_OFFLINE is True and datasets.config.HF_HUB_OFFLINE is True
    assert f"The Hub ({hub.ENDPOINT}) cannot be reached" in capsys.readouterr().err


def test_every_problem_before_loading_includes_the_data(tmp_path, capsys, no_model_load, toy_cold_dir):
    """Settings, model name and a local dataset's columns, in one run."""
    data = write_rows(tmp_path / "q.jsonl", [{"question": "1+1", "answer": "2"}])
    argv = cpu_args(tmp_path, "--reward_funcs", "toy", "--model_name_or_path", "./no/model", "--dataset_name",
                    str(data), "--temperature", "0")  # fmt: skip
    assert run_error(capsys, argv) == (
        "trl-ada train: error: 3 problems: (1) temperature must be a number > 0 (completions are sampled), got 0.0. "
        "(2) --model_name_or_path ./no/model: no such folder. (3) The train split has no 'prompt' column; its columns "
        "are ['question', 'answer']. Rename the question column to 'prompt' (a string or a list of chat messages), or "
        "build the set with `trl-ada prepare`."
    )


# -------------------------------------------------------------------------------------------------------------------
# A reward function that fails in training; accelerate's one-process CPU launcher
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_reward_returning_the_wrong_number_of_values_is_one_line_exit_1(tmp_path, toy_cold_dir):
    (tmp_path / "short_reward.py").write_text("def short(completions, **kwargs):\n    return [1.0]\n")
    command = [sys.executable, "-m", "trl_ada.tools.cli", "train", *short_run(toy_cold_dir, tmp_path / "out", 1),
               "--reward_funcs", "short_reward.short"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{REPO}:{tmp_path}"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == cli.EXIT_FAILURE
    assert "Traceback" not in result.stderr and "All reward functions returned None" not in result.stderr
    rows = 4 * 8  # 16 rows of groups of 4: 4 prompts, a first round of 8 samples each
    assert result.stderr.strip().splitlines()[-1] == (
        "trl-ada train: error: Reward function 'short' failed on the whole batch (no single row fails on its own): "
        f"returned 1 rewards for {rows} completions. Return exactly one reward per completion (None for one that "
        "cannot be scored). (training step 1). Fix or guard the reward function; return None for a completion it "
        "cannot score."
    )


def test_accelerate_s_single_process_cpu_launch_is_recognised():
    from trl_ada.tools.train import single_cpu_launch_message

    # What `accelerate launch --cpu --num_processes 2` leaves in its one process's environment (accelerate 1.15)
    launched = {"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert single_cpu_launch_message(launched) == (
        "trl-ada train: warning: `accelerate launch --cpu` started one process: without MPI (--mpirun_hostfile) its "
        "CPU launcher runs a single process whatever --num_processes says, so this run trains on 1 process. For N CPU "
        "processes over gloo: `accelerate launch --multi_gpu --num_processes N -m trl_ada.train ... --use_cpu true "
        "--bf16 false`."
    )
    assert single_cpu_launch_message({**launched, "WORLD_SIZE": "2", "RANK": "0"}) is None  # torch.distributed.run
    assert single_cpu_launch_message({**launched, "PMI_SIZE": "2"}) is None  # MPI
    assert single_cpu_launch_message({"ACCELERATE_USE_CPU": "True"}) is None  # --cpu with one process
    assert single_cpu_launch_message({}) is None


@pytest.mark.slow
def test_accelerate_launch_cpu_with_two_processes_warns_that_it_runs_one(tmp_path, toy_cold_dir):
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        "-m", "trl_ada.train", *short_run(toy_cold_dir, tmp_path / "out", 1), "--save_strategy", "no",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Reinforce-Ada (balanced) on 1 process(es)" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("trl-ada train: warning: ")]
    assert len(warnings) == 1 and "so this run trains on 1 process" in warnings[0]


# -------------------------------------------------------------------------------------------------------------------
# Model names: a local folder that is not there, a Hub id that cannot be had (no network in any of these)
# -------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """huggingface_hub's settings, pointed at an empty cache under tmp_path; offline unless a test says otherwise.
    Everything set here is restored after the test (resolve_model may switch to offline itself)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "ENDPOINT", constants.ENDPOINT)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return constants


def cache_model(cache: str, repo_id: str) -> None:
    """Lay out a cached model as huggingface_hub does: refs/main names a snapshot holding the files."""
    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    (repo / "snapshots" / "0123abc").mkdir(parents=True)
    (repo / "snapshots" / "0123abc" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")


def run_failure(capsys, argv) -> str:
    """Run main(argv), expect the runtime-failure exit code and return its one-line message."""
    assert main(argv) == cli.EXIT_FAILURE
    err = capsys.readouterr().err
    message = err.strip().splitlines()[-1]
    assert message.startswith("trl-ada train: error: ") and "Traceback" not in err
    return message


@pytest.mark.parametrize("name", ["./no/such/model", "/no/such/model", "~/no-such-model-here", "runs/a/b", "a\\b"])
def test_a_missing_local_model_folder_is_one_line(tmp_path, capsys, name):
    err = run_error(capsys, with_model(tmp_path, name))
    assert err == f"trl-ada train: error: --model_name_or_path {name}: no such folder."  # no "Repo id must be..."


def test_a_mistyped_folder_next_to_real_ones_is_named(tmp_path, capsys, monkeypatch):
    (tmp_path / "runs" / "toy-cpu").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    # "runs/toy-cpx" could be a Hub id, but runs/ is a folder here: a path, with the close match named.
    err = run_error(capsys, with_model(tmp_path, "runs/toy-cpx"))
    assert err.endswith("--model_name_or_path runs/toy-cpx: no such folder (did you mean runs/toy-cpu?).")
    err = run_error(capsys, with_model(tmp_path, "runs"))
    assert "--model_name_or_path runs: a folder, but not a model: it has no config.json" in err


def test_a_hub_name_offline_and_not_cached_fails_at_once(tmp_path, capsys, hub):
    start = time.monotonic()
    err = run_failure(capsys, with_model(tmp_path, "nobody/nothing"))
    assert time.monotonic() - start < 5
    assert err == (
        "trl-ada train: error: --model_name_or_path nobody/nothing: not a local folder, and not in the Hugging Face "
        f"cache ({tmp_path / 'hub-cache'}), and HF_HUB_OFFLINE is set, so it cannot be downloaded: download it where "
        "there is network (`hf download nobody/nothing`) and copy the cache here (or point HF_HOME at it), or pass a "
        "local folder."
    )


def test_a_hub_name_with_the_hub_unreachable_fails_in_seconds(tmp_path, capsys, hub):
    hub.HF_HUB_OFFLINE, hub.ENDPOINT = False, f"http://127.0.0.1:{free_port()}"  # nothing listens there
    start = time.monotonic()
    err = run_failure(capsys, with_model(tmp_path, "nobody/nothing"))
    assert time.monotonic() - start < HUB_CHECK_SECONDS  # huggingface_hub's own retries took about 25 s
    assert (
        f"not in the Hugging Face cache ({tmp_path / 'hub-cache'}), and the Hub ({hub.ENDPOINT}) cannot be reached ("
        in err
    )
    assert "check the network (and HF_ENDPOINT or a proxy)" in err


def test_a_cached_hub_model_is_used_offline_when_the_hub_is_unreachable(capsys, hub):
    hub.HF_HUB_OFFLINE, hub.ENDPOINT = False, f"http://127.0.0.1:{free_port()}"
    cache_model(hub.HF_HUB_CACHE, "somebody/cached")
    assert resolve_model("somebody/cached") == "somebody/cached"
    assert hub.HF_HUB_OFFLINE is True and os.environ["HF_HUB_OFFLINE"] == "1"  # loads from the cache, no retries
    assert f"The Hub ({hub.ENDPOINT}) cannot be reached" in capsys.readouterr().err
    hub.HF_HUB_OFFLINE = True
    assert resolve_model("somebody/cached") == "somebody/cached"  # and offline, cached is enough


def test_a_hub_that_answers_is_left_to_the_download(hub):
    """Any HTTP answer, even 404, means the Hub is reachable: the name goes through for transformers to fetch."""
    heads = []

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            heads.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hub.HF_HUB_OFFLINE, hub.ENDPOINT = False, f"http://127.0.0.1:{server.server_address[1]}"
        assert resolve_model("somebody/uncached") == "somebody/uncached"
    finally:
        server.shutdown()
    assert len(heads) == 1 and hub.HF_HUB_OFFLINE is False


def test_a_model_that_does_not_load_is_one_line(tmp_path, capsys, toy_cold_dir):
    weightless = tmp_path / "weightless"
    weightless.mkdir()
    (weightless / "config.json").write_text((toy_cold_dir / "config.json").read_text())
    argv = cpu_args(tmp_path, "--config", str(TOY_RECIPE), "--model_name_or_path", str(weightless))
    err = run_failure(capsys, argv)
    assert err.startswith(f"trl-ada train: error: cannot load --model_name_or_path {weightless}: ")
    assert "model.safetensors" in err  # transformers' own words for what is missing


# -------------------------------------------------------------------------------------------------------------------
# Data and model resolution
# -------------------------------------------------------------------------------------------------------------------


def script(dataset_name: str):
    script_args, _, _, dataset_args = parse_args(["--dataset_name", dataset_name, "--use_cpu", "true"])
    return script_args, dataset_args


@pytest.mark.parametrize(
    "error",
    [
        ConnectionError("Couldn't reach 'nobody/nothing' on the Hub (ConnectTimeout)"),
        datasets.exceptions.DatasetNotFoundError(
            "Dataset 'nobody/nothing' doesn't exist on the Hub or cannot be accessed."
        ),
    ],
)
def test_a_hub_dataset_that_does_not_load_is_one_run_error(monkeypatch, error):
    """Past the name check (the Hub answered), datasets' own refusal is the message, without its traceback."""

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    with pytest.raises(RunError) as info:
        load_data(*script("nobody/nothing"), local=False)
    assert str(info.value) == f"cannot load --dataset_name nobody/nothing: {error}"


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet", ".csv"])
def test_local_files_load_by_extension(tmp_path, suffix):
    path = write_rows(tmp_path / f"data{suffix}", ROWS)
    data = load_data(*script(str(path)))
    assert list(data) == ["train"]
    assert data["train"].to_list() == ROWS


def test_saved_dataset_folder_loads(tmp_path):
    datasets.DatasetDict(
        train=datasets.Dataset.from_list(ROWS[:2]), test=datasets.Dataset.from_list(ROWS[2:])
    ).save_to_disk(str(tmp_path / "dict"))
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "single"))
    data = load_data(*script(str(tmp_path / "dict")))
    assert data["train"].to_list() == ROWS[:2] and data["test"].to_list() == ROWS[2:]
    assert load_data(*script(str(tmp_path / "single")))["train"].to_list() == ROWS


def test_builtin_toy_dataset():
    data = load_data(*script("builtin:toy"))
    assert {name: len(split) for name, split in data.items()} == TOY_SPLIT_SIZES
    assert {"prompt", "answer"} <= set(data["train"].column_names)
    train_prompts = {row[0]["content"] for row in data["train"]["prompt"]}
    assert not train_prompts & {row[0]["content"] for row in data["test"]["prompt"]}  # held-out problems


def test_builtin_models_resolve_to_a_cached_folder(tmp_path, monkeypatch, hub):
    monkeypatch.setenv("TRL_ADA_CACHE", str(tmp_path))
    folder = Path(resolve_model("builtin:toy-cold"))
    assert folder.parent == tmp_path and (folder / "config.json").is_file()
    assert json.loads((folder / "config.json").read_text())["model_type"] == "qwen2"
    assert resolve_model(str(folder)) == str(folder)  # a local model folder: unchanged
    cache_model(hub.HF_HUB_CACHE, "Qwen/Qwen2.5-Math-1.5B")
    assert resolve_model("Qwen/Qwen2.5-Math-1.5B") == "Qwen/Qwen2.5-Math-1.5B"  # a cached Hub id: unchanged


# -------------------------------------------------------------------------------------------------------------------
# Resume and Ctrl-C
# -------------------------------------------------------------------------------------------------------------------


def fake_checkpoint(folder: Path, step: int, complete: bool = True) -> Path:
    """A checkpoint-N folder; an incomplete one (a save cut short) has no trainer_state.json, written last."""
    checkpoint = folder / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    if complete:
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return checkpoint


def test_resume_true_takes_the_latest_complete_checkpoint(tmp_path):
    out = tmp_path / "out"
    fake_checkpoint(out, 2)
    latest = fake_checkpoint(out, 10)  # by number: 10 after 2, though "checkpoint-10" < "checkpoint-2" as text
    fake_checkpoint(out, 12, complete=False)
    (out / "checkpoint-final").mkdir()
    for value in ("true", "True", " TRUE ", True):
        assert resolve_resume(value, str(out)) == str(latest)
    for value in (None, "", "false", False):
        assert resolve_resume(value, str(out)) is None
    assert resolve_resume(str(out / "checkpoint-2"), str(out)) == str(out / "checkpoint-2")  # a path: as given


def test_resume_errors_name_the_cause(tmp_path, capsys):
    out = tmp_path / "out"
    err = run_error(capsys, ["--config", str(TOY_RECIPE), "--output_dir", str(out), "--resume_from_checkpoint"])
    assert err == (
        f"trl-ada train: error: --resume_from_checkpoint true: no checkpoint to resume from in --output_dir {out} "
        "(no checkpoint-N folder holding trainer_state.json). Pass the --output_dir of the run to resume, or a "
        "checkpoint folder."
    )
    fake_checkpoint(out, 3)
    fake_checkpoint(out, 4, complete=False)
    with pytest.raises(UsageError, match=r"checkpoint-5: no such folder \(did you mean .*checkpoint-4 or .*-3\?\)"):
        resolve_resume(str(out / "checkpoint-5"), str(out))
    with pytest.raises(
        UsageError, match=rf"{out}: not a checkpoint, it has no trainer_state.json; it holds checkpoint-3"
    ):
        resolve_resume(str(out), str(out))
    with pytest.raises(UsageError, match=r"checkpoint-4: not a checkpoint, it has no trainer_state.json \(a save cut"):
        resolve_resume(str(out / "checkpoint-4"), str(out))


def test_without_resume_drops_every_spelling_of_the_flag():
    tail = ["--max_steps", "5"]
    for flag in (
        ["--resume_from_checkpoint", "true"],
        ["--resume_from_checkpoint"],
        ["--resume-from-checkpoint", "out/checkpoint-2"],
        ["--resume_from_checkpoint=out/checkpoint-2"],
    ):
        assert without_resume(["--config", "toy-cpu", *flag, *tail]) == ["--config", "toy-cpu", *tail]
        assert without_resume(["--config", "toy-cpu", *tail, *flag]) == ["--config", "toy-cpu", *tail]


def test_interrupted_before_any_checkpoint(tmp_path):
    message = interrupted_message(str(tmp_path / "out"), ["--config", "toy-cpu", "--output_dir", "my run"])
    assert message == (
        f"trl-ada train: interrupted before any checkpoint was saved in {tmp_path / 'out'}: nothing to resume. Start "
        "again with: trl-ada train --config toy-cpu --output_dir 'my run'"
    )


def short_run(model_dir, out: Path, max_steps: int, *extra: str) -> list[str]:
    """A toy-cpu run shrunk to seconds: 4 prompts a step, no evaluation, a checkpoint every step."""
    return [
        "--config", str(TOY_RECIPE), "--model_name_or_path", str(model_dir), "--output_dir", str(out),
        "--per_device_train_batch_size", "16", "--eval_strategy", "no", "--eval_on_start", "false",
        "--save_steps", "1", "--max_steps", str(max_steps), *extra,
    ]  # fmt: skip


def printed_steps(stdout: str) -> list[int]:
    """The steps of the compact per-step lines a run printed."""
    return [int(line.split()[0]) for line in stdout.splitlines() if re.match(r"^ *\d+ +\d+\.\d{3} ", line)]


def global_step(checkpoint: Path) -> int:
    return json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]


@pytest.mark.slow
def test_resume_true_and_the_bare_flag_go_on_from_the_latest_checkpoint(tmp_path, toy_cold_dir, capsys):
    out = tmp_path / "out"
    assert main(short_run(toy_cold_dir, out, 3)) == 0
    assert printed_steps(capsys.readouterr().out) == [1, 2, 3]
    first = {step: json.loads((out / f"checkpoint-{step}" / "trainer_state.json").read_text()) for step in (1, 2)}
    (out / "checkpoint-3" / "trainer_state.json").unlink()  # as a save cut short leaves it: not resumable

    # `true`: from checkpoint-2 (transformers' get_last_checkpoint would pick the broken checkpoint-3).
    assert main(short_run(toy_cold_dir, out, 4, "--resume_from_checkpoint", "true")) == 0
    stdout = capsys.readouterr().out
    assert f"Resuming from {out / 'checkpoint-2'} (step 2)" in stdout
    assert printed_steps(stdout) == [3, 4]  # only the steps after the checkpoint were trained
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert state["log_history"][:2] == first[2]["log_history"]  # steps 1-2 carried over from checkpoint-2

    # The bare flag, last on the line: from checkpoint-4.
    assert main(short_run(toy_cold_dir, out, 5, "--resume_from_checkpoint")) == 0
    stdout = capsys.readouterr().out
    assert f"Resuming from {out / 'checkpoint-4'} (step 4)" in stdout and printed_steps(stdout) == [5]
    assert global_step(out / "checkpoint-5") == 5 and global_step(out) == 5  # and the final trainer_state.json


def _sigint_by_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def train_process(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    """``trl-ada train`` as a terminal would start it. A suite started in the background (`make test &` in a shell
    without job control) runs with SIGINT ignored, which a child inherits, and a Python started that way never turns
    Ctrl-C into KeyboardInterrupt: reset it in the child."""
    command = [sys.executable, "-m", "trl_ada.tools.cli", "train", *argv]
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_by_default,
    )


@pytest.mark.slow
def test_ctrl_c_names_the_last_checkpoint_and_the_command_that_resumes_it(tmp_path, toy_cold_dir):
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    argv = short_run(toy_cold_dir, out, 1000)
    process = train_process(argv, env)
    try:
        deadline = time.monotonic() + 240
        while not (out / "checkpoint-1" / "trainer_state.json").exists():
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == cli.EXIT_INTERRUPTED
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    message = stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        r"trl-ada train: interrupted; last checkpoint: (\S+) \(step (\d+)\)\. Resume with: (.*)", message
    )
    assert match, message
    # The latest checkpoint whose save finished, found here independently of the code under test.
    complete = [path for path in out.glob("checkpoint-*") if (path / "trainer_state.json").exists()]
    latest = max(complete, key=lambda path: int(path.name.split("-")[1]))
    assert match.group(1) == str(latest) and int(match.group(2)) == global_step(latest)
    command = shlex.split(match.group(3))
    assert command == ["trl-ada", "train", *argv, "--resume_from_checkpoint", str(latest)]

    # The command resumes: run it (with this checkout's module for `trl-ada`) one step further.
    step = int(match.group(2))
    resumed = subprocess.run(
        [sys.executable, "-m", "trl_ada.tools.cli", *command[1:], "--max_steps", str(step + 1)],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming from {latest} (step {step})" in resumed.stdout and printed_steps(resumed.stdout) == [step + 1]
    assert global_step(out / f"checkpoint-{step + 1}") == step + 1


# -------------------------------------------------------------------------------------------------------------------
# recipes/README.md shows what `trl-ada train --config toy-cpu` prints
# -------------------------------------------------------------------------------------------------------------------

RECIPES_README = RECIPES_DIR / "README.md"


def readme_example() -> tuple[list[str], str]:
    """The README's example output block of the toy-cpu run, and the paragraph after it."""
    text = RECIPES_README.read_text()
    start = text.index("```\nReinforce-Ada (balanced) on 1 process(es)") + 4
    end = text.index("```", start)
    return text[start:end].splitlines(), text[end : text.index("\n\n", end + 4)]


def test_recipes_readme_example_has_the_lines_the_code_prints():
    """Without training: the start-up line and the header are what the code prints for toy-cpu, and each step line
    is what log_line prints for the numbers it shows (so a new or moved column cannot go unnoticed)."""
    lines, _ = readme_example()
    _, config, _, _ = parse_args(["--config", "toy-cpu"])
    assert lines[0] == describe(config, num_processes=1)
    assert lines[1] == log_header()
    assert len(lines) == 5
    for step, line in enumerate(lines[2:], 1):
        cells = line.split()
        logs = {name: float(cell) for (name, _, _), cell in zip(LOG_COLUMNS, cells[1:], strict=True)}
        assert log_line(step, logs) == line


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the pinned numbers are x86-64 AVX2's")
def test_recipes_readme_example_is_what_the_documented_command_prints(tmp_path):
    """The documented command, pinned as the README says (only --output_dir added): the same lines, character for
    character, and the 100-step summary the README gives, from the run's trainer_state.json."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "trl_ada.tools.cli", "train", "--config", "toy-cpu", "--output_dir", str(out)]
    env = {**os.environ, **PINNED_ENV, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines, summary = readme_example()
    printed = result.stdout.splitlines()
    start = printed.index(lines[0])
    assert printed[start : start + 2] == lines[:2]
    assert [line for line in printed if re.match(r"^ +[123] ", line)] == lines[2:]

    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    steps = [row for row in history if "ada/rounds" in row]
    assert len(steps) == 100 and sorted(row.get("step") for row in history if "eval_reward" in row) == [0, 50, 100]

    def mean(name: str) -> float:
        return sum(row[name] for row in steps) / len(steps)

    evals = [f"{row['eval_reward']:.3f}" for row in history if "eval_reward" in row]
    expected = (
        f"averaged {mean('ada/completion_tokens'):.0f} completion tokens, {mean('ada/samples_per_prompt'):.1f} "
        f"samples per prompt, {mean('ada/frac_resolved'):.2f} resolved, {mean('ada/frac_zero_std_first_round'):.2f} "
        f"all-equal groups after one round and {mean('frac_reward_zero_std'):.2f} in the final groups; its held-out "
        f"reward (`eval_reward`, 256 prompts x 4) went {' -> '.join(evals)} at steps 0, 50 and 100"
    )
    assert expected in " ".join(summary.split())
    assert sorted(path.name for path in out.glob("checkpoint-*")) == [f"checkpoint-{n}" for n in (100, 25, 50, 75)]


# -------------------------------------------------------------------------------------------------------------------
# Real runs of the CPU recipe
# -------------------------------------------------------------------------------------------------------------------


def test_eval_strategy_no_on_the_command_line_also_drops_the_recipe_s_evaluation_at_start():
    _, recipe, _, _ = parse_args(["--config", str(TOY_RECIPE)])
    assert recipe.eval_on_start and recipe.eval_strategy == "steps"  # the recipe evaluates at the start
    for flags in (["--eval_strategy", "no"], ["--eval-strategy=no"]):
        _, config, _, _ = parse_args(["--config", str(TOY_RECIPE), *flags])
        assert config.eval_strategy == "no" and not config.eval_on_start, flags
    _, config, _, _ = parse_args(["--config", str(TOY_RECIPE), "--eval_strategy", "no", "--eval_on_start", "true"])
    assert config.eval_on_start  # asked for on the command line: kept


@pytest.mark.slow
def test_the_toy_recipe_with_eval_strategy_no_evaluates_nothing(tmp_path, toy_cold_dir):
    out = tmp_path / "out"
    argv = ["--config", str(TOY_RECIPE), "--model_name_or_path", str(toy_cold_dir), "--max_steps", "1"]
    assert main([*argv, "--output_dir", str(out), "--save_strategy", "no", "--eval_strategy", "no"]) == 0
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [row["step"] for row in history if "ada/rounds" in row] == [1]
    assert not [row for row in history if any(name.startswith("eval_") for name in row)]


@pytest.mark.slow
def test_toy_recipe_trains_saves_and_logs_ada_metrics(tmp_path, toy_cold_dir, capsys):
    out = tmp_path / "out"
    argv = [
        "--config", str(TOY_RECIPE),
        "--model_name_or_path", str(toy_cold_dir),  # the untrained model: no warm-up build in the suite
        "--max_steps", "3", "--output_dir", str(out),
        "--eval_on_start", "false", "--eval_steps", "3",
        "--save_strategy", "steps", "--save_steps", "3",
    ]  # fmt: skip
    assert main(argv) == 0
    stdout = capsys.readouterr().out

    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()  # the final model
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())  # and a checkpoint
    train_logs = [row for row in state["log_history"] if "ada/rounds" in row]
    assert [row["step"] for row in train_logs] == [1, 2, 3]
    for row in train_logs:
        # balanced, rounds of 8, at most 4 rounds: every prompt draws one round at least and 32 samples at most
        assert 1 <= row["ada/rounds"] <= 4
        assert 8 <= row["ada/samples_per_prompt"] <= row["ada/samples_per_prompt_max"] <= 32
        assert row["ada/samples_per_prompt"] <= 8 * row["ada/rounds"]
        for share in ("ada/frac_resolved", "ada/frac_zero_std_first_round", "frac_reward_zero_std", "reward"):
            assert 0.0 <= row[share] <= 1.0
    assert any("eval_reward" in row for row in state["log_history"])  # the builtin test split was evaluated

    assert "16 prompts x 4 kept completions per generation" in stdout
    printed = [line.split() for line in stdout.splitlines() if line.split()[:1] in (["1"], ["2"], ["3"])]
    assert [cells[0] for cells in printed] == ["1", "2", "3"]
    for cells, row in zip(printed, train_logs, strict=True):  # the progress line shows the logged values
        assert float(cells[2]) == row["ada/completion_tokens"]  # a count of tokens: printed whole
        assert float(cells[4]) == pytest.approx(row["ada/samples_per_prompt"], abs=0.005)
    # Every logged metric is kept next to the final model too (save_state), whatever report_to says: the
    # checkpoint's history, then the end-of-training summary.
    final = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert final[: len(state["log_history"])] == state["log_history"] and "train_runtime" in final[-1]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_accelerate_launch_runs_the_module_on_two_processes(tmp_path, toy_cold_dir):
    """The documented `accelerate launch ... -m trl_ada.train --config ...`, on CPU over gloo."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        # --multi_gpu goes through torch.distributed.run; use_cpu in the recipe then trains on CPU over gloo
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        "-m", "trl_ada.train", "--config", str(TOY_RECIPE),
        "--model_name_or_path", str(toy_cold_dir), "--per_device_train_batch_size", "8", "--max_steps", "2",
        "--eval_strategy", "no", "--eval_on_start", "false", "--output_dir", str(tmp_path / "out"),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "on 2 process(es): 4 prompts x 4 kept completions per generation" in result.stdout
    assert result.stdout.count("on 2 process(es)") == 1  # printed by the main process only
    assert (tmp_path / "out" / "model.safetensors").is_file()
