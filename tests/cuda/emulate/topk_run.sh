#!/usr/bin/env bash
# Runs kernels/cuda/topk.cu emulated on the CPU (emu_prelude.h +
# topk_intrinsics.h: one std::thread per CUDA thread) against the CPU
# reference of LogitsTopK (topk_emulated.cc): a check of the kernel's radix
# select, ballot compaction and bitonic sort for sessions without a GPU. Not
# part of CI. Needs build/ (tq_kernels built), g++ >= 12 and the CUDA headers.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=build/emulate
mkdir -p "$out/gen/kernels/cuda"
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
. tests/cuda/emulate/convert.sh
emu_convert kernels/cuda/topk.cu "$out/gen/kernels/cuda/topk.cu.cc"
flags=(-std=c++20 -O1 -w -I. -isystem "$cuda_inc")
g++ "${flags[@]}" -include tests/cuda/emulate/topk_intrinsics.h -c "$out/gen/kernels/cuda/topk.cu.cc" -o "$out/topk.o"
g++ "${flags[@]}" -c tests/cuda/emulate/topk_emulated.cc -o "$out/topk_emulated.o"
g++ "$out/topk.o" "$out/topk_emulated.o" build/lib/libtq_kernels.a -lpthread \
  -L"${CUDA_HOME:-/usr/local/cuda}/lib64" -lcudart_static -ldl -lrt -o "$out/tq_topk_emulated"
"$out/tq_topk_emulated"
