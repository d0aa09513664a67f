"""`trl-ada <command>`: the same exit codes everywhere (2 usage, 1 run failed, 130 Ctrl-C), each subcommand's help
under its own name with its defaults, and `trl-ada eval`'s default benchmarks. `trl-ada train` itself is in
test_train_cli.py."""

import argparse
import json
import re

import pytest

from trl_ada.tools import catalog, cli, demo, evaluate, prepare, simulate

PARSERS = {
    "prepare": prepare.build_parser,
    "eval": evaluate.build_parser,
    "simulate": simulate.build_parser,
    "demo": demo.build_parser,
    "recipes": catalog.build_parser,
}


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty Hugging Face cache, offline: a Hub name then fails at once."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def bench(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    return str(path)


# (argv, exit code, start of the message); "{tmp}" is the test's folder, "{bench}" a one-problem benchmark file.
CASES = [
    (["nosuch"], cli.EXIT_USAGE, "trl-ada: error: unknown command 'nosuch'"),
    (["recipes", "--path", "nope"], cli.EXIT_USAGE, "trl-ada recipes: error: no packaged recipe"),
    (["simulate", "--pass-rates", "beta:x"], cli.EXIT_USAGE, "trl-ada simulate: error: "),
    (["simulate", "--pass-rates", "{tmp}/none.jsonl"], cli.EXIT_USAGE, "trl-ada simulate: error: "),
    (["train", "--config", "nope"], cli.EXIT_USAGE, "trl-ada train: error: --config nope: no such file"),
    (["eval", "--benchmark", "nameless"], cli.EXIT_USAGE, "trl-ada eval: error: Bad --benchmark 'nameless'"),
    (["eval", "--benchmark", "x={tmp}/none.jsonl"], cli.EXIT_USAGE, "trl-ada eval: error: No such file"),
    (["eval", "--benchmark", "x={bench}", "--reward", "nope"], cli.EXIT_USAGE, "trl-ada eval: error: Unknown reward"),
    (["eval", "--benchmark", "x={bench}", "--model", "./missing"], cli.EXIT_USAGE, "trl-ada eval: error: --model ./"),
    (["eval", "--benchmark", "x={bench}", "--model", "nobody/nothing"], cli.EXIT_FAILURE, "trl-ada eval: error: --m"),
    (["prepare", "--dataset", "{bench}", "--band", "0.5,0.1"], cli.EXIT_USAGE, "trl-ada prepare: error: Bad band"),
    (["prepare", "--dataset", "{tmp}/none.jsonl"], cli.EXIT_USAGE, "trl-ada prepare: error: No such file"),
    (["prepare", "--dataset", "{bench}", "--model", "./missing"], cli.EXIT_USAGE, "trl-ada prepare: error: --model"),
]


@pytest.mark.parametrize(("argv", "code", "message"), CASES, ids=lambda value: None)
def test_exit_codes_and_one_line_messages(argv, code, message, tmp_path, capsys, offline_hub, toy_cold_dir):
    argv = [arg.replace("{tmp}", str(tmp_path)).replace("{bench}", bench(tmp_path)) for arg in argv]
    if argv[0] in ("eval", "prepare"):  # the required flags, unless the case names its own model
        argv += ["--output-dir", str(tmp_path / "out")] + ([] if "--model" in argv else ["--model", str(toy_cold_dir)])
    assert cli.main(argv) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1 if argv[0] != "nosuch" else 0].startswith(message)


@pytest.mark.parametrize("command", ["simulate", "eval", "prepare", "recipes", "demo"])
def test_argparse_errors_exit_with_the_usage_code(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        PARSERS[command]().parse_args(["--no-such-flag"])
    assert exit_info.value.code == cli.EXIT_USAGE
    assert f"trl-ada {command}: error: " in capsys.readouterr().err


def test_ctrl_c_in_any_command_is_one_line_and_130(monkeypatch, capsys):
    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(simulate, "main", interrupted)
    assert cli.main(["simulate"]) == cli.EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err.strip() == "trl-ada simulate: interrupted"


@pytest.mark.parametrize("command", list(PARSERS))
def test_help_is_under_the_commands_name_and_states_every_default(command):
    parser = PARSERS[command]()
    text = parser.format_help()
    assert text.startswith(f"usage: trl-ada {command} ")
    # Every option whose default is a value (not None, False or empty) says so in its entry.
    worth_stating = [
        action
        for action in parser._actions
        if action.option_strings
        and action.default not in (None, argparse.SUPPRESS)
        and action.default is not False
        and action.default != []
    ]
    assert worth_stating or command == "recipes"
    entries = re.split(r"\n(?=  -)", text)  # one entry per option: its line and the help lines under it
    for action in worth_stating:
        (entry,) = [e for e in entries if e.lstrip().split(" ")[0].rstrip(",") == action.option_strings[0]]
        assert "default" in entry.lower(), entry


def test_show_defaults_states_values_and_leaves_the_rest():
    parser = argparse.ArgumentParser(prog="x", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plain", default=7)  # no help at all: argparse's own formatter would show nothing
    parser.add_argument("--rate", type=float, default=0.5, help="share, 50%% of it")
    parser.add_argument("--sizes", nargs="*", type=int, default=[4, 8])
    parser.add_argument("--said", default="x", help="kept as is (default: the usual)")
    parser.add_argument("--none", default=None, help="no value")
    parser.add_argument("--flag", action="store_true", help="off")
    parser.add_argument("--zero", type=int, default=0, help="a count")
    entries = " ".join(cli.show_defaults(parser).format_help().split())
    for expected in (
        "--plain PLAIN (default: 7)",
        "--rate RATE share, 50% of it (default: 0.5)",
        "--sizes [SIZES ...] (default: 4 8)",
        "--said SAID kept as is (default: the usual) --none",
        "--none NONE no value --flag off --zero ZERO a count (default: 0)",
    ):
        assert expected in entries


def test_demo_help_says_trl_ada_demo(capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.parse_args(["--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: trl-ada demo [-h] [--steps STEPS]")


def test_eval_default_benchmarks_are_the_ones_it_can_load():
    """The default list used to include aime_like, which has no Hub dataset, so `trl-ada eval` without flags always
    failed: now it is the Hub sets, and the help says how to add the AIME-like one."""
    assert evaluate.DEFAULT_BENCHMARKS == tuple(name for name, spec in evaluate.BENCHMARKS.items() if spec.source)
    assert "aime_like" not in evaluate.DEFAULT_BENCHMARKS and len(evaluate.DEFAULT_BENCHMARKS) == 3
    chosen = evaluate.select_benchmarks(None, {})
    assert [spec.name for spec, _ in chosen] == list(evaluate.DEFAULT_BENCHMARKS)
    help_text = " ".join(evaluate.build_parser().format_help().split())
    assert "else the Hub sets math500,minerva,olympiadbench; aime_like needs --benchmark NAME=PATH" in help_text


def test_a_rejected_value_is_the_only_line_a_real_process_prints():
    """From a shell, as a user runs it: nothing before the one-line error, not even the deprecation warnings
    transformers raises for TRL's own gradient-checkpointing names (`cli.LIBRARY_DEPRECATIONS`)."""
    import os
    import subprocess
    import sys

    env = os.environ | {"HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "default"}  # warnings shown as a user sees them
    command = [sys.executable, "-m", "trl_ada.tools.cli", "train", "--config", "toy-cpu", "--temperature", "0"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "trl-ada train: error: temperature must be a number > 0 (completions are sampled), got 0.0."
    ]


def test_the_quieted_warnings_are_the_gradient_checkpointing_deprecations_only():
    from trl_ada.tools.cli import LIBRARY_DEPRECATIONS

    for quieted in (
        "`gradient_checkpointing` is deprecated and will be removed in v6. Use `activation_checkpointing` instead.",
        "`is_gradient_checkpointing` is deprecated and will be removed in v6.",
        "`gradient_checkpointing_enable` is deprecated and will be removed in v6.",
        "`gradient_checkpointing_disable` is deprecated and will be removed in v6.",
    ):
        assert re.match(LIBRARY_DEPRECATIONS, quieted), quieted
    kept_warnings = ("`evaluation_strategy` is deprecated", "`use_cache=True` is incompatible with checkpointing")
    for kept in kept_warnings:
        assert not re.match(LIBRARY_DEPRECATIONS, kept), kept
