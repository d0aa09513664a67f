"""What a benchmark ran on, recorded next to its numbers (absolute times mean little without it)."""

from __future__ import annotations

import hashlib
import os
import pathlib
import platform
import subprocess


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags_digest() -> str | None:
    """A short digest of the CPU's instruction-set flags: two machines that print the same model name ("AMD EPYC")
    can still run different kernels, and so round differently."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                    return hashlib.sha256(flags.encode()).hexdigest()[:12]
    except OSError:
        pass
    return None


def code_version() -> str | None:
    """The checkout's commit, with "-dirty" when files differ from it; None outside a git checkout."""
    root = pathlib.Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("-dirty" if dirty else "")


def machine_info() -> dict[str, str | int | float | None]:
    """CPU model, count, kernel set (torch's CPU capability, a digest of the instruction-set flags), library
    versions, the code's commit, and the 1-minute load average at the time of the call.

    A load average above the core count means other processes shared the CPU: wall-time ratios are then noisy. The
    kernel set, the versions and the commit are what a bit-for-bit rerun depends on (`learning_reproduce.py`).
    """
    import torch
    import transformers
    import trl

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 0,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flags": _cpu_flags_digest(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "code": code_version(),
        "load_average_1min": round(load, 2),
    }


def describe(info: dict[str, str | int | float]) -> str:
    """One line for a report, e.g. ``AMD EPYC, 2 cores, Python 3.11.7, torch 2.13.0+cpu, trl 1.16.0 (load 1.9)``."""
    return (
        f"{info['cpu']}, {info['cores']} cores, Python {info['python']}, torch {info['torch']}, "
        f"transformers {info['transformers']}, trl {info['trl']} (1-min load average {info['load_average_1min']})"
    )
