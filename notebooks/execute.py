"""Run notebooks/quickstart.ipynb top to bottom, headless, on this interpreter, and store it with its outputs.

    python notebooks/execute.py          # what `make notebook` runs: rewrites notebooks/quickstart.ipynb

The notebook is executed with nbclient on a kernel that is this very interpreter (a kernel spec of our own, found
first through JUPYTER_PATH), in a temporary working directory (its `outputs/` stay out of the repository), on one
torch thread, offline. What is stored is what a reader should see on the repository page: the cells' printed results
and plots. Streams written to stderr (transformers' warnings, progress bars) are left out, since they hold this
machine's paths and change from run to run, and so are execution timings; `tests/test_notebook.py` runs the same
code and checks both the fresh outputs and the stored ones.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
from typing import Any

NOTEBOOK = pathlib.Path(__file__).resolve().parent / "quickstart.ipynb"
KERNEL_NAME = "trl-ada-notebook-python"  # unique, so no installed kernel spec of the same name can shadow ours
TIMEOUT = 600  # per cell, seconds; a warm cache runs the whole notebook in about two minutes


def write_kernel_spec(root: pathlib.Path) -> None:
    """A kernel spec under `root/kernels` that launches ipykernel on this interpreter.

    The stock "python3" spec says `python` and jupyter_client swaps in `sys.executable`, but a user-level spec of
    that name may point at another Python; a spec of our own, found first through JUPYTER_PATH, cannot.
    """
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "trl-ada notebook kernel",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


def execute(notebook: Any, workdir: pathlib.Path, scratch: pathlib.Path, timeout: int = TIMEOUT) -> Any:
    """Execute `notebook` (an nbformat node, changed in place and returned) with `workdir` as its working directory.

    The kernel inherits this process's environment with the hub offline, one torch thread unless OMP_NUM_THREADS says
    otherwise (on shared cores two intra-op threads spin-wait for each other: 5x the CPU time for the same results),
    and matplotlib's inline backend (a headless machine may set Agg globally). `scratch` holds the kernel spec.
    """
    import nbclient

    write_kernel_spec(scratch / "jupyter")
    names = ("JUPYTER_PATH", "MPLBACKEND", "OMP_NUM_THREADS", "HF_HUB_OFFLINE")
    saved = {name: os.environ.get(name) for name in names}
    os.environ["JUPYTER_PATH"] = str(scratch / "jupyter")
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        client = nbclient.NotebookClient(
            notebook,
            kernel_name=KERNEL_NAME,
            timeout=timeout,
            record_timing=False,
            resources={"metadata": {"path": str(workdir)}},
        )
        client.execute()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return notebook


def for_the_page(notebook: Any, kernelspec: dict[str, Any]) -> Any:
    """The executed notebook as it is stored: stderr streams dropped, the original kernel spec in its metadata."""
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [out for out in cell.outputs if not (out.output_type == "stream" and out.name == "stderr")]
    notebook.metadata["kernelspec"] = kernelspec
    return notebook


def main(argv: list[str] | None = None) -> int:
    """Execute the notebook and write it back with its outputs."""
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", nargs="?", type=pathlib.Path, default=NOTEBOOK)
    args = parser.parse_args(argv)
    notebook = nbformat.read(args.notebook, as_version=4)
    kernelspec = dict(notebook.metadata.get("kernelspec", {}))
    for cell in notebook.cells:  # start clean: no output of an earlier run survives a failing cell
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    with tempfile.TemporaryDirectory() as scratch:
        workdir = pathlib.Path(scratch) / "work"
        workdir.mkdir()
        execute(notebook, workdir, pathlib.Path(scratch))
    nbformat.write(for_the_page(notebook, kernelspec), args.notebook)
    print(f"wrote {args.notebook} with its outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
