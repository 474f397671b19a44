// Group-wise RTN quantization with a clip search (engine/quant/group_quant.h): int4 packing,
// quantize/dequantize per mode against codes, scales and zeros computed here
// from the definition (fp16 rounding by the compiler's _Float16, not
// kernels/half.h), bits-per-weight accounting, and format errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/common/error.h"
#include "engine/quant/group_quant.h"

namespace tq::quant {
namespace {

using ::testing::HasSubstr;

uint16_t HalfBits(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float HalfValue(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

std::vector<float> RandomWeights(size_t n, uint32_t seed, float stddev = 0.05f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> w(n);
  for (float& x : w) x = dist(rng);
  return w;
}

// Codes of row r, unpacked by hand from the documented nibble order.
std::vector<int> RowCodes(const QuantizedMatrix& q, int r) {
  std::vector<int> codes(static_cast<size_t>(q.in_features));
  const int64_t stride = CodeBytesPerRow(q.format, q.in_features);
  for (int i = 0; i < q.in_features; ++i) {
    const uint8_t* row = q.codes.data() + r * stride;
    codes[i] = q.format.bits == 8 ? row[i] : (i % 2 == 0 ? row[i / 2] & 0xf : row[i / 2] >> 4);
  }
  return codes;
}

TEST(QuantPackTest, Int4NibbleOrder) {
  const uint8_t codes[6] = {1, 2, 15, 0, 7, 8};
  uint8_t packed[3];
  PackInt4(codes, 6, packed);
  EXPECT_EQ(packed[0], 0x21);  // element 0 low nibble, element 1 high nibble
  EXPECT_EQ(packed[1], 0x0f);
  EXPECT_EQ(packed[2], 0x87);
  uint8_t back[6];
  UnpackInt4(packed, 6, back);
  EXPECT_EQ(0, std::memcmp(back, codes, 6));
}

struct Mode {
  int bits;
  int group;
  bool symmetric;
};

class QuantRoundTripTest : public ::testing::TestWithParam<Mode> {};

TEST_P(QuantRoundTripTest, MatchesDefinition) {
  const Mode m = GetParam();
  const int out = 5, in = 96;  // ragged: out not a multiple of anything
  const QuantFormat f{m.bits, m.group, m.symmetric};
  std::vector<float> w = RandomWeights(static_cast<size_t>(out) * in, 7 + m.bits + m.group);
  w[3] = 0.4f;                                                         // an outlier
  std::fill(w.begin() + in, w.begin() + in + m.group, 0.0f);           // an all-zero group (row 1)
  std::fill(w.begin() + 2 * in, w.begin() + 2 * in + m.group, 0.02f);  // all-positive group

  const QuantizedMatrix q = Quantize(w.data(), out, in, f);
  const int groups = in / m.group;
  ASSERT_EQ(q.scales.size(), static_cast<size_t>(out * groups));
  ASSERT_EQ(q.zeros.size(), m.symmetric ? 0u : static_cast<size_t>(out * groups));
  ASSERT_EQ(q.codes.size(), static_cast<size_t>(out * in * m.bits / 8));
  const int maxq = (1 << m.bits) - 1;
  std::vector<float> deq(w.size());
  Dequantize(q, deq.data());
  for (int r = 0; r < out; ++r) {
    const std::vector<int> codes = RowCodes(q, r);
    for (int g = 0; g < groups; ++g) {
      const float* x = w.data() + r * in + g * m.group;
      float lo = 0.0f, hi = 0.0f, amax = 0.0f;
      for (int i = 0; i < m.group; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
        amax = std::max(amax, std::fabs(x[i]));
      }
      // Every shrink c = 1 - 0.025 k, k < 16; the least squared error wins.
      double best_err = -1.0, plain_err = 0.0;
      uint16_t want_scale = 0;
      int want_zero = 0;
      std::vector<int> want_codes(m.group);
      for (int k = 0; k < 16; ++k) {
        const float c = 1.0f - 0.025f * static_cast<float>(k);
        const float real_scale = m.symmetric
                                     ? c * amax / static_cast<float>((1 << (m.bits - 1)) - 1)
                                     : c * (hi - lo) / static_cast<float>(maxq);
        const uint16_t sb = real_scale == 0.0f ? HalfBits(1.0f) : HalfBits(real_scale);
        const float s = HalfValue(sb);
        const int zero = m.symmetric
                             ? (1 << (m.bits - 1))
                             : std::clamp(static_cast<int>(std::lround(-c * lo / s)), 0, maxq);
        std::vector<int> codes_k(m.group);
        double err = 0.0;
        for (int i = 0; i < m.group; ++i) {
          codes_k[i] = std::clamp(static_cast<int>(std::lround(x[i] / s)) + zero, 0, maxq);
          const double d = static_cast<double>(x[i]) - static_cast<double>(s) * (codes_k[i] - zero);
          err += d * d;
        }
        if (k == 0) plain_err = err;
        if (best_err < 0.0 || err < best_err) {
          best_err = err;
          want_scale = sb;
          want_zero = zero;
          want_codes = codes_k;
        }
      }
      EXPECT_LE(best_err, plain_err);
      ASSERT_EQ(q.scales[r * groups + g], want_scale) << "row " << r << " group " << g;
      const float s = HalfValue(want_scale);
      if (!m.symmetric) {
        ASSERT_EQ(HalfValue(q.zeros[r * groups + g]), static_cast<float>(want_zero));
      }
      for (int i = 0; i < m.group; ++i) {
        ASSERT_EQ(codes[g * m.group + i], want_codes[i])
            << "row " << r << " col " << g * m.group + i;
        const float recon = s * static_cast<float>(want_codes[i] - want_zero);
        EXPECT_EQ(deq[r * in + g * m.group + i], recon);
        // Codes inside the range are off by at most half a step.
        if (want_codes[i] > 0 && want_codes[i] < maxq) {
          EXPECT_LE(std::fabs(recon - x[i]), 0.5f * s * (1 + 1e-6f));
        }
      }
    }
  }
  // The all-zero group reconstructs exactly; so does the constant group's value
  // at the top of an asymmetric range (code maxq, zero 0).
  for (int i = 0; i < m.group; ++i) EXPECT_EQ(deq[in + i], 0.0f);
  if (!m.symmetric) {
    EXPECT_NEAR(deq[2 * in], 0.02f, 0.02f * 1e-3f);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, QuantRoundTripTest,
                         ::testing::Values(Mode{8, 32, false}, Mode{8, 32, true},
                                           Mode{4, 32, false}, Mode{4, 32, true},
                                           Mode{4, 96, false}, Mode{8, 48, true}),
                         [](const auto& info) {
                           return "int" + std::to_string(info.param.bits) + "g" +
                                  std::to_string(info.param.group) +
                                  (info.param.symmetric ? "sym" : "asym");
                         });

TEST(QuantRoundTripTest, ViewMatchesKernelContract) {
  const std::vector<float> w = RandomWeights(4 * 64, 3);
  const QuantizedMatrix q = Quantize(w.data(), 4, 64, {4, 32, false});
  const kernels::WeightView v = q.View();
  EXPECT_EQ(v.dtype, kernels::WeightDtype::kInt4);
  EXPECT_EQ(v.out_features, 4);
  EXPECT_EQ(v.in_features, 64);
  EXPECT_EQ(v.group_size, 32);
  EXPECT_EQ(v.scales, q.scales.data());
  EXPECT_EQ(v.zeros, q.zeros.data());
  EXPECT_EQ(Quantize(w.data(), 4, 64, {8, 32, true}).View().zeros, nullptr);
}

TEST(QuantRoundTripTest, RejectsNonFiniteWeights) {
  std::vector<float> w(32, 0.1f);
  w[5] = NAN;
  EXPECT_THROW(Quantize(w.data(), 1, 32, {8, 32, false}), Error);
  w[5] = 1e30f;  // scale overflows fp16
  EXPECT_THROW(Quantize(w.data(), 1, 32, {4, 32, true}), Error);
}

TEST(QuantAccountingTest, BitsAndBytesPerWeight) {
  EXPECT_DOUBLE_EQ(BitsPerWeight({4, 128, false}), 4.25);  // 4 + (16 + 16) / 128
  EXPECT_DOUBLE_EQ(BitsPerWeight({4, 128, true}), 4.125);
  EXPECT_DOUBLE_EQ(BitsPerWeight({8, 32, true}), 8.5);
  EXPECT_DOUBLE_EQ(BitsPerWeight({4, 32, false}), 5.0);
  EXPECT_DOUBLE_EQ(BitsPerWeight({16, 0, false}), 16.0);
  // 4096 x 4096 int4 g128 asym: 8 MiB codes + 2 x 128k fp16 scales/zeros.
  EXPECT_EQ(StorageBytes({4, 128, false}, 4096, 4096), 8388608u + 2 * 131072 * 2);
  EXPECT_EQ(StorageBytes({8, 64, true}, 10, 128), 1280u + 20 * 2);
  EXPECT_EQ(StorageBytes({16, 0, false}, 10, 128), 2560u);
  EXPECT_TRUE((QuantFormat{16, 32, true} == QuantFormat{16, 128, false}));
  EXPECT_FALSE((QuantFormat{4, 32, true} == QuantFormat{4, 32, false}));
}

TEST(QuantAccountingTest, FormatErrorsNameTheModule) {
  try {
    CheckFormat({4, 32, false}, 172, "model.layers.0.mlp.down_proj");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.layers.0.mlp.down_proj: group_size 32 does not divide "
                                    "in_features 172"));
  }
  try {
    CheckFormat({4, 43, false}, 172, "m");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("int4 needs an even group_size"));
  }
  EXPECT_NO_THROW(CheckFormat({8, 43, false}, 172, "m"));
  EXPECT_THROW(CheckFormat({3, 32, false}, 64, "m"), Error);
  EXPECT_THROW(CheckFormat({8, 0, false}, 64, "m"), Error);
}

TEST(QuantAccountingTest, ColumnErrorIsTheSquaredReconstructionError) {
  const std::vector<float> w = RandomWeights(3 * 64, 11);
  const QuantFormat f{4, 32, false};
  const QuantizedMatrix q = Quantize(w.data(), 3, 64, f);
  std::vector<float> deq(w.size());
  Dequantize(q, deq.data());
  std::vector<double> err(64, 0.0);
  AccumulateColumnError(w.data(), 3, 64, f, err.data());
  for (int i = 0; i < 64; ++i) {
    double want = 0.0;
    for (int o = 0; o < 3; ++o) {
      const double d = static_cast<double>(w[o * 64 + i]) - deq[o * 64 + i];
      want += d * d;
    }
    EXPECT_DOUBLE_EQ(err[i], want) << i;
  }
}

}  // namespace
}  // namespace tq::quant

namespace tq::quant {
namespace {

TEST(QuantRoundTripTest, WithoutClipSearchIsPlainMinMax) {
  const std::vector<float> w = RandomWeights(2 * 64, 5);
  QuantFormat f{4, 32, false};
  f.clip_search = false;
  const QuantizedMatrix q = Quantize(w.data(), 2, 64, f);
  for (int g = 0; g < 4; ++g) {
    const float* x = w.data() + g * 32;
    float lo = 0.0f, hi = 0.0f;
    for (int i = 0; i < 32; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    EXPECT_EQ(q.scales[g], HalfBits((hi - lo) / 15.0f)) << g;
  }
}

}  // namespace
}  // namespace tq::quant
