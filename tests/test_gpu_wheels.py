"""scripts/gpu_wheels.sh with a stand-in for pip (no network): which wheels it asks for, at which versions and for
which Python, the size limit, and the install line it prints."""

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STANDIN = textwrap.dedent(
    """\
    import json, os, sys
    args = sys.argv[1:]
    with open(os.environ["STANDIN_LOG"], "w") as log:
        json.dump(args, log)
    folder = args[args.index("-d") + 1]
    sizes = json.loads(os.environ["STANDIN_SIZES"])
    for spec in [a for a in args if "==" in a]:
        name, version = spec.split("==")
        with open(os.path.join(folder, f"{name}-{version}-py3-none-any.whl"), "wb") as wheel:
            wheel.write(b"0" * sizes.get(name, 1000))
    """
)


def run_script(tmp_path, sizes, **env):
    standin = tmp_path / "pip_standin.py"
    standin.write_text(STANDIN)
    log = tmp_path / "pip_args.json"
    environment = {
        **os.environ,
        "PYTHON": sys.executable,
        "PIP": f"{sys.executable} {standin}",
        "STANDIN_LOG": str(log),
        "STANDIN_SIZES": json.dumps(sizes),
        **env,
    }
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_wheels.sh"), str(tmp_path / "wheels")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, json.loads(log.read_text()) if log.exists() else None


def test_it_asks_pip_for_the_installed_versions_without_dependencies(tmp_path):
    done, args = run_script(tmp_path, {"trl": 600_000, "datasets": 500_000}, PYTHON_VERSION="3.12")
    assert done.returncode == 0, done.stderr
    versions = {
        name: importlib.metadata.version(name) for name in ("trl", "datasets", "dill", "multiprocess", "fsspec")
    }
    specs = [f"{name}=={version}" for name, version in versions.items()]
    assert args == [
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--platform",
        "manylinux2014_x86_64",
        "-d",
        str(tmp_path / "wheels"),
        *specs,
    ]
    total = 600_000 + 500_000 + 3 * 1000
    assert f"gpu_wheels.sh: 5 wheels, {total / 2**20:.1f} MiB (limit 64 MiB)" in done.stdout
    assert f"  pip install --no-deps --no-index {tmp_path / 'wheels'}/*.whl" in done.stdout
    assert sorted(p.name for p in (tmp_path / "wheels").iterdir()) == sorted(
        f"{name}-{version}-py3-none-any.whl" for name, version in versions.items()
    )


def test_a_newer_transformers_is_added_and_the_limit_is_enforced(tmp_path):
    """64 MiB is 67,108,864 bytes: wheels of exactly that pass, one byte more fails, naming the total."""
    limit = 64 * 2**20
    done, args = run_script(tmp_path, {"transformers": limit - 5 * 1000}, TRANSFORMERS="5.24.0")
    assert done.returncode == 0, done.stderr
    assert args[-1] == "transformers==5.24.0" and "gpu_wheels.sh: 6 wheels, 64.0 MiB (limit 64 MiB)" in done.stdout
    over = tmp_path / "over"
    over.mkdir()
    done, _ = run_script(over, {"transformers": limit - 5 * 1000 + 1}, TRANSFORMERS="5.24.0")
    assert done.returncode == 1
    assert "come to 64.0 MiB, over 64 MiB" in done.stderr and "pip install" not in done.stdout
