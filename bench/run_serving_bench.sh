#!/usr/bin/env bash
# Serving benchmark (issue 4): does batching work? Builds Release, writes the
# ~100M-parameter random model (tqserve make-random-model --preset tiny-100m),
# serves it with `tqserve serve`, and runs tq_bench_serving at concurrency 1
# and 16 side by side (interleaved repeats, one process), printing TTFT/ITL
# percentiles, tokens/s and the throughput ratio (target: >= 6x at 16).
#
# Environment overrides (defaults in brackets):
#   BUILD_DIR [build-bench]  MODEL_DIR [/tmp/tqserve-tiny100m]  PORT [8011]
#   PROMPT_LEN [32]  OUTPUT_LEN [128]  REQUESTS [4,32]  REPEATS [2]
#   SERVE_ARGS [extra flags for tqserve serve, e.g. "--kv-cache-dtype fp32"]
#   CMAKE_FLAGS [extra cmake configure flags]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR=${BUILD_DIR:-build-bench}
MODEL_DIR=${MODEL_DIR:-/tmp/tqserve-tiny100m}
PORT=${PORT:-8011}
PROMPT_LEN=${PROMPT_LEN:-32}
OUTPUT_LEN=${OUTPUT_LEN:-128}
REQUESTS=${REQUESTS:-4,32}
REPEATS=${REPEATS:-2}
SERVE_ARGS=${SERVE_ARGS:-}
CMAKE_FLAGS=${CMAKE_FLAGS:-}

# shellcheck disable=SC2086  # CMAKE_FLAGS is a list of flags
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTQ_CUDA=OFF $CMAKE_FLAGS >/dev/null
cmake --build "$BUILD_DIR" --target tqserve tq_bench_serving -j2
TQSERVE="$BUILD_DIR/bin/tqserve"

if [ ! -f "$MODEL_DIR/config.json" ]; then
  "$TQSERVE" make-random-model --preset tiny-100m --dtype fp16 --out "$MODEL_DIR" \
    --tokenizer models/stories260K/tokenizer.model
fi

LOG="$(mktemp /tmp/tqserve-bench.XXXXXX.log)"
# shellcheck disable=SC2086  # SERVE_ARGS is a list of flags
# --dtype float32: the model is an F16 checkpoint, and `--dtype auto` would keep
# it 16-bit; this measures batching on the fp32 weights (SERVE_ARGS may override).
"$TQSERVE" serve --model "$MODEL_DIR" --host 127.0.0.1 --port "$PORT" --grpc-port 0 --max-num-seqs 16 --dtype float32 $SERVE_ARGS >"$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$SERVER" 2>/dev/null; then
    echo "tqserve serve exited:" >&2
    cat "$LOG" >&2
    exit 1
  fi
  sleep 0.5
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "tqserve never became healthy:" >&2; cat "$LOG" >&2; exit 1; }
grep -v '^\s*$' "$LOG" | head -20

echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- engine kernels server || echo '+changes'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$BUILD_DIR/bin/tq_bench_serving" --url "http://127.0.0.1:$PORT" --concurrency 1,16 --num-requests "$REQUESTS" \
  --prompt-len "$PROMPT_LEN" --output-len "$OUTPUT_LEN" --repeats "$REPEATS" --stream
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
