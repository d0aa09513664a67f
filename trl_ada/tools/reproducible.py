"""Bit-for-bit reproducible CPU runs of the toy model: what ``trl-ada demo`` (``make demo``) pins, and why.

Sampling makes RL chaotic: a last-bit difference in one logit can flip one sampled token, which changes a reward, a
gradient and every number after it. Seeds alone are not enough; every floating-point operation must also run the
same kernel in the same order. These environment variables are meant to pin that on any x86-64 CPU with AVX2 (checked
on one such CPU: docs/toy-task.md says what was measured):

- ``OMP_NUM_THREADS=1``, ``MKL_NUM_THREADS=1``: one thread, so no reduction is split by core count. The toy
  model's matrices are too small to gain from more (benchmarks/README.md#threads-for-the-toy-model).
- ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility on its SSE2 code branch. By default MKL picks
  kernels per instruction set, and AVX2 and AVX-512 kernels round differently. Its AVX2 branch would be faster, but
  on non-Intel CPUs (such as this project's AMD machines) MKL ignores it and dispatches per CPU; the SSE2 branch
  holds on both.
- ``ATEN_CPU_CAPABILITY=avx2``: torch's own vectorized kernels (softmax, norms, sampling noise, the optimizer) at AVX2
  on every CPU that has it; an AVX-512 CPU would otherwise run its AVX-512 variants.

They are read when torch and MKL load, so they must be in the environment before ``import torch``: ``trl-ada demo``
sets them before importing anything, and ``python -m trl_ada.demo`` restarts itself with them. Left alone: oneDNN
(the demo ran no oneDNN primitive) and ``torch.use_deterministic_algorithms`` (the demo logged the same bits with it
on). The price is MKL's SSE2 code: about twice the training time of one unpinned thread on the toy model.

Not covered: CPUs without AVX2 (torch then falls back to an older kernel set), non-x86 CPUs (ARM runs other
kernels), and other versions of torch or transformers. The demo says so on stderr when it detects the first two.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

PINNED_ENV: dict[str, str] = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MKL_CBWR": "COMPATIBLE",
    "ATEN_CPU_CAPABILITY": "avx2",
}
EXPECTED_CAPABILITY = "AVX2"  # what torch.backends.cpu.get_cpu_capability() reports when the pin took effect


def is_pinned(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default: this process's) holds every pinned setting."""
    environ = os.environ if environ is None else environ
    return all(environ.get(name) == value for name, value in PINNED_ENV.items())


def pinned_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``environ`` (default: this process's) with the pinned settings applied."""
    return {**(os.environ if environ is None else environ), **PINNED_ENV}


def pin() -> None:
    """Apply the pinned settings to this process. Effective only before torch is imported; raises if it already is."""
    if "torch" in sys.modules and not is_pinned():
        raise RuntimeError(
            f"torch is already imported, so its kernels and MKL's are already chosen: set {describe_pins()} before "
            "starting Python"
        )
    os.environ.update(PINNED_ENV)


def describe_pins() -> str:
    return " ".join(f"{name}={value}" for name, value in PINNED_ENV.items())


def restart_pinned(module: str, argv: Sequence[str]) -> NoReturn:
    """Replace this process with ``python -m module *argv`` under the pinned settings (says so on stderr)."""
    print(f"[trl_ada] restarting `python -m {module}` with {describe_pins()}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], pinned_environ())


def problems() -> list[str]:
    """Why this process may not reproduce the pinned numbers (empty when it should): call after importing torch."""
    import torch

    found = [f"{name} is {os.environ.get(name)!r}, not {value!r}" for name, value in PINNED_ENV.items()
             if os.environ.get(name) != value]  # fmt: skip
    if torch.get_num_threads() != 1:
        found.append(f"torch runs {torch.get_num_threads()} threads, not 1")
    capability = torch.backends.cpu.get_cpu_capability()
    if capability != EXPECTED_CAPABILITY:
        found.append(f"torch runs its {capability} kernels, not {EXPECTED_CAPABILITY} (this CPU has no AVX2?)")
    return found


def main() -> int:
    """``python -m trl_ada.reproducible``: whether this process runs pinned, and what stands in the way if not."""
    import torch

    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()} kernels, {torch.get_num_threads()} "
          f"thread(s); MKL_CBWR={os.environ.get('MKL_CBWR')}")  # fmt: skip
    found = problems()
    print("pinned: the toy model's runs reproduce bit for bit" if not found else "not pinned: " + "; ".join(found))
    return 0 if not found else 1


if __name__ == "__main__":
    sys.exit(main())
