"""The benchmarks' testbeds: toy tasks that live in a checkout, not in the installed package.

Importing this package registers them with the package's toy task registry (`trl_ada.toy.register_task`), so that
`toy_task(name)`, `toy_model_dir(task=name)` and the trainer's toy helpers find them by name as they find the built-in
"arithmetic" task. The benchmarks import it (`learning_runs.py`, and so every worker process that runs a training
run), with `benchmarks/` on `sys.path`, as `python benchmarks/X.py` puts it.

- "columns" and "columns-epochs" (`testbeds/columns/`, its warm model in `testbeds/columns/warm/`): column arithmetic
  worked digit by digit, the learning benchmark's instrument (benchmarks/results/columns/README.md).
"""

from __future__ import annotations

from trl_ada.toy.registry import TASK_FACTORIES, register_task

register_task("columns", "testbeds.columns:columns_task")
register_task("columns-epochs", "testbeds.columns:columns_epochs_task")

# Every task a benchmark can run: the package's built-in ones and these.
TASKS = tuple(TASK_FACTORIES)
