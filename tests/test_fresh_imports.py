"""Every module of the package imports on its own, first, in an interpreter that has imported nothing of trl_ada: an
import circle that a lazy or dynamic import hides from the static check (tests/test_layers.py) fails here as
"partially initialized module".

The driver is one subprocess of a fresh interpreter. It imports the third-party stack trl_ada sits on (torch,
transformers, TRL, datasets, ...) once, and nothing of trl_ada; then it forks a child per module, and each child
imports that one module in a process whose `sys.modules` holds no trl_ada module. The fork saves each child the
seconds the third-party stack takes to load (87 modules x 5-18 s each as separate interpreters), and changes nothing
this test is about: which trl_ada module imports which, and in what order.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Run as `python -c DRIVER PACKAGE_DIR PACKAGE [PRELOAD...]`: prints {module: error} for the modules that fail.
DRIVER = textwrap.dedent(
    """
    import importlib, json, os, pathlib, sys, traceback
    folder, package, *preload = sys.argv[1:]
    for name in preload:  # the third-party stack, loaded once before the forks; never the package
        importlib.import_module(name)
    assert not [m for m in sys.modules if m == package or m.startswith(package + ".")], "the package is loaded"
    root = pathlib.Path(folder)
    modules = sorted(
        ".".join((package, *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        for path in root.rglob("*.py")
    )
    failures = {}
    for module in modules:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: one module, first
            os.close(read)
            try:
                importlib.import_module(module)
                message = ""
            except BaseException:
                message = traceback.format_exc(limit=-3)
            os.write(write, message.encode())
            os.close(write)
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            message = pipe.read()
        _, status = os.waitpid(pid, 0)
        if message or status:
            failures[module] = message or f"exit status {status}"
    print(json.dumps({"modules": modules, "failures": failures}))
    """
)

# What trl_ada imports at its modules' tops that is slow to load: loaded once by the driver, before the forks.
PRELOAD = ["torch", "numpy", "datasets", "transformers", "accelerate", "peft", "trl", "trl.trainer.grpo_trainer"]


def fresh_imports(folder: Path, package: str, preload: list[str], pythonpath: Path) -> dict:
    env = {"PYTHONPATH": str(pythonpath), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, str(folder), package, *preload],
        cwd=pythonpath,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_a_circle_fails_when_its_module_is_imported_first(tmp_path):
    """The driver sees a circle: `x` imports `y`, which takes a name from `x` before `x` has defined it."""
    package = tmp_path / "circle_pkg"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "x.py").write_text("from .y import Y\nX = 1\n")
    (package / "y.py").write_text("from .x import X\nY = X\n")
    (package / "inner" / "z.py").write_text("from ..x import X\n")
    found = fresh_imports(package, "circle_pkg", [], tmp_path)
    assert found["modules"] == ["circle_pkg", "circle_pkg.inner", "circle_pkg.inner.z", "circle_pkg.x", "circle_pkg.y"]
    assert sorted(found["failures"]) == ["circle_pkg.inner.z", "circle_pkg.x", "circle_pkg.y"]
    assert all("partially initialized module" in error for error in found["failures"].values())


@pytest.mark.slow
def test_every_module_imports_first_in_a_fresh_interpreter():
    found = fresh_imports(ROOT / "trl_ada", "trl_ada", PRELOAD, ROOT)
    assert len(found["modules"]) > 80
    assert {"trl_ada", "trl_ada.toy.sampling", "trl_ada.toy.registry", "trl_ada.adapter.trainer"} <= set(
        found["modules"]
    )
    assert found["failures"] == {}
