#!/usr/bin/env bash
# Install torch into a venv, the CPU build on a Linux machine without an NVIDIA GPU (what `make install` runs first).
#
# Usage:  scripts/install_torch.sh PYTHON REQUIREMENT      e.g. scripts/install_torch.sh .venv/bin/python torch==2.13.0
#
# On Linux without an NVIDIA GPU (no `nvidia-smi` on PATH and no /proc/driver/nvidia) the package index's torch is the
# CUDA build, several GB with its nvidia-* wheels, which nothing here would use; so the requirement is installed from
# PyTorch's CPU wheel index instead (torch 2.13.0's CPU wheel is 192 MB). When that index cannot be reached (checked with a
# 10 s timeout before pip is asked), or pip fails on it, the requirement comes from the default package index, and the
# script says so. With an NVIDIA GPU, and on macOS or Windows (whose index wheels carry no CUDA), it comes from the
# default index too. Each case prints one line saying which index it used and why and, once pip is done, one line
# naming the torch the venv now imports, e.g. `install_torch: installed torch 2.13.0+cpu (CPU build)` or
# `install_torch: installed torch 2.13.0 (CUDA 12.8 build)` (exit 1 if pip succeeded but torch does not import).
#
# Settings, as environment variables:
#   PIP              the pip command, word-split      "$PYTHON -m pip"
#   TORCH_CPU_INDEX  PyTorch's CPU wheel index        https://download.pytorch.org/whl/cpu
#   TORCH_GPU        auto, yes or no                  auto: look for nvidia-smi and /proc/driver/nvidia
set -uo pipefail

if [[ $# -ne 2 || -z $2 ]]; then
    echo "usage: $0 PYTHON REQUIREMENT (e.g. .venv/bin/python torch==2.13.0)" >&2
    exit 2
fi
python=$1 requirement=$2
read -ra pip <<<"${PIP:-$python -m pip}"
cpu_index=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
gpu=${TORCH_GPU:-auto}

say() { echo "install_torch: $*"; }

# The torch the venv imports once pip is done: after a fallback to the default index it may be the CUDA build, and a
# torch already installed may have satisfied the requirement, so the index alone does not say which one it is.
report() {
    local found errors
    errors=$(mktemp)  # apart from stdout: torch may warn on import (no numpy yet), which is not its version
    if ! found=$("$python" - 2>"$errors" <<'EOF'
import torch

if torch.version.cuda:
    build = f"CUDA {torch.version.cuda}"
elif getattr(torch.version, "hip", None):
    build = f"ROCm {torch.version.hip}"
else:
    build = "CPU"
print(f"torch {torch.__version__} ({build} build)")
EOF
    ); then
        say "pip installed $requirement, but torch does not import: $(tail -n 1 "$errors")"
        rm -f "$errors"
        exit 1
    fi
    rm -f "$errors"
    say "installed $found"
}

# pip install from the default package index, then the report; pip's exit status when it fails.
install_default() {
    "${pip[@]}" install --quiet "$requirement" || return
    report
}

if [[ $gpu == auto ]]; then
    if command -v nvidia-smi >/dev/null 2>&1 || [[ -e /proc/driver/nvidia ]]; then gpu=yes; else gpu=no; fi
fi

if [[ $gpu == yes ]]; then
    say "NVIDIA GPU found: $requirement from the default package index (on Linux, the CUDA build)"
    install_default
    exit
fi
if [[ $(uname -s) != Linux ]]; then
    say "$(uname -s): $requirement from the default package index (no CUDA build there)"
    install_default
    exit
fi

# Reachable: the index answers its torch page within 10 s. pip's own retries and timeouts (PIP_DEFAULT_TIMEOUT may be
# minutes) would make an unreachable index slow to give up on.
reason=$("$python" - "$cpu_index/torch/" <<'EOF' 2>&1
import sys
import urllib.request

try:
    urllib.request.urlopen(sys.argv[1], timeout=10).close()
except Exception as error:  # noqa: BLE001 - any failure means "not reachable", and the message says which
    print(f"{type(error).__name__}: {error}")
    sys.exit(1)
EOF
)
if [[ $? -eq 0 ]]; then
    say "no NVIDIA GPU found: $requirement, the CPU build, from $cpu_index"
    if "${pip[@]}" install --quiet --index-url "$cpu_index" "$requirement"; then
        report
        exit 0
    fi
    reason="pip failed on it"
fi
say "$cpu_index cannot be used (${reason:-no answer}); falling back to the default package index for $requirement" \
    "(on Linux x86_64 that is the CUDA build, several GB, unless your index or wheel folder holds a CPU build)"
install_default
