#!/usr/bin/env bash
# `make test-compat`: the tests that touch TRL's seams (the GRPOTrainer methods ReinforceAdaTrainer overrides or
# calls) against each supported TRL release, each in its own venv, cached under $COMPAT_DIR; optionally against a
# TRL source tree too, as an early warning for the next release.
#
# Usage:  scripts/test_compat.sh [ENTRY...]
#   ENTRY  a TRL version (1.15.0): that release, with the newest transformers pip resolves for it; or
#          VERSION:TRANSFORMERS (1.16.0:5.17.0): that release with that transformers.
#          Default: $COMPAT_RELEASES (set it empty to run only TRL_SRC).
# Settings, as environment variables:
#   TRL_SRC       a TRL checkout (a folder holding its pyproject.toml): also run against it, installed editable over
#                 the newest release's dependencies (so a TRL newer than setup.cfg's range still installs).
#   COMPAT_DIR    .compat                 where the venvs, logs and results.md live (gitignored)
#   COMPAT_TESTS  the test files below
#   TORCH         torch==2.13.0           installed first in each venv by scripts/install_torch.sh (the CPU build
#                                         where there is no NVIDIA GPU)
#   PYTHON        python3                 the interpreter the venvs are made from
# A venv is rebuilt when its entry or setup.cfg changed; delete $COMPAT_DIR to rebuild them all.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
COMPAT_RELEASES=${COMPAT_RELEASES-"1.14.0 1.14.2 1.15.0 1.16.0 1.16.0:5.17.0"}
COMPAT_DIR=${COMPAT_DIR:-.compat}
TORCH=${TORCH-torch==2.13.0}
PYTHON=${PYTHON:-python3}
TRL_SRC=${TRL_SRC:-}
# The tests that run GRPOTrainer's code through our overrides: the seams' signatures, real training steps (rounds,
# Est, streaming through transformers continuous batching and through a stand-in vLLM server), the failure modes,
# several processes, checkpoint resume, the CLI and its recipes (ReinforceAdaConfig is a GRPOConfig), the trackers,
# the fail-fast checks (a reward's log_metric goes through GRPOTrainer's _pending_metrics), the asynchronous worker
# (scripted, over HTTP against a stand-in vLLM server, and its TRL version gate), and the GPU check's CPU mode.
COMPAT_TESTS=${COMPAT_TESTS:-"tests/test_compat.py tests/test_config.py tests/test_recipes.py tests/test_trainer.py
tests/test_trainer_est.py tests/test_streaming_cb.py tests/test_streaming_server.py tests/test_failure_modes.py
tests/test_integrations.py tests/test_multiprocess.py tests/test_multiprocess_est.py tests/test_multiprocess_faults.py
tests/test_resume.py tests/test_resume_est.py tests/test_train_cli.py tests/test_gpu_check.py
tests/test_tools_environments.py tests/test_vlm.py tests/test_fail_fast.py tests/test_multiprocess_resume.py
tests/test_cli.py tests/test_async_worker.py tests/test_async_server.py tests/test_async_versions.py
tests/test_async_selection.py tests/test_async_worker_builder.py"}

entries=("$@")
[[ ${#entries[@]} -gt 0 ]] || read -ra entries <<<"$COMPAT_RELEASES"
[[ -n $TRL_SRC ]] && entries+=("src")
mkdir -p "$COMPAT_DIR"
results="$COMPAT_DIR/results.md"
echo "| TRL | transformers | settings | result | seconds |" >"$results"
echo "|---|---|---|---|---|" >>"$results"
setup_hash=$(sha256sum setup.cfg | cut -c1-16)
failed=0

# TRL 1.15 computes log-probabilities with Triton kernels and has no CPU path (1.14 and 1.16 have one): its venv gets
# Triton, and its tests run the kernels in Triton's interpreter, on the CPU. PyTorch's CUDA wheels ship Triton.
needs_triton() { [[ $1 == 1.15.* ]]; }

# make_venv DIR SPEC: (re)build the venv at DIR for SPEC unless its stamp says it holds SPEC already.
make_venv() {
    local dir=$1 spec=$2
    local stamp="$dir/.compat-stamp" key="$spec $setup_hash"
    needs_triton "${spec%%:*}" && key+=" triton"
    if [[ -f $stamp && "$(cat "$stamp")" == "$key" ]]; then
        return 0
    fi
    echo "test_compat: building $dir ($spec)"
    rm -rf "$dir"
    "$PYTHON" -m venv "$dir" || return 1
    local pip=("$dir/bin/python" -m pip install --quiet)
    "${pip[@]}" --upgrade pip || return 1
    if [[ -n $TORCH ]]; then scripts/install_torch.sh "$dir/bin/python" "$TORCH" || return 1; fi
    if [[ $spec == src=* ]]; then
        # Our dependencies first (with the newest supported TRL), then the source tree over them: its version may
        # lie outside setup.cfg's range, which pip reports and installs anyway.
        "${pip[@]}" -e ".[test]" || return 1
        "${pip[@]}" -e "${spec#src=}" || return 1
    else
        local trl=${spec%%:*} transformers=""
        [[ $spec == *:* ]] && transformers=${spec#*:}
        local extra=()
        needs_triton "$trl" && extra+=(triton)
        "${pip[@]}" -e ".[test]" "trl==$trl" ${transformers:+"transformers==$transformers"} "${extra[@]}" || return 1
    fi
    echo "$key" >"$stamp"
}

for entry in "${entries[@]}"; do
    if [[ $entry == src ]]; then
        [[ -f $TRL_SRC/pyproject.toml || -f $TRL_SRC/setup.py ]] || {
            echo "test_compat: TRL_SRC=$TRL_SRC holds no pyproject.toml or setup.py" >&2
            exit 2
        }
        name=trl-src spec="src=$(cd "$TRL_SRC" && pwd)"
    else
        name="trl-${entry/:/-transformers-}" spec=$entry
    fi
    dir="$COMPAT_DIR/$name"
    log="$COMPAT_DIR/$name.log"
    if ! make_venv "$dir" "$spec" >"$COMPAT_DIR/$name.install.log" 2>&1; then
        echo "test_compat: $name: the venv did not build; see $COMPAT_DIR/$name.install.log" >&2
        tail -5 "$COMPAT_DIR/$name.install.log" >&2
        echo "| $entry | - | - | venv did not build | - |" >>"$results"
        failed=1
        continue
    fi
    versions=$("$dir/bin/python" -c "import importlib.metadata as m; print(m.version('trl'), m.version('transformers'))")
    read -r trl_version transformers_version <<<"$versions"
    interpret=()
    needs_triton "$trl_version" && interpret=(TRITON_INTERPRET=1)
    echo "== TRL $trl_version, transformers $transformers_version ($dir) ${interpret[*]} =="
    started=$(date +%s)
    # shellcheck disable=SC2086  # COMPAT_TESTS is a list of paths
    env "${interpret[@]}" OMP_NUM_THREADS=1 "$dir/bin/python" -m pytest -q -p no:cacheprovider $COMPAT_TESTS >"$log" 2>&1
    rc=$?
    seconds=$(($(date +%s) - started))
    summary=$(tail -1 "$log" | sed -E 's/^=+ //; s/ =+$//') # pytest's closing line
    echo "   $summary ($seconds s; log: $log)"
    if [[ $rc -ne 0 ]]; then
        failed=1
        grep -E '^(FAILED|ERROR) ' "$log" | head -20
    fi
    echo "| $trl_version | $transformers_version | ${interpret[*]} | $summary | $seconds |" >>"$results"
done

echo
cat "$results"
exit $failed
