"""`trl-ada train`: help, clear messages for bad input, data and model resolution, and real runs of toy-cpu.yaml."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch

from trl_ada import cli
from trl_ada.train import (
    LOG_COLUMNS,
    TOY_SPLIT_SIZES,
    UsageError,
    check_precision,
    load_data,
    log_header,
    log_line,
    main,
    parse_args,
    resolve_model,
)

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
TOY_RECIPE = RECIPES_DIR / "toy-cpu.yaml"
HAS_BF16_GPU = torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_args(tmp_path, *extra):
    return ["--use_cpu", "true", "--bf16", "false", "--output_dir", str(tmp_path / "out"), *extra]


def run_error(capsys, argv) -> str:
    """Run main(argv), expect the usage-error exit code and return the message (no traceback)."""
    assert main(argv) == 2
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
        "ada/rounds": 2.0,
        "ada/samples_per_prompt": 12.5,
        "ada/frac_resolved": 0.75,
        "ada/frac_zero_std_first_round": 0.25,
    }  # frac_reward_zero_std missing: shown as "-"
    header, line = log_header(), log_line(3, logs)
    assert len(header) == len(line)
    assert header.split() == ["step"] + [name for _, name, _ in LOG_COLUMNS]
    assert line.split() == ["3", "0.500", "2", "12.50", "0.75", "0.25", "-"]


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
    assert "vLLM is not installed" in err and "pip install 'trl-ada[vllm]'" in err and "--use_vllm false" in err


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


def test_dataset_without_prompt_column_lists_the_columns(tmp_path, capsys, model_ok):
    data = write_rows(tmp_path / "q.jsonl", [{"question": "1+1", "answer": "2"}])
    err = run_error(capsys, [*model_ok, "--dataset_name", str(data)])
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
    err = run_error(capsys, [*model_ok, "--dataset_name", str(data), "--eval_strategy", "steps"])
    assert "eval_strategy='steps' needs an evaluation split" in err and "it has ['train']" in err
    assert "--eval_strategy no" in err
    err = run_error(capsys, [*model_ok, "--dataset_name", str(data), "--eval_on_start", "true"])
    assert "eval_on_start=True needs an evaluation split" in err
    err = run_error(capsys, [*model_ok, "--dataset_name", str(data), "--dataset_train_split", "training"])
    assert "no 'training' split; it has ['train']" in err


def test_unknown_keys_and_flags(tmp_path, capsys):
    recipe = tmp_path / "typo.yaml"
    recipe.write_text(TOY_RECIPE.read_text() + "learning_rat: 0.1\n")
    assert "unknown keys ['learning_rat']" in run_error(capsys, ["--config", str(recipe)])
    assert "Unknown arguments ['--max_stpes', '3']" in run_error(
        capsys, ["--config", str(TOY_RECIPE), "--max_stpes", "3"]
    )
    assert "no such file" in run_error(capsys, ["--config", str(tmp_path / "missing.yaml")])


def test_config_validation_errors_are_reported_without_traceback(capsys):
    err = run_error(capsys, ["--config", str(TOY_RECIPE), "--samples_per_round", "1", "--max_rounds", "2"])
    assert "smaller than num_generations=4" in err  # ReinforceAdaConfig's own check, passed through


# -------------------------------------------------------------------------------------------------------------------
# Data and model resolution
# -------------------------------------------------------------------------------------------------------------------


def script(dataset_name: str):
    script_args, _, _, dataset_args = parse_args(["--dataset_name", dataset_name, "--use_cpu", "true"])
    return script_args, dataset_args


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


def test_builtin_models_resolve_to_a_cached_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_ADA_CACHE", str(tmp_path))
    folder = Path(resolve_model("builtin:toy-cold"))
    assert folder.parent == tmp_path and (folder / "config.json").is_file()
    assert json.loads((folder / "config.json").read_text())["model_type"] == "qwen2"
    assert resolve_model("Qwen/Qwen2.5-Math-1.5B") == "Qwen/Qwen2.5-Math-1.5B"  # not a built-in: unchanged


# -------------------------------------------------------------------------------------------------------------------
# Real runs of the CPU recipe
# -------------------------------------------------------------------------------------------------------------------


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
        assert float(cells[3]) == pytest.approx(row["ada/samples_per_prompt"], abs=0.005)


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
