#!/usr/bin/env bash
# Runs tests/cuda/test_cuda_kv.cc and test_cuda_plan.cc with the attention
# kernels (paged_attention.cu, paged_prefill.cu) emulated on the CPU
# (emu_prelude.h, emulated_backend.cc): a check of their indexing, masking
# and synchronization for sessions without a GPU. Not part of CI; slow (one
# std::thread per CUDA thread), so pick tests with a filter.
# Needs build/ (any configuration that built tq_engine and tq_kernels),
# g++ ≥ 12 (C++20 <barrier>), the CUDA headers and GoogleTest.
# Usage: tests/cuda/emulate/run.sh [gtest filter]   e.g.
#   tests/cuda/emulate/run.sh 'CudaKv.MixedBatches*:CudaKv.PrefillChunkOver*'
set -euo pipefail
cd "$(dirname "$0")/../../.."
filter=${1:-CudaKv.MixedBatches*}
out=build/emulate
mkdir -p "$out/gen/kernels/cuda"
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
# The kernels' sources, with the launches and shared-memory declarations the
# host compiler cannot read turned into the emulator's.
for f in paged_attention.cu paged_prefill.cu; do
  sed -e 's|extern __shared__ float smem\[\];|float* smem = emu_dynamic_smem;|' \
      -e 's|\(\w*Kernel<[A-Za-z]*>\)<<<\([^,]*\), *\([^,]*\), *\([^,]*\), *stream>>>(a);|EmuLaunch(\1, \2, \3, \4, a);|' \
      -e 's|cudaFuncSetAttribute(|EmuFuncSetAttribute(|' \
      -e 's|TQ_CUDA_CHECK_LAUNCH();||' \
      "kernels/cuda/$f" > "$out/gen/kernels/cuda/$f.cc"
  grep -q "<<<" "$out/gen/kernels/cuda/$f.cc" && { echo "run.sh: a launch in $f was not converted" >&2; exit 1; }
done
flags=(-std=c++20 -O1 -w -I. -isystem "$cuda_inc")
objs=()
for f in paged_attention paged_prefill; do
  g++ "${flags[@]}" -include tests/cuda/emulate/emu_prelude.h -c "$out/gen/kernels/cuda/$f.cu.cc" -o "$out/$f.o"
  objs+=("$out/$f.o")
done
for f in tests/cuda/emulate/emulated_backend.cc tests/cuda/test_cuda_kv.cc tests/cuda/test_cuda_plan.cc; do
  o="$out/$(basename "$f" .cc).o"
  g++ "${flags[@]}" -c "$f" -o "$o"
  objs+=("$o")
done
g++ "${objs[@]}" build/lib/libtq_engine.a build/lib/libtq_kernels.a -lgtest -lgtest_main -lpthread \
  -L"${CUDA_HOME:-/usr/local/cuda}/lib64" -lcudart_static -ldl -lrt -o "$out/tq_test_cuda_emulated"
"$out/tq_test_cuda_emulated" --gtest_filter="$filter"
