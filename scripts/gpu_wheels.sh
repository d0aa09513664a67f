#!/usr/bin/env bash
# Wheels for a GPU machine with no package index: what `python -m trl_ada.gpu_check`, `python -m
# trl_ada.gpu_step_time` and scripts/gpu_smoke.sh need beyond a PyTorch image (torch with CUDA, transformers,
# accelerate, numpy, pandas, pyarrow, tokenizers, safetensors, huggingface-hub, and peft for the LoRA run).
#
# Run it where pip reaches the index; it downloads, installs nothing:
#   trl, datasets and datasets' dill, multiprocess and fsspec, at the versions installed for $PYTHON (this
#   checkout's venv: the releases its tests ran with), and, with TRANSFORMERS=<version>, that transformers too
#   (continuous batching needs >= 5.8; the GPU run recorded in docs/gpu-check.md had 5.17.0).
# Each is fetched with `pip download --no-deps --only-binary=:all:` for the GPU machine's Python and platform, into
# DIR (default ./wheels). The script fails when the wheels come to more than LIMIT_MIB (64 MiB): what a GPU session
# can carry. Then it prints how to install them there.
#
# Usage:  scripts/gpu_wheels.sh [DIR]
# Settings, as environment variables:
#   PYTHON          .venv/bin/python if it exists, else python3   reads the versions to fetch
#   PYTHON_VERSION  $PYTHON's X.Y              the GPU machine's Python (multiprocess has one wheel per version)
#   PLATFORM        manylinux2014_x86_64       the GPU machine's platform tag (every wheel here is pure Python
#                                              but multiprocess's, which is per Python version, not platform)
#   TRANSFORMERS    (unset)                    also fetch transformers==TRANSFORMERS
#   PACKAGES        trl datasets dill multiprocess fsspec
#   LIMIT_MIB       64
#   PIP             $PYTHON -m pip
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-./wheels}
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x $REPO/.venv/bin/python ]]; then PYTHON=$REPO/.venv/bin/python; else PYTHON=python3; fi
fi
PYTHON_VERSION=${PYTHON_VERSION:-$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')}
PLATFORM=${PLATFORM:-manylinux2014_x86_64}
PACKAGES=${PACKAGES:-"trl datasets dill multiprocess fsspec"}
LIMIT_MIB=${LIMIT_MIB:-64}
read -ra PIP <<<"${PIP:-$PYTHON -m pip}"

die() {
    echo "gpu_wheels.sh: error: $*" >&2
    exit 1
}

# name==version for each package, from $PYTHON's installed distributions
read -ra SPECS <<<"$("$PYTHON" - $PACKAGES <<'EOF'
import importlib.metadata
import sys

specs = []
for name in sys.argv[1:]:
    try:
        specs.append(f"{name}=={importlib.metadata.version(name)}")
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"{name} is not installed for {sys.executable}: install it there, or set PACKAGES")
print(" ".join(specs))
EOF
)"
[[ ${#SPECS[@]} -gt 0 ]] || die "no package versions read from $PYTHON"
[[ -n ${TRANSFORMERS:-} ]] && SPECS+=("transformers==$TRANSFORMERS")

mkdir -p "$DIR"
echo "gpu_wheels.sh: ${SPECS[*]} for Python $PYTHON_VERSION on $PLATFORM, into $DIR"
"${PIP[@]}" download --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" --platform "$PLATFORM" \
    -d "$DIR" "${SPECS[@]}"

shopt -s nullglob
wheels=("$DIR"/*.whl)
[[ ${#wheels[@]} -gt 0 ]] || die "pip left no wheel in $DIR"
total=0
for wheel in "${wheels[@]}"; do
    size=$(stat -c %s "$wheel")
    total=$((total + size))
    printf '  %10d  %s\n' "$size" "$(basename "$wheel")"
done
limit=$((LIMIT_MIB * 1024 * 1024))
mib=$(awk -v b="$total" 'BEGIN { printf "%.1f", b / 1048576 }')
((total <= limit)) || die "the wheels in $DIR come to $mib MiB, over $LIMIT_MIB MiB (leave TRANSFORMERS unset, or empty $DIR of older wheels)"
echo "gpu_wheels.sh: ${#wheels[@]} wheels, $mib MiB (limit $LIMIT_MIB MiB)"
cat <<EOF
Carry $DIR and this checkout to the GPU machine; there, in the Python that has torch:
  pip install --no-deps --no-index $DIR/*.whl
  python -m trl_ada.gpu_check              # or scripts/gpu_smoke.sh
  python -m trl_ada.gpu_step_time          # the realistic-size table, within 8 minutes
(trl_ada is taken from the checkout: run from its root, or put it on PYTHONPATH.)
EOF
