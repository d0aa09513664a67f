"""Every recipe under recipes/ parses through `trl-ada train`'s parser into a valid config, and says what it claims.

Recipes are found by glob, so a new one is covered without touching this file. The paper's numbers below are typed
in from the paper (see recipes/README.md), not read from the recipes.
"""

import re
import shlex
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from trl_ada import ReinforceAdaConfig
from trl_ada.tools import catalog
from trl_ada.tools.rewards import resolve_reward
from trl_ada.tools.train import describe
from trl_ada.tools.train_args import parse_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import learning_catalog  # benchmarks/ is not a package

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
# async-*.yaml are for AsyncGRPOTrainer (trl_ada/tools/gpu_async_check.py reads them; tests/test_gpu_async_check.py
# checks them), not for `trl-ada train`.
ASYNC_RECIPES = sorted(RECIPES_DIR.glob("async-*.yaml"))
RECIPES = sorted(p for p in RECIPES_DIR.rglob("*.yaml") if "accelerate" not in p.parts and p not in ASYNC_RECIPES)
ACCELERATE = sorted((RECIPES_DIR / "accelerate").glob("*.yaml"))
PAPER_RECIPES = [p for p in RECIPES if p.parent.name.startswith(("qwen2.5-math", "llama"))]
GPU_RECIPES = [p for p in RECIPES if p.name != "toy-cpu.yaml"]

# The paper's run: 512 prompts x n = 4 per step on 8 GPUs, mini-batch 128 prompts, 400 steps, 10 warm-up steps,
# lr 1e-6, no KL, clip 0.2 / 0.28, 2048 completion tokens, temperature 1, budget 8 x 4 rounds.
PAPER_GPUS, PAPER_PROMPTS, PAPER_MINIBATCH, PAPER_STEPS, PAPER_WARMUP = 8, 512, 128, 400, 10
SAMPLING_FIELDS = {"sampling_strategy", "samples_per_round", "max_rounds", "min_positives", "min_negatives"}
ESTIMATE_FIELDS = {
    "samples_per_prompt_mean",
    "min_samples_per_prompt",
    "max_samples_per_prompt",
    "allocation_rule",
    "difficulty_weighting",
    "max_difficulty_weight",
}
RUN_NAME_FIELDS = {"output_dir", "logging_dir", "run_name"}
# The catalog method the `efficient` recipes set: the sampling fields of `seq-positive-4x2`.
EFFICIENT_METHOD = "seq-positive-4x2"


def rel(path: Path) -> str:
    return str(path.relative_to(RECIPES_DIR))


def parse(path: Path):
    # use_cpu: the GPU recipes ask for bf16, which this machine's CPU check would otherwise (rightly) refuse.
    return parse_args(["--config", str(path), "--use_cpu", "true"])


def flat(path: Path) -> dict:
    script_args, config, model_args, _ = parse(path)
    return {**vars(script_args), **vars(model_args), **config.to_dict()}


def test_recipes_are_found():
    assert (RECIPES_DIR / "toy-cpu.yaml") in RECIPES
    # 2 models x 2 prompt sets x 3 methods, Llama x 3, Est for 1.5B easy, and the recommended one per paper model
    assert len(PAPER_RECIPES) == 19
    assert {p.stem for p in ACCELERATE} == {"ddp", "zero2", "zero3", "fsdp"}


@pytest.mark.parametrize("path", RECIPES, ids=rel)
def test_recipe_parses_into_a_valid_config(path):
    script_args, config, model_args, _ = parse(path)
    assert isinstance(config, ReinforceAdaConfig)
    assert model_args.model_name_or_path and script_args.dataset_name
    assert script_args.reward_funcs and all(callable(resolve_reward(name)) for name in script_args.reward_funcs)
    assert config.output_dir.startswith("outputs/")
    if path in GPU_RECIPES:
        assert config.bf16 and config.use_vllm, "GPU recipes generate with vLLM in bf16, as the paper did"
        assert config.steps_per_generation % config.gradient_accumulation_steps == 0


def test_toy_recipe_runs_on_cpu():
    script_args, config, model_args, _ = parse_args(["--config", str(RECIPES_DIR / "toy-cpu.yaml")])
    assert config.use_cpu and not config.bf16 and not config.use_vllm
    assert model_args.model_name_or_path == "builtin:toy" and script_args.dataset_name == "builtin:toy"


@pytest.mark.parametrize("path", PAPER_RECIPES, ids=rel)
def test_paper_recipe_maps_the_paper_batch_onto_8_gpus(path):
    _, config, _, _ = parse(path)
    n = config.num_generations
    assert n == 4
    per_optimizer_step = config.per_device_train_batch_size * PAPER_GPUS * config.gradient_accumulation_steps
    per_generation = config.per_device_train_batch_size * PAPER_GPUS * config.steps_per_generation
    assert per_optimizer_step == PAPER_MINIBATCH * n
    assert per_generation == PAPER_PROMPTS * n
    optimizer_steps_per_generation = PAPER_PROMPTS // PAPER_MINIBATCH  # 4
    assert config.max_steps == PAPER_STEPS * optimizer_steps_per_generation
    assert config.warmup_steps == PAPER_WARMUP * optimizer_steps_per_generation
    assert config.lr_scheduler_type == "constant_with_warmup"
    assert (config.learning_rate, config.beta, config.epsilon, config.epsilon_high) == (1e-6, 0.0, 0.2, 0.28)
    assert (config.max_completion_length, config.temperature, config.top_p) == (2048, 1.0, 1.0)
    if config.sampling_strategy != "uniform" and not path.stem.endswith("efficient"):
        assert (config.samples_per_round, config.max_rounds) == (8, 4)  # the paper's rounds
    assert describe(config, PAPER_GPUS).startswith(
        f"Reinforce-Ada ({config.sampling_strategy}) on 8 process(es): 512 prompts x 4 kept completions per "
        "generation, 128 prompts per optimizer step, 4 optimizer steps per generation"
    )


def variants() -> dict[tuple[str, str], dict[str, Path]]:
    """(model folder, prompt set) -> {method: recipe}, from names like qwen2.5-math-1.5b/hard-balanced.yaml."""
    groups: dict[tuple[str, str], dict[str, Path]] = defaultdict(dict)
    for path in PAPER_RECIPES:
        prompt_set, _, method = path.stem.rpartition("-")
        groups[(path.parent.name, prompt_set)][method] = path
    return groups


def differing_keys(a: dict, b: dict) -> set[str]:
    return {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)} - RUN_NAME_FIELDS


@pytest.mark.parametrize("group", sorted(variants()), ids="/".join)
def test_methods_of_one_model_and_prompt_set_differ_only_in_sampling(group):
    recipes = variants()[group]
    assert set(recipes) - {"estimate", "efficient"} == {"grpo", "positive", "balanced"}
    grpo, positive, balanced = (flat(recipes[m]) for m in ("grpo", "positive", "balanced"))
    assert differing_keys(positive, balanced) == {"sampling_strategy"}
    # The authors' GRPO baseline divides advantages by the group std (verl's default); their Ada runs do not.
    assert differing_keys(grpo, balanced) <= SAMPLING_FIELDS | {"scale_rewards"}
    assert (grpo["sampling_strategy"], grpo["scale_rewards"]) == ("uniform", "group")
    assert balanced["scale_rewards"] == positive["scale_rewards"] == "none"
    if "estimate" in recipes:  # Reinforce-Ada-Est: the same run but for how samples are allocated and weighted
        estimate = flat(recipes["estimate"])
        assert differing_keys(estimate, balanced) <= SAMPLING_FIELDS | ESTIMATE_FIELDS
        assert estimate["sampling_strategy"] == "estimate" and estimate["scale_rewards"] == "none"
    if "efficient" in recipes:  # seq-positive-4x2, on the same run
        efficient = flat(recipes["efficient"])
        assert differing_keys(efficient, positive) == {"samples_per_round", "max_rounds"}
        # seq-positive-4x2 as benchmarks/learning_per_token.py measured it, and no option beyond it: prompt selection
        # was measured only where prompts recur (four passes), where it lowered pass@32.
        measured = learning_catalog.CATALOG[EFFICIENT_METHOD][0]
        assert efficient["sampling_strategy"] == measured.strategy
        assert {key: efficient[key] for key in dict(measured.options)} == dict(measured.options)
        assert efficient["prompt_selection"] == "none" and not efficient["refill"]


@pytest.mark.parametrize("model", ["qwen2.5-math-1.5b", "qwen2.5-math-7b"])
@pytest.mark.parametrize("method", ["grpo", "positive", "balanced"])
def test_easy_and_hard_prompt_sets_differ_only_in_data(model, method):
    easy, hard = (flat(RECIPES_DIR / model / f"{s}-{method}.yaml") for s in ("easy", "hard"))
    assert differing_keys(easy, hard) == {"dataset_name"}
    assert "-easy/" in easy["dataset_name"] and "-hard/" in hard["dataset_name"]


ONE_GPU = RECIPES_DIR / "lora-1gpu.yaml"  # seq-balanced-8x4 on the hard prompts
ONE_GPU_EFFICIENT = {
    "easy": RECIPES_DIR / "lora-1gpu-efficient.yaml",
    "hard": RECIPES_DIR / "lora-1gpu-hard-efficient.yaml",
}


@pytest.mark.parametrize("prompt_set", sorted(ONE_GPU_EFFICIENT))
def test_one_gpu_efficient_recipes_are_lora_1gpu_with_the_recommended_sampling(prompt_set):
    path = ONE_GPU_EFFICIENT[prompt_set]
    efficient, balanced = flat(path), flat(ONE_GPU)
    # the same LoRA run at the same scale, on the paper's data for that prompt set, with other sampling
    assert differing_keys(efficient, balanced) <= {
        "dataset_name",
        "sampling_strategy",
        "samples_per_round",
        "max_rounds",
    }
    paper_data = flat(RECIPES_DIR / "qwen2.5-math-1.5b" / f"{prompt_set}-balanced.yaml")["dataset_name"]
    assert efficient["dataset_name"] == paper_data and efficient["use_peft"]
    # seq-positive-4x2, as measured and as the 8-GPU efficient recipe sets it, and no option beyond it
    measured = learning_catalog.CATALOG[EFFICIENT_METHOD][0]
    assert efficient["sampling_strategy"] == measured.strategy
    assert {key: efficient[key] for key in dict(measured.options)} == dict(measured.options)
    assert efficient["prompt_selection"] == "none" and not efficient["refill"]
    eight_gpus = flat(RECIPES_DIR / "qwen2.5-math-1.5b" / "easy-efficient.yaml")
    same = SAMPLING_FIELDS | {"num_generations", "scale_rewards", "model_name_or_path", "reward_funcs"}
    assert {key: efficient[key] for key in same} == {key: eight_gpus[key] for key in same}
    # the header's batch mapping: 128 prompts a generation, 32 an optimizer step, the paper's 4 steps per generation
    _, config, _, _ = parse(path)
    assert describe(config, 1) == (
        "Reinforce-Ada (positive) on 1 process(es): 128 prompts x 4 kept completions per generation, 32 prompts per "
        "optimizer step, 4 optimizer steps per generation, at most 2 rounds x 4 samples per prompt"
    )


def test_one_gpu_easy_and_hard_efficient_recipes_differ_only_in_data():
    easy, hard = (flat(ONE_GPU_EFFICIENT[s]) for s in ("easy", "hard"))
    assert differing_keys(easy, hard) == {"dataset_name"}
    assert "-easy/" in easy["dataset_name"] and "-hard/" in hard["dataset_name"]


def test_every_recipe_writes_to_its_own_output_dir():
    """Two recipes with one output_dir would resume from, or overwrite, each other's checkpoints."""
    output_dirs = defaultdict(list)
    for path in RECIPES:
        output_dirs[yaml.safe_load(path.read_text())["output_dir"]].append(rel(path))
    assert not {where: paths for where, paths in output_dirs.items() if len(paths) > 1}


# The step-time table's columns, as the paper names its methods, and the sampling each one's recipe must set.
STEP_TIME_METHODS = {
    "`grpo-4`": ("uniform", None),
    "`seq-positive-8x4`": ("positive", (8, 4)),  # the paper's rounds: 8 per round, at most 4
    "`seq-balanced-8x4`": ("balanced", (8, 4)),
    "`est-8`": ("estimate", None),
}


def step_time_table() -> dict[str, dict[str, str]]:
    """recipes/README.md's table of the paper's step times: model -> {method column -> cell}."""
    text = (RECIPES_DIR / "README.md").read_text().split("## What to expect: the paper's step times", 1)[1]
    rows = [line for line in text.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header[0] == "model" and set(header[1:]) == set(STEP_TIME_METHODS), header
    table = {}
    for row in rows[2:]:  # below the |---| line
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        table[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return table


def test_every_time_in_the_step_time_table_has_its_recipe():
    """A time the table gives for a model and method promises a recipe to run it: the model's folder must hold a
    recipe of that model with that method's sampling."""
    table = step_time_table()
    assert set(table) == {"Qwen2.5-Math-1.5B", "Qwen2.5-Math-7B"}
    named = 0
    for model, cells in table.items():
        recipes = [yaml.safe_load(path.read_text()) for path in sorted((RECIPES_DIR / model.lower()).glob("*.yaml"))]
        for method, cell in cells.items():
            if cell == "-":
                continue
            assert cell.isdigit(), f"{model} {method}: {cell!r} is neither seconds nor '-'"
            strategy, rounds = STEP_TIME_METHODS[method]
            matching = [
                recipe
                for recipe in recipes
                if recipe["model_name_or_path"] == f"Qwen/{model}"
                and recipe["sampling_strategy"] == strategy
                and (rounds is None or (recipe["samples_per_round"], recipe["max_rounds"]) == rounds)
            ]
            assert matching, f"the table gives {model} {method} {cell} s, and no recipe runs it"
            named += 1
    assert named == 7  # three methods on each model, and Est on the 1.5B model


EXPECTED_LAUNCH = {  # accelerate config -> (distributed type, DeepSpeed ZeRO stage or None)
    "ddp": ("MULTI_GPU", None),
    "zero2": ("DEEPSPEED", 2),
    "zero3": ("DEEPSPEED", 3),
    "fsdp": ("FSDP", None),
}


@pytest.mark.parametrize("path", ACCELERATE, ids=rel)
def test_accelerate_config_is_accepted_by_accelerate_launch(path):
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    config = load_config_from_file(str(path))  # accelerate's own loader rejects unknown keys
    distributed_type, zero_stage = EXPECTED_LAUNCH[path.stem]
    assert config.distributed_type == distributed_type
    assert (config.num_processes, config.num_machines, config.mixed_precision) == (8, 1, "bf16")
    assert (config.deepspeed_config or {}).get("zero_stage") == zero_stage

    recipe = RECIPES_DIR / "qwen2.5-math-1.5b" / "hard-balanced.yaml"
    argv = ["--config_file", str(path), "-m", "trl_ada.train", "--config", str(recipe)]
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(argv))
    assert args.module and args.training_script == "trl_ada.train"
    assert args.training_script_args == ["--config", str(recipe)]


def test_every_recipe_named_in_the_recipes_exists():
    """Recipe headers and recipes/README.md name recipes and accelerate configs, by path or by packaged name
    (`--config qwen2.5-math-1.5b/hard-balanced`, `trl-ada recipes --path accelerate/zero2`): all of them must exist."""
    texts = [p.read_text() for p in RECIPES] + [(RECIPES_DIR / "README.md").read_text()]
    paths = {m for text in texts for m in re.findall(r"recipes/[\w./-]+\.yaml", text)}
    assert not sorted(m for m in paths if not (RECIPES_DIR.parent / m).is_file())
    names = {m for text in texts for m in re.findall(r"--(?:config|path|show) ([\w][\w./-]*)", text)}
    assert len(names) >= len(PAPER_RECIPES) + 2, "expected the recipes and README to name recipes"
    for name in names:
        assert catalog.find(name).is_file()
    assert {"accelerate/zero2", "accelerate/zero3"} <= names


def test_recipes_are_plain_yaml_mappings():
    for path in RECIPES + ACCELERATE:
        assert isinstance(yaml.safe_load(path.read_text()), dict), rel(path)


def documented_commands() -> list[tuple[str, list[str]]]:
    """Every `trl-ada ...` and `accelerate launch ...` command in recipes/README.md and the recipe headers."""
    commands = []
    for path in [RECIPES_DIR / "README.md", *RECIPES]:
        text = path.read_text()
        if path.suffix == ".yaml":  # commands live in the header comments: "# Data:  trl-ada prepare ... \"
            text = "\n".join(line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#"))
        text = re.sub(r"\\\n\s*", " ", text)  # join continued lines
        for line in text.splitlines():
            line = re.sub(r"^(Data|Train):\s*", "", line.strip())
            line = re.sub(r"^([A-Z_]+=\S+\s+)+", "", line)  # CUDA_VISIBLE_DEVICES=... prefixes
            line = re.sub(r"^trl-ada [\w-]+: .*Resume with: ", "", line)  # a printed message: the command it names
            if re.match(r"^trl-ada [\w-]+: ", line):  # another message a command prints, not a command
                continue
            if line.startswith(("trl-ada ", "accelerate launch ")):
                commands.append((rel(path), shlex.split(line.split(" #")[0].rstrip(" &"))))
    return commands


def test_documented_commands_parse(monkeypatch):
    """The commands in the docs use options that `trl-ada prepare`, `trl-ada eval` and `trl-ada train` accept."""
    monkeypatch.chdir(RECIPES_DIR.parent)  # the commands name recipes relative to the repository root
    from trl_ada.tools.evaluate import build_parser as eval_parser
    from trl_ada.tools.prepare import build_parser as prepare_parser

    commands = documented_commands()
    seen = defaultdict(int)
    for where, argv in commands:
        if argv[:2] == ["trl-ada", "prepare"]:
            prepare_parser().parse_args(argv[2:])
        elif argv[:2] == ["trl-ada", "eval"]:
            eval_parser().parse_args(argv[2:])
        elif argv[:2] == ["trl-ada", "train"]:
            parse_args([*argv[2:], "--use_cpu", "true"])
        else:  # accelerate launch [launcher options] -m trl_ada.train [train options]
            assert "-m" in argv and argv[argv.index("-m") + 1] == "trl_ada.train", where
            parse_args([*argv[argv.index("-m") + 2 :], "--use_cpu", "true"])
        seen[" ".join(argv[:2])] += 1
    assert seen["trl-ada prepare"] >= len(PAPER_RECIPES) and seen["trl-ada eval"] >= 1
    assert seen["trl-ada train"] >= 2 and seen["accelerate launch"] >= len(PAPER_RECIPES)
