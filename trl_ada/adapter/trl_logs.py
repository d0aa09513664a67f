"""Writing a step's metrics into GRPOTrainer's own logs (its `_metrics`, `_pending_extra_logs`, `_logs`): the trainer
passes the dict or list, these functions change it in place. The values come from the core (`trl_ada.core.metrics`,
`trl_ada.core.step`); only where they go is TRL's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..core.metrics import LENGTH_METRICS, TOOL_METRICS

__all__ = ["LENGTH_METRICS", "TOOL_METRICS", "log_step", "metric_marks", "pop_columns", "replace_since", "show_rows"]


def pop_columns(logs: dict[str, list], num_rows: int) -> dict[str, list]:
    """Take from `logs` (GRPOTrainer's pending `log_extra` columns) the columns of the last call, the ones holding
    `num_rows` values, so only the kept rows' can be logged."""
    taken = {key: values for key, values in logs.items() if len(values) == num_rows}
    for key in taken:
        del logs[key]
    return taken


def metric_marks(metrics: Mapping[str, list], names: Sequence[str]) -> dict[str, int]:
    """Where each named metric's entries stand now (`metrics` is one mode of the trainer's `_metrics`)."""
    return {name: len(metrics[name]) for name in names}


def replace_since(metrics: Mapping[str, list], marks: Mapping[str, int], values: Mapping[str, float]) -> None:
    """Replace each metric's entries appended since `marks` (one per generation call) by its one value `values`
    gives over the whole step."""
    for name, value in values.items():
        entries = metrics[name]
        del entries[marks.get(name, len(entries)) :]
        entries.append(value)


def log_step(
    metrics: Mapping[str, list],
    signal: Mapping[str, float],
    first_draws: Mapping[str, float],
    step: Mapping[str, float],
) -> None:
    """Log a step into `metrics` (the trainer's training metrics): the `signal` metrics are appended; GRPOTrainer's
    `reward*` entries just logged over the kept rows (which downsampling chose by reward) move to `ada/kept_*` and the
    `first_draws`' take their place; then the `step` metrics are appended."""
    for name, value in signal.items():
        metrics[name].append(value)
    for name, value in first_draws.items():
        metrics[f"ada/kept_{name}"].append(metrics[name][-1])
        metrics[name][-1] = value
    for name, value in step.items():
        metrics[name].append(value)


def show_rows(logged: list, values: list) -> None:
    """Put `values` in place of the last as many entries of a completions-table column (GRPOTrainer's `_logs`)."""
    for _ in range(min(len(values), len(logged))):
        logged.pop()
    logged.extend(values)
