"""Offline toy tasks for adaptive-sampling RL on CPU, with a tiny Qwen2 model.

Everything here is built locally (no model hub): a byte-level BPE tokenizer with a ChatML template, a ~0.53M
parameter Qwen2 model, datasets of prompts with their answers, binary rewards, and a supervised warm-up that stops
once the model is *partly* right. The point of the warm-up is a policy whose per-prompt pass rates spread across
(0, 1): prompts that are always or never solved give GRPO no gradient, so adaptive sampling has something to improve
on.

One task is built in (:data:`TASKS`; :func:`toy_task` describes it, ``toy_model_dir(task=...)`` picks one):
"arithmetic" (:mod:`trl_ada.toy.arithmetic`: ``47-8`` answered with one number). The learning benchmark's instrument,
the "columns" task, lives with the benchmarks in a checkout (``benchmarks/testbeds/columns``) and registers itself here
(:func:`register_task`); the superseded "reasoning" and "rules" tasks left the package (``docs/moved.md`` names the
commit that holds them). The modules:

- :mod:`~trl_ada.toy.model`: the tokenizer and model every task shares;
- :mod:`~trl_ada.toy.threads`: torch threads for the toy model (one);
- :mod:`~trl_ada.toy.rewards`: the rewards read from a completion's text;
- :mod:`~trl_ada.toy.sampling`: sampled completions, pass rates, accuracy and a start model's measured properties;
- :mod:`~trl_ada.toy.warmup`: the supervised warm-up loop, run on a task's :class:`WarmupRecipe`;
- :mod:`~trl_ada.toy.task`: :class:`ToyTask`, what a task is;
- :mod:`~trl_ada.toy.registry`: the task names (:data:`TASK_FACTORIES`; a new task module is registered there with
  one line, or from outside the package with :func:`register_task`);
- :mod:`~trl_ada.toy.cache`: :func:`toy_model_dir`, the shipped warm models and the cached built ones.

The warm model for seed 0 ships with each task (the arithmetic task's in the package, ``trl_ada/toy_warm``, 2.1 MB):
where learning "clicks" during the warm-up depends on the last bits of every float operation, so the same code stops
at a different step on another CPU (500 steps on one machine, 600 on another) and every number measured after it
differs. Shipping the weights gives every machine the
same start; ``toy_model_dir(prebuilt=False)`` rebuilds them (and other seeds are built) in a cache.

Typical use::

    path = toy_model_dir()  # the shipped warm model; instant
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    train, heldout = toy_dataset_split(1024, 256)
"""

from .arithmetic import (
    SHIPPED_WARM_DIR,
    TOY_VERSION,
    Split,
    arithmetic_reward,
    make_arithmetic_dataset,
    problem_split,
    toy_dataset_split,
)
from .cache import SHIPPED_WARM_SEED, toy_model_dir
from .model import (
    CHATML_TEMPLATE,
    IM_END,
    IM_START,
    PAD_TOKEN,
    TOY_SYSTEM,
    build_toy_model,
    build_toy_tokenizer,
)
from .registry import TASK_FACTORIES, TASKS, ToyTask, register_task, toy_task
from .sampling import (
    always_agree_token_share,
    per_prompt_pass_rates,
    sample_completions,
    sample_properties,
    sampled_accuracy,
)
from .threads import TOY_NUM_THREADS, toy_num_threads, toy_threads, use_toy_threads
from .warmup import WarmupRecipe, supervised_warmup

__all__ = [
    "CHATML_TEMPLATE",
    "IM_END",
    "IM_START",
    "PAD_TOKEN",
    "SHIPPED_WARM_DIR",
    "SHIPPED_WARM_SEED",
    "TASKS",
    "TASK_FACTORIES",
    "TOY_NUM_THREADS",
    "TOY_SYSTEM",
    "TOY_VERSION",
    "Split",
    "ToyTask",
    "WarmupRecipe",
    "always_agree_token_share",
    "arithmetic_reward",
    "build_toy_model",
    "build_toy_tokenizer",
    "make_arithmetic_dataset",
    "per_prompt_pass_rates",
    "problem_split",
    "register_task",
    "sample_completions",
    "sample_properties",
    "sampled_accuracy",
    "supervised_warmup",
    "toy_dataset_split",
    "toy_model_dir",
    "toy_num_threads",
    "toy_task",
    "toy_threads",
    "use_toy_threads",
]
