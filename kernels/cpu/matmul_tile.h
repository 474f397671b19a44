// The register-tiled dot-product micro-kernel shared by every CPU matmul
// (fp32 weights, and the 16-bit and integer formats once decoded to fp32).
// GCC vector extensions give 16-wide SIMD with AVX-512 (a 2 x 8 tile) and
// 8-wide on AVX2 (2 x 4, which fits 16 registers), with no intrinsics.
//
// Summation order: each output keeps kLanes partial sums over k in steps of
// kLanes, adds them pairwise (HorizontalSum), then adds the k % kLanes tail
// serially. It depends only on k, never on the tile shape, the number of rows
// or threads, so batched and single-sequence results agree bit for bit; every
// format's kernel follows this same order.
#pragma once

#ifndef TQ_CPU_ISA_NS
#error "ISA-dependent header: include kernels/cpu/isa_begin.h first"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd.h"
#include "kernels/cpu/x86_intrin.h"
#include "kernels/half.h"
#include "kernels/op_params.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {

#if TQ_ISA_AVX512F
using Vec = v16f;
constexpr int kColTile = 8;
#else
using Vec = v8f;
constexpr int kColTile = 4;
#endif
constexpr int kRowTile = 2;
constexpr int kLanes = sizeof(Vec) / sizeof(float);

inline Vec LoadVec(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

/// acc + a * b, fused (one rounding) where the ISA has FMA and two roundings
/// where it does not. Spelled out rather than left to the compiler's
/// contraction of `acc += a * b`, which differs between inlining contexts
/// (GCC 12 vectorizes some tail multiplies and then adds them unfused), so
/// that every kernel sharing this order also shares its bits.
inline Vec MulAdd(Vec a, Vec b, Vec acc) {
#if TQ_ISA_AVX512F
  return reinterpret_cast<Vec>(_mm512_fmadd_ps(
      reinterpret_cast<__m512>(a), reinterpret_cast<__m512>(b), reinterpret_cast<__m512>(acc)));
#elif TQ_ISA_FMA
  return reinterpret_cast<Vec>(_mm256_fmadd_ps(
      reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b), reinterpret_cast<__m256>(acc)));
#else
  return acc + a * b;
#endif
}

inline float MulAdd(float a, float b, float acc) {
#if TQ_ISA_FMA
  return std::fma(a, b, acc);
#else
  return acc + a * b;
#endif
}

/// Weights [i, i + kLanes) of a 16-bit (kF16 or kBF16) row widened to fp32 (exact).
template <WeightDtype D>
inline Vec LoadWide(const uint16_t* row, int64_t i) {
#if TQ_ISA_AVX512F
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i));
  if constexpr (D == WeightDtype::kF16) {
    return reinterpret_cast<Vec>(_mm512_cvtph_ps(h));
  } else {
    return reinterpret_cast<Vec>(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
#elif TQ_ISA_AVX2 && TQ_ISA_F16C
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i));
  if constexpr (D == WeightDtype::kF16) {
    return reinterpret_cast<Vec>(_mm256_cvtph_ps(h));
  } else {
    return reinterpret_cast<Vec>(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
#else
  Vec v{};
  for (int j = 0; j < kLanes; ++j) {
    v[j] = D == WeightDtype::kF16 ? HalfToFloat(row[i + j]) : Bf16ToFloat(row[i + j]);
  }
  return v;
#endif
}

/// Adds x[j] * w[j] for j < n to sum, serially: the k % kLanes tail of
/// every dot product.
inline float DotTail(const float* x, const float* w, int64_t n, float sum) {
  for (int64_t j = 0; j < n; ++j) sum = MulAdd(x[j], w[j], sum);
  return sum;
}

/// Adds the products of chunks [k_begin, k_end) (multiples of kLanes) to the
/// lane-wise partial sums acc[r][c] of dot(x[r], w[c]). A dot product split
/// into k blocks this way sums in the same order as in one call.
template <int R, int C>
inline void DotTileAccumulate(const float* const* x, const float* const* w, int64_t k_begin,
                              int64_t k_end, Vec acc[R][C]) {
  for (int64_t i = k_begin; i < k_end; i += kLanes) {
    Vec wv[C];
    for (int c = 0; c < C; ++c) wv[c] = LoadVec(w[c] + i);
    for (int r = 0; r < R; ++r) {
      const Vec xv = LoadVec(x[r] + i);
      for (int c = 0; c < C; ++c) acc[r][c] = MulAdd(xv, wv[c], acc[r][c]);
    }
  }
}

/// Computes the R x C tile out[r][c] = dot(x[r], w[c]) over k, in the order
/// described above.
template <int R, int C>
inline void DotTile(const float* const* x, const float* const* w, int64_t k, float out[R][C]) {
  Vec acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = Vec{};
  const int64_t main = k / kLanes * kLanes;
  DotTileAccumulate<R, C>(x, w, 0, main, acc);
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      out[r][c] = DotTail(x[r] + main, w[c] + main, k - main, HorizontalSum(acc[r][c]));
    }
  }
}

/// Writes out[row + r, col_begin + c] for r < R, c < cols (+= when
/// p.accumulate): the dot products of x's rows with the fp32 weight rows
/// w_rows[c * k .. (c + 1) * k), which are W's rows col_begin + c (the matrix
/// itself for fp32, a decoded block for the other formats).
template <int R>
void RowBlock(const MatMulParams& p, int64_t row, const float* w_rows, int64_t col_begin,
              int64_t cols) {
  const int64_t k = p.w.in_features;
  const int64_t n = p.w.out_features;
  const float* x[R];
  for (int r = 0; r < R; ++r) x[r] = p.x + (row + r) * k;
  auto store = [&](int64_t col, int r, float v) {
    float& dst = p.out[(row + r) * n + col];
    dst = p.accumulate ? dst + v : v;
  };
  int64_t c0 = 0;
  for (; c0 + kColTile <= cols; c0 += kColTile) {
    const float* w[kColTile];
    for (int c = 0; c < kColTile; ++c) w[c] = w_rows + (c0 + c) * k;
    float tile[R][kColTile];
    DotTile<R, kColTile>(x, w, k, tile);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kColTile; ++c) store(col_begin + c0 + c, r, tile[r][c]);
  }
  for (; c0 < cols; ++c0) {
    const float* w[1] = {w_rows + c0 * k};
    float tile[R][1];
    DotTile<R, 1>(x, w, k, tile);
    for (int r = 0; r < R; ++r) store(col_begin + c0, r, tile[r][0]);
  }
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS
