// KV record codecs (see kv_codec.h and docs/kv-cache.md).
#include "kernels/cpu/kv_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/half.h"
#include "kernels/tq/bitplanes.h"
#include "kernels/tq/rotation.h"

// This level's part of the file (isa_begin.h): everything above is baseline code.
#include "kernels/cpu/isa_begin.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {
namespace {

void StoreHalf(uint8_t* dst, float v) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(dst, &h, 2);
}
float LoadHalf(const uint8_t* src) {
  uint16_t h;
  std::memcpy(&h, src, 2);
  return HalfToFloat(h);
}

// fp16 -> fp32 of d elements, 8 at a time with F16C (vcvtph2ps is exact, as
// HalfToFloat, so both paths give the same floats). Attention decodes every
// key and value once per query token, so the scalar loop made an fp16 cache
// prefill 2.5x slower than fp32 (issue 22 item 3).
void WidenHalf(const uint8_t* src, int32_t d, float* out) {
  int32_t i = 0;
#if TQ_ISA_F16C
  for (; i + 8 <= d; i += 8) {
    __m128i h;
    std::memcpy(&h, src + 2 * i, sizeof(h));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < d; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = HalfToFloat(h);
  }
}

// bf16 -> fp32: the 16 bits become the high half of the float, 8 lanes at a time.
void WidenBf16(const uint8_t* src, int32_t d, float* out) {
  typedef uint16_t v8h __attribute__((vector_size(16)));
  typedef uint32_t v8u __attribute__((vector_size(32)));
  int32_t i = 0;
  for (; i + 8 <= d; i += 8) {
    v8h h;
    std::memcpy(&h, src + 2 * i, sizeof(h));
    const v8u w = __builtin_convertvector(h, v8u) << 16;
    std::memcpy(out + i, &w, sizeof(w));
  }
  for (; i < d; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = Bf16ToFloat(h);
  }
}

// Asymmetric per-vector integer quantization with `levels` = 2^bits - 1 steps:
// x ≈ scale·q + zero, scale and zero rounded to fp16 before q is chosen so the
// decoder sees exactly what the encoder assumed.
void EncodeInt(const float* x, int32_t d, int32_t bits, uint8_t* code, uint8_t* param) {
  const float levels = static_cast<float>((1 << bits) - 1);
  const auto [lo, hi] = std::minmax_element(x, x + d);
  const float zero = HalfToFloat(FloatToHalf(*lo));
  float scale = HalfToFloat(FloatToHalf((*hi - zero) / levels));
  if (!(scale > 0.0f)) scale = 1.0f;  // constant vector (or NaN): q = 0 everywhere
  StoreHalf(param, scale);
  StoreHalf(param + 2, zero);
  if (bits == 4) std::memset(code, 0, static_cast<size_t>(d + 1) / 2);
  for (int32_t i = 0; i < d; ++i) {
    const float q = std::clamp(std::nearbyint((x[i] - zero) / scale), 0.0f, levels);
    const uint8_t u = static_cast<uint8_t>(q);
    if (bits == 8) {
      code[i] = u;
    } else {
      code[i / 2] |= static_cast<uint8_t>(u << (4 * (i % 2)));
    }
  }
}

void DecodeInt(const uint8_t* code, const uint8_t* param, int32_t d, int32_t bits, float* out) {
  const float scale = LoadHalf(param);
  const float zero = LoadHalf(param + 2);
  for (int32_t i = 0; i < d; ++i) {
    const uint32_t q = bits == 8 ? code[i] : (code[i / 2] >> (4 * (i % 2))) & 0xFu;
    out[i] = scale * static_cast<float>(q) + zero;
  }
}

// Index of the nearest centroid: count of boundaries below y (levels <= 16).
inline uint8_t Quantize(float y, const float* boundaries, int32_t levels) {
  uint8_t idx = 0;
  for (int32_t b = 0; b < levels - 1; ++b) idx += y >= boundaries[b];
  return idx;
}

}  // namespace

void EncodeRecord(const float* x, const KvLayout& layout, const TqLayerCodec* tq, KvSide side,
                  int32_t head, uint8_t* code, uint8_t* param, float* scratch) {
  const int32_t d = layout.head_dim;
  switch (layout.dtype) {
    case KvDtype::kF32:
      std::memcpy(code, x, sizeof(float) * d);
      return;
    case KvDtype::kF16:
    case KvDtype::kBF16: {
      const bool f16 = layout.dtype == KvDtype::kF16;
      for (int32_t i = 0; i < d; ++i) {
        const uint16_t h = f16 ? FloatToHalf(x[i]) : FloatToBf16(x[i]);
        std::memcpy(code + 2 * i, &h, 2);
      }
      return;
    }
    case KvDtype::kInt8:
    case KvDtype::kInt4:
      EncodeInt(x, d, layout.dtype == KvDtype::kInt8 ? 8 : 4, code, param);
      return;
    case KvDtype::kTq3:
    case KvDtype::kTq4:
    case KvDtype::kTqK3V2:
      break;
  }
  // tq: (keys: per-channel normalization) -> norm -> rotate unit vector -> codes.
  float* u = scratch;
  float* y = scratch + d;
  const size_t stats = static_cast<size_t>(head) * d;
  for (int32_t i = 0; i < d; ++i) {
    float v = x[i];
    if (side == KvSide::kKey) {
      if (tq->k_mean) v -= tq->k_mean[stats + i];
      if (tq->k_scale) v /= tq->k_scale[stats + i];
    }
    u[i] = v;
  }
  double sum_sq = 0.0;
  for (int32_t i = 0; i < d; ++i) sum_sq += static_cast<double>(u[i]) * u[i];
  const float norm = static_cast<float>(std::sqrt(sum_sq));
  const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
  for (int32_t i = 0; i < d; ++i) u[i] *= inv;
  tq->rotation->Forward(u, y);
  const bool key = side == KvSide::kKey;
  const int32_t bits = key ? TqKeyBits(layout.dtype) : TqValueBits(layout.dtype);
  const float* boundaries = key ? tq->k_boundaries : tq->v_boundaries;
  uint8_t indices[512];  // head_dim <= 512 (checked by the cache)
  for (int32_t i = 0; i < d; ++i) indices[i] = Quantize(y[i], boundaries, 1 << bits);
  PackPlanes(indices, d, bits, code);
  // Store |x| / |ĉ| rather than |x|, so the reconstruction norm·ĉ keeps the
  // vector's length: Lloyd–Max codes shrink vectors (|ĉ| < 1 on average),
  // which flattens softmax scores. Measured on stories260K (eval, fp32 KV
  // 3.3763): tq3 3.6446 -> 3.6052, tq4 3.4634 -> 3.4455 (docs/PERFORMANCE.md).
  const float* centroids = key ? tq->k_centroids : tq->v_centroids;
  double c2 = 0.0;
  for (int32_t i = 0; i < d; ++i) {
    c2 += static_cast<double>(centroids[indices[i]]) * centroids[indices[i]];
  }
  const float stored = c2 > 0.0 ? static_cast<float>(norm / std::sqrt(c2)) : 0.0f;
  StoreHalf(param, stored);
}

void DecodeRecord(const uint8_t* code, const uint8_t* param, const KvLayout& layout,
                  const TqLayerCodec* tq, KvSide side, int32_t head, float* out) {
  const int32_t d = layout.head_dim;
  switch (layout.dtype) {
    case KvDtype::kF32:
      std::memcpy(out, code, sizeof(float) * d);
      return;
    case KvDtype::kF16:
      WidenHalf(code, d, out);
      return;
    case KvDtype::kBF16:
      WidenBf16(code, d, out);
      return;
    case KvDtype::kInt8:
    case KvDtype::kInt4:
      DecodeInt(code, param, d, layout.dtype == KvDtype::kInt8 ? 8 : 4, out);
      return;
    case KvDtype::kTq3:
    case KvDtype::kTq4:
    case KvDtype::kTqK3V2:
      break;
  }
  const bool key = side == KvSide::kKey;
  const int32_t bits = key ? TqKeyBits(layout.dtype) : TqValueBits(layout.dtype);
  const float* centroids = key ? tq->k_centroids : tq->v_centroids;
  const float norm = LoadHalf(param);
  uint8_t indices[512];
  UnpackPlanes(code, d, bits, indices);
  for (int32_t i = 0; i < d; ++i) out[i] = norm * centroids[indices[i]];
  if (!key) return;  // values stay rotated
  tq->rotation->Inverse(out, out);
  const size_t stats = static_cast<size_t>(head) * d;
  for (int32_t i = 0; i < d; ++i) {
    if (tq->k_scale) out[i] *= tq->k_scale[stats + i];
    if (tq->k_mean) out[i] += tq->k_mean[stats + i];
  }
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
