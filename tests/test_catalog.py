"""Packaged recipes by name: listing, lookup, `trl-ada recipes`, and `trl-ada train --config <name>`."""

from pathlib import Path

import pytest

from trl_ada.adapter.errors import UsageError
from trl_ada.tools import catalog, cli
from trl_ada.tools.catalog import RecipeNotFound, find, names, resolve_config
from trl_ada.tools.train_args import parse_args

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
ALL_YAML = sorted(p.relative_to(RECIPES_DIR).with_suffix("").as_posix() for p in RECIPES_DIR.rglob("*.yaml"))


def test_in_a_checkout_the_recipes_are_the_top_level_folder():
    assert catalog.recipes_dir() == RECIPES_DIR  # the source of truth; the wheel ships the same files


def test_names_list_every_yaml_under_recipes():
    assert names() == ALL_YAML
    assert {"toy-cpu", "lora-1gpu", "qwen2.5-math-1.5b/hard-balanced", "accelerate/zero2"} <= set(names())
    assert names("accelerate") == ["accelerate/ddp", "accelerate/fsdp", "accelerate/zero2", "accelerate/zero3"]
    assert set(names("recipes")) == set(ALL_YAML) - set(names("accelerate"))
    with pytest.raises(ValueError, match="kind 'configs'"):
        names("configs")


@pytest.mark.parametrize("name", ["toy-cpu", "toy-cpu.yaml", "recipes/toy-cpu.yaml", "./recipes/toy-cpu", " toy-cpu "])
def test_find_accepts_the_name_with_or_without_folder_and_suffix(name):
    assert find(name) == RECIPES_DIR / "toy-cpu.yaml"


def test_find_nested_names_and_unknown_names():
    assert find("qwen2.5-math-1.5b/hard-balanced") == RECIPES_DIR / "qwen2.5-math-1.5b" / "hard-balanced.yaml"
    assert find("accelerate/zero3", kind="accelerate") == RECIPES_DIR / "accelerate" / "zero3.yaml"
    with pytest.raises(
        RecipeNotFound, match=r"no packaged recipe or accelerate config named 'hard-balanced'.*toy-cpu"
    ):
        find("hard-balanced")  # the folder is part of the name
    with pytest.raises(RecipeNotFound, match="no packaged accelerate config named 'toy-cpu'"):
        find("toy-cpu", kind="accelerate")


def test_resolve_config_prefers_an_existing_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config("toy-cpu") == RECIPES_DIR / "toy-cpu.yaml"
    (tmp_path / "toy-cpu").write_text("max_steps: 1\n")  # a local file of the same name wins
    assert resolve_config("toy-cpu") == Path("toy-cpu")
    mine = tmp_path / "mine.yaml"
    mine.write_text("max_steps: 1\n")
    assert resolve_config(str(mine)) == mine


def test_resolve_config_rejects_accelerate_configs_and_unknown_names():
    with pytest.raises(RecipeNotFound, match=r"--config accelerate/zero2: no such file, and no packaged recipe"):
        resolve_config("accelerate/zero2")  # an `accelerate launch` config, not a training recipe
    with pytest.raises(
        RecipeNotFound, match=r"Packaged recipes: .*qwen2.5-math-1.5b/hard-balanced.*`trl-ada recipes`"
    ):
        resolve_config("no-such-recipe")


def test_every_packaged_file_opens_with_a_description():
    for name in names():
        assert catalog.describe(find(name)), f"{name}.yaml has no opening comment line"
    zero3 = "DeepSpeed ZeRO-3 on one node of 8 GPUs: parameters sharded too (7B and up)"  # first sentence only
    assert catalog.describe(find("accelerate/zero3")) == zero3


# -------------------------------------------------------------------------------------------------------------------
# The command
# -------------------------------------------------------------------------------------------------------------------


def test_recipes_command_lists_names_and_descriptions(capsys):
    assert cli.main(["recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == names()
    toy = next(line for line in lines if line.startswith("toy-cpu "))
    assert "Reinforce-Ada (balanced) on the built-in toy arithmetic task" in toy


def test_recipes_command_prints_a_path_the_contents_or_the_folder(capsys):
    assert cli.main(["recipes", "--path", "accelerate/zero2"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.is_absolute() and path == RECIPES_DIR / "accelerate" / "zero2.yaml"
    assert cli.main(["recipes", "--show", "toy-cpu"]) == 0
    assert capsys.readouterr().out == (RECIPES_DIR / "toy-cpu.yaml").read_text()
    assert cli.main(["recipes", "--dir"]) == 0
    assert capsys.readouterr().out.strip() == str(RECIPES_DIR)


def test_recipes_command_unknown_name(capsys):
    assert cli.main(["recipes", "--path", "zero2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trl-ada recipes: error: no packaged recipe or accelerate config named 'zero2'")
    assert "accelerate/zero2" in err


# -------------------------------------------------------------------------------------------------------------------
# trl-ada train --config <name>
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["name", "equals", "path"])
def test_train_config_by_name_parses_like_the_file(form, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the checkout: the name must not depend on the working directory
    by_file = parse_args(["--config", str(RECIPES_DIR / "toy-cpu.yaml"), "--max_steps", "3"])
    argv = {
        "name": ["--config", "toy-cpu"],
        "equals": ["--config=toy-cpu"],
        "path": ["--config", "recipes/toy-cpu.yaml"],  # the checkout-relative path of the docs, from elsewhere
    }[form]
    by_name = parse_args([*argv, "--max_steps", "3"])
    dicts = [vars, lambda config: config.to_dict(), vars, vars]  # configs hold a device object
    assert [as_dict(part) for as_dict, part in zip(dicts, by_name, strict=True)] == [
        as_dict(part) for as_dict, part in zip(dicts, by_file, strict=True)
    ]
    assert by_name[1].max_steps == 3 and by_name[1].sampling_strategy == "balanced"


def test_train_config_by_nested_name():
    _, config, model_args, _ = parse_args(["--config", "qwen2.5-math-1.5b/hard-balanced", "--use_cpu", "true"])
    assert model_args.model_name_or_path == "Qwen/Qwen2.5-Math-1.5B" and config.sampling_strategy == "balanced"


def test_train_config_unknown_name_lists_the_recipes():
    with pytest.raises(UsageError, match=r"--config hard-balanced: no such file, and no packaged recipe.*toy-cpu"):
        parse_args(["--config", "hard-balanced"])
