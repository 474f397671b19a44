// Row decoders for f16, bf16, int8 and int4 weights. The SIMD paths (AVX-512,
// AVX2, F16C intrinsics; GCC vector extensions for bf16) compute exactly what
// the scalar tails compute, element by element.
#include "kernels/cpu/weight_decode.h"

#include <cstring>
#include <stdexcept>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/x86_intrin.h"
#include "kernels/half.h"

// This level's part of the file (isa_begin.h): everything above is baseline code.
#include "kernels/cpu/isa_begin.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {
namespace {

typedef uint16_t v16u16 __attribute__((vector_size(32)));
typedef uint32_t v16u32 __attribute__((vector_size(64)));
template <typename V>
inline V LoadU(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

void DecodeF16(const uint16_t* src, int64_t k, float* dst) {
  int64_t i = 0;
#if TQ_ISA_AVX512F
  for (; i + 16 <= k; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
#elif TQ_ISA_F16C
  for (; i + 8 <= k; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
#endif
  for (; i < k; ++i) dst[i] = HalfToFloat(src[i]);
}

void DecodeBf16(const uint16_t* src, int64_t k, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const v16u32 bits = __builtin_convertvector(LoadU<v16u16>(src + i), v16u32) << 16;
    std::memcpy(dst + i, &bits, sizeof(bits));
  }
  for (; i < k; ++i) dst[i] = Bf16ToFloat(src[i]);
}

// 16 codes (one per byte, or interleaved nibbles already split into bytes)
// -> dst[0..16) = (float(code) - zero) * scale. The intrinsic paths compute
// exactly what the scalar path computes, lane by lane.
inline void Dequantize16(const uint8_t* codes, float scale, float zero, float* dst) {
#if TQ_ISA_AVX512F
  const __m512 f = _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes))));
  _mm512_storeu_ps(dst,
                   _mm512_mul_ps(_mm512_sub_ps(f, _mm512_set1_ps(zero)), _mm512_set1_ps(scale)));
#elif TQ_ISA_AVX2
  for (int h = 0; h < 16; h += 8) {
    const __m256 f = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + h))));
    _mm256_storeu_ps(dst + h,
                     _mm256_mul_ps(_mm256_sub_ps(f, _mm256_set1_ps(zero)), _mm256_set1_ps(scale)));
  }
#else
  for (int j = 0; j < 16; ++j) dst[j] = (static_cast<float>(codes[j]) - zero) * scale;
#endif
}

// One group of int8 codes: dst[j] = (float(code[j]) - zero) * scale.
void DecodeInt8Group(const uint8_t* codes, int64_t n, float scale, float zero, float* dst) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) Dequantize16(codes + j, scale, zero, dst + j);
  for (; j < n; ++j) dst[j] = (static_cast<float>(codes[j]) - zero) * scale;
}

// One group of int4 codes (n even; element 2m in the low nibble of byte m).
void DecodeInt4Group(const uint8_t* bytes, int64_t n, float scale, float zero, float* dst) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    alignas(16) uint8_t codes[32];
#if defined(__SSE2__)
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + j / 2));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(b, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    _mm_store_si128(reinterpret_cast<__m128i*>(codes), _mm_unpacklo_epi8(lo, hi));
    _mm_store_si128(reinterpret_cast<__m128i*>(codes + 16), _mm_unpackhi_epi8(lo, hi));
#else
    for (int m = 0; m < 16; ++m) {
      codes[2 * m] = bytes[j / 2 + m] & 0x0f;
      codes[2 * m + 1] = bytes[j / 2 + m] >> 4;
    }
#endif
    Dequantize16(codes, scale, zero, dst + j);
    Dequantize16(codes + 16, scale, zero, dst + j + 16);
  }
  for (; j < n; j += 2) {
    const uint8_t b = bytes[j / 2];
    dst[j] = (static_cast<float>(b & 0x0f) - zero) * scale;
    dst[j + 1] = (static_cast<float>(b >> 4) - zero) * scale;
  }
}

}  // namespace

void DecodeWeightRow(const WeightView& w, int64_t o, float* dst) {
  const int64_t k = w.in_features;
  switch (w.dtype) {
    case WeightDtype::kF32:
      std::memcpy(dst, static_cast<const float*>(w.data) + o * k, sizeof(float) * k);
      return;
    case WeightDtype::kF16:
      DecodeF16(static_cast<const uint16_t*>(w.data) + o * k, k, dst);
      return;
    case WeightDtype::kBF16:
      DecodeBf16(static_cast<const uint16_t*>(w.data) + o * k, k, dst);
      return;
    case WeightDtype::kF32Panels: {
      const float* panel = static_cast<const float*>(w.data) + o / kPanelCols * kPanelCols * k;
      for (int64_t i = 0; i < k; ++i) dst[i] = panel[i * kPanelCols + o % kPanelCols];
      return;
    }
    case WeightDtype::kF16Panels:
    case WeightDtype::kBF16Panels: {
      const uint16_t* panel =
          static_cast<const uint16_t*>(w.data) + o / kPanelCols * kPanelCols * k;
      const bool f16 = w.dtype == WeightDtype::kF16Panels;
      for (int64_t i = 0; i < k; ++i) {
        const uint16_t h = panel[i * kPanelCols + o % kPanelCols];
        dst[i] = f16 ? HalfToFloat(h) : Bf16ToFloat(h);
      }
      return;
    }
    case WeightDtype::kInt8Tiles:
    case WeightDtype::kInt4Tiles:
      return DecodeTiledIntRow(w, o, dst);
    case WeightDtype::kInt8:
    case WeightDtype::kInt4:
      break;
  }
  const bool int4 = w.dtype == WeightDtype::kInt4;
  const int64_t gs = w.group_size;
  const int64_t groups = k / gs;
  const float midpoint = int4 ? 8.0f : 128.0f;
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + (int4 ? o * k / 2 : o * k);
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = HalfToFloat(w.scales[o * groups + g]);
    const float zero = w.zeros ? HalfToFloat(w.zeros[o * groups + g]) : midpoint;
    if (int4) {
      DecodeInt4Group(row + g * gs / 2, gs, scale, zero, dst + g * gs);
    } else {
      DecodeInt8Group(row + g * gs, gs, scale, zero, dst + g * gs);
    }
  }
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
