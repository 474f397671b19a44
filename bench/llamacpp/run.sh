#!/usr/bin/env bash
# Side-by-side CPU benchmark, tqserve vs llama.cpp, on the same weights
# (issue 22 item 5; docs/PERFORMANCE.md "tqserve vs llama.cpp"). Not part of
# make test: it installs node-llama-cpp (~730 MB, llama.cpp's prebuilt CPU
# libraries, pinned by package-lock.json here) into $WORK on first use.
#
#   bench/llamacpp/run.sh [--threads "1 2"] [--runs 3] [--formats "f16 q8_0 q4_0 q4_0all"]
#                         [--model DIR] [--skip-validate]
#
# Steps: build tqserve + tq_bench_llamacpp_side (build/), npm ci the pinned
# package, clone llama.cpp's headers from its git bundle, compile llbench
# (the kit in ../shared/tools/llamacpp-anchor, or $TQ_LLAMACPP_ANCHOR), make
# the tiny-100m random model (unless --model), convert it to GGUF per format
# (hf2gguf.py), validate identical greedy ids (F16, fp32 KV, flash attention
# off), then for each run, thread count and format run tqserve and llama.cpp
# one after the other (interleaved processes), and print the median tok/s
# ratios tqserve / llama.cpp as the issue's table.
#
# Formats: f16 (F16 both), q8_0 (Q8_0 vs int8 g32 symmetric), q4_0 (Q4_0 vs
# int4 g32 symmetric), q4_0all (also token_embd/output Q4_0 vs
# configs/llama_w4_all.json; skipped when that config is absent).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${TQ_LLAMACPP_WORK:-$ROOT/build/llamacpp-bench}"
ANCHOR="${TQ_LLAMACPP_ANCHOR:-}"
if [[ -z "$ANCHOR" ]]; then
  for d in "$ROOT/../shared/tools/llamacpp-anchor" "$ROOT/../../shared/tools/llamacpp-anchor"; do
    [[ -f "$d/llbench.cpp" ]] && ANCHOR="$(cd "$d" && pwd)" && break
  done
fi
[[ -n "$ANCHOR" && -f "$ANCHOR/llbench.cpp" ]] || {
  echo "llamacpp-anchor kit not found; set TQ_LLAMACPP_ANCHOR" >&2
  exit 2
}

THREADS="1 2"
RUNS=3
FORMATS="f16 q8_0 q4_0 q4_0all"
MODEL=""
VALIDATE=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --formats) FORMATS="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --skip-validate) VALIDATE=0; shift ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done

mkdir -p "$WORK"
# Debian's python3 with numpy + sentencepiece (hf2gguf.py), not a pyenv shim.
PY=/usr/bin/python3
if ! $PY -c "import numpy, sentencepiece" 2>/dev/null; then
  apt-get install -y python3-numpy python3-sentencepiece >/dev/null
fi
echo "== build tqserve (build/)"
if [[ ! -f "$ROOT/build/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$ROOT/build" --target tqserve tq_bench_llamacpp_side >/dev/null
TQ="$ROOT/build/bin/tqserve"
TQB="$ROOT/build/bin/tq_bench_llamacpp_side"

echo "== llama.cpp harness ($WORK)"
cp "$ROOT/bench/llamacpp/package.json" "$ROOT/bench/llamacpp/package-lock.json" "$WORK/"
if [[ ! -d "$WORK/node_modules/@node-llama-cpp/linux-x64" ]]; then
  (cd "$WORK" && NODE_LLAMA_CPP_POSTINSTALL=skip npm ci --no-audit --no-fund --ignore-scripts)
fi
BINS="$WORK/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
if [[ ! -d "$WORK/llama-src" ]]; then
  git clone -q "$WORK/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$WORK/llama-src"
fi
if [[ ! -x "$WORK/llbench" || "$ANCHOR/llbench.cpp" -nt "$WORK/llbench" ]]; then
  g++ -O2 -std=c++17 -I"$ANCHOR" -I"$WORK/llama-src/include" -I"$WORK/llama-src/ggml/include" \
    "$ANCHOR/llbench.cpp" -o "$WORK/llbench" -L"$BINS" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so \
    -l:libggml-base.so -Wl,-rpath,"$BINS"
fi

if [[ -z "$MODEL" ]]; then
  MODEL="$WORK/tiny-100m"
  if [[ ! -f "$MODEL/config.json" ]]; then
    "$TQ" make-random-model --preset tiny-100m --out "$MODEL" \
      --tokenizer "$ROOT/models/stories260K/tokenizer.model" >/dev/null
  fi
fi
NAME="$(basename "$MODEL")"

# tqserve's quantization config per format.
cat >"$WORK/w8g32.json" <<'EOF'
{"description": "int8 g32 symmetric, Q8_0's format", "bits": 8, "group_size": 32, "symmetric": true, "clip_search": false}
EOF
cat >"$WORK/w4g32.json" <<'EOF'
{"description": "int4 g32 symmetric, Q4_0's format", "bits": 4, "group_size": 32, "symmetric": true, "clip_search": false}
EOF
tq_quant() {
  case "$1" in
    f16) echo "" ;;
    q8_0) echo "$WORK/w8g32.json" ;;
    q4_0) echo "$WORK/w4g32.json" ;;
    q4_0all) echo "$ROOT/configs/llama_w4_all.json" ;;
  esac
}
gguf() {
  local f="$1" out="$WORK/$NAME-$1.gguf"
  if [[ ! -f "$out" ]]; then
    case "$f" in
      q4_0all) $PY "$ANCHOR/hf2gguf.py" "$MODEL" "$out" --type q4_0 --quant-embd-output >/dev/null ;;
      *) $PY "$ANCHOR/hf2gguf.py" "$MODEL" "$out" --type "$f" >/dev/null ;;
    esac
  fi
  echo "$out"
}
ACTIVE=""
for f in $FORMATS; do
  if [[ "$f" == q4_0all && ! -f "$ROOT/configs/llama_w4_all.json" ]]; then
    echo "skip q4_0all: configs/llama_w4_all.json is not there (quantized embeddings/lm_head)"
    continue
  fi
  gguf "$f" >/dev/null
  ACTIVE="$ACTIVE $f"
done

if [[ $VALIDATE == 1 ]]; then
  echo "== validate: greedy ids, F16, fp32 KV, flash attention off"
  "$WORK/llbench" --model "$(gguf f16)" --threads 1 --bins "$BINS" --fa 0 --mode validate |
    grep '^IDS' >"$WORK/ids-llama.txt"
  "$TQB" --model "$MODEL" --threads 1 --mode validate | grep '^IDS' >"$WORK/ids-tq.txt"
  # The single sequence must match exactly; of the batch sequences all but
  # one (a near-tie of greedy logits under different fp32 summation orders
  # on random weights), with the first divergence shown.
  $PY - "$WORK/ids-llama.txt" "$WORK/ids-tq.txt" <<'EOF' || exit 1
import sys
a = dict(l.split(":", 1) for l in open(sys.argv[1]))
b = dict(l.split(":", 1) for l in open(sys.argv[2]))
same = [k for k in a if a[k].split() == b.get(k, "").split()]
for k in a:
    if k not in same:
        x, y = a[k].split(), b.get(k, "").split()
        i = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
        print(f"{k}: first divergence at generated token {i}: llama.cpp {x[i:i+3]} tqserve {y[i:i+3]}")
print(f"identical greedy ids: {len(same)} of {len(a)} sequences")
sys.exit(0 if "IDS single" in same and len(same) >= len(a) - 1 else 1)
EOF
fi

echo "== measure: $RUNS runs x threads {$THREADS} x formats {$ACTIVE}; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
RES="$WORK/results.txt"
: >"$RES"
for r in $(seq 1 "$RUNS"); do
  for t in $THREADS; do
    for f in $ACTIVE; do
      q="$(tq_quant "$f")"
      "$TQB" --model "$MODEL" --threads "$t" --runs 1 ${q:+--quantization-config "$q"} |
        awk -v f="$f" -v t="$t" '/^RESULT/ {print "tq", f, t, $2, $3}' >>"$RES"
      "$WORK/llbench" --model "$(gguf "$f")" --threads "$t" --bins "$BINS" --fa 0 --runs 1 \
        --tg 128 | awk -v f="$f" -v t="$t" '/^RESULT/ {print "ll", f, t, $2, $3}' >>"$RES"
    done
  done
done
echo "loadavg at end $(cut -d' ' -f1-3 /proc/loadavg)"
$PY - "$RES" <<'EOF'
import statistics, sys, collections
vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    eng, f, t, what, v = line.split()
    vals[(eng, f, t, what)].append(float(v))
med = {k: statistics.median(v) for k, v in vals.items()}
names = {"f16": "F16", "q8_0": "8-bit (int8 g32 / Q8_0)", "q4_0": "4-bit (int4 g32 / Q4_0)",
         "q4_0all": "4-bit + embeddings/lm_head (Q4_0)"}
cols = [("pp400", "prefill 400"), ("tg128", "decode"), ("batch16", "16 sequences")]
print("\ntqserve / llama.cpp tok/s (median of runs; tqserve tok/s | llama.cpp tok/s)\n")
print("| weights | threads | " + " | ".join(c[1] for c in cols) + " |")
print("|---|---|" + "---|" * len(cols))
for f in dict.fromkeys(k[1] for k in med):
    for t in sorted(dict.fromkeys(k[2] for k in med if k[1] == f), key=int):
        cells = []
        for c, _ in cols:
            a, b = med.get(("tq", f, t, c)), med.get(("ll", f, t, c))
            cells.append(f"{a / b:.2f} ({a:.0f} / {b:.0f})" if a and b else "-")
        print(f"| {names.get(f, f)} | {t} | " + " | ".join(cells) + " |")
EOF
