"""`python -m trl_ada.demo`, the documented command, kept at this path with the demo's names: the demo is
`trl_ada.tools.demo`, and `from trl_ada.demo import X` gives that module's `X`."""

import sys
from typing import Any

from .tools import demo as _demo
from .tools import reproducible


def __getattr__(name: str) -> Any:
    return getattr(_demo, name)


if __name__ == "__main__":
    if not reproducible.is_pinned():
        reproducible.restart_pinned("trl_ada.demo", sys.argv[1:])
    _demo.main()
