"""`accelerate launch ... -m trl_ada.train` and `python -m trl_ada.train`, the documented launch commands (the
recipes name them), kept at this path: they run `trl-ada train`, whose code is `trl_ada.tools.train`."""

import sys

from .tools.train import main

if __name__ == "__main__":
    sys.exit(main(launcher="python -m trl_ada.train"))
