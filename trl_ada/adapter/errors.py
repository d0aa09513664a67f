"""The two errors a user can act on, raised by the trainer's input checks (a model name that names no model) and by
the command line: each is reported as one message without a traceback, with the exit code `trl_ada.tools.cli` gives
it (docs/cli.md's table)."""


class UsageError(ValueError):
    """Input the user can fix on the command line; reported as one message, without a traceback, exit code 2."""


class RunError(RuntimeError):
    """A well-formed command that cannot run here (no network, a model that does not load); one message, exit 1."""
