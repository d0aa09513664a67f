"""What a benchmark ran on, recorded next to its numbers (absolute times mean little without it)."""

from __future__ import annotations

import os
import platform


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, str | int | float]:
    """CPU model and count, library versions, and the 1-minute load average at the time of the call.

    A load average above the core count means other processes shared the CPU: wall-time ratios are then noisy.
    """
    import torch
    import transformers
    import trl

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 0,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "load_average_1min": round(load, 2),
    }


def describe(info: dict[str, str | int | float]) -> str:
    """One line for a report, e.g. ``AMD EPYC, 2 cores, Python 3.11.7, torch 2.13.0+cpu, trl 1.16.0 (load 1.9)``."""
    return (
        f"{info['cpu']}, {info['cores']} cores, Python {info['python']}, torch {info['torch']}, "
        f"transformers {info['transformers']}, trl {info['trl']} (1-min load average {info['load_average_1min']})"
    )
