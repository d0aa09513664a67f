"""`python -m trl_ada.reproducible`, the documented command, kept at this path: it runs `trl_ada.tools.reproducible`
(whether this process runs with the pinned numerics)."""

import sys

from .tools.reproducible import main

if __name__ == "__main__":
    sys.exit(main())
