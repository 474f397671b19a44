#!/usr/bin/env bash
# Runs tests/cuda/test_cuda_kv.cc, test_cuda_ops.cc, test_quant_gemm.cc and
# test_cuda_plan.cc with the CUDA kernels of KvWrite (kv_write.cu), paged
# attention (paged_attention.cu, paged_prefill.cu), the elementwise ops
# (elementwise.cu) and the int8/int4 GEMM (quant_gemm.cu) emulated on the
# CPU (emu_prelude.h, emulated_backend.cc, emu_runtime.cc): a check of their
# indexing, encoding, masking and synchronization for sessions without a GPU.
# Not part of CI; slow (one std::thread per CUDA thread), so pick tests with a
# filter. Needs build/ (any configuration that built tq_engine and
# tq_kernels), g++ >= 12 (C++20 <barrier>), the CUDA headers and GoogleTest.
# Usage: tests/cuda/emulate/run.sh [gtest filter]   e.g.
#   tests/cuda/emulate/run.sh 'CudaKv.AttentionSink*:CudaOps.*:CudaQuantGemm.*'
set -euo pipefail
cd "$(dirname "$0")/../../.."
filter=${1:-CudaKv.MixedBatches*}
out=build/emulate
mkdir -p "$out/gen/kernels/cuda"
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
. tests/cuda/emulate/convert.sh
flags=(-std=c++20 -O1 -w -I. -isystem "$cuda_inc")
objs=()
# Each object is rebuilt only when its source (or the emulator) is newer.
compile() {  # compile SRC OBJ [extra flags]
  local src=$1 obj=$2
  shift 2
  if [[ ! -f $obj || $src -nt $obj || tests/cuda/emulate/emu_prelude.h -nt $obj ]]; then
    g++ "${flags[@]}" "$@" -c "$src" -o "$obj"
  fi
  objs+=("$obj")
}
for f in kv_write paged_attention paged_prefill elementwise quant_gemm; do
  gen=$out/gen/kernels/cuda/$f.cu.cc
  emu_convert "kernels/cuda/$f.cu" "$gen.new"
  if cmp -s "$gen.new" "$gen"; then rm "$gen.new"; else mv "$gen.new" "$gen"; fi
  compile "$gen" "$out/$f.o" -include tests/cuda/emulate/emu_prelude.h
done
for f in tests/cuda/emulate/emulated_backend.cc tests/cuda/emulate/emu_runtime.cc \
  tests/cuda/test_cuda_kv.cc tests/cuda/test_cuda_ops.cc tests/cuda/test_quant_gemm.cc \
  tests/cuda/test_cuda_plan.cc; do
  compile "$f" "$out/$(basename "$f" .cc).o"
done
g++ "${objs[@]}" build/lib/libtq_engine.a build/lib/libtq_kernels.a -lgtest -lgtest_main -lpthread \
  -o "$out/tq_test_cuda_emulated"
"$out/tq_test_cuda_emulated" --gtest_filter="$filter"
