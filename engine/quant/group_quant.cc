// Round-to-nearest group-wise quantization (see group_quant.h for the formulas).
#include "engine/quant/group_quant.h"

#include <algorithm>
#include <cmath>

#include "engine/common/error.h"
#include "kernels/half.h"

namespace tq::quant {
namespace {

constexpr uint16_t kHalfOne = 0x3c00;
constexpr uint16_t kSmallestHalf = 0x0001;  // 2^-24, the smallest positive subnormal
constexpr int32_t kMaxGroup = 4096;         // groups searched for a clip (scratch size)

// Stored fp16 scale for a real-valued scale s >= 0 (0 only for all-zero groups).
uint16_t ScaleBits(float s, const char* what) {
  if (!std::isfinite(s)) throw Error(std::string(what) + ": weight is not finite");
  if (s == 0.0f) return kHalfOne;
  const uint16_t h = kernels::FloatToHalf(s);
  if ((h & 0x7c00u) == 0x7c00u) {
    throw Error(std::string(what) + ": group scale " + std::to_string(s) +
                " overflows fp16 (weights larger than ~4e6)");
  }
  return h == 0 ? kSmallestHalf : h;  // a scale that underflows keeps its sign of life
}

// Scale and zero for the range shrunk by `shrink` (1 = the full range).
void GroupParams(const float* x, int32_t n, int32_t bits, bool symmetric, float shrink,
                 uint16_t* scale_bits, int32_t* zero) {
  const int32_t maxq = (1 << bits) - 1;
  float lo = 0.0f, hi = 0.0f, amax = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) throw Error("quantize: weight is not finite");
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  const float scale = symmetric ? shrink * amax / static_cast<float>((1 << (bits - 1)) - 1)
                                : shrink * (hi - lo) / static_cast<float>(maxq);
  *scale_bits = ScaleBits(scale, "quantize");
  const float s = kernels::HalfToFloat(*scale_bits);
  *zero = symmetric ? 1 << (bits - 1)
                    : std::clamp(static_cast<int32_t>(std::lround(-shrink * lo / s)), 0, maxq);
}

// Codes of one group for a stored scale and zero; returns sum (x - w')^2.
double GroupCodes(const float* x, int32_t n, int32_t maxq, uint16_t scale_bits, int32_t zero,
                  uint8_t* codes) {
  const float s = kernels::HalfToFloat(scale_bits);
  double err = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    const long q = std::clamp<long>(std::lround(x[i] / s) + zero, 0, maxq);
    codes[i] = static_cast<uint8_t>(q);
    const double d = static_cast<double>(x[i]) - static_cast<double>(s) * (q - zero);
    err += d * d;
  }
  return err;
}

// Quantizes one group of n values; writes n codes (unpacked), scale and zero
// bits. Tries the range shrunk by kShrink[k] and keeps the one with the least
// squared error (the first on ties), as AWQ's clip search and llama.cpp's
// quantizers do: clipping a few outliers buys a finer step for the rest.
void QuantizeGroup(const float* x, int32_t n, int32_t bits, bool symmetric, int32_t steps,
                   uint8_t* codes, uint16_t* scale_bits, uint16_t* zero_bits) {
  const int32_t maxq = (1 << bits) - 1;
  uint8_t trial[kMaxGroup];
  double best = -1.0;
  for (int32_t k = 0; k < steps; ++k) {
    uint16_t sb = 0;
    int32_t zero = 0;
    GroupParams(x, n, bits, symmetric, ClipShrink(k), &sb, &zero);
    const bool fits = n <= kMaxGroup;
    const double err = GroupCodes(x, n, maxq, sb, zero, fits && k > 0 ? trial : codes);
    if (best < 0.0 || err < best) {
      best = err;
      *scale_bits = sb;
      *zero_bits = kernels::FloatToHalf(static_cast<float>(zero));  // integral, exact in fp16
      if (k > 0) std::copy(trial, trial + n, codes);
    }
    if (!fits) break;  // very large groups: the full range only
  }
}

}  // namespace

std::string QuantFormat::ToString() const {
  if (!quantized()) return std::to_string(bits) + "-bit";
  return "int" + std::to_string(bits) + " g" + std::to_string(group_size) +
         (symmetric ? " sym" : " asym");
}

double BitsPerWeight(const QuantFormat& f) {
  if (!f.quantized()) return static_cast<double>(f.bits);
  return f.bits + (f.symmetric ? 16.0 : 32.0) / f.group_size;
}

size_t StorageBytes(const QuantFormat& f, int64_t out_features, int64_t in_features) {
  const auto n = static_cast<size_t>(out_features * in_features);
  if (!f.quantized()) return n * static_cast<size_t>(f.bits / 8);
  const size_t groups = static_cast<size_t>(out_features * (in_features / f.group_size));
  return n * static_cast<size_t>(f.bits) / 8 + groups * (f.symmetric ? 2 : 4);
}

void CheckFormat(const QuantFormat& f, int64_t in_features, const std::string& name) {
  if (f.bits != 4 && f.bits != 8 && f.bits != 16) {
    throw Error(name + ": bits " + std::to_string(f.bits) + " is not supported (4, 8 or 16)");
  }
  if (!f.quantized()) return;
  if (f.group_size <= 0 || in_features % f.group_size != 0) {
    throw Error(name + ": group_size " + std::to_string(f.group_size) +
                " does not divide in_features " + std::to_string(in_features));
  }
  if (f.bits == 4 && f.group_size % 2 != 0) {
    throw Error(name + ": int4 needs an even group_size (two codes per byte), got " +
                std::to_string(f.group_size));
  }
}

int64_t CodeBytesPerRow(const QuantFormat& f, int32_t in_features) {
  return f.bits == 4 ? in_features / 2 : in_features;
}

void QuantizeRows(const float* w, int64_t rows, int32_t in_features, const QuantFormat& f,
                  uint8_t* codes, uint16_t* scales, uint16_t* zeros) {
  const int32_t g = f.group_size;
  const int32_t groups = in_features / g;
  std::vector<uint8_t> row_codes(static_cast<size_t>(in_features));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = w + r * in_features;
    for (int32_t j = 0; j < groups; ++j) {
      uint16_t zero_bits = 0;
      QuantizeGroup(x + static_cast<int64_t>(j) * g, g, f.bits, f.symmetric,
                    f.clip_search ? kClipSteps : 1, row_codes.data() + static_cast<size_t>(j) * g,
                    &scales[r * groups + j], &zero_bits);
      if (!f.symmetric) zeros[r * groups + j] = zero_bits;
    }
    uint8_t* dst = codes + r * CodeBytesPerRow(f, in_features);
    if (f.bits == 4) {
      PackInt4(row_codes.data(), in_features, dst);
    } else {
      std::copy(row_codes.begin(), row_codes.end(), dst);
    }
  }
}

QuantizedMatrix Quantize(const float* w, int32_t out_features, int32_t in_features,
                         const QuantFormat& f) {
  CheckFormat(f, in_features, "quantize");
  if (!f.quantized()) throw Error("quantize: format " + f.ToString() + " is not an integer format");
  QuantizedMatrix q;
  q.out_features = out_features;
  q.in_features = in_features;
  q.format = f;
  const size_t groups = static_cast<size_t>(out_features) * (in_features / f.group_size);
  q.codes.resize(static_cast<size_t>(out_features * CodeBytesPerRow(f, in_features)));
  q.scales.resize(groups);
  if (!f.symmetric) q.zeros.resize(groups);
  QuantizeRows(w, out_features, in_features, f, q.codes.data(), q.scales.data(),
               f.symmetric ? nullptr : q.zeros.data());
  return q;
}

void Dequantize(const QuantizedMatrix& q, float* out) {
  const QuantFormat& f = q.format;
  const int32_t in = q.in_features;
  const int32_t groups = in / f.group_size;
  const float sym_zero = static_cast<float>(1 << (f.bits - 1));
  std::vector<uint8_t> row(static_cast<size_t>(in));
  for (int64_t o = 0; o < q.out_features; ++o) {
    const uint8_t* src = q.codes.data() + o * CodeBytesPerRow(f, in);
    if (f.bits == 4) {
      UnpackInt4(src, in, row.data());
    } else {
      std::copy(src, src + in, row.begin());
    }
    for (int32_t i = 0; i < in; ++i) {
      const int64_t gi = o * groups + i / f.group_size;
      const float s = kernels::HalfToFloat(q.scales[gi]);
      const float z = f.symmetric ? sym_zero : kernels::HalfToFloat(q.zeros[gi]);
      out[o * in + i] = s * (static_cast<float>(row[i]) - z);
    }
  }
}

void PackInt4(const uint8_t* codes, int64_t n, uint8_t* packed) {
  for (int64_t j = 0; j < n / 2; ++j) {
    packed[j] = static_cast<uint8_t>((codes[2 * j] & 0x0f) | ((codes[2 * j + 1] & 0x0f) << 4));
  }
}

void UnpackInt4(const uint8_t* packed, int64_t n, uint8_t* codes) {
  for (int64_t j = 0; j < n / 2; ++j) {
    codes[2 * j] = packed[j] & 0x0f;
    codes[2 * j + 1] = packed[j] >> 4;
  }
}

kernels::WeightView QuantizedMatrix::View() const {
  kernels::WeightView v;
  v.data = codes.data();
  v.dtype = format.bits == 4 ? kernels::WeightDtype::kInt4 : kernels::WeightDtype::kInt8;
  v.out_features = out_features;
  v.in_features = in_features;
  v.scales = scales.data();
  v.zeros = zeros.empty() ? nullptr : zeros.data();
  v.group_size = format.group_size;
  return v;
}

void AccumulateColumnError(const float* w, int64_t rows, int32_t in_features, const QuantFormat& f,
                           double* err) {
  std::vector<float> deq(static_cast<size_t>(rows * in_features));
  if (f.quantized()) {
    Dequantize(Quantize(w, static_cast<int32_t>(rows), in_features, f), deq.data());
  } else {
    for (size_t i = 0; i < deq.size(); ++i) {
      deq[i] = kernels::HalfToFloat(kernels::FloatToHalf(w[i]));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t i = 0; i < in_features; ++i) {
      const size_t k = static_cast<size_t>(r * in_features + i);
      const double d = static_cast<double>(w[k]) - deq[k];
      err[i] += d * d;
    }
  }
}

}  // namespace tq::quant
