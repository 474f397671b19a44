// Group-wise weight-only integer quantization on the host: round-to-nearest
// (RTN) codes with fp16 scales and, when asymmetric, integral fp16 zero points,
// in the layout kernels::WeightView reads (kernels/op_params.h,
// docs/quantization.md). Scale/zero conventions follow GPTQ's quantizer
// (Frantar et al. 2022, arXiv 2210.17323, quant.py find_params).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/op_params.h"

namespace tq::quant {

/// Storage format of one linear module. bits 16 = dense 16-bit (no groups);
/// bits 4 or 8 = group-wise integer codes. group_size counts input channels
/// per scale (it must divide in_features; even for 4 bits).
struct QuantFormat {
  int32_t bits = 16;
  int32_t group_size = 128;
  bool symmetric = false;
  // How to quantize, not part of the stored format (ignored by ==): search
  // the clip range per group (QuantizeRows) or plain min/max, 16x faster.
  bool clip_search = true;

  bool quantized() const { return bits == 4 || bits == 8; }
  bool operator==(const QuantFormat& o) const {
    return bits == o.bits &&
           (!quantized() || (group_size == o.group_size && symmetric == o.symmetric));
  }
  /// "int4 g32 asym", "int8 g64 sym", "16-bit".
  std::string ToString() const;
};

/// Storage bits per weight: code bits + 16/group (fp16 scale) + 16/group
/// (fp16 zero, asymmetric only); 16 for dense 16-bit.
double BitsPerWeight(const QuantFormat& f);

/// Host bytes of one [out, in] matrix stored in format f (codes + scales + zeros,
/// or 2 bytes per weight for 16-bit).
size_t StorageBytes(const QuantFormat& f, int64_t out_features, int64_t in_features);

/// Throws tq::Error "<name>: ..." when f cannot store a matrix with
/// in_features columns: bits not 4/8/16, group_size not positive or not
/// dividing in_features, or odd for 4 bits.
void CheckFormat(const QuantFormat& f, int64_t in_features, const std::string& name);

/// Row-major host buffers of a quantized [out, in] matrix, as WeightView wants.
struct QuantizedMatrix {
  int32_t out_features = 0;
  int32_t in_features = 0;
  QuantFormat format;
  std::vector<uint8_t> codes;    // int8: [out, in]; int4: [out, in / 2], 2j low nibble
  std::vector<uint16_t> scales;  // fp16 bits [out, in / group_size]
  std::vector<uint16_t> zeros;   // fp16 bits, same shape; empty when symmetric

  kernels::WeightView View() const;
};

/// Range shrink factors tried per group (AWQ-style clip search):
/// ClipShrink(k) = 1 - 0.025 k for k in [0, kClipSteps), i.e. 1 down to 0.625.
inline constexpr int32_t kClipSteps = 16;
inline float ClipShrink(int32_t k) {
  return 1.0f - 0.025f * static_cast<float>(k);
}

/// Quantizes rows [0, rows) of w (row-major, in_features columns) into the
/// given output rows (codes: rows * CodeBytesPerRow, scales/zeros:
/// rows * groups; zeros ignored when symmetric). Per group of group_size
/// inputs and shrink c = ClipShrink(k):
///   asymmetric: lo = min(0, min x), hi = max(0, max x) (zero always
///     representable), scale = c (hi - lo) / (2^bits - 1),
///     zero = clamp(round(-c lo / scale), 0, 2^bits - 1);
///   symmetric:  scale = c max|x| / (2^(bits-1) - 1), zero = 2^(bits-1);
///   scale is rounded to fp16 first, and code = clamp(round(x / scale) + zero,
///   0, 2^bits - 1) uses that stored scale. The k with the least
///   sum (x - scale (code - zero))^2 wins (the smallest k on ties; only k = 0,
///   plain min/max RTN, for groups over 4096). An all-zero group gets scale 1.
/// Throws tq::Error when a scale overflows fp16 (|w| > ~4e6) or w is not finite.
void QuantizeRows(const float* w, int64_t rows, int32_t in_features, const QuantFormat& f,
                  uint8_t* codes, uint16_t* scales, uint16_t* zeros);

/// Bytes of packed codes per row: in (8 bits) or in / 2 (4 bits).
int64_t CodeBytesPerRow(const QuantFormat& f, int32_t in_features);

/// Quantizes a whole [out, in] matrix (QuantizeRows into fresh buffers).
QuantizedMatrix Quantize(const float* w, int32_t out_features, int32_t in_features,
                         const QuantFormat& f);

/// w[o, i] = scale[o, g] * (code[o, i] - zero[o, g]) into out[out * in].
void Dequantize(const QuantizedMatrix& q, float* out);

/// Packs 4-bit codes (each < 16): element 2j -> low nibble of byte j, 2j+1 ->
/// high nibble. n must be even.
void PackInt4(const uint8_t* codes, int64_t n, uint8_t* packed);
/// Inverse of PackInt4: n codes from n / 2 bytes.
void UnpackInt4(const uint8_t* packed, int64_t n, uint8_t* codes);

/// Sum over the matrix of (w - dequant(quant(w)))^2 per input channel i:
/// err[i] = sum_o (w_oi - q(w)_oi)^2 for rows [0, rows), added into err[in].
/// 16-bit formats count the fp16 rounding error. Used by the sensitivity
/// search (engine/quant/sensitivity.h).
void AccumulateColumnError(const float* w, int64_t rows, int32_t in_features, const QuantFormat& f,
                           double* err);

}  // namespace tq::quant
