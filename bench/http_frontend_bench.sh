#!/usr/bin/env bash
# HTTP front end before/after (issue 19): serves the same model with two
# tqserve binaries in turn (OLD, NEW; interleaved over REPEATS rounds) and runs
# tq_bench_serving against each at several concurrencies, printing throughput,
# TTFT and ITL percentiles and the daemon's peak threads and RSS
# (/proc/PID/status, sampled every 100 ms during the run).
#
# Usage: bench/http_frontend_bench.sh OLD_TQSERVE NEW_TQSERVE
# Environment [defaults]: MODEL_DIR [models/stories260K]  CONCURRENCY [1,16,256,1024]
#   OUTPUT_LEN [64]  PROMPT_LEN [16]  REPEATS [1]  PORT [8013]
#   BENCH [build/bin/tq_bench_serving]  SERVE_ARGS [--max-num-seqs 256]
set -euo pipefail
OLD=$1
NEW=$2
MODEL_DIR=${MODEL_DIR:-models/stories260K}
CONCURRENCY=${CONCURRENCY:-1,16,256,1024}
OUTPUT_LEN=${OUTPUT_LEN:-64}
PROMPT_LEN=${PROMPT_LEN:-16}
REPEATS=${REPEATS:-1}
PORT=${PORT:-8013}
BENCH=${BENCH:-build/bin/tq_bench_serving}
SERVE_ARGS=${SERVE_ARGS:---max-num-seqs 256}

run_one() {  # binary label concurrency
  local bin=$1 label=$2 c=$3 log
  log=$(mktemp /tmp/tqserve-http-bench.XXXXXX.log)
  # shellcheck disable=SC2086  # SERVE_ARGS is a list of flags
  "$bin" serve --model "$MODEL_DIR" --host 127.0.0.1 --port "$PORT" --grpc-port 0 \
    --disable-log-requests $SERVE_ARGS >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  local peak_threads=0 peak_rss=0
  (
    while kill -0 "$pid" 2>/dev/null; do
      awk '/^Threads:/ {t=$2} /^VmRSS:/ {r=$2} END {print t, r}' "/proc/$pid/status" 2>/dev/null
      sleep 0.1
    done
  ) >"$log.samples" &
  local sampler=$!
  local requests=$((c < 16 ? 16 : c * 2))
  "$BENCH" --url "http://127.0.0.1:$PORT" --concurrency "$c" --num-requests "$requests" \
    --prompt-len "$PROMPT_LEN" --output-len "$OUTPUT_LEN" --stream --timeout 600 | tail -n +2 |
    sed "s/^/$label /"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  read -r peak_threads peak_rss < <(awk '$1 > t {t=$1} $2 > r {r=$2} END {print t, r}' "$log.samples")
  echo "$label c=$c peak threads $peak_threads, peak RSS $((peak_rss / 1024)) MiB"
  rm -f "$log" "$log.samples"
}

echo "model $MODEL_DIR, prompt $PROMPT_LEN, output $OUTPUT_LEN, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$REPEATS"); do
  for c in ${CONCURRENCY//,/ }; do
    run_one "$OLD" old "$c"
    run_one "$NEW" new "$c"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
