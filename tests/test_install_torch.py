"""scripts/install_torch.sh, what `make install` runs first: the CPU build from PyTorch's CPU index where there is no
NVIDIA GPU, the default index (and a line saying so) when that index cannot be reached or pip fails on it.

No network: pip is a stand-in that records its arguments, the reachable index is a local HTTP server, and the
unreachable one a local port nothing listens on.
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
import json, os, sys
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
fail = os.environ.get("FAKE_PIP_FAIL", "")
sys.exit(1 if fail == "all" or (fail == "index" and "--index-url" in sys.argv) else 0)
"""


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


def run(tmp_path, pip, index, gpu="no", fail="", path=None):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TORCH_", "PIP"))}
    env |= {"PIP": str(pip), "TORCH_CPU_INDEX": index, "TORCH_GPU": gpu, "FAKE_PIP_LOG": str(tmp_path / "calls.log")}
    env |= {"FAKE_PIP_FAIL": fail}
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


def test_an_unreachable_cpu_index_falls_back_to_the_default_index_and_says_so(tmp_path, fake_pip, unreachable_index):
    result, calls = run(tmp_path, fake_pip, unreachable_index)
    assert result.returncode == 0, result.stderr
    assert calls == [["install", "--quiet", REQUIREMENT]], "pip is not asked to try the unreachable index"
    assert f"{unreachable_index} cannot be used" in result.stdout
    assert "falling back to the default package index" in result.stdout
    assert "Connection refused" in result.stdout or "URLError" in result.stdout  # the cause, as the probe saw it


def test_pip_failing_on_the_cpu_index_falls_back_too(tmp_path, fake_pip, reachable_index):
    result, calls = run(tmp_path, fake_pip, reachable_index, fail="index")
    assert result.returncode == 0, result.stderr
    assert calls == [
        ["install", "--quiet", "--index-url", reachable_index, REQUIREMENT],
        ["install", "--quiet", REQUIREMENT],
    ]
    assert "pip failed on it" in result.stdout and "falling back" in result.stdout


def test_a_failing_fallback_fails_the_script(tmp_path, fake_pip, unreachable_index):
    result, calls = run(tmp_path, fake_pip, unreachable_index, fail="all")
    assert result.returncode != 0
    assert len(calls) == 1


def test_with_a_gpu_it_installs_from_the_default_index(tmp_path, fake_pip, reachable_index):
    result, calls = run(tmp_path, fake_pip, reachable_index, gpu="yes")
    assert result.returncode == 0, result.stderr
    assert calls == [["install", "--quiet", REQUIREMENT]]
    assert "NVIDIA GPU found" in result.stdout


def test_nvidia_smi_on_the_path_counts_as_a_gpu(tmp_path, fake_pip, reachable_index):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    result, calls = run(tmp_path, fake_pip, reachable_index, gpu="auto", path=path)
    assert calls == [["install", "--quiet", REQUIREMENT]]
    assert "NVIDIA GPU found" in result.stdout


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
