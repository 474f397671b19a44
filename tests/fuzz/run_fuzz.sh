#!/usr/bin/env bash
# Real fuzzing (docs/fuzzing.md): builds the libFuzzer targets of tests/fuzz
# with clang-14 (-fsanitize=fuzzer,address,undefined; the libraries they link
# with fuzzer-no-link) in build-fuzz/, then runs each for FUZZ_SECONDS.
#   tests/fuzz/run_fuzz.sh [target...]     (default: every target)
# Environment: FUZZ_SECONDS (60 per target), FUZZ_DIR (build-fuzz),
#   FUZZ_JOBS (build parallelism, 2), FUZZ_NICE (10), FUZZ_BUILD (1; 0 runs the
#   targets already built, without installing or building anything).
# The seed corpus (tests/fuzz/corpus/<name>) is copied to
# $FUZZ_DIR/fuzz-corpus/<name>, which collects what libFuzzer finds, so the
# checkout is not touched; crashes land in $FUZZ_DIR/fuzz-artifacts/<name>/.
# Prints a table of executions/s and writes it to $FUZZ_DIR/fuzz-summary.md.
# Exits 1 when any target crashed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
FUZZ_DIR="${FUZZ_DIR:-build-fuzz}"
FUZZ_JOBS="${FUZZ_JOBS:-2}"
FUZZ_NICE="${FUZZ_NICE:-10}"

# name:max_len (bytes). Bounds each input's work: a request body, a
# template plus messages, a tokenizer.json plus text.
ALL_TARGETS=(
  completion_request:4096 chat_request:4096 chat_template:16384 grpc_request:1024
  safetensors:4096 model_config:4096 quant_config:2048 sentencepiece:1024
  tokenizer_json:16384 detokenizer:1024 json_schema:4096 regex:1024 grammar:4096
)
declare -A MAX_LEN DICT
for t in "${ALL_TARGETS[@]}"; do MAX_LEN[${t%%:*}]=${t##*:}; done
for t in completion_request chat_request model_config quant_config safetensors tokenizer_json json_schema; do
  DICT[$t]=tests/fuzz/json.dict
done
DICT[chat_template]=tests/fuzz/jinja.dict
if [ $# -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${!MAX_LEN[@]}"); fi
IFS=$'\n' TARGETS=($(sort <<<"${TARGETS[*]}")); unset IFS

# clang and libFuzzer only here, on demand: `make test` never needs them, so
# CI's install stays as it was (scripts/install_deps.sh, TQ_FUZZ_DEPS=1).
if [ "${FUZZ_BUILD:-1}" != 0 ]; then
  TQ_FUZZ_DEPS=1 bash scripts/install_deps.sh
  if [ ! -f "$FUZZ_DIR/build.ninja" ]; then
    nice -n "$FUZZ_NICE" cmake -S . -B "$FUZZ_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DTQ_FUZZ=ON -DTQ_CUDA=OFF
  fi
  # Only the fuzz targets and the libraries they link, not the whole project.
  nice -n "$FUZZ_NICE" cmake --build "$FUZZ_DIR" -j "$FUZZ_JOBS" \
    --target $(printf 'fuzz_%s ' "${TARGETS[@]}")
fi

summary="$FUZZ_DIR/fuzz-summary${FUZZ_SUMMARY_SUFFIX:-}.md"
{
  echo "| target | seconds | executions | exec/s | corpus | result |"
  echo "|---|---:|---:|---:|---:|---|"
} >"$summary"
failed=0
for name in "${TARGETS[@]}"; do
  corpus="$FUZZ_DIR/fuzz-corpus/$name"
  artifacts="$FUZZ_DIR/fuzz-artifacts/$name"
  mkdir -p "$corpus" "$artifacts"
  cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  log="$FUZZ_DIR/fuzz-$name.log"
  args=(-max_total_time="$FUZZ_SECONDS" -max_len="${MAX_LEN[$name]}" -timeout=10
        -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$artifacts/")
  [ -n "${DICT[$name]:-}" ] && args+=(-dict="${DICT[$name]}")
  echo "== fuzz_$name: ${FUZZ_SECONDS}s, -max_len=${MAX_LEN[$name]} (log: $log)"
  rc=0
  nice -n "$FUZZ_NICE" "$FUZZ_DIR/bin/fuzz_$name" "${args[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  files=$(find "$corpus" -type f | wc -l)
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    failed=1
    crash=$(ls -t "$artifacts" 2>/dev/null | head -n1)
    result="CRASH rc=$rc ${crash:+$artifacts/$crash}"
    grep -m3 -E "ERROR: |runtime error|fuzz: |==ERROR" "$log" || tail -n 20 "$log"
  fi
  echo "| $name | $FUZZ_SECONDS | ${runs:-?} | ${rate:-?} | $files | $result |" | tee -a "$summary"
done
echo "summary: $summary"
cat "$summary"
exit "$failed"
