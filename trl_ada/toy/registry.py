"""The toy tasks by name: where each one is defined (:data:`TASK_FACTORIES`) and what it is (:func:`toy_task`, a
:class:`ToyTask`)."""

from __future__ import annotations

import importlib

from .task import ToyTask

# Task name -> "module:function": the module that defines the task, and its function returning the task's ToyTask.
# A module starting with "." is this package's (imported on first use; a task module imports ToyTask from .task). A
# new built-in task is one more line; a task defined outside the package is added with `register_task`.
TASK_FACTORIES: dict[str, str] = {
    "arithmetic": ".arithmetic:arithmetic_task",
}
# The built-in tasks. `TASK_FACTORIES` also holds the ones registered since (the benchmarks' columns task).
TASKS = tuple(TASK_FACTORIES)


def register_task(name: str, factory: str) -> None:
    """Make ``toy_task(name)`` (and ``toy_model_dir(task=name)``) the task that ``factory`` ("module:function", an
    importable module) returns. A checkout's ``benchmarks/testbeds`` registers the columns task this way."""
    if TASK_FACTORIES.get(name, factory) != factory:
        raise ValueError(f"toy task {name!r} is already registered as {TASK_FACTORIES[name]!r}")
    TASK_FACTORIES[name] = factory


def toy_task(name: str = "arithmetic") -> ToyTask:
    """The toy task ``name``: "arithmetic" (``47-8``, the default; :mod:`trl_ada.toy.arithmetic`), or one registered
    with :func:`register_task`."""
    if name not in TASK_FACTORIES:
        raise ValueError(f"unknown toy task {name!r}; expected one of {tuple(TASK_FACTORIES)}")
    module, function = TASK_FACTORIES[name].split(":")
    return getattr(importlib.import_module(module, __package__), function)()
