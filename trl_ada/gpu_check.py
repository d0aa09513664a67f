"""`python -m trl_ada.gpu_check`, the documented command, kept at this path: it runs `trl_ada.tools.gpu_check`."""

import sys

from .tools.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
