"""The built-in toy tasks: what each one is (:class:`ToyTask`) and where it is defined (:data:`TASK_FACTORIES`)."""

from __future__ import annotations

import importlib

from .task import ToyTask

# Task name -> "module:function": the module of this package that defines the task, and its function returning the
# task's ToyTask. Imported on first use (a task module imports ToyTask from .task). A new task is one more line.
TASK_FACTORIES: dict[str, str] = {
    "arithmetic": "arithmetic:arithmetic_task",
    "reasoning": "reasoning:reasoning_task",
    "rules": "rules:rules_task",
    "rules-epochs": "rules:rules_epochs_task",
    "columns": "columns:columns_task",
    "columns-epochs": "columns:columns_epochs_task",
}
TASKS = tuple(TASK_FACTORIES)


def toy_task(name: str = "arithmetic") -> ToyTask:
    """The built-in toy task ``name``, one of :data:`TASKS`: "arithmetic" (``47-8``, the default;
    :mod:`trl_ada.toy.arithmetic`) or "reasoning" (``7+5-3+8``, worked step by step; :mod:`trl_ada.toy.reasoning`)."""
    if name not in TASK_FACTORIES:
        raise ValueError(f"unknown toy task {name!r}; expected one of {TASKS}")
    module, function = TASK_FACTORIES[name].split(":")
    return getattr(importlib.import_module(f".{module}", __package__), function)()
