"""The ``trl-ada`` command: ``trl-ada {train,recipes,prepare,eval,simulate,demo} [options]``.

Each subcommand lives in its own module with a ``main(argv)`` function, imported only when used, so
``trl-ada simulate`` does not pay for importing TRL, and ``trl-ada demo`` can pin torch's numerics before torch loads.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {
    "train": ("trl_ada.train", "train with ReinforceAdaTrainer from a YAML recipe (file or packaged name) and flags"),
    "recipes": ("trl_ada.catalog", "list the packaged recipes and accelerate configs; print one's path or contents"),
    "prepare": ("trl_ada.prepare", "build a training set: prompt template, pass-rate estimate, difficulty band"),
    "eval": ("trl_ada.evaluate", "avg@k accuracy on math benchmarks, written as JSON and a Markdown table"),
    "simulate": ("trl_ada.simulate", "budget simulator: samples, rounds and signal per strategy, no model"),
    "demo": ("trl_ada.demo", "GRPO vs Reinforce-Ada on the built-in toy task, on CPU, reproducible bit for bit"),
}


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [f"  {name.ljust(width)}  {text}" for name, (_, text) in SUBCOMMANDS.items()]
    return (
        "usage: trl-ada <command> [options]\n\ncommands:\n"
        + "\n".join(lines)
        + ("\n\nRun `trl-ada <command> --help` for a command's options.")
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from . import __version__

        print(f"trl-ada {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in SUBCOMMANDS:
        print(f"trl-ada: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    if command == "demo":  # before anything imports torch: its kernels and MKL's are chosen when it loads
        from . import reproducible

        reproducible.pin()
    module = importlib.import_module(SUBCOMMANDS[command][0])
    result = module.main(rest)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
