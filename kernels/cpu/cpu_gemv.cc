// Single-row matmul (the GEMV of decode) for the f16, bf16, int8 and int4
// weight formats, decoding straight into registers: per kLanes-wide chunk,
// w = the widened 16-bit value, or (float(code) - zero) * scale within one
// group of an integer format, then acc += x * w. That is exactly what
// the decode-to-buffer path (cpu_matmul_packed.cc) stores and the shared
// micro-kernel (matmul_tile.h) then accumulates, in the same order, so a row
// alone and the same row inside a batch give the same bits. With packed
// weights the GEMV is bound by decoding, not by memory bandwidth
// (docs/PERFORMANCE.md), so this path decodes each packed byte once into
// registers, with no fp32 round trip through the cache.
#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/x86_intrin.h"
#include "kernels/half.h"

// This level's part of the file (isa_begin.h): everything above is baseline code.
#include "kernels/cpu/isa_begin.h"
#include "kernels/cpu/matmul_tile.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {
namespace {

// fp16 bits -> float, one instruction with F16C (exact either way).
inline float HalfBitsToFloat(uint16_t h) {
#if TQ_ISA_F16C
  return _cvtsh_ss(h);
#else
  return HalfToFloat(h);
#endif
}

// Codes of inputs [i, i + kLanes) of one row as floats (not yet shifted or
// scaled). kInt8: one byte per code; kInt4: element 2j in the low nibble of
// byte j.
template <WeightDtype D>
inline Vec LoadCodes(const uint8_t* row, int64_t i) {
#if TQ_ISA_AVX512F
  __m128i bytes;
  if constexpr (D == WeightDtype::kInt8) {
    bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i));
  } else {
    const __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i / 2));
    const __m128i mask = _mm_set1_epi8(0x0f);
    bytes = _mm_unpacklo_epi8(_mm_and_si128(packed, mask),
                              _mm_and_si128(_mm_srli_epi16(packed, 4), mask));
  }
  return reinterpret_cast<Vec>(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes)));
#elif TQ_ISA_AVX2
  __m128i bytes;
  if constexpr (D == WeightDtype::kInt8) {
    bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i));
  } else {
    int32_t word;
    std::memcpy(&word, row + i / 2, 4);
    const __m128i packed = _mm_cvtsi32_si128(word);
    const __m128i mask = _mm_set1_epi8(0x0f);
    bytes = _mm_unpacklo_epi8(_mm_and_si128(packed, mask),
                              _mm_and_si128(_mm_srli_epi16(packed, 4), mask));
  }
  return reinterpret_cast<Vec>(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)));
#else
  Vec v{};
  for (int j = 0; j < kLanes; ++j) {
    const int64_t e = i + j;
    v[j] = D == WeightDtype::kInt8 ? row[e] : (row[e / 2] >> (4 * (e & 1))) & 0x0f;
  }
  return v;
#endif
}

#if TQ_ISA_AVX512F
// int4 on AVX-512: a group of one row has only 16 distinct weights, so the
// kernel builds the table t[j] = (float(j) - zero) * scale once per group
// (the very values the decoder computes) and looks codes up with one vpermps,
// which reads only the low 4 bits of each index lane: no conversion, shift
// or multiply per weight.
constexpr bool kInt4Table = true;

inline Vec Int4Table(float scale, float zero) {
  const Vec iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  return (iota - zero) * scale;
}

// Weights [i, i + 16) of an int4 row through its group's table.
inline Vec LookupInt4(const uint8_t* row, int64_t i, Vec table) {
  const __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i / 2));
  // Byte m twice, in dword lanes 2m and 2m + 1; the odd lane shifts its high
  // nibble down. Bits above the nibble are ignored by the permute.
  const __m512i lanes = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(packed, packed));
  const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
  return reinterpret_cast<Vec>(
      _mm512_permutexvar_ps(_mm512_srlv_epi32(lanes, shifts), reinterpret_cast<__m512>(table)));
}
#else
constexpr bool kInt4Table = false;
inline Vec Int4Table(float, float) {
  return Vec{};
}
inline Vec LookupInt4(const uint8_t*, int64_t, Vec) {
  return Vec{};
}
#endif

// out[col + c] for c < C (one row of x).
template <WeightDtype D, int C>
inline void GemvTile(const MatMulParams& p, int64_t col) {
  const int64_t k = p.w.in_features;
  const int64_t gs = p.w.group_size;
  const int64_t groups = k / gs;
  const int64_t row_bytes = D == WeightDtype::kInt8 ? k : k / 2;
  const float midpoint = D == WeightDtype::kInt8 ? 128.0f : 8.0f;
  const uint8_t* rows[C];
  for (int c = 0; c < C; ++c)
    rows[c] = static_cast<const uint8_t*>(p.w.data) + (col + c) * row_bytes;
  Vec acc[C];
  for (int c = 0; c < C; ++c) acc[c] = Vec{};
  for (int64_t g = 0; g < groups; ++g) {
    Vec scale[C], zero[C];
    for (int c = 0; c < C; ++c) {
      const int64_t q = (col + c) * groups + g;
      const float s = HalfBitsToFloat(p.w.scales[q]);
      const float z = p.w.zeros ? HalfBitsToFloat(p.w.zeros[q]) : midpoint;
      if constexpr (D == WeightDtype::kInt4 && kInt4Table) {
        scale[c] = Int4Table(s, z);  // the table; zero[] unused
      } else {
        scale[c] = Splat<Vec>(s);
        zero[c] = Splat<Vec>(z);
      }
    }
    if constexpr (D == WeightDtype::kInt4 && kInt4Table) {
      for (int64_t i = g * gs; i < (g + 1) * gs; i += kLanes) {
        const Vec xv = LoadVec(p.x + i);
        for (int c = 0; c < C; ++c) acc[c] = MulAdd(xv, LookupInt4(rows[c], i, scale[c]), acc[c]);
      }
      continue;
    }
    for (int64_t i = g * gs; i < (g + 1) * gs; i += kLanes) {
      const Vec xv = LoadVec(p.x + i);
      for (int c = 0; c < C; ++c) {
        const Vec wv = (LoadCodes<D>(rows[c], i) - zero[c]) * scale[c];
        acc[c] = MulAdd(xv, wv, acc[c]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    const float v = HorizontalSum(acc[c]);
    float& dst = p.out[col + c];
    dst = p.accumulate ? dst + v : v;
  }
}

// out[col + c] for c < C, 16-bit formats: DotTile's order, serial tail included.
template <WeightDtype D, int C>
inline void GemvTileWide(const MatMulParams& p, int64_t col) {
  const int64_t k = p.w.in_features;
  const uint16_t* rows[C];
  for (int c = 0; c < C; ++c) rows[c] = static_cast<const uint16_t*>(p.w.data) + (col + c) * k;
  Vec acc[C];
  for (int c = 0; c < C; ++c) acc[c] = Vec{};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    const Vec xv = LoadVec(p.x + i);
    for (int c = 0; c < C; ++c) acc[c] = MulAdd(xv, LoadWide<D>(rows[c], i), acc[c]);
  }
  for (int c = 0; c < C; ++c) {
    // The tail (< kLanes weights) goes through a stack buffer so that it is
    // the same DotTail as the decode-to-buffer path.
    float tail[kLanes];
    for (int64_t j = i; j < k; ++j) {
      tail[j - i] = D == WeightDtype::kF16 ? HalfToFloat(rows[c][j]) : Bf16ToFloat(rows[c][j]);
    }
    const float v = DotTail(p.x + i, tail, k - i, HorizontalSum(acc[c]));
    float& dst = p.out[col + c];
    dst = p.accumulate ? dst + v : v;
  }
}

template <WeightDtype D, int C>
inline void Tile(const MatMulParams& p, int64_t col) {
  if constexpr (D == WeightDtype::kF16 || D == WeightDtype::kBF16) {
    GemvTileWide<D, C>(p, col);
  } else {
    GemvTile<D, C>(p, col);
  }
}

template <WeightDtype D>
void Gemv(const MatMulParams& p, ThreadPool& pool) {
  const int64_t n = p.w.out_features;
  constexpr int64_t kTilesPerTask = 8;
  const int64_t num_tiles = (n + kColTile - 1) / kColTile;
  pool.ParallelFor(num_tiles, kTilesPerTask, [&](int64_t tile_begin, int64_t tile_end) {
    const int64_t col_end = std::min(n, tile_end * kColTile);
    int64_t col = tile_begin * kColTile;
    for (; col + kColTile <= col_end; col += kColTile) Tile<D, kColTile>(p, col);
    for (; col < col_end; ++col) Tile<D, 1>(p, col);
  });
}

}  // namespace

bool GemvSupported(const MatMulParams& p) {
  switch (p.w.dtype) {
    case WeightDtype::kF16:
    case WeightDtype::kBF16:
      return p.rows == 1;
    case WeightDtype::kInt8:
    case WeightDtype::kInt4:
      return p.rows == 1 && p.w.group_size % kLanes == 0;
    default:
      return false;
  }
}

void Gemv(const MatMulParams& p, ThreadPool& pool) {
  switch (p.w.dtype) {
    case WeightDtype::kF16:
      return Gemv<WeightDtype::kF16>(p, pool);
    case WeightDtype::kBF16:
      return Gemv<WeightDtype::kBF16>(p, pool);
    case WeightDtype::kInt8:
      return Gemv<WeightDtype::kInt8>(p, pool);
    default:
      return Gemv<WeightDtype::kInt4>(p, pool);
  }
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
