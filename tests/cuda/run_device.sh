#!/usr/bin/env bash
# GPU check of the CUDA backend (issue 6), for a machine with CUDA, CMake and
# a C++ compiler only: builds the engine + CUDA kernels (no server, no
# sentencepiece; GoogleTest and nlohmann/json come from third_party/carry/),
# runs every CUDA test (each op against the CPU backend, end-to-end greedy on
# the bundled model and on random Qwen2/Qwen3 checkpoints (biases, q/k norms:
# test_cuda_arch.cc); with NCCL installed, tq_test_nccl: the NCCL
# communicator's collectives over this machine's GPUs and tensor-parallel
# greedy decoding against the CPU, TP=1 through NCCL on one GPU and TP=2/4 when
# the machine has that many GPUs; CudaKvRetrieval: the long-context needle
# test of issue 21 item 3 at 4K/16K/32K, whose table of top-1 agreement and
# output error per dtype is printed) and the kernel benchmarks (copy bandwidth,
# decode attention, chunked-prefill attention tiled vs per-token, a
# Llama-3-8B decode step, LogitsTopK at vocab 128256 vs the logits' copy to
# the host, CUDA graphs), and prints a short table (the
# tensor-parallel tests listed one per line).
# Budget: under 8 minutes on 16 cores (build ~3-4 min for sm_90 only).
#
# Here (once):  tests/cuda/prepare_carry.sh
# Device run:   run(command="tests/cuda/run_device.sh",
#                   carry=["third_party/carry"], timeout_s=540)
# Outputs under $OUT (or build-device/out): cuda_tests.xml, cuda_tests.log,
# bench.txt, summary.txt.  Options: --quick (decode benchmarks at 4k, prefill
# at 2k only, fewer repetitions), --no-bench.
set -uo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
quick=""
bench=1
for arg in "$@"; do
  case $arg in
    --quick) quick="--quick" ;;
    --no-bench) bench=0 ;;
    *) echo "run_device.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
out=${OUT:-build-device/out}
mkdir -p "$out"
log() { echo "[run_device $(($(date +%s) - start))s] $*"; }

[[ -d third_party/carry/googletest ]] || { echo "third_party/carry missing: run tests/cuda/prepare_carry.sh here and carry it" >&2; exit 2; }
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[[ -x $nvcc ]] || { echo "run_device.sh: nvcc not found" >&2; exit 2; }
log "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi unavailable')"
log "$($nvcc --version | tail -1); $(cmake --version | head -1); $(${CXX:-c++} --version | head -1)"

gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
# sm_90 only on the H200 (halves nvcc time); CI builds 80 and 90.
arch=${TQ_CUDA_ARCH:-90}
if ! cmake -S . -B build-device "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTQ_CUDA=ON \
    -DTQ_BUILD_SERVER=OFF -DTQ_SENTENCEPIECE=OFF -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" > "$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"; exit 1
fi
log "configured"
targets=(tq_test_cuda tq_bench_cuda tq_bench_cuda_graphs)
# tq_test_nccl exists when CMake found nccl.h and libnccl next to CUDA.
grep -q "tq_test_nccl" build-device/build.ninja build-device/Makefile 2>/dev/null && targets+=(tq_test_nccl)
if ! cmake --build build-device -j"$(nproc)" --target "${targets[@]}" > "$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -40; exit 1
fi
log "built"

build-device/bin/tq_test_cuda --gtest_output="xml:$out/cuda_tests.xml" > "$out/cuda_tests.log" 2>&1
tests_rc=$?
if [[ -x build-device/bin/tq_test_nccl ]]; then
  # A collective that never completes (first GPU run of TP) must not eat the budget.
  timeout 300 build-device/bin/tq_test_nccl --gtest_output="xml:$out/nccl_tests.xml" \
    >> "$out/cuda_tests.log" 2>&1 || tests_rc=1
else
  log "NCCL not found: tq_test_nccl not built"
fi
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|tq3 KV|Failure|Expected|Which is|worst|TP=|^rank " "$out/cuda_tests.log" | head -60
# The needle retrieval table (CudaKvRetrieval; docs/kv-cache.md has the CPU one).
grep -E "^\| (backend|cuda) \|" "$out/cuda_tests.log"
log "tests rc=$tests_rc"

if [[ $bench == 1 ]]; then
  timeout 240 build-device/bin/tq_bench_cuda $quick > "$out/bench.txt" 2>&1
  log "bench rc=$?"
  # Decode step with and without CUDA graphs (docs/cuda.md "CUDA graphs").
  timeout 120 build-device/bin/tq_bench_cuda_graphs >> "$out/bench.txt" 2>&1
  log "graphs bench rc=$?"
  cat "$out/bench.txt"
fi

{
  # Per-test result lines end in "(N ms)"; gtest's closing lists do not.
  count() { grep -cE "^\[ *$1 *\] .* \([0-9]+ ms\)\$" "$out/cuda_tests.log"; }
  echo "tests: $(count OK) passed, $(count FAILED) failed, $(count SKIPPED) skipped"
  # Tensor parallelism on CUDA (issue 8): each test's result, and the token
  # and logit comparisons it printed (a skip says how many GPUs there were).
  grep -E "^\[ *(OK|FAILED|SKIPPED) *\] (CudaTensorParallel|NcclCommunicator)\..* \([0-9]+ ms\)\$" \
    "$out/cuda_tests.log" |
    sed 's/^/  /'
  grep -E "CUDA TP=[0-9]|TP=[0-9] needs" "$out/cuda_tests.log" | sed 's/^/    /'
  grep -E "^\| (backend|cuda) \|" "$out/cuda_tests.log"
  [[ -f $out/bench.txt ]] && cat "$out/bench.txt"
  echo "wall: $(($(date +%s) - start)) s"
} > "$out/summary.txt"
cat "$out/summary.txt"
exit $tests_rc
