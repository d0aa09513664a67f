"""scripts/install_torch.sh, what `make install` runs first: the CPU build from PyTorch's CPU index where there is no
NVIDIA GPU, the default index (and a line saying so) when that index cannot be reached or pip fails on it; on every
path, a last line naming the torch version and build the venv then imports.

No network: pip is a stand-in that records its arguments and leaves a stand-in torch where the script's Python
imports it (the CPU build from an index URL, as PyTorch's CPU index serves it; the CUDA build from the default
index, as Linux x86_64 gets it), the reachable index is a local HTTP server, and the unreachable one a local port
nothing listens on.
"""

import functools
import http.server
import json
import os
import pathlib
import platform
import socket
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install_torch.sh"
REQUIREMENT = "torch==2.13.0"

pytestmark = pytest.mark.skipif(platform.system() != "Linux", reason="the CPU index is used on Linux only")

FAKE_PIP = """#!{python}
import json, os, pathlib, sys
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
fail = os.environ.get("FAKE_PIP_FAIL", "")
cpu = "--index-url" in sys.argv
if fail == "all" or (fail == "index" and cpu):
    sys.exit(1)
torch = pathlib.Path(os.environ["FAKE_TORCH_DIR"]) / "torch"
torch.mkdir(parents=True, exist_ok=True)
if os.environ.get("FAKE_TORCH_BROKEN"):
    (torch / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: cannot open shared object file')")
else:
    version, cuda = ("2.13.0+cpu", None) if cpu else ("2.13.0", "12.8")
    warn = "import sys\\nsys.stderr.write('functional_tensor.py:368: UserWarning: Failed to initialize NumPy\\\\n')\\n"
    (torch / "__init__.py").write_text(warn + f"from . import version\\n__version__ = {{version!r}}")
    (torch / "version.py").write_text(f"cuda = {{cuda!r}}\\nhip = None")
"""
CPU_BUILD = "install_torch: installed torch 2.13.0+cpu (CPU build)"
CUDA_BUILD = "install_torch: installed torch 2.13.0 (CUDA 12.8 build)"


@pytest.fixture
def fake_pip(tmp_path):
    """A pip stand-in: logs each call's arguments, one JSON list a line; FAKE_PIP_FAIL=index|all makes it fail."""
    pip = tmp_path / "pip"
    pip.write_text(FAKE_PIP.format(python=sys.executable))
    pip.chmod(0o755)
    return pip


@pytest.fixture
def reachable_index(tmp_path):
    """A local folder served over HTTP with a torch/ page, as a wheel index has."""
    root = tmp_path / "index"
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "index.html").write_text("<html></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def unreachable_index():
    """A local port nothing listens on: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/cpu"


def run(tmp_path, pip, index, gpu="no", fail="", path=None, broken=False):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TORCH_", "PIP"))}
    env |= {"PIP": str(pip), "TORCH_CPU_INDEX": index, "TORCH_GPU": gpu, "FAKE_PIP_LOG": str(tmp_path / "calls.log")}
    env |= {
        "FAKE_PIP_FAIL": fail,
        "FAKE_TORCH_DIR": str(tmp_path / "site"),
        "FAKE_TORCH_BROKEN": "1" if broken else "",
    }
    env["PYTHONPATH"] = str(tmp_path / "site")  # the stand-in torch, ahead of any torch the test's Python has
    if path is not None:
        env["PATH"] = path
    result = subprocess.run(
        [str(SCRIPT), sys.executable, REQUIREMENT], env=env, capture_output=True, text=True, timeout=60
    )
    log = tmp_path / "calls.log"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return result, calls


def test_without_a_gpu_it_installs_from_the_cpu_index(tmp_path, fake_pip, reachable_index):
    result, calls = run(tmp_path, fake_pip, reachable_index)
    assert result.returncode == 0, result.stderr
    assert calls == [["install", "--quiet", "--index-url", reachable_index, REQUIREMENT]]
    assert f"the CPU build, from {reachable_index}" in result.stdout
    assert "falling back" not in result.stdout
    assert result.stdout.splitlines()[-1] == CPU_BUILD


def test_an_unreachable_cpu_index_falls_back_to_the_default_index_and_says_so(tmp_path, fake_pip, unreachable_index):
    result, calls = run(tmp_path, fake_pip, unreachable_index)
    assert result.returncode == 0, result.stderr
    assert calls == [["install", "--quiet", REQUIREMENT]], "pip is not asked to try the unreachable index"
    assert f"{unreachable_index} cannot be used" in result.stdout
    assert "falling back to the default package index" in result.stdout
    assert "Connection refused" in result.stdout or "URLError" in result.stdout  # the cause, as the probe saw it
    assert result.stdout.splitlines()[-1] == CUDA_BUILD  # what the fallback brought, not what was asked for


def test_pip_failing_on_the_cpu_index_falls_back_too(tmp_path, fake_pip, reachable_index):
    result, calls = run(tmp_path, fake_pip, reachable_index, fail="index")
    assert result.returncode == 0, result.stderr
    assert calls == [
        ["install", "--quiet", "--index-url", reachable_index, REQUIREMENT],
        ["install", "--quiet", REQUIREMENT],
    ]
    assert "pip failed on it" in result.stdout and "falling back" in result.stdout
    assert result.stdout.splitlines()[-1] == CUDA_BUILD


def test_a_failing_fallback_fails_the_script(tmp_path, fake_pip, unreachable_index):
    result, calls = run(tmp_path, fake_pip, unreachable_index, fail="all")
    assert result.returncode != 0
    assert len(calls) == 1
    assert "installed torch" not in result.stdout


def test_with_a_gpu_it_installs_from_the_default_index(tmp_path, fake_pip, reachable_index):
    result, calls = run(tmp_path, fake_pip, reachable_index, gpu="yes")
    assert result.returncode == 0, result.stderr
    assert calls == [["install", "--quiet", REQUIREMENT]]
    assert "NVIDIA GPU found" in result.stdout
    assert result.stdout.splitlines()[-1] == CUDA_BUILD


def test_nvidia_smi_on_the_path_counts_as_a_gpu(tmp_path, fake_pip, reachable_index):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    result, calls = run(tmp_path, fake_pip, reachable_index, gpu="auto", path=path)
    assert calls == [["install", "--quiet", REQUIREMENT]]
    assert "NVIDIA GPU found" in result.stdout


def test_a_torch_that_does_not_import_after_pip_fails_the_script_and_says_why(tmp_path, fake_pip, reachable_index):
    result, calls = run(tmp_path, fake_pip, reachable_index, broken=True)
    assert result.returncode == 1
    assert len(calls) == 1, "pip succeeded: there is nothing to fall back from"
    last = result.stdout.splitlines()[-1]
    assert last.startswith("install_torch: pip installed torch==2.13.0, but torch does not import: ImportError")
    assert "libtorch_cpu.so" in last


def test_usage_errors_exit_2():
    result = subprocess.run([str(SCRIPT), sys.executable], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "usage" in result.stderr


def make_install_commands(tmp_path, *args: str) -> str:
    """What `make install` would run for a venv that does not exist yet (make -n prints, runs nothing)."""
    venv = tmp_path / "venv"
    result = subprocess.run(
        ["make", "-n", "install", f"VENV={venv}", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.skipif(subprocess.run(["which", "make"], capture_output=True).returncode != 0, reason="no make")
def test_make_install_runs_the_script_with_the_pinned_torch_and_skips_it_for_an_empty_torch(tmp_path):
    venv_python = tmp_path / "venv" / "bin" / "python"
    assert f'scripts/install_torch.sh {venv_python} "torch==2.13.0"' in make_install_commands(tmp_path)
    assert f'scripts/install_torch.sh {venv_python} "torch==2.12.0"' in make_install_commands(
        tmp_path, "TORCH=torch==2.12.0"
    )
    assert "install_torch" not in make_install_commands(tmp_path, "TORCH=")
