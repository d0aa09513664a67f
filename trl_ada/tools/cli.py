"""The ``trl-ada`` command: ``trl-ada {train,recipes,prepare,eval,simulate,demo} [options]``.

Each subcommand lives in its own module with a ``main(argv)`` function, imported only when used, so
``trl-ada simulate`` does not pay for importing TRL, and ``trl-ada demo`` can pin torch's numerics before torch loads.

Exit codes, the same for every subcommand (docs/cli.md's table): 0 done; 1 the command was well formed but the run
failed (no network, a model that cannot be loaded, data that lacks a split or column the run needs, data with nothing
to keep); 2 a usage error (a bad flag or value, a file or folder named on the command line that does not exist); both
reported as one ``trl-ada <command>: error: ...`` line; 130 interrupted (Ctrl-C), as a shell reports a process ended
by SIGINT.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2  # what argparse itself exits with on a bad flag
EXIT_INTERRUPTED = 130  # 128 + SIGINT

SUBCOMMANDS = {
    "train": (
        "trl_ada.tools.train",
        "train with ReinforceAdaTrainer from a YAML recipe (file or packaged name) and flags",
    ),
    "recipes": (
        "trl_ada.tools.catalog",
        "list the packaged recipes and accelerate configs; print one's path or contents",
    ),
    "prepare": ("trl_ada.tools.prepare", "build a training set: prompt template, pass-rate estimate, difficulty band"),
    "eval": ("trl_ada.tools.evaluate", "avg@k accuracy on math benchmarks, written as JSON and a Markdown table"),
    "simulate": ("trl_ada.tools.simulate", "budget simulator: samples, rounds and signal per strategy, no model"),
    "demo": ("trl_ada.tools.demo", "GRPO vs Reinforce-Ada on the built-in toy task, on CPU, reproducible bit for bit"),
}


def show_defaults(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Append ``(default: X)`` to the help of every option that has a default worth stating, and return ``parser``.

    argparse's ArgumentDefaultsHelpFormatter would also print ``(default: None)``, ``(default: False)`` and
    ``(default: [])``, and nothing at all for options without a help string. Options whose help already names their
    default are left as they are. Lists are shown as they are typed: ``4 8 16``.
    """
    for action in parser._actions:
        default = action.default
        if not action.option_strings or default is None or default is False or default is argparse.SUPPRESS:
            continue
        if isinstance(default, list | tuple | str) and len(default) == 0:
            continue
        if action.help == argparse.SUPPRESS or "default" in (action.help or "").lower():
            continue
        shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else str(default)
        note = f"(default: {shown.replace('%', '%%')})"  # help strings are %-formatted by argparse
        action.help = f"{action.help} {note}" if action.help else note
    return parser


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [f"  {name.ljust(width)}  {text}" for name, (_, text) in SUBCOMMANDS.items()]
    return (
        "usage: trl-ada <command> [options]\n\ncommands:\n"
        + "\n".join(lines)
        + ("\n\nRun `trl-ada <command> --help` for a command's options.")
    )


# transformers 5 deprecates its gradient-checkpointing names, which TRL's own GRPOConfig default and trainer still use:
# every command would print that warning, before its one-line error too, for nothing the user set or can change.
LIBRARY_DEPRECATIONS = r".*`?(is_)?gradient_checkpointing(_enable|_disable)?`? is deprecated"


def quiet_library_deprecations() -> None:
    """Hide the transformers deprecation warnings TRL's own calls raise (`LIBRARY_DEPRECATIONS`); nothing else."""
    warnings.filterwarnings("ignore", message=LIBRARY_DEPRECATIONS, category=FutureWarning)


def main(argv: list[str] | None = None) -> int:
    """Run ``trl-ada <command> [options]`` and return its exit code (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return EXIT_OK
    if argv[0] in ("-V", "--version"):
        from .. import __version__

        print(f"trl-ada {__version__}")
        return EXIT_OK
    command, rest = argv[0], argv[1:]
    if command not in SUBCOMMANDS:
        print(f"trl-ada: error: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return EXIT_USAGE
    quiet_library_deprecations()
    if command == "demo":  # before anything imports torch: its kernels and MKL's are chosen when it loads
        from . import reproducible

        reproducible.pin()
    try:
        module = importlib.import_module(SUBCOMMANDS[command][0])
        result = module.main(rest)
    except KeyboardInterrupt:  # `trl-ada train` reports its own, with the checkpoint to resume from
        print(f"\ntrl-ada {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return result if isinstance(result, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
