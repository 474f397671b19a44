// The CPU kernels' instruction-set levels (kernels/cpu/cpu_isa.h): which ones
// this machine supports (against /proc/cpuinfo's flags), TQ_CPU_ISA, and every
// dispatched kernel at every supported level against a double-precision
// reference written here from kernels/op_params.h, within the bound of its
// summation (any order, fused or not: |error| <= (k + 2) u sum |x_i w_i|,
// u = 2^-24), plus bit-identity with the baseline level where no rounding
// depends on the level (weight decoding, embedding, top-k). The levels'
// attention and KV codecs run the tq_test_kernels / tq_test_tq_math suites
// (references of their own) once per level: the cpu_isa.<level>.* ctest
// entries (tests/unit/CMakeLists.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_topk.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_decode.h"
#include "kernels/half.h"
#include "kernels/op_params.h"

namespace tq::kernels::cpu {
namespace {

constexpr double kU = 0x1.0p-24;  // fp32 unit roundoff

// Restores the level the process started with after each test.
class CpuIsaTest : public ::testing::Test {
 protected:
  void SetUp() override { initial_ = ActiveCpuIsa(); }
  void TearDown() override { SetCpuIsa(initial_); }

 private:
  CpuIsa initial_{};
};

// The flags of /proc/cpuinfo's first processor (an independent source of
// what the CPU has; empty off Linux).
std::set<std::string> CpuInfoFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST_F(CpuIsaTest, SupportedLevelsFollowTheCpuFlags) {
  const std::vector<CpuIsa> isas = SupportedCpuIsas();
  ASSERT_FALSE(isas.empty());
  if (isas.front() == CpuIsa::kNative) {  // -DTQ_NATIVE=ON: the one level
    EXPECT_EQ(isas.size(), 1u);
    GTEST_SKIP() << "native build: one level";
  }
  EXPECT_EQ(isas.front(), CpuIsa::kBaseline);
#if defined(__x86_64__)
  const std::set<std::string> f = CpuInfoFlags();
  ASSERT_FALSE(f.empty()) << "no flags line in /proc/cpuinfo";
  auto has = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* n) { return f.count(n) > 0; });
  };
  const bool avx2 = has({"avx2", "fma", "f16c"});
  const bool avx512 = avx2 && has({"avx512f", "avx512bw", "avx512vl", "avx512dq"});
  EXPECT_EQ(CpuIsaSupported(CpuIsa::kAvx2), avx2);
  EXPECT_EQ(CpuIsaSupported(CpuIsa::kAvx512), avx512);
  EXPECT_EQ(CpuIsaSupported(CpuIsa::kAvx512Vnni), avx512 && has({"avx512_vnni"}));
  EXPECT_FALSE(CpuIsaSupported(CpuIsa::kNative));
#endif
}

TEST_F(CpuIsaTest, ParseNamesAndEnvironment) {
  const std::vector<CpuIsa> isas = SupportedCpuIsas();
  for (CpuIsa isa : isas) EXPECT_EQ(ParseCpuIsa(CpuIsaName(isa)), isa) << CpuIsaName(isa);
  EXPECT_EQ(ParseCpuIsa(""), isas.back());
  EXPECT_EQ(ParseCpuIsa("auto"), isas.back());
  EXPECT_THROW(ParseCpuIsa("sse9"), std::invalid_argument);
  EXPECT_THROW(ParseCpuIsa("AVX2"), std::invalid_argument);  // names are lower case
  if (!CpuIsaSupported(CpuIsa::kNative)) {
    EXPECT_THROW(ParseCpuIsa("native"), std::invalid_argument);
    EXPECT_THROW(SetCpuIsa(CpuIsa::kNative), std::invalid_argument);
  }
  // The process's level is what TQ_CPU_ISA names (the cpu_isa.<level>
  // ctest entries set it), the fastest level without it.
  const char* env = std::getenv("TQ_CPU_ISA");
  EXPECT_EQ(ActiveCpuIsa(), ParseCpuIsa(env ? env : ""));
}

// ---------------------------------------------------------------------------
// Weights in every format, with an independent dequantization.

std::vector<float> Random(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

struct TestWeight {
  WeightDtype dtype;
  int32_t out = 0, in = 0, group = 0;
  std::vector<uint8_t> bytes;
  std::vector<uint16_t> scales, zeros;
  std::vector<double> dense;  // w[o, i], from the definition in op_params.h

  WeightView View() const {
    WeightView w;
    w.data = bytes.data();
    w.dtype = dtype;
    w.out_features = out;
    w.in_features = in;
    if (group > 0) {
      w.scales = scales.data();
      w.zeros = zeros.empty() ? nullptr : zeros.data();
      w.group_size = group;
    }
    return w;
  }
};

TestWeight MakeWeight(std::mt19937& rng, WeightDtype dtype, int32_t out, int32_t in, int32_t group,
                      bool with_zeros) {
  TestWeight t{dtype, out, in, group, {}, {}, {}, {}};
  const size_t n = static_cast<size_t>(out) * in;
  t.dense.resize(n);
  const std::vector<float> v = Random(rng, n);
  if (dtype == WeightDtype::kF32) {
    t.bytes.resize(n * 4);
    std::memcpy(t.bytes.data(), v.data(), n * 4);
    for (size_t i = 0; i < n; ++i) t.dense[i] = v[i];
  } else if (dtype == WeightDtype::kF16 || dtype == WeightDtype::kBF16) {
    t.bytes.resize(n * 2);
    auto* h = reinterpret_cast<uint16_t*>(t.bytes.data());
    for (size_t i = 0; i < n; ++i) {
      h[i] = dtype == WeightDtype::kF16 ? FloatToHalf(v[i]) : FloatToBf16(v[i]);
      t.dense[i] = dtype == WeightDtype::kF16 ? HalfToFloat(h[i]) : Bf16ToFloat(h[i]);
    }
  } else {  // kInt8 / kInt4: codes, fp16 scales (and zeros)
    const bool int4 = dtype == WeightDtype::kInt4;
    const int levels = int4 ? 16 : 256;
    const size_t groups = static_cast<size_t>(out) * (in / group);
    std::uniform_int_distribution<int> code(0, levels - 1);
    std::vector<int> codes(n);
    for (int& c : codes) c = code(rng);
    t.bytes.assign(int4 ? n / 2 : n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (int4) {
        t.bytes[i / 2] |= static_cast<uint8_t>(codes[i] << (i % 2 ? 4 : 0));
      } else {
        t.bytes[i] = static_cast<uint8_t>(codes[i]);
      }
    }
    const std::vector<float> s = Random(rng, groups, 0.001f, 0.05f);
    for (size_t g = 0; g < groups; ++g) {
      t.scales.push_back(FloatToHalf(s[g]));
      if (with_zeros) t.zeros.push_back(FloatToHalf(static_cast<float>(code(rng))));
    }
    for (int32_t o = 0; o < out; ++o) {
      for (int32_t i = 0; i < in; ++i) {
        const size_t g = static_cast<size_t>(o) * (in / group) + i / group;
        const double zero = with_zeros ? HalfToFloat(t.zeros[g]) : levels / 2;
        const size_t e = static_cast<size_t>(o) * in + i;
        t.dense[e] = HalfToFloat(t.scales[g]) * (codes[e] - zero);
      }
    }
  }
  return t;
}

// Checks out[r, o] against the double product of x and t.dense within the
// summation bound (+ out0 when accumulating).
void ExpectProduct(const std::vector<float>& x, const TestWeight& t, int32_t rows,
                   const std::vector<float>& out, const std::vector<float>& out0,
                   const std::string& what) {
  int bad = 0;
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t o = 0; o < t.out; ++o) {
      double ref = out0.empty() ? 0.0 : out0[static_cast<size_t>(r) * t.out + o];
      double mag = std::fabs(ref);
      for (int32_t i = 0; i < t.in; ++i) {
        const double p =
            x[static_cast<size_t>(r) * t.in + i] * t.dense[static_cast<size_t>(o) * t.in + i];
        ref += p;
        mag += std::fabs(p);
      }
      const double got = out[static_cast<size_t>(r) * t.out + o];
      const double bound = (t.in + 2) * kU * mag * 1.01 + 1e-30;
      if (!(std::fabs(got - ref) <= bound) && bad++ < 5) {
        ADD_FAILURE() << what << " row " << r << " col " << o << ": " << got << " vs " << ref
                      << " (bound " << bound << ")";
      }
    }
  }
}

// Every matmul path of the active level: the fp32 dot kernel, the panel
// kernels, the decode-to-buffer kernel and the register-decoding GEMV.
void CheckMatMuls(std::mt19937& rng, ThreadPool& pool, const std::string& level) {
  constexpr int32_t kOut = 128, kIn = 96;  // two panels; k not a multiple of 16 (tails)
  const std::vector<float> out0 = Random(rng, static_cast<size_t>(7) * kOut);
  for (int32_t rows : {1, 3, 7}) {
    const std::vector<float> x = Random(rng, static_cast<size_t>(rows) * kIn);
    for (bool accumulate : {false, true}) {
      const std::string tag =
          level + " rows " + std::to_string(rows) + (accumulate ? " accumulate" : "");
      auto run = [&](const WeightView& w, auto&& kernel) {
        std::vector<float> out(out0.begin(), out0.begin() + static_cast<size_t>(rows) * kOut);
        kernel(MatMulParams{x.data(), w, out.data(), rows, accumulate, nullptr});
        return out;
      };
      const std::vector<float> base(out0.begin(), out0.begin() + (accumulate ? rows * kOut : 0));
      for (WeightDtype d : {WeightDtype::kF32, WeightDtype::kF16, WeightDtype::kBF16}) {
        const TestWeight t = MakeWeight(rng, d, kOut, kIn, 0, false);
        const std::string name = WeightDtypeName(d) + " " + tag;
        if (d == WeightDtype::kF32) {
          ExpectProduct(x, t, rows, run(t.View(), [&](const MatMulParams& p) { MatMul(p, pool); }),
                        base, "MatMul " + name);
        } else {
          ExpectProduct(x, t, rows,
                        run(t.View(), [&](const MatMulParams& p) { MatMulPacked(p, pool); }), base,
                        "MatMulPacked " + name);
        }
        ASSERT_NE(PanelDtype(t.View()), d);
        std::vector<uint8_t> packed(DenseWeightBytes(t.View()));
        PackPanels(t.View(), packed.data());
        WeightView pw = t.View();
        pw.data = packed.data();
        pw.dtype = PanelDtype(t.View());
        ExpectProduct(x, t, rows, run(pw, [&](const MatMulParams& p) { MatMulPanels(p, pool); }),
                      base, "MatMulPanels " + name);
        if (rows == 1 && d != WeightDtype::kF32) {
          ExpectProduct(x, t, rows, run(t.View(), [&](const MatMulParams& p) { Gemv(p, pool); }),
                        base, "Gemv " + name);
        }
      }
      for (WeightDtype d : {WeightDtype::kInt8, WeightDtype::kInt4}) {
        for (bool zeros : {false, true}) {
          const TestWeight t = MakeWeight(rng, d, kOut, kIn, 32, zeros);
          const std::string name =
              WeightDtypeName(d) + (zeros ? " asymmetric " : " symmetric ") + tag;
          ExpectProduct(x, t, rows,
                        run(t.View(), [&](const MatMulParams& p) { MatMulPacked(p, pool); }), base,
                        "MatMulPacked " + name);
          MatMulParams probe{x.data(), t.View(), nullptr, rows, accumulate, nullptr};
          EXPECT_EQ(GemvSupported(probe), rows == 1) << name;
          if (GemvSupported(probe)) {
            ExpectProduct(x, t, rows, run(t.View(), [&](const MatMulParams& p) { Gemv(p, pool); }),
                          base, "Gemv " + name);
          }
        }
      }
    }
  }
}

// What every level must give bit for bit: decoded weight rows and
// embeddings (exact conversions), and top-k (comparisons, exp of doubles).
struct ExactOutputs {
  std::vector<float> decoded, embedded, topk_values;
  std::vector<int32_t> topk_ids;
  std::vector<double> sums;
};

ExactOutputs RunExact(ThreadPool& pool) {
  std::mt19937 rng(7);  // the same inputs at every level
  ExactOutputs e;
  for (WeightDtype d : {WeightDtype::kF32, WeightDtype::kF16, WeightDtype::kBF16,
                        WeightDtype::kInt8, WeightDtype::kInt4}) {
    const bool integer = d == WeightDtype::kInt8 || d == WeightDtype::kInt4;
    const TestWeight t = MakeWeight(rng, d, 16, 96, integer ? 32 : 0, integer);
    std::vector<float> row(96);
    for (int32_t o = 0; o < 16; ++o) {
      DecodeWeightRow(t.View(), o, row.data());
      for (int32_t i = 0; i < 96; ++i) {
        // The definition, exactly: (code - zero) is exact and the product rounds once.
        EXPECT_EQ(row[i], static_cast<float>(t.dense[static_cast<size_t>(o) * 96 + i]))
            << WeightDtypeName(d) << " row " << o << " col " << i;
      }
      e.decoded.insert(e.decoded.end(), row.begin(), row.end());
    }
    const int32_t ids[3] = {5, 0, 15};
    std::vector<float> emb(3 * 96);
    EmbeddingParams p;
    p.table = t.bytes.data();
    p.table_dtype = d;
    p.ids = ids;
    p.out = emb.data();
    p.num_tokens = 3;
    p.vocab = 16;
    p.hidden = 96;
    if (integer) {
      p.scales = t.scales.data();
      p.zeros = t.zeros.data();
      p.group_size = 32;
    }
    Embedding(p, pool);
    for (int32_t r = 0; r < 3; ++r) {
      for (int32_t i = 0; i < 96; ++i) {
        EXPECT_EQ(emb[r * 96 + i],
                  static_cast<float>(t.dense[static_cast<size_t>(ids[r]) * 96 + i]));
      }
    }
    e.embedded.insert(e.embedded.end(), emb.begin(), emb.end());
  }
  // Top-k over logits with ties, checked against a full sort.
  constexpr int32_t kVocab = 1000, kK = 20;
  std::vector<float> logits = Random(rng, kVocab, -8.0f, 8.0f);
  logits[10] = logits[20];
  std::vector<int32_t> ids(kK);
  std::vector<float> values(kK);
  double sum_exp = 0, sum_scaled = 0;
  LogitsTopKRow(logits.data(), kVocab, kK, 1.25f, ids.data(), values.data(), &sum_exp, &sum_scaled,
                nullptr);
  std::vector<int32_t> order(kVocab);
  for (int32_t i = 0; i < kVocab; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (int32_t i = 0; i < kK; ++i) EXPECT_EQ(ids[i], order[i]) << "rank " << i;
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l) - logits[order[0]]);
  EXPECT_NEAR(sum_exp, z, 1e-12 * z);
  e.topk_ids = ids;
  e.topk_values = values;
  e.sums = {sum_exp, sum_scaled};
  return e;
}

void CheckRowOps(std::mt19937& rng, ThreadPool& pool, const std::string& level) {
  // Softmax: exp within ~2 ulp of s - max rounded to float (relative error
  // |s - max| u of the result), summed over n, normalized.
  for (int32_t n : {1, 7, 8, 33, 300}) {
    const std::vector<float> x = Random(rng, n, -20.0f, 20.0f);
    std::vector<float> s = x;
    std::vector<double> ref(n);
    const double m = *std::max_element(s.begin(), s.end());
    double z = 0;
    for (int32_t i = 0; i < n; ++i) z += ref[i] = std::exp(x[i] - m);
    Softmax(s.data(), n);
    for (int32_t i = 0; i < n; ++i) {
      const double bound = (std::fabs(x[i] - m) + n + 8) * kU * ref[i] / z + 1e-37;
      EXPECT_NEAR(s[i], ref[i] / z, bound) << level << " n " << n;
    }
  }
  // RMSNorm, RoPE, SiLU * up.
  constexpr int32_t kRows = 3, kDim = 72, kHeads = 2, kHeadDim = 36;
  const std::vector<float> x = Random(rng, kRows * kDim), w = Random(rng, kDim);
  std::vector<float> out(kRows * kDim);
  RmsNorm(RmsNormParams{x.data(), w.data(), out.data(), kRows, kDim, 1e-5f}, pool);
  for (int32_t r = 0; r < kRows; ++r) {
    double ss = 0;
    for (int32_t i = 0; i < kDim; ++i) ss += static_cast<double>(x[r * kDim + i]) * x[r * kDim + i];
    const double inv = 1.0 / std::sqrt(ss / kDim + 1e-5);
    for (int32_t i = 0; i < kDim; ++i) {
      const double ref = x[r * kDim + i] * inv * w[i];
      EXPECT_NEAR(out[r * kDim + i], ref, 8 * kU * std::fabs(ref) + 1e-30) << level;
    }
  }
  std::vector<float> q = x;
  const int32_t pos[2] = {3, 1000};
  std::vector<float> inv_freq(kHeadDim / 2);
  for (int32_t i = 0; i < kHeadDim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / kHeadDim);
  Rope(RopeParams{q.data(), pos, inv_freq.data(), 2, kHeads, kHeadDim, 1.0f}, pool);
  for (int32_t t = 0; t < 2; ++t) {
    for (int32_t h = 0; h < kHeads; ++h) {
      const float* in = x.data() + (t * kHeads + h) * kHeadDim;
      const float* got = q.data() + (t * kHeads + h) * kHeadDim;
      for (int32_t i = 0; i < kHeadDim / 2; ++i) {
        const double a = static_cast<double>(static_cast<float>(pos[t])) * inv_freq[i];
        const double c = std::cos(a), s = std::sin(a), x1 = in[i], x2 = in[i + kHeadDim / 2];
        const double bound = 4 * kU * (std::fabs(x1) + std::fabs(x2));
        EXPECT_NEAR(got[i], x1 * c - x2 * s, bound) << level;
        EXPECT_NEAR(got[i + kHeadDim / 2], x2 * c + x1 * s, bound) << level;
      }
    }
  }
  const std::vector<float> up = Random(rng, kRows * kDim);
  SiluMul(SiluMulParams{x.data(), up.data(), out.data(), kRows, kDim}, pool);
  for (int32_t i = 0; i < kRows * kDim; ++i) {
    const double g = x[i], ref = g / (1.0 + std::exp(-g)) * up[i];
    EXPECT_NEAR(out[i], ref, 6 * kU * std::fabs(ref) + 1e-30) << level;
  }
}

TEST_F(CpuIsaTest, EveryLevelMatchesTheReference) {
  ThreadPool pool(2);
  std::vector<CpuIsa> isas = SupportedCpuIsas();
  ExactOutputs first;
  for (CpuIsa isa : isas) {
    SetCpuIsa(isa);
    ASSERT_EQ(ActiveCpuIsa(), isa);
    const std::string level = CpuIsaName(isa);
    SCOPED_TRACE(level);
    std::mt19937 rng(42);
    CheckMatMuls(rng, pool, level);
    CheckRowOps(rng, pool, level);
    const ExactOutputs e = RunExact(pool);
    if (isa == isas.front()) {
      first = e;
      continue;
    }
    EXPECT_EQ(e.decoded, first.decoded);
    EXPECT_EQ(e.embedded, first.embedded);
    EXPECT_EQ(e.topk_ids, first.topk_ids);
    EXPECT_EQ(e.topk_values, first.topk_values);
    EXPECT_EQ(e.sums, first.sums);
  }
}

}  // namespace
}  // namespace tq::kernels::cpu
