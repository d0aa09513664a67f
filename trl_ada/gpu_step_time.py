"""`python -m trl_ada.gpu_step_time`, the documented command, kept at this path: it runs
`trl_ada.tools.gpu_step_time`."""

import sys

from .tools.gpu_step_time import main

if __name__ == "__main__":
    sys.exit(main())
