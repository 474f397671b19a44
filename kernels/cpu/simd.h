// Portable 8-wide float SIMD for the CPU kernels: GCC/Clang vector extensions,
// which become AVX/AVX-512 instructions with -march=native and pairs of SSE
// instructions without it. No intrinsics, so the same code builds anywhere.
#pragma once

#include <cstdint>
#include <cstring>

namespace tq::kernels::cpu {

typedef float v8f __attribute__((vector_size(32)));

inline v8f Load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float HorizontalSum(v8f v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
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

}  // namespace tq::kernels::cpu
