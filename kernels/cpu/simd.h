// Portable 8-wide float SIMD for the CPU kernels: GCC/Clang vector extensions,
// which become AVX/AVX-512 instructions in the avx2/avx512 levels (isa_begin.h) and pairs of SSE
// instructions without it. No intrinsics, so the same code builds anywhere.
#pragma once

#ifndef TQ_CPU_ISA_NS
#error "ISA-dependent header: include kernels/cpu/isa_begin.h first"
#endif

#include <cstdint>
#include <cstring>

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {

typedef float v8f __attribute__((vector_size(32)));

inline v8f Load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float HorizontalSum(v8f v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/// 16-wide, for compute-bound kernels on CPUs with 512-bit FMA units (AVX-512
/// builds): batched matmuls run ~1.8x faster than with v8f on the Zen 5
/// build machines (docs/PERFORMANCE.md). Without AVX-512 it is two v8f.
typedef float v16f __attribute__((vector_size(64)));

inline float HorizontalSum(v16f v) {
  const v8f lo = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
  const v8f hi = {v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]};
  return HorizontalSum(lo + hi);
}

/// x in every lane: one vbroadcastss (folded into a load when x is in
/// memory). Not `V{} + x`: 0 + -0 is +0, so GCC 12 keeps that add and emits
/// vaddss + vbroadcastss, two more uops on the FMA ports per broadcast (the
/// F16 prefill tile ran 22% slower with them on the Xeon of issue 22).
template <typename V>
V Splat(float x);
template <>
inline v8f Splat<v8f>(float x) {
  return v8f{x, x, x, x, x, x, x, x};
}
template <>
inline v16f Splat<v16f>(float x) {
  return v16f{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
}

/// dot(a, b) over n floats with 8 independent lanes: strict IEEE code cannot
/// reorder a serial sum, so this is what lets the compiler vectorize it.
inline float Dot(const float* a, const float* b, int64_t n) {
  v8f acc{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc += Load8(a + i) * Load8(b + i);
  float sum = HorizontalSum(acc);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS
