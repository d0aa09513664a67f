"""What the wheel holds and does outside the checkout: recipes, accelerate configs, the arithmetic toy task's warm
model, py.typed, one version, and nothing of the research (under 3 MB); and the built wheel, installed in a fresh venv,
trains the toy recipe by name."""

import configparser
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import setuptools
from setuptools.config.setupcfg import read_configuration

import trl_ada
from trl_ada import toy
from trl_ada.tools import catalog

ROOT = Path(__file__).resolve().parent.parent
SETUP_CFG = ROOT / "setup.cfg"


def test_the_version_has_one_source():
    raw = configparser.ConfigParser()
    raw.read(SETUP_CFG)
    assert raw["metadata"]["version"] == "attr: trl_ada.__version__"
    assert read_configuration(SETUP_CFG)["metadata"]["version"] == trl_ada.__version__
    assert not [line for line in SETUP_CFG.read_text().splitlines() if trl_ada.__version__ in line]


def test_every_subpackage_and_the_recipes_are_packaged():
    options = read_configuration(SETUP_CFG)["options"]
    found = set(setuptools.find_packages(str(ROOT), include=["trl_ada", "trl_ada.*"]))
    assert found <= set(options["packages"]), f"list {sorted(found - set(options['packages']))} in setup.cfg"
    assert options["package_dir"] == {"trl_ada.recipes": "recipes"}  # the top-level folder ships as trl_ada/recipes
    assert (ROOT / "trl_ada" / "py.typed").is_file() and "py.typed" in options["package_data"]["trl_ada"]


def test_the_notebook_extra_installs_what_opening_the_notebook_needs():
    extras = read_configuration(SETUP_CFG)["options"]["extras_require"]
    names = {requirement.split(">")[0].split("=")[0].strip() for requirement in extras["notebook"]}
    # A front end to open it in, a Python kernel to run it, and the plotting library its cells import.
    assert names & {"jupyterlab", "notebook"} and {"ipykernel", "matplotlib"} <= names
    imports = {"matplotlib", "transformers", "trl", "trl_ada"}
    source = (ROOT / "notebooks" / "quickstart.ipynb").read_text()
    found = {word for word in imports if f"import {word}" in source or f"from {word}" in source}
    assert found == imports  # what the notebook imports: the extra's plotting library and the package's own deps


def test_the_notebook_cells_have_stable_ids_and_it_pins_the_toy_models_threads():
    """Cell ids (nbformat 4.5) stored in the file, not made up at random by each reader; one torch thread for the toy
    model, as the README's quick start does."""
    notebook = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    assert (notebook["nbformat"], notebook["nbformat_minor"]) >= (4, 5)
    ids = [cell.get("id") for cell in notebook["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), ids
    sources = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    first_toy = next(i for i, source in enumerate(sources) if "toy_model_dir()" in source)
    assert "use_toy_threads()" in sources[first_toy].split("toy_model_dir()")[0]


# -------------------------------------------------------------------------------------------------------------------
# The wheel, outside the checkout
# -------------------------------------------------------------------------------------------------------------------


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """sdist from the checkout, then the wheel from the unpacked sdist, as `python -m build` does: so the sdist must
    carry everything the wheel needs, and no stale build/ folder of the checkout can leak into the wheel."""
    out = tmp_path_factory.mktemp("dist")
    code = f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"
    sdist = out / run([sys.executable, "-c", code], cwd=ROOT).stdout.strip().splitlines()[-1]
    with tarfile.open(sdist) as archive:
        archive.extractall(out / "src", filter="data")
    (source,) = (out / "src").iterdir()
    # No build isolation: setuptools comes from this environment, so the build needs no index (CI is offline).
    run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(out)],
        cwd=out,
    )
    (built,) = out.glob("trl_ada-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_holds_recipes_configs_the_warm_models_and_py_typed(wheel):
    files = set(zipfile.ZipFile(wheel).namelist())
    for name in catalog.names():
        assert f"trl_ada/recipes/{name}.yaml" in files
    assert "trl_ada/recipes/README.md" in files and "trl_ada/py.typed" in files
    for task in toy.TASKS:
        shipped = toy.toy_task(task).shipped_dir
        for path in shipped.iterdir():
            assert f"trl_ada/{shipped.name}/{path.name}" in files
    assert not [name for name in files if name.startswith(("recipes/", "tests/", "benchmarks/"))]
    # The research stays out: no superseded task (docs/moved.md), no testbed of the benchmarks or its warm model; one
    # warm model in all, the arithmetic task's.
    modules = {name.removesuffix(".py").replace("/", ".") for name in files if name.endswith(".py")}
    gone = ("trl_ada.toy.rules", "trl_ada.toy.reasoning", "trl_ada.toy.columns")
    assert not [m for m in modules if m.startswith(gone) or "testbeds" in m]
    assert not [name for name in files if "columns" in name or "toy_warm_" in name]
    assert [name for name in files if name.endswith(".safetensors")] == ["trl_ada/toy_warm/model.safetensors"]
    assert wheel.name.startswith(f"trl_ada-{trl_ada.__version__}-")
    metadata = zipfile.ZipFile(wheel).read(f"trl_ada-{trl_ada.__version__}.dist-info/METADATA").decode()
    assert f"\nVersion: {trl_ada.__version__}\n" in metadata
    # The license the metadata declares ships as its text, the checkout's LICENSE.
    assert "\nLicense: Apache-2.0\n" in metadata or "\nLicense-Expression: Apache-2.0\n" in metadata
    (license_file,) = [name for name in files if name.endswith("/LICENSE") and ".dist-info/" in name]
    assert zipfile.ZipFile(wheel).read(license_file) == (ROOT / "LICENSE").read_bytes()


@pytest.mark.slow
def test_the_wheel_is_under_3_mb_built_and_installed(wheel):
    """The wheel under 3 MB, and what it installs (its files unpacked) under 3 MiB: 2.1 MB of it is the arithmetic
    task's warm model, which `make demo` starts from."""
    installed = sum(info.file_size for info in zipfile.ZipFile(wheel).infolist())
    assert wheel.stat().st_size < 3_000_000 and installed < 3 * 2**20, (wheel.stat().st_size, installed)


@pytest.mark.slow
def test_the_installed_wheel_trains_a_packaged_recipe_by_name_outside_the_checkout(wheel, tmp_path):
    """A fresh venv holding only the wheel (dependencies: this environment's, through a .pth file, since CI has no
    index). Proves the wheel's contents and entry point work outside the checkout, not that pip resolves the
    dependencies (which `pip check` confirms this environment satisfies)."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)])
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    ours = Path(run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    (site / "deps-from-test-env.pth").write_text(f"{ours}\n")  # appended after site: the wheel's trl_ada comes first
    run([sys.executable, "-m", "pip", "--python", str(python), "check"])

    env = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "TRL_ADA_CACHE")
    }
    env |= {"TRL_ADA_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    work = tmp_path / "work"
    work.mkdir()
    trl_ada_cmd = str(venv / "bin" / "trl-ada")

    def in_venv(*args):
        return run([*args], cwd=work, env=env).stdout

    where = in_venv(str(python), "-c", "import trl_ada.tools.catalog as c; print(c.__file__, c.recipes_dir())")
    module, recipes = map(Path, where.split())
    assert module.is_relative_to(site) and recipes == site / "trl_ada" / "recipes"
    assert in_venv(trl_ada_cmd, "--version").strip() == f"trl-ada {trl_ada.__version__}"
    listed = [line.split()[0] for line in in_venv(trl_ada_cmd, "recipes").splitlines()]
    assert listed == catalog.names()
    zero2 = Path(in_venv(trl_ada_cmd, "recipes", "--path", "accelerate/zero2").strip())
    assert zero2 == recipes / "accelerate" / "zero2.yaml" and zero2.is_file()

    out = work / "out"
    stdout = in_venv(
        trl_ada_cmd, "train", "--config", "toy-cpu", "--max_steps", "2", "--output_dir", str(out),
        "--eval_strategy", "no", "--eval_on_start", "false", "--disable_tqdm", "true",
    )  # fmt: skip
    assert "Reinforce-Ada (balanced) on 1 process(es): 16 prompts x 4 kept completions" in stdout
    assert (out / "model.safetensors").is_file()
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())  # warm model: the shipped one
    assert not (work / "recipes").exists()
