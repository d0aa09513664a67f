"""The package's layers as checks (docs/architecture.md): the import-linter contracts in pyproject.toml hold (the
adapter's schedules above its engines among them), and each one fails when an import that breaks it is planted in a
copy of the package; no import circle anywhere in the package, toy tasks included; no module over 600 lines in
`trl_ada/` or `benchmarks/`, and the trainer at most 450."""

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
IMPORT_LINTER = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {contract["name"]: contract for contract in IMPORT_LINTER["contracts"]}
LAYERS = next(name for name, contract in CONTRACTS.items() if "trl_ada.tools" in contract.get("layers", ()))
SCHEDULES = next(name for name, c in CONTRACTS.items() if "trl_ada.adapter.engines" in c.get("layers", ()))
NO_MODEL_STACK = next(name for name, c in CONTRACTS.items() if "transformers" in c.get("forbidden_modules", ()))
NO_TORCH = next(name for name, c in CONTRACTS.items() if "torch" in c.get("forbidden_modules", ()))
NO_TOY = next(name for name, c in CONTRACTS.items() if "trl_ada.toy" in c.get("forbidden_modules", ()))
MAX_LINES = 600
MAX_TRAINER_LINES = 450  # the trainer holds TRL's seams; the step is the core's, checkpoints their own module


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter on the package under `root`, with `root`'s pyproject.toml (as `lint-imports` run there)."""
    command = "import sys, importlinter.cli as c; sys.exit(c.lint_imports(no_cache=True, no_logo=True))"
    env = {**os.environ, "PYTHONPATH": str(root)}  # before the editable install's finder, which comes last
    return subprocess.run(
        [sys.executable, "-c", command], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def verdicts(output: str) -> dict[str, str]:
    """Each contract's verdict (KEPT or BROKEN) in lint-imports' report."""
    found = {}
    for name in CONTRACTS:
        lines = [line for line in output.splitlines() if line.startswith(f"{name} ")]
        found[name] = lines[0].rsplit(" ", 1)[-1] if lines else "missing"
    return found


def test_the_layer_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert verdicts(result.stdout) == dict.fromkeys(CONTRACTS, "KEPT")
    assert len(CONTRACTS) == 5


# (module file, planted line, the one contract it breaks). A tool that imports more would break more: the forbidden
# contracts count imports through other modules too (`from ..tools import cli` in the core reaches TRL through the
# package's own `__init__`), so each plant here reaches nothing else that is forbidden.
PLANTS = {
    "core imports a tool": ("trl_ada/core/metrics.py", "from ..tools import heldout", LAYERS),
    "adapter imports a tool": ("trl_ada/adapter/step_io.py", "from ..tools import heldout", LAYERS),
    "core imports transformers": ("trl_ada/core/metrics.py", "import transformers", NO_MODEL_STACK),
    "engine imports torch": ("trl_ada/core/engine/pool.py", "import torch", NO_TORCH),
    "adapter imports a toy task": ("trl_ada/adapter/trainer.py", "from ..toy import toy_task", NO_TOY),
    "engine imports a schedule": ("trl_ada/adapter/engines/base.py", "from ..schedules import rounds", SCHEDULES),
}


@pytest.mark.parametrize("plant", list(PLANTS.values()), ids=list(PLANTS))
def test_a_planted_import_breaks_its_contract(tmp_path, plant):
    """A copy of the package with one import added, inside a function as a lazy import would be: lint-imports fails,
    the contract it breaks is BROKEN (naming the planted module), every other contract KEPT."""
    path, line, contract = plant
    shutil.copytree(ROOT / "trl_ada", tmp_path / "trl_ada", ignore=shutil.ignore_patterns("__pycache__", "toy_warm*"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / path
    assert target.is_file(), path
    with target.open("a") as module:
        module.write(f"\n\ndef _planted():\n    {line}\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    assert verdicts(result.stdout) == {name: "BROKEN" if name == contract else "KEPT" for name in CONTRACTS}
    planted = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    assert planted in result.stdout


def import_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import circles of a module graph (module -> the modules it imports): each strongly connected component
    of more than one module, and each module that imports itself, as a sorted list (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.get(module, ()):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1 or module in graph.get(module, ()):
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def module_graph(package: str) -> dict[str, set[str]]:
    """Every module of `package` and the modules of it each one imports (at the top, in a function or under
    TYPE_CHECKING), as grimp reads the source."""
    graph = grimp.build_graph(package, cache_dir=None)
    return {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}


def test_import_cycles_finds_circles_and_only_them():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"a"}, "b": {"a"}}) == [["a"]]
    assert import_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [["a", "b"], ["c", "d"]]


def test_a_lazy_import_that_closes_a_circle_is_found(tmp_path, monkeypatch):
    """The circle the toy tasks had (arithmetic -> warmup -> sampling -> arithmetic, the last import inside a
    function), in a package of its own."""
    package = tmp_path / "circle_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "arithmetic.py").write_text("from .warmup import supervised_warmup\n")
    (package / "warmup.py").write_text("from .sampling import sampled_accuracy\n")
    (package / "sampling.py").write_text("def sampled_accuracy():\n    from .arithmetic import reward\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cycles = import_cycles(module_graph("circle_pkg"))
    assert cycles == [["circle_pkg.arithmetic", "circle_pkg.sampling", "circle_pkg.warmup"]]


def with_task_factories(graph: dict[str, set[str]], factories: Mapping[str, str]) -> dict[str, set[str]]:
    """`graph` with the imports the toy task registry makes at run time (`importlib`, which grimp cannot read): the
    registry imports each task's module (`TASK_FACTORIES`, "module:function", relative to `trl_ada.toy`)."""
    modules = {f"trl_ada.toy{factory.split(':')[0]}" for factory in factories.values() if factory.startswith(".")}
    return graph | {"trl_ada.toy.registry": graph.get("trl_ada.toy.registry", set()) | modules}


def test_a_circle_through_the_task_registry_is_found():
    """The circle the toy tasks had at run time: sampling -> registry (a function-level import), registry -> arithmetic
    (the registry's dynamic import), arithmetic -> warmup -> sampling."""
    graph = {
        "trl_ada.toy.sampling": {"trl_ada.toy.registry"},
        "trl_ada.toy.registry": set(),
        "trl_ada.toy.arithmetic": {"trl_ada.toy.registry", "trl_ada.toy.warmup"},
        "trl_ada.toy.warmup": {"trl_ada.toy.sampling"},
    }
    assert import_cycles(graph) == []
    found = import_cycles(with_task_factories(graph, {"arithmetic": ".arithmetic:arithmetic_task"}))
    assert found == [["trl_ada.toy.arithmetic", "trl_ada.toy.registry", "trl_ada.toy.sampling", "trl_ada.toy.warmup"]]


def test_the_package_has_no_import_circle():
    from trl_ada.toy.registry import TASK_FACTORIES

    graph = with_task_factories(module_graph("trl_ada"), TASK_FACTORIES)
    assert {"trl_ada.core.engine", "trl_ada.adapter.trainer", "trl_ada.tools.cli", "trl_ada.toy.arithmetic"} <= set(
        graph
    )
    assert import_cycles(graph) == []


def test_no_module_is_over_600_lines():
    modules = sorted(path for folder in ("trl_ada", "benchmarks") for path in (ROOT / folder).rglob("*.py"))
    assert len(modules) > 80
    lengths = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in modules}
    assert {path: n for path, n in lengths.items() if n > MAX_LINES} == {}


def test_the_trainer_is_at_most_450_lines():
    assert len((ROOT / "trl_ada" / "adapter" / "trainer.py").read_text().splitlines()) <= MAX_TRAINER_LINES
