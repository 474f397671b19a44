// CPU matmul for the f16, bf16, int8 and int4 weight formats, and embedding
// lookups from f16/bf16 tables, against float64 references computed here from
// the format definitions in kernels/op_params.h: codes, scales and zero points
// are random, the int4 packing and the fp16/bf16 bit decoding are written out
// in this file (not taken from the kernels), and every product is summed in
// double.
//
// Tolerance: |out - ref| <= 1e-4 * sum_i |x_i * w_i| per output (the scale of
// a dot product's rounding error; it is what "1e-4 relative" means for sums
// whose terms cancel). Outputs start as NaN, so an element the kernel does not
// write fails; a guard region after the output must stay untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/op_params.h"

namespace tq::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr size_t kGuard = 16;
constexpr float kGuardValue = 1234.5f;

// IEEE binary16 bits -> double, from the definition (sign, 5-bit exponent
// biased by 15, 10-bit fraction; exponent 0 is subnormal). Finite values only.
double HalfBitsToDouble(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int frac = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(frac, -24);
  return sign * std::ldexp(1024 + frac, exp - 25);
}

// double -> binary16 bits for values that are exactly representable or where
// any nearby half will do (test data only): pick the nearest by search over
// the 2^15 positive codes, so this does not depend on kernels/half.h.
uint16_t NearestHalfBits(double v) {
  static const std::vector<double> table = [] {
    std::vector<double> t(0x7c00);
    for (int i = 0; i < 0x7c00; ++i) t[i] = HalfBitsToDouble(static_cast<uint16_t>(i));
    return t;
  }();
  const double a = std::fabs(v);
  const auto it = std::lower_bound(table.begin(), table.end(), a);
  size_t i = static_cast<size_t>(it - table.begin());
  if (i == table.size()) i = table.size() - 1;
  if (i > 0 && a - table[i - 1] < table[i] - a) --i;
  return static_cast<uint16_t>(i | (v < 0 ? 0x8000 : 0));
}

double Bf16BitsToDouble(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A weight matrix in one format plus its float64 dequantization.
struct TestWeight {
  WeightDtype dtype = WeightDtype::kF32;
  int out = 0, in = 0, group_size = 0;
  bool symmetric = true;
  std::vector<uint8_t> bytes;     // packed data
  std::vector<uint16_t> scales;   // fp16 bits
  std::vector<uint16_t> zeros;    // fp16 bits, empty when symmetric
  std::vector<double> reference;  // [out, in] dequantized in double

  WeightView View() const {
    WeightView v;
    v.data = bytes.data();
    v.dtype = dtype;
    v.out_features = out;
    v.in_features = in;
    v.scales = scales.empty() ? nullptr : scales.data();
    v.zeros = zeros.empty() ? nullptr : zeros.data();
    v.group_size = group_size;
    return v;
  }
};

std::string Describe(const TestWeight& w) {
  return WeightDtypeName(w.dtype) + (w.symmetric ? " sym" : " asym") + " [" +
         std::to_string(w.out) + "x" + std::to_string(w.in) + "] g" + std::to_string(w.group_size);
}

TestWeight MakeWeight(WeightDtype dtype, int out, int in, int group_size, bool symmetric,
                      uint32_t seed) {
  std::mt19937 rng(seed);
  TestWeight w;
  w.dtype = dtype;
  w.out = out;
  w.in = in;
  w.group_size = group_size;
  w.symmetric = symmetric;
  w.reference.resize(static_cast<size_t>(out) * in);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  if (dtype == WeightDtype::kF16 || dtype == WeightDtype::kBF16) {
    w.bytes.resize(w.reference.size() * 2);
    for (size_t i = 0; i < w.reference.size(); ++i) {
      uint16_t bits;
      if (dtype == WeightDtype::kF16) {
        bits = NearestHalfBits(value(rng));
        w.reference[i] = HalfBitsToDouble(bits);
      } else {
        const float f = static_cast<float>(value(rng));
        uint32_t fb;
        std::memcpy(&fb, &f, 4);
        bits = static_cast<uint16_t>(fb >> 16);  // truncation: any bf16 value is valid data
        w.reference[i] = Bf16BitsToDouble(bits);
      }
      std::memcpy(&w.bytes[2 * i], &bits, 2);
    }
    return w;
  }
  const int bits = dtype == WeightDtype::kInt4 ? 4 : 8;
  const int max_code = (1 << bits) - 1;
  const int groups = in / group_size;
  std::uniform_int_distribution<int> code(0, max_code);
  std::uniform_real_distribution<double> scale(0.002, 0.05);
  w.scales.resize(static_cast<size_t>(out) * groups);
  if (!symmetric) w.zeros.resize(w.scales.size());
  std::vector<int> codes(static_cast<size_t>(out) * in);
  for (auto& c : codes) c = code(rng);
  for (int o = 0; o < out; ++o) {
    for (int g = 0; g < groups; ++g) {
      const size_t gi = static_cast<size_t>(o) * groups + g;
      w.scales[gi] = NearestHalfBits(scale(rng));
      double zero = 1 << (bits - 1);
      if (!symmetric) {
        zero = code(rng);
        w.zeros[gi] = NearestHalfBits(zero);  // small integers are exact in fp16
      }
      for (int i = g * group_size; i < (g + 1) * group_size; ++i) {
        const size_t e = static_cast<size_t>(o) * in + i;
        w.reference[e] = HalfBitsToDouble(w.scales[gi]) * (codes[e] - zero);
      }
    }
  }
  if (bits == 8) {
    w.bytes.assign(codes.begin(), codes.end());
  } else {  // element 2j in the low nibble of byte j, 2j+1 in the high nibble
    w.bytes.resize(codes.size() / 2);
    for (size_t j = 0; j < w.bytes.size(); ++j) {
      w.bytes[j] = static_cast<uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
    }
  }
  return w;
}

std::vector<float> RandomActivations(int rows, int in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows) * in);
  for (auto& v : x) v = d(rng);
  return x;
}

// out (rows x out, plus guard) after one MatMul with weight view `view` (w's
// own, or a layout the backend prepared from it); `init` is out's prior content.
std::vector<float> RunMatMul(Backend* be, const WeightView& view, const std::vector<float>& x,
                             int rows, const std::vector<float>* init) {
  std::vector<float> out(static_cast<size_t>(rows) * view.out_features, kNaN);
  if (init) out = *init;
  out.resize(out.size() + kGuard, kGuardValue);
  MatMulParams p;
  p.x = x.data();
  p.w = view;
  p.out = out.data();
  p.rows = rows;
  p.accumulate = init != nullptr;
  be->MatMul(p);  // the CPU backend's memory is host memory
  return out;
}

std::vector<float> RunMatMul(Backend* be, const TestWeight& w, const std::vector<float>& x,
                             int rows, const std::vector<float>* init) {
  return RunMatMul(be, w.View(), x, rows, init);
}

void ExpectMatchesReference(const TestWeight& w, const std::vector<float>& x, int rows,
                            const std::vector<float>& out, const std::vector<float>* init) {
  const std::string what = Describe(w) + " rows " + std::to_string(rows);
  for (size_t g = 0; g < kGuard; ++g) {
    ASSERT_EQ(out[static_cast<size_t>(rows) * w.out + g], kGuardValue) << what << " guard " << g;
  }
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < w.out; ++o) {
      double ref = 0, magnitude = 0;
      for (int i = 0; i < w.in; ++i) {
        const double term = static_cast<double>(x[static_cast<size_t>(r) * w.in + i]) *
                            w.reference[static_cast<size_t>(o) * w.in + i];
        ref += term;
        magnitude += std::fabs(term);
      }
      const size_t e = static_cast<size_t>(r) * w.out + o;
      if (init) ref += (*init)[e];
      ASSERT_TRUE(std::isfinite(out[e])) << what << " out[" << r << "," << o << "] not written";
      ASSERT_LE(std::fabs(out[e] - ref), 1e-4 * magnitude + 1e-30)
          << what << " out[" << r << "," << o << "] = " << out[e] << " vs " << ref;
    }
  }
}

struct Shape {
  int out, in, group_size;
};

// Ragged shapes: out features not a multiple of any tile, in features not a
// multiple of the SIMD width, group sizes from 2 to in_features.
const Shape kShapes[] = {{37, 96, 32},  {37, 96, 96},  {5, 40, 8},     {19, 172, 4}, {19, 172, 86},
                         {9, 172, 172}, {64, 256, 64}, {3, 1000, 200}, {17, 36, 6},  {33, 64, 2}};
const int kRows[] = {1, 2, 3, 7, 17, 64};

struct FormatCase {
  WeightDtype dtype;
  bool symmetric;
};
const FormatCase kFormats[] = {{WeightDtype::kF16, true},  {WeightDtype::kBF16, true},
                               {WeightDtype::kInt8, true}, {WeightDtype::kInt8, false},
                               {WeightDtype::kInt4, true}, {WeightDtype::kInt4, false}};

class QuantMatMulTest : public ::testing::TestWithParam<int> {};  // param: thread count

TEST_P(QuantMatMulTest, MatchesFloat64ReferenceOnRaggedShapes) {
  auto be = CreateCpuBackend(GetParam());
  uint32_t seed = 1;
  for (const FormatCase& f : kFormats) {
    for (const Shape& s : kShapes) {
      const TestWeight w = MakeWeight(f.dtype, s.out, s.in, s.group_size, f.symmetric, ++seed);
      for (int rows : kRows) {
        const auto x = RandomActivations(rows, s.in, ++seed);
        ExpectMatchesReference(w, x, rows, RunMatMul(be.get(), w, x, rows, nullptr), nullptr);
      }
    }
  }
}

TEST_P(QuantMatMulTest, AccumulateAddsToOutput) {
  auto be = CreateCpuBackend(GetParam());
  uint32_t seed = 100;
  for (const FormatCase& f : kFormats) {
    const TestWeight w = MakeWeight(f.dtype, 21, 128, 64, f.symmetric, ++seed);
    for (int rows : {1, 5}) {
      const auto x = RandomActivations(rows, w.in, ++seed);
      const auto init = RandomActivations(rows, w.out, ++seed);
      ExpectMatchesReference(w, x, rows, RunMatMul(be.get(), w, x, rows, &init), &init);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, QuantMatMulTest, ::testing::Values(1, 2));

// Each output's bits depend only on its row of x and its row of W: not on how
// many rows run together nor on how many threads split the columns (engine
// tests compare a batched sequence with the same sequence alone).
TEST(QuantMatMulBits, IdenticalAcrossRowCountsAndThreadCounts) {
  uint32_t seed = 200;
  for (const FormatCase& f : kFormats) {
    for (const Shape& s : {Shape{131, 256, 64}, Shape{45, 172, 86}}) {
      const TestWeight w = MakeWeight(f.dtype, s.out, s.in, s.group_size, f.symmetric, ++seed);
      const int rows = 17;
      const auto x = RandomActivations(rows, s.in, ++seed);
      std::vector<float> batched;
      for (int threads : {1, 2, 3, 4}) {
        ThreadPool pool(threads);
        std::vector<float> out(static_cast<size_t>(rows) * w.out, kNaN);
        cpu::MatMulPacked({x.data(), w.View(), out.data(), rows, false}, pool);
        if (batched.empty()) {
          batched = out;
        } else {
          ASSERT_EQ(0, std::memcmp(out.data(), batched.data(), out.size() * sizeof(float)))
              << Describe(w) << " threads " << threads;
        }
      }
      // One row alone: the register-decode GEMV (cpu_gemv.cc) where it
      // applies, on 1-4 threads, then the backend's own choice of kernel.
      if (cpu::GemvSupported({x.data(), w.View(), nullptr, 1, false})) {
        for (int threads : {1, 2, 3, 4}) {
          ThreadPool pool(threads);
          for (int r = 0; r < rows; ++r) {
            std::vector<float> single(w.out, kNaN);
            cpu::Gemv({x.data() + static_cast<size_t>(r) * s.in, w.View(), single.data(), 1, false},
                      pool);
            ASSERT_EQ(0, std::memcmp(single.data(), batched.data() + static_cast<size_t>(r) * w.out,
                                     single.size() * sizeof(float)))
                << Describe(w) << " row " << r << " GEMV differs from the batch, threads "
                << threads;
          }
        }
      }
      for (int threads : {1, 2}) {
        auto be = CreateCpuBackend(threads);
        for (int r = 0; r < rows; ++r) {
          std::vector<float> single(w.out, kNaN);
          be->MatMul({x.data() + static_cast<size_t>(r) * s.in, w.View(), single.data(), 1, false});
          ASSERT_EQ(0, std::memcmp(single.data(), batched.data() + static_cast<size_t>(r) * w.out,
                                   single.size() * sizeof(float)))
              << Describe(w) << " row " << r << " alone differs from the batch, threads "
              << threads;
        }
      }
    }
  }
}

// The packed kernels compute the fp32 matmul of the dequantized weights in
// the same order: dequantizing each weight to float as scale * (code - zero)
// (exact subtraction, one rounding) and running the fp32 MatMul gives the
// same bits.
TEST(QuantMatMulBits, EqualsFp32MatMulOfDequantizedWeights) {
  auto be = CreateCpuBackend(2);
  uint32_t seed = 300;
  for (const FormatCase& f : kFormats) {
    const TestWeight w = MakeWeight(f.dtype, 70, 192, 64, f.symmetric, ++seed);
    std::vector<float> dense(w.reference.size());
    for (size_t i = 0; i < dense.size(); ++i) {
      dense[i] = static_cast<float>(w.reference[i]);  // exact: one rounding of s * (c - z)
    }
    const int rows = 9;
    const auto x = RandomActivations(rows, w.in, ++seed);
    WeightView fp32{dense.data(), WeightDtype::kF32, w.out, w.in, nullptr, nullptr, 0};
    std::vector<float> expected(static_cast<size_t>(rows) * w.out, kNaN);
    be->MatMul({x.data(), fp32, expected.data(), rows, false});
    const auto got = RunMatMul(be.get(), w, x, rows, nullptr);
    ASSERT_EQ(0, std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)))
        << Describe(w);
  }
}

// fp16/bf16 weights repacked by PrepareWeight into column panels
// (kF16Panels/kBF16Panels, the layout prefill and decode both read): the
// float64 reference over the exact widened weights for every row count, with
// and without accumulate; each row's bits the same alone or in a batch and on
// 1 or 2 threads; the same bits as the fp32 panels of the widened weights
// (one order of summation for every panel format); shapes that are not whole
// panels keep their row-major format.
TEST(PanelMatMul, SixteenBitPanelsMatchFloat64AndTheFp32PanelsBitForBit) {
  uint32_t seed = 700;
  for (WeightDtype dtype : {WeightDtype::kF16, WeightDtype::kBF16}) {
    const WeightDtype panels =
        dtype == WeightDtype::kF16 ? WeightDtype::kF16Panels : WeightDtype::kBF16Panels;
    for (const Shape& s : {Shape{64, 96, 0}, Shape{128, 172, 0}, Shape{192, 7, 0}}) {
      const TestWeight w = MakeWeight(dtype, s.out, s.in, 0, true, ++seed);
      std::vector<float> dense(w.reference.begin(), w.reference.end());  // exact
      const WeightView fp32{dense.data(), WeightDtype::kF32, w.out, w.in, nullptr, nullptr, 0};
      const int batch = 17;
      const auto x = RandomActivations(batch, w.in, ++seed);
      std::vector<float> first;
      for (int threads : {1, 2}) {
        auto be = CreateCpuBackend(threads);
        BackendBuffer storage, fp32_storage;
        const WeightView v = be->PrepareWeight(w.View(), &storage);
        ASSERT_EQ(v.dtype, panels) << Describe(w);
        const WeightView v32 = be->PrepareWeight(fp32, &fp32_storage);
        ASSERT_EQ(v32.dtype, WeightDtype::kF32Panels);
        for (int rows : kRows) {
          const auto xr = RandomActivations(rows, w.in, ++seed);
          ExpectMatchesReference(w, xr, rows, RunMatMul(be.get(), v, xr, rows, nullptr), nullptr);
          const auto init = RandomActivations(rows, w.out, ++seed);
          ExpectMatchesReference(w, xr, rows, RunMatMul(be.get(), v, xr, rows, &init), &init);
        }
        const auto batched = RunMatMul(be.get(), v, x, batch, nullptr);
        const auto as_fp32 = RunMatMul(be.get(), v32, x, batch, nullptr);
        ASSERT_EQ(0, std::memcmp(batched.data(), as_fp32.data(), batched.size() * sizeof(float)))
            << Describe(w) << " differs from the fp32 panels, threads " << threads;
        if (first.empty()) first = batched;
        ASSERT_EQ(0, std::memcmp(batched.data(), first.data(), batched.size() * sizeof(float)))
            << Describe(w) << " threads " << threads;
        for (int r = 0; r < batch; ++r) {
          const std::vector<float> row(x.begin() + static_cast<ptrdiff_t>(r) * w.in,
                                       x.begin() + static_cast<ptrdiff_t>(r + 1) * w.in);
          const auto single = RunMatMul(be.get(), v, row, 1, nullptr);
          ASSERT_EQ(0, std::memcmp(single.data(), batched.data() + static_cast<size_t>(r) * w.out,
                                   static_cast<size_t>(w.out) * sizeof(float)))
              << Describe(w) << " row " << r << " alone differs from the batch";
        }
      }
    }
    // 100 output features are not whole panels of 64: kept row-major.
    auto be = CreateCpuBackend(1);
    BackendBuffer storage;
    const TestWeight odd = MakeWeight(dtype, 100, 64, 0, true, ++seed);
    EXPECT_EQ(be->PrepareWeight(odd.View(), &storage).dtype, dtype);
  }
}

TEST(QuantMatMulBits, ZeroRowsWriteNothing) {
  auto be = CreateCpuBackend(2);
  for (const FormatCase& f : kFormats) {
    const TestWeight w = MakeWeight(f.dtype, 9, 64, 32, f.symmetric, 400);
    const std::vector<float> x(64, 1.0f);
    const auto out = RunMatMul(be.get(), w, x, 0, nullptr);
    for (size_t g = 0; g < kGuard; ++g) ASSERT_EQ(out[g], kGuardValue) << Describe(w);
  }
}

TEST(QuantMatMulErrors, BadWeightViewsAreRejectedWithAMessage) {
  auto be = CreateCpuBackend(1);
  const TestWeight w = MakeWeight(WeightDtype::kInt4, 4, 64, 32, true, 7);
  std::vector<float> x(64, 1.0f), out(4);
  auto expect_error = [&](WeightView v, const std::string& needle) {
    try {
      be->MatMul({x.data(), v, out.data(), 1, false});
      ADD_FAILURE() << "no error, expected: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  WeightView v = w.View();
  v.group_size = 24;
  expect_error(v, "group_size 24 does not divide in_features 64");
  v.group_size = 0;
  expect_error(v, "group_size 0");
  v = w.View();
  v.scales = nullptr;
  expect_error(v, "int4 weight has no scales");
  v = w.View();
  v.in_features = 62;
  v.group_size = 31;
  expect_error(v, "odd");
  v = w.View();
  v.data = nullptr;
  expect_error(v, "has no data");
  v = w.View();
  v.out_features = 0;
  expect_error(v, "must be positive");
}

// ---------------------------------------------------------------------------
// Embedding from 16-bit tables: widening is exact, so the rows must be equal.

TEST(QuantEmbedding, SixteenBitTablesWidenExactly) {
  auto be = CreateCpuBackend(2);
  const int vocab = 50, hidden = 37;
  for (WeightDtype dtype : {WeightDtype::kF16, WeightDtype::kBF16, WeightDtype::kF32}) {
    std::vector<double> reference(static_cast<size_t>(vocab) * hidden);
    std::vector<uint8_t> table;
    if (dtype == WeightDtype::kF32) {
      std::mt19937 rng(11);
      std::normal_distribution<float> d(0.0f, 1.0f);
      std::vector<float> t(reference.size());
      for (size_t i = 0; i < t.size(); ++i) reference[i] = t[i] = d(rng);
      table.resize(t.size() * 4);
      std::memcpy(table.data(), t.data(), table.size());
    } else {
      const TestWeight w = MakeWeight(dtype, vocab, hidden, 0, true, 12);
      reference = w.reference;
      table = w.bytes;
    }
    const std::vector<int32_t> ids = {3, 0, 49, 3, 17, 25, 8, 8, 1, 48, 30, 2, 44, 5, 6, 7, 9, 10};
    const int n = static_cast<int>(ids.size());
    std::vector<float> out(static_cast<size_t>(n) * hidden + kGuard, kNaN);
    std::fill(out.end() - kGuard, out.end(), kGuardValue);
    be->Embedding({ids.data(), table.data(), out.data(), n, vocab, hidden, dtype});
    for (int t = 0; t < n; ++t) {
      for (int h = 0; h < hidden; ++h) {
        ASSERT_EQ(static_cast<double>(out[static_cast<size_t>(t) * hidden + h]),
                  reference[static_cast<size_t>(ids[t]) * hidden + h])
            << "dtype " << static_cast<int>(dtype) << " token " << t << " dim " << h;
      }
    }
    for (size_t g = 0; g < kGuard; ++g)
      ASSERT_EQ(out[static_cast<size_t>(n) * hidden + g], kGuardValue);
  }
}

// A table tied to lm_head is stored in lm_head's column panels (64 rows of a
// panel interleaved); Embedding must gather the same exact rows from them.
TEST(QuantEmbedding, PanelTablesGatherTheirRowsExactly) {
  auto be = CreateCpuBackend(2);
  const int vocab = 128, hidden = 37;  // two whole panels
  for (WeightDtype dtype : {WeightDtype::kF16, WeightDtype::kBF16}) {
    const TestWeight w = MakeWeight(dtype, vocab, hidden, 0, true, 13);
    BackendBuffer storage;
    const WeightView panels = be->PrepareWeight(w.View(), &storage);
    ASSERT_EQ(LogicalWeightDtype(panels.dtype), dtype);
    ASSERT_NE(panels.dtype, dtype) << "expected the panel layout";
    const std::vector<int32_t> ids = {0, 63, 64, 127, 1, 65, 100, 100, 31};
    const int n = static_cast<int>(ids.size());
    std::vector<float> out(static_cast<size_t>(n) * hidden + kGuard, kNaN);
    std::fill(out.end() - kGuard, out.end(), kGuardValue);
    be->Embedding({ids.data(), panels.data, out.data(), n, vocab, hidden, panels.dtype});
    for (int t = 0; t < n; ++t) {
      for (int h = 0; h < hidden; ++h) {
        ASSERT_EQ(static_cast<double>(out[static_cast<size_t>(t) * hidden + h]),
                  w.reference[static_cast<size_t>(ids[t]) * hidden + h])
            << "dtype " << static_cast<int>(dtype) << " token " << t << " dim " << h;
      }
    }
    for (size_t g = 0; g < kGuard; ++g)
      ASSERT_EQ(out[static_cast<size_t>(n) * hidden + g], kGuardValue);
  }
}

TEST(QuantEmbedding, RejectsOutOfRangeIdsAndIntegerTablesWithoutScales) {
  auto be = CreateCpuBackend(1);
  std::vector<uint16_t> table(4 * 8, 0x3c00);  // 1.0 in fp16
  std::vector<float> out(16);
  const std::vector<int32_t> bad = {1, 4};
  EXPECT_THROW(
      {
        try {
          be->Embedding({bad.data(), table.data(), out.data(), 2, 4, 8, WeightDtype::kF16});
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("token id 4 at position 1"), std::string::npos)
              << e.what();
          throw;
        }
      },
      std::invalid_argument);
  const std::vector<int32_t> good = {1, 2};
  EXPECT_THROW(be->Embedding({good.data(), table.data(), out.data(), 2, 4, 8, WeightDtype::kInt8}),
               std::invalid_argument);
  // Not a WeightDtype at all (every real one is a table format now: panels
  // and tiles hold a table tied to lm_head).
  EXPECT_THROW(be->Embedding(
                   {good.data(), table.data(), out.data(), 2, 4, 8, static_cast<WeightDtype>(200)}),
               std::invalid_argument);
}

// ---------------------------------------------------------------------------
// The integer-unit matmul (kernels/cpu/cpu_int_matmul.cc) over the CPU
// backend's int tiles. Its activation quantization is modelled here from the
// rule in that file (per group of the weight: d = max|x| / 127, q =
// round-half-even(x * (127 / max|x|))), and the float64 reference sums
// scale * d * q * (code - zero); a second check bounds the distance to the
// unquantized float64 reference by the activation rounding, sum |w| * d / 2.

std::vector<cpu::IntIsa> SupportedIsas() {
  std::vector<cpu::IntIsa> isas;
  for (cpu::IntIsa isa : {cpu::IntIsa::kScalar, cpu::IntIsa::kAvx2, cpu::IntIsa::kAvx512Vnni}) {
    if (cpu::IntIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// A tiled copy of w and its view (storage owned by the struct).
struct TiledWeight {
  std::vector<uint8_t> storage;
  WeightView view;
};

TiledWeight Tile(const TestWeight& w) {
  TiledWeight t;
  EXPECT_TRUE(cpu::CanTileInt(w.View())) << Describe(w);
  t.storage.resize(cpu::TiledIntBytes(w.View()) + 64);
  // 64-byte aligned as the backend's buffers are.
  void* base = t.storage.data();
  size_t space = t.storage.size();
  std::align(64, cpu::TiledIntBytes(w.View()), base, space);
  t.view = cpu::TileInt(w.View(), base);
  return t;
}

std::vector<float> RunIntMatMul(const WeightView& v, const std::vector<float>& x, int rows,
                                int threads, cpu::IntIsa isa, const std::vector<float>* init) {
  std::vector<float> out(static_cast<size_t>(rows) * v.out_features, kNaN);
  if (init) out = *init;
  out.resize(out.size() + kGuard, kGuardValue);
  ThreadPool pool(threads);
  cpu::IntMatMul({x.data(), v, out.data(), rows, init != nullptr}, pool, isa);
  return out;
}

void ExpectMatchesIntReference(const TestWeight& w, const std::vector<float>& x, int rows,
                               const std::vector<float>& out, const std::string& what) {
  const int gs = w.group_size, groups = w.in / gs;
  for (size_t g = 0; g < kGuard; ++g) {
    ASSERT_EQ(out[static_cast<size_t>(rows) * w.out + g], kGuardValue) << what << " guard " << g;
  }
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + static_cast<size_t>(r) * w.in;
    std::vector<double> xq(w.in), d(groups);  // modelled quantized activations
    for (int g = 0; g < groups; ++g) {
      float amax = 0;
      for (int i = g * gs; i < (g + 1) * gs; ++i) amax = std::max(amax, std::fabs(xr[i]));
      const float inv = amax > 0 ? 127.0f / amax : 0.0f;
      d[g] = amax / 127.0f;
      for (int i = g * gs; i < (g + 1) * gs; ++i) {
        xq[i] = std::clamp(std::nearbyint(xr[i] * inv), -127.0f, 127.0f);
      }
    }
    for (int o = 0; o < w.out; ++o) {
      double ref = 0, magnitude = 0, exact = 0, bound = 0;
      for (int i = 0; i < w.in; ++i) {
        const double wi = w.reference[static_cast<size_t>(o) * w.in + i];
        const double term = d[i / gs] * xq[i] * wi;
        ref += term;
        magnitude += std::fabs(term) + std::fabs(xr[i] * wi);
        exact += xr[i] * wi;
        bound += std::fabs(wi) * (d[i / gs] / 2 + 1e-6 * std::fabs(xr[i]));
      }
      const double got = out[static_cast<size_t>(r) * w.out + o];
      ASSERT_TRUE(std::isfinite(got)) << what << " out[" << r << "," << o << "] not written";
      ASSERT_LE(std::fabs(got - ref), 1e-5 * magnitude + 1e-30)
          << what << " out[" << r << "," << o << "] = " << got << " vs modelled " << ref;
      ASSERT_LE(std::fabs(got - exact), bound + 1e-5 * magnitude + 1e-30)
          << what << " out[" << r << "," << o << "] = " << got << " vs unquantized " << exact;
    }
  }
}

struct IntShape {
  int out, in, group_size;
};
// Groups from one chunk (4 / 8 inputs) to the 512 limit, several tile counts.
const IntShape kIntShapes[] = {{16, 64, 8},   {48, 96, 32},    {32, 512, 512},
                               {80, 192, 64}, {16, 1024, 128}, {64, 40, 8}};
const FormatCase kIntFormats[] = {{WeightDtype::kInt8, true},
                                  {WeightDtype::kInt8, false},
                                  {WeightDtype::kInt4, true},
                                  {WeightDtype::kInt4, false}};

TEST(IntMatMul, MatchesModelledFloat64ReferenceOnEveryIsa) {
  uint32_t seed = 500;
  for (cpu::IntIsa isa : SupportedIsas()) {
    for (const FormatCase& f : kIntFormats) {
      for (const IntShape& s : kIntShapes) {
        const TestWeight w = MakeWeight(f.dtype, s.out, s.in, s.group_size, f.symmetric, ++seed);
        const TiledWeight t = Tile(w);
        for (int rows : {1, 2, 5, 9}) {
          auto x = RandomActivations(rows, s.in, ++seed);
          if (rows == 2) std::fill(x.begin(), x.begin() + s.group_size, 0.0f);  // d = 0 block
          const std::string what =
              Describe(w) + " " + cpu::IntIsaName(isa) + " rows " + std::to_string(rows);
          ExpectMatchesIntReference(w, x, rows, RunIntMatMul(t.view, x, rows, 2, isa, nullptr),
                                    what);
        }
      }
    }
  }
}

// Bits: the same for every ISA, thread count, row count and with accumulate
// (out + the same sum), and the backend's MatMul over its prepared weight
// is this kernel.
TEST(IntMatMul, IdenticalAcrossIsasThreadsRowsAndBatch) {
  uint32_t seed = 600;
  const auto isas = SupportedIsas();
  for (const FormatCase& f : kIntFormats) {
    const TestWeight w = MakeWeight(f.dtype, 112, 256, 64, f.symmetric, ++seed);
    const TiledWeight t = Tile(w);
    const int rows = 70;  // more than one 64-row block
    const auto x = RandomActivations(rows, w.in, ++seed);
    const auto batch = RunIntMatMul(t.view, x, rows, 1, cpu::IntIsa::kScalar, nullptr);
    for (cpu::IntIsa isa : isas) {
      for (int threads : {1, 2, 3, 4}) {
        const auto out = RunIntMatMul(t.view, x, rows, threads, isa, nullptr);
        ASSERT_EQ(0, std::memcmp(out.data(), batch.data(), out.size() * sizeof(float)))
            << Describe(w) << " " << cpu::IntIsaName(isa) << " threads " << threads;
      }
      for (int r : {0, 1, 33, 64, 69}) {
        const std::vector<float> xr(x.begin() + static_cast<size_t>(r) * w.in,
                                    x.begin() + static_cast<size_t>(r + 1) * w.in);
        const auto single = RunIntMatMul(t.view, xr, 1, 2, isa, nullptr);
        ASSERT_EQ(0, std::memcmp(single.data(), batch.data() + static_cast<size_t>(r) * w.out,
                                 w.out * sizeof(float)))
            << Describe(w) << " " << cpu::IntIsaName(isa) << " row " << r << " alone";
      }
      const auto init = RandomActivations(3, w.out, ++seed);
      const auto three = RunIntMatMul(t.view, x, 3, 1, isa, nullptr);
      const auto acc = RunIntMatMul(t.view, x, 3, 2, isa, &init);
      for (size_t e = 0; e < init.size(); ++e) ASSERT_EQ(acc[e], init[e] + three[e]) << e;
    }
    auto be = CreateCpuBackend(2, CpuMatMulChoice{true, isas.back()});
    BackendBuffer storage;
    const WeightView prepared = be->PrepareWeight(w.View(), &storage);
    ASSERT_EQ(prepared.dtype,
              f.dtype == WeightDtype::kInt8 ? WeightDtype::kInt8Tiles : WeightDtype::kInt4Tiles);
    ASSERT_EQ(storage.bytes(), w.bytes.size() + (w.scales.size() + w.zeros.size()) * 2);
    std::vector<float> out(static_cast<size_t>(rows) * w.out, kNaN);
    be->MatMul({x.data(), prepared, out.data(), rows, false});
    ASSERT_EQ(0, std::memcmp(out.data(), batch.data(), out.size() * sizeof(float)));
  }
}

// Tiling keeps every weight: the tiled rows decode to the row-major rows'
// bits, and weights the tiles cannot hold stay as they are.
TEST(IntMatMul, TilesDecodeToTheSameWeightsAndOnlyWholeTilesAreTiled) {
  uint32_t seed = 700;
  for (const FormatCase& f : kIntFormats) {
    const TestWeight w = MakeWeight(f.dtype, 48, 96, 32, f.symmetric, ++seed);
    const TiledWeight t = Tile(w);
    std::vector<float> a(w.in), b(w.in);
    for (int o = 0; o < w.out; ++o) {
      cpu::DecodeTiledIntRow(t.view, o, a.data());
      for (int i = 0; i < w.in; ++i) {
        ASSERT_EQ(static_cast<double>(a[i]), w.reference[static_cast<size_t>(o) * w.in + i])
            << Describe(w) << " [" << o << ", " << i << "]";
      }
    }
    auto be = CreateCpuBackend(1, CpuMatMulChoice{true, cpu::IntIsa::kScalar});
    for (const Shape& s : {Shape{37, 96, 32}, Shape{48, 1024, 1024}, Shape{16, 36, 6}}) {
      const TestWeight odd = MakeWeight(f.dtype, s.out, s.in, s.group_size, f.symmetric, ++seed);
      BackendBuffer storage;
      EXPECT_EQ(be->PrepareWeight(odd.View(), &storage).dtype, f.dtype) << Describe(odd);
      EXPECT_EQ(storage.data(), nullptr);
    }
    auto off = CreateCpuBackend(1, CpuMatMulChoice{false, cpu::IntIsa::kScalar});
    BackendBuffer storage;
    EXPECT_EQ(off->PrepareWeight(w.View(), &storage).dtype, f.dtype);
  }
}

// Embedding from int8/int4 tables (gather-dequantize rows, issue 22): every
// output equals the float64 dequantized row exactly (an fp16 scale times a
// code difference of at most 255 fits fp32), read row-major and from the int
// tiles that a tied table shares with lm_head, at 1 and 2 threads.
TEST(QuantEmbedding, IntegerTablesGatherTheFloat64DequantizedRows) {
  const int vocab = 48, hidden = 96;
  const std::vector<int32_t> ids = {3, 0, 47, 3, 17, 25, 8, 8, 1, 46, 30, 2, 44, 5, 6, 7, 9, 10};
  const int n = static_cast<int>(ids.size());
  uint32_t seed = 900;
  for (const FormatCase& f : kIntFormats) {
    for (int group : {32, 96}) {
      const TestWeight w = MakeWeight(f.dtype, vocab, hidden, group, f.symmetric, ++seed);
      for (int threads : {1, 2}) {
        auto be = CreateCpuBackend(threads, CpuMatMulChoice{true, cpu::IntIsa::kScalar});
        BackendBuffer storage;
        for (bool tiled : {false, true}) {
          const WeightView v = tiled ? be->PrepareWeight(w.View(), &storage) : w.View();
          if (tiled) {
            ASSERT_NE(v.dtype, w.dtype) << Describe(w);
          }
          std::vector<float> out(static_cast<size_t>(n) * hidden + kGuard, kNaN);
          std::fill(out.end() - kGuard, out.end(), kGuardValue);
          be->Embedding({ids.data(), v.data, out.data(), n, vocab, hidden, v.dtype, v.scales,
                         v.zeros, v.group_size});
          for (int t = 0; t < n; ++t) {
            for (int h = 0; h < hidden; ++h) {
              ASSERT_EQ(static_cast<double>(out[static_cast<size_t>(t) * hidden + h]),
                        w.reference[static_cast<size_t>(ids[t]) * hidden + h])
                  << Describe(w) << (tiled ? " tiled" : " rows") << " token " << t << " dim " << h;
            }
          }
          for (size_t g = 0; g < kGuard; ++g) {
            ASSERT_EQ(out[static_cast<size_t>(n) * hidden + g], kGuardValue);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tq::kernels
