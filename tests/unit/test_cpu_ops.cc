// Every CPU backend op against a naive double-precision reference written here
// from the op's definition in kernels/op_params.h, run with 1, 2 and 3
// (oversubscribed) threads; plus the ThreadPool the backend runs on.
//
// Output buffers are filled with NaN before each op, so an element the op does
// not write fails the comparison, and are followed by a guard region that must
// come back untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/half.h"
#include "kernels/kv_layout.h"
#include "kernels/op_params.h"

namespace tq::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr size_t kGuard = 16;           // floats after every output buffer
constexpr float kGuardValue = 1234.5f;  // what the guard region must still hold

// ---------------------------------------------------------------------------
// Backend memory helpers.

template <typename T>
BackendBuffer Upload(Backend* be, const std::vector<T>& host) {
  BackendBuffer buf(be, std::max<size_t>(1, host.size() * sizeof(T)));
  if (!host.empty()) be->CopyToDevice(buf.data(), host.data(), host.size() * sizeof(T));
  return buf;
}

template <typename T>
std::vector<T> Download(Backend* be, const BackendBuffer& buf, size_t n) {
  std::vector<T> host(n);
  if (n) be->CopyToHost(host.data(), buf.data(), n * sizeof(T));
  return host;
}

// An output buffer of n floats: NaN, then kGuard guard floats.
BackendBuffer PoisonedOutput(Backend* be, size_t n) {
  std::vector<float> host(n, kNaN);
  host.resize(n + kGuard, kGuardValue);
  return Upload(be, host);
}

// Same, but the first n floats hold `init` (for accumulate / in-place ops).
BackendBuffer GuardedCopy(Backend* be, const std::vector<float>& init) {
  std::vector<float> host = init;
  host.resize(init.size() + kGuard, kGuardValue);
  return Upload(be, host);
}

// Returns the n floats of a guarded buffer and checks its guard region.
std::vector<float> ReadGuarded(Backend* be, const BackendBuffer& buf, size_t n) {
  std::vector<float> all = Download<float>(be, buf, n + kGuard);
  for (size_t i = n; i < n + kGuard; ++i) {
    EXPECT_EQ(all[i], kGuardValue) << "write past the end at element " << i << " of " << n;
  }
  all.resize(n);
  return all;
}

std::vector<float> RandomVector(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// |got - want| <= tol, NaN never passes.
::testing::AssertionResult Near(double got, double want, double tol) {
  if (std::fabs(got - want) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << " want " << want << " (diff "
                                       << std::fabs(got - want) << " > tol " << tol << ")";
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CpuOpsTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend(GetParam());
    be_ = backend_.get();
  }
  std::unique_ptr<Backend> backend_;
  Backend* be_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Threads, CpuOpsTest, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string name = std::to_string(info.param);
                           name.append("threads");
                           return name;
                         });

TEST(CpuBackendTest, AllocateIsAlignedAndZeroed) {
  auto be = CreateCpuBackend(0);  // 0 = hardware concurrency
  EXPECT_EQ(be->Name(), "cpu");
  for (size_t bytes : {1, 3, 64, 65, 1000, 1 << 20}) {
    BackendBuffer buf(be.get(), bytes);
    ASSERT_NE(buf.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u) << bytes;
    std::vector<uint8_t> host = Download<uint8_t>(be.get(), buf, bytes);
    EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](uint8_t b) { return b == 0; })) << bytes;
  }
}

// ---------------------------------------------------------------------------
// Embedding: out[t, :] = table[ids[t], :].

TEST_P(CpuOpsTest, Embedding) {
  std::mt19937 rng(1);
  const int32_t vocab = 50, hidden = 37;
  const std::vector<float> table = RandomVector(rng, static_cast<size_t>(vocab) * hidden);
  std::vector<int32_t> ids = {0, 49, 7, 7, 3, 49, 0};
  for (int i = 0; i < 16; ++i) ids.push_back(static_cast<int32_t>(rng() % vocab));
  const auto n = static_cast<int32_t>(ids.size());

  BackendBuffer d_table = Upload(be_, table);
  BackendBuffer d_ids = Upload(be_, ids);
  BackendBuffer d_out = PoisonedOutput(be_, static_cast<size_t>(n) * hidden);
  EmbeddingParams p;
  p.ids = d_ids.as<int32_t>();
  p.table = d_table.as<float>();
  p.out = d_out.as<float>();
  p.num_tokens = n;
  p.vocab = vocab;
  p.hidden = hidden;
  be_->Embedding(p);
  const std::vector<float> out = ReadGuarded(be_, d_out, static_cast<size_t>(n) * hidden);
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t i = 0; i < hidden; ++i) {
      ASSERT_EQ(out[t * hidden + i], table[ids[t] * hidden + i]) << "token " << t << " i " << i;
    }
  }

  // No tokens: nothing is written.
  BackendBuffer d_empty = PoisonedOutput(be_, hidden);
  p.out = d_empty.as<float>();
  p.num_tokens = 0;
  be_->Embedding(p);
  const std::vector<float> untouched = ReadGuarded(be_, d_empty, hidden);
  EXPECT_TRUE(
      std::all_of(untouched.begin(), untouched.end(), [](float x) { return std::isnan(x); }));
}

// ---------------------------------------------------------------------------
// RmsNorm: out = x / sqrt(mean(x^2) + eps) * weight, per row.

std::vector<double> RmsNormRef(const std::vector<float>& x, const std::vector<float>& w,
                               int32_t rows, int32_t dim, float eps) {
  std::vector<double> out(x.size());
  for (int32_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int32_t i = 0; i < dim; ++i) ss += double{x[r * dim + i]} * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int32_t i = 0; i < dim; ++i) out[r * dim + i] = x[r * dim + i] * inv * w[i];
  }
  return out;
}

TEST_P(CpuOpsTest, RmsNorm) {
  std::mt19937 rng(2);
  for (int32_t rows : {1, 3, 17, 33}) {
    for (int32_t dim : {1, 7, 64, 173}) {
      for (float eps : {1e-5f, 1e-6f}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim));
        const size_t n = static_cast<size_t>(rows) * dim;
        std::vector<float> x = RandomVector(rng, n);
        // Rows of very different magnitude (eps matters for the small ones), and a zero row.
        for (int32_t r = 0; r < rows; ++r) {
          const float scale = std::pow(10.0f, static_cast<float>(r % 7) - 3.0f);
          for (int32_t i = 0; i < dim; ++i) x[r * dim + i] *= scale;
        }
        if (rows > 2) std::fill(x.begin() + dim, x.begin() + 2 * dim, 0.0f);
        const std::vector<float> w = RandomVector(rng, dim, -2.0f, 2.0f);
        const std::vector<double> ref = RmsNormRef(x, w, rows, dim, eps);

        BackendBuffer d_x = Upload(be_, x);
        BackendBuffer d_w = Upload(be_, w);
        BackendBuffer d_out = PoisonedOutput(be_, n);
        RmsNormParams p;
        p.x = d_x.as<float>();
        p.weight = d_w.as<float>();
        p.out = d_out.as<float>();
        p.rows = rows;
        p.dim = dim;
        p.eps = eps;
        be_->RmsNorm(p);
        const std::vector<float> out = ReadGuarded(be_, d_out, n);

        // In place: out == x.
        BackendBuffer d_inplace = GuardedCopy(be_, x);
        p.x = d_inplace.as<float>();
        p.out = d_inplace.as<float>();
        be_->RmsNorm(p);
        const std::vector<float> inplace = ReadGuarded(be_, d_inplace, n);

        for (size_t i = 0; i < n; ++i) {
          const double tol = 2e-6 * std::fabs(ref[i]) + 1e-30;
          ASSERT_TRUE(Near(out[i], ref[i], tol)) << "element " << i;
          ASSERT_TRUE(Near(inplace[i], ref[i], tol)) << "in place, element " << i;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// MatMul: out[rows, out_features] = x · Wᵀ (+ out when accumulate).

struct MatMulCase {
  int32_t rows, in, out;
};

std::vector<MatMulCase> MatMulCases() {
  std::vector<MatMulCase> cases;
  for (int32_t rows : {1, 2, 3, 5, 17})
    for (int32_t in : {1, 7, 8, 9, 64, 172, 173})
      for (int32_t out : {1, 3, 4, 5, 33, 64, 100, 192}) cases.push_back({rows, in, out});
  return cases;
}

// Runs one MatMul on `be`; `init` is out's initial contents (used when
// accumulate). `prepared` runs the weight through be->PrepareWeight first (the
// CPU backend's kF32Panels layout), as the model loader does.
std::vector<float> RunMatMul(Backend* be, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>* init, const MatMulCase& c,
                             bool prepared = false) {
  const size_t n_out = static_cast<size_t>(c.rows) * c.out;
  BackendBuffer d_x = Upload(be, x);
  BackendBuffer d_w = Upload(be, w);
  BackendBuffer d_out = init ? GuardedCopy(be, *init) : PoisonedOutput(be, n_out);
  MatMulParams p;
  p.x = d_x.as<float>();
  p.w.data = d_w.data();
  p.w.dtype = WeightDtype::kF32;
  p.w.out_features = c.out;
  p.w.in_features = c.in;
  BackendBuffer packed;
  if (prepared) {
    p.w = be->PrepareWeight(p.w, &packed);
    // Whole 64-column panels only; other shapes keep the row-major kernel.
    const bool packs = c.out % kPanelCols == 0;
    EXPECT_EQ(p.w.dtype, packs ? WeightDtype::kF32Panels : WeightDtype::kF32);
    if (packs) d_w.Reset();  // the packed copy must not read the original
  }
  p.out = d_out.as<float>();
  p.rows = c.rows;
  p.accumulate = init != nullptr;
  be->MatMul(p);
  return ReadGuarded(be, d_out, n_out);
}

TEST_P(CpuOpsTest, MatMul) {
  std::mt19937 rng(3);
  for (const MatMulCase& c : MatMulCases()) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool accumulate = variant & 1;
      const bool prepared = variant & 2;
      SCOPED_TRACE("rows " + std::to_string(c.rows) + " in " + std::to_string(c.in) + " out " +
                   std::to_string(c.out) + (accumulate ? " accumulate" : "") +
                   (prepared ? " prepared" : ""));
      const std::vector<float> x = RandomVector(rng, static_cast<size_t>(c.rows) * c.in);
      const std::vector<float> w = RandomVector(rng, static_cast<size_t>(c.out) * c.in);
      const std::vector<float> init =
          RandomVector(rng, static_cast<size_t>(c.rows) * c.out, -3.0f, 3.0f);
      const std::vector<float> got =
          RunMatMul(be_, x, w, accumulate ? &init : nullptr, c, prepared);
      for (int32_t r = 0; r < c.rows; ++r) {
        for (int32_t o = 0; o < c.out; ++o) {
          double dot = 0.0, abs_sum = 0.0;
          for (int32_t i = 0; i < c.in; ++i) {
            const double term = double{x[r * c.in + i]} * w[o * c.in + i];
            dot += term;
            abs_sum += std::fabs(term);
          }
          const size_t idx = static_cast<size_t>(r) * c.out + o;
          const double base = accumulate ? init[idx] : 0.0;
          const double tol = 1e-5 * abs_sum + 1e-6 * std::fabs(base) + 1e-30;
          ASSERT_TRUE(Near(got[idx], base + dot, tol)) << "row " << r << " col " << o;
        }
      }
    }
  }
}

// MatMulParams::bias (nn.Linear's bias, Qwen2's q/k/v): added to every row
// after the product, on the row-major, panel and quantized kernels alike (int8
// row-major on the float kernels, and int8 prepared by the backend: its
// integer-unit tiles where the shape is whole tiles), with and without
// accumulate.
TEST_P(CpuOpsTest, MatMulAddsBiasToEveryRow) {
  std::mt19937 rng(5);
  for (const MatMulCase& c :
       {MatMulCase{1, 64, 64}, MatMulCase{5, 173, 192}, {17, 64, 33}, {3, 128, 48}}) {
    for (int variant = 0; variant < 8; ++variant) {
      const bool accumulate = variant & 1;
      // 0 row-major, 1 prepared (panels), 2 int8, 3 int8 prepared (int tiles)
      const int kind = variant / 2;
      SCOPED_TRACE("rows " + std::to_string(c.rows) + " out " + std::to_string(c.out) + " kind " +
                   std::to_string(kind) + (accumulate ? " accumulate" : ""));
      const std::vector<float> x = RandomVector(rng, static_cast<size_t>(c.rows) * c.in);
      std::vector<float> w = RandomVector(rng, static_cast<size_t>(c.out) * c.in);
      const std::vector<float> bias = RandomVector(rng, static_cast<size_t>(c.out), -2.0f, 2.0f);
      const std::vector<float> init = RandomVector(rng, static_cast<size_t>(c.rows) * c.out);
      BackendBuffer d_x = Upload(be_, x);
      BackendBuffer d_bias = Upload(be_, bias);
      std::vector<uint8_t> codes(w.size());
      std::vector<uint16_t> scales(static_cast<size_t>(c.out));
      MatMulParams p;
      p.w.out_features = c.out;
      p.w.in_features = c.in;
      BackendBuffer d_w, packed, d_codes, d_scales;
      if (kind >= 2) {  // symmetric int8, one group per row: w = scale * (code - 128)
        for (int32_t o = 0; o < c.out; ++o) {
          scales[o] = FloatToHalf(0.01f);
          for (int32_t i = 0; i < c.in; ++i) {
            const size_t k = static_cast<size_t>(o) * c.in + i;
            codes[k] = static_cast<uint8_t>(128 + static_cast<int>(rng() % 201) - 100);
            w[k] = HalfToFloat(scales[o]) * (static_cast<int>(codes[k]) - 128);
          }
        }
        d_codes = Upload(be_, codes);
        d_scales = Upload(be_, scales);
        p.w.data = d_codes.data();
        p.w.dtype = WeightDtype::kInt8;
        p.w.scales = d_scales.as<const uint16_t>();
        p.w.group_size = c.in;
        if (kind == 3) {
          p.w = be_->PrepareWeight(p.w, &packed);
          const bool whole_tiles =
              CpuMatMulChoiceFromEnv().integer && c.out % kIntTileRows == 0 && c.in % 4 == 0;
          ASSERT_EQ(p.w.dtype, whole_tiles ? WeightDtype::kInt8Tiles : WeightDtype::kInt8);
        }
      } else {
        d_w = Upload(be_, w);
        p.w.data = d_w.data();
        p.w.dtype = WeightDtype::kF32;
        if (kind == 1) p.w = be_->PrepareWeight(p.w, &packed);
      }
      BackendBuffer d_out = accumulate ? GuardedCopy(be_, init)
                                       : PoisonedOutput(be_, static_cast<size_t>(c.rows) * c.out);
      p.x = d_x.as<float>();
      p.out = d_out.as<float>();
      p.rows = c.rows;
      p.accumulate = accumulate;
      p.bias = d_bias.as<float>();
      be_->MatMul(p);
      const std::vector<float> got = ReadGuarded(be_, d_out, static_cast<size_t>(c.rows) * c.out);
      for (int32_t r = 0; r < c.rows; ++r) {
        for (int32_t o = 0; o < c.out; ++o) {
          double want = (accumulate ? init[static_cast<size_t>(r) * c.out + o] : 0.0) + bias[o];
          double abs_sum = std::fabs(want);
          for (int32_t i = 0; i < c.in; ++i) {
            const double term = double{x[r * c.in + i]} * w[o * c.in + i];
            want += term;
            abs_sum += std::fabs(term);
          }
          // int8 kernels may round the activations (cpukern); dense is fp32 throughout.
          const double tol = (kind >= 2 ? 1e-2 : 1e-5) * abs_sum + 1e-30;
          ASSERT_TRUE(Near(got[static_cast<size_t>(r) * c.out + o], want, tol))
              << "row " << r << " col " << o;
        }
      }
    }
  }
}

// The split over output columns must not change any result bit: every thread
// count gives the same output as one thread.
// KNOWN FAILURE: a column's bits depend on whether it falls in a 4-column
// register tile or the 1-column remainder loop of cpu_matmul.cc, which depends
// on the per-thread column range; GCC's default -ffp-contract=fast fuses
// multiply-adds differently in the two DotTile instantiations (-march=native).
TEST(CpuOpsDeterminismTest, MatMulIdenticalAcrossThreadCounts) {
  std::vector<std::unique_ptr<Backend>> backends;
  for (int threads : {1, 2, 3, 4}) backends.push_back(CreateCpuBackend(threads));
  std::vector<MatMulCase> cases = MatMulCases();
  cases.push_back({7, 300, 257});
  cases.push_back({4, 129, 97});
  std::mt19937 rng(4);
  cases.push_back({9, 768, 128});
  cases.push_back({13, 33, 256});
  int num_differing = 0;
  std::string examples;
  for (const MatMulCase& c : cases) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool accumulate = variant & 1;
      const bool prepared = variant & 2;
      const std::vector<float> x = RandomVector(rng, static_cast<size_t>(c.rows) * c.in);
      const std::vector<float> w = RandomVector(rng, static_cast<size_t>(c.out) * c.in);
      const std::vector<float> init = RandomVector(rng, static_cast<size_t>(c.rows) * c.out);
      const std::vector<float>* pinit = accumulate ? &init : nullptr;
      const std::vector<float> one = RunMatMul(backends[0].get(), x, w, pinit, c, prepared);
      for (size_t b = 1; b < backends.size(); ++b) {
        const std::vector<float> got = RunMatMul(backends[b].get(), x, w, pinit, c, prepared);
        if (SameBits(one, got)) continue;
        if (++num_differing > 5) continue;
        std::ostringstream msg;
        msg << "\n  rows " << c.rows << " in " << c.in << " out " << c.out
            << (accumulate ? " accumulate" : "") << (prepared ? " prepared" : "") << ", " << b + 1
            << " threads: columns";
        for (size_t i = 0; i < one.size(); ++i) {
          if (std::memcmp(&one[i], &got[i], sizeof(float)) != 0) msg << " " << i % c.out;
        }
        examples += msg.str();
      }
    }
  }
  EXPECT_EQ(num_differing, 0) << "(case, thread count) pairs whose bits differ from 1 thread "
                                 "(first 5):"
                              << examples;
}

// A row's result must not depend on which other rows share the batch (the
// engine compares a sequence decoded in a batch with the same one alone): each
// row of a 1..20-row prepared matmul equals that row computed by itself.
TEST(CpuOpsDeterminismTest, PreparedMatMulRowIndependentOfBatch) {
  std::unique_ptr<Backend> be = CreateCpuBackend(2);
  std::mt19937 rng(5);
  for (int32_t rows = 1; rows <= 20; ++rows) {
    const MatMulCase c{rows, 200, 128};
    const std::vector<float> x = RandomVector(rng, static_cast<size_t>(c.rows) * c.in);
    const std::vector<float> w = RandomVector(rng, static_cast<size_t>(c.out) * c.in);
    const std::vector<float> batched = RunMatMul(be.get(), x, w, nullptr, c, true);
    for (int32_t r = 0; r < rows; ++r) {
      const std::vector<float> row_x(x.begin() + r * c.in, x.begin() + (r + 1) * c.in);
      const std::vector<float> alone =
          RunMatMul(be.get(), row_x, w, nullptr, {1, c.in, c.out}, true);
      const std::vector<float> row_out(batched.begin() + r * c.out,
                                       batched.begin() + (r + 1) * c.out);
      ASSERT_TRUE(SameBits(row_out, alone)) << "row " << r << " of " << rows;
    }
  }
}

// ---------------------------------------------------------------------------
// Rope (HF rotate_half): pairs (i, i + hd/2) rotate by pos * inv_freq[i], with
// cos/sin multiplied by attention_scaling.

TEST_P(CpuOpsTest, Rope) {
  std::mt19937 rng(5);
  for (int32_t hd : {8, 64, 128}) {
    for (int32_t heads : {1, 3}) {
      for (int32_t tokens : {1, 37}) {
        for (double theta : {10000.0, 500000.0}) {
          for (float scaling : {1.0f, 1.2f}) {
            SCOPED_TRACE("hd " + std::to_string(hd) + " heads " + std::to_string(heads) +
                         " tokens " + std::to_string(tokens) + " theta " + std::to_string(theta) +
                         " scaling " + std::to_string(scaling));
            const int32_t half = hd / 2;
            std::vector<float> inv_freq(half);
            for (int32_t i = 0; i < half; ++i)
              inv_freq[i] = static_cast<float>(std::pow(theta, -2.0 * i / hd));
            std::vector<int32_t> pos(tokens);
            for (int32_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(rng() % 100001);
            pos[0] = tokens > 1 ? 0 : 100000;
            if (tokens > 2) pos[1] = 100000;
            if (tokens > 3) pos[2] = 99999;
            const size_t n = static_cast<size_t>(tokens) * heads * hd;
            const std::vector<float> x = RandomVector(rng, n, -2.0f, 2.0f);

            BackendBuffer d_x = GuardedCopy(be_, x);
            BackendBuffer d_pos = Upload(be_, pos);
            BackendBuffer d_freq = Upload(be_, inv_freq);
            RopeParams p;
            p.x = d_x.as<float>();
            p.positions = d_pos.as<int32_t>();
            p.inv_freq = d_freq.as<float>();
            p.num_tokens = tokens;
            p.num_heads = heads;
            p.head_dim = hd;
            p.attention_scaling = scaling;
            be_->Rope(p);
            const std::vector<float> got = ReadGuarded(be_, d_x, n);

            for (int32_t t = 0; t < tokens; ++t) {
              for (int32_t h = 0; h < heads; ++h) {
                const size_t base = (static_cast<size_t>(t) * heads + h) * hd;
                for (int32_t i = 0; i < half; ++i) {
                  const double angle = double{static_cast<float>(pos[t])} * inv_freq[i];
                  const double c = std::cos(angle) * scaling, s = std::sin(angle) * scaling;
                  const double x1 = x[base + i], x2 = x[base + i + half];
                  const double tol = 1e-6 * scaling * (std::fabs(x1) + std::fabs(x2)) + 1e-30;
                  ASSERT_TRUE(Near(got[base + i], x1 * c - x2 * s, tol))
                      << "t " << t << " pos " << pos[t] << " h " << h << " i " << i;
                  ASSERT_TRUE(Near(got[base + i + half], x2 * c + x1 * s, tol))
                      << "t " << t << " pos " << pos[t] << " h " << h << " i " << i + half;
                }
              }
            }
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// SiluMul: out = silu(gate) * up = gate / (1 + exp(-gate)) * up.

TEST_P(CpuOpsTest, SiluMul) {
  std::mt19937 rng(6);
  for (int32_t rows : {1, 3, 7}) {
    for (int32_t dim : {1, 5, 4096, 5000}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim));
      const size_t n = static_cast<size_t>(rows) * dim;
      std::vector<float> gate = RandomVector(rng, n, -12.0f, 12.0f);
      const float specials[] = {0.0f, -0.0f, 100.0f, -100.0f, -88.5f, 30.0f, 1e-20f, -1e-20f};
      for (size_t i = 0; i < std::size(specials) && i < n; ++i) gate[i * 3 % n] = specials[i];
      const std::vector<float> up = RandomVector(rng, n, -3.0f, 3.0f);
      std::vector<double> ref(n);
      for (size_t i = 0; i < n; ++i) ref[i] = gate[i] / (1.0 + std::exp(-double{gate[i]})) * up[i];

      BackendBuffer d_gate = Upload(be_, gate);
      BackendBuffer d_up = Upload(be_, up);
      BackendBuffer d_out = PoisonedOutput(be_, n);
      SiluMulParams p;
      p.gate = d_gate.as<float>();
      p.up = d_up.as<float>();
      p.out = d_out.as<float>();
      p.rows = rows;
      p.dim = dim;
      be_->SiluMul(p);
      const std::vector<float> out = ReadGuarded(be_, d_out, n);

      // In place: out == gate.
      BackendBuffer d_inplace = GuardedCopy(be_, gate);
      p.gate = d_inplace.as<float>();
      p.out = d_inplace.as<float>();
      be_->SiluMul(p);
      const std::vector<float> inplace = ReadGuarded(be_, d_inplace, n);

      for (size_t i = 0; i < n; ++i) {
        const double tol = 2e-6 * std::fabs(ref[i]) + 1e-35;
        ASSERT_TRUE(Near(out[i], ref[i], tol)) << "gate " << gate[i] << " up " << up[i];
        ASSERT_TRUE(Near(inplace[i], ref[i], tol)) << "in place, gate " << gate[i];
      }
    }
  }
}

// ---------------------------------------------------------------------------
// KvWrite and PagedAttention helpers.

uint16_t NanPattern16(KvDtype dtype) {
  return dtype == KvDtype::kF16 ? 0x7E00 : 0x7FC0;
}

// What the pool holds for x after conversion to `dtype`, as the test expects it.
float StoredValue(float x, KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return x;
    case KvDtype::kF16:
      return HalfToFloat(FloatToHalf(x));
    case KvDtype::kBF16:
      return Bf16ToFloat(FloatToBf16(x));
    default:  // quantized formats are covered by test_kv_formats.cc
      return kNaN;
  }
}

// Decodes element `index` of a pool downloaded as bytes.
float DecodeElement(const std::vector<uint8_t>& pool, KvDtype dtype, size_t index) {
  if (dtype == KvDtype::kF32) {
    float f;
    std::memcpy(&f, pool.data() + index * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, pool.data() + index * 2, 2);
  return dtype == KvDtype::kF16 ? HalfToFloat(h) : Bf16ToFloat(h);
}

// A pool of `elements` elements of `dtype`, all NaN.
std::vector<uint8_t> NanPool(KvDtype dtype, size_t elements) {
  std::vector<uint8_t> bytes(elements * KvDtypeElementBytes(dtype));
  if (dtype == KvDtype::kF32) {
    for (size_t i = 0; i < elements; ++i) std::memcpy(bytes.data() + i * 4, &kNaN, 4);
  } else {
    const uint16_t nan = NanPattern16(dtype);
    for (size_t i = 0; i < elements; ++i) std::memcpy(bytes.data() + i * 2, &nan, 2);
  }
  return bytes;
}

std::string DtypeName(KvDtype d) {
  return std::string(KvDtypeName(d));
}

TEST_P(CpuOpsTest, KvWrite) {
  std::mt19937 rng(7);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
    for (int32_t block_size : {16, 5}) {
      for (int32_t kv_heads : {1, 3}) {
        for (int32_t hd : {8, 64}) {
          SCOPED_TRACE(DtypeName(dtype) + " block " + std::to_string(block_size) + " kv_heads " +
                       std::to_string(kv_heads) + " hd " + std::to_string(hd));
          KvLayout layout;
          layout.dtype = dtype;
          layout.num_blocks = 6;
          layout.block_size = block_size;
          layout.num_kv_heads = kv_heads;
          layout.head_dim = hd;
          const int64_t num_slots = int64_t{layout.num_blocks} * block_size;
          const size_t row = static_cast<size_t>(kv_heads) * hd;
          const size_t pool_bytes = layout.BlockBytes() * layout.num_blocks;
          ASSERT_EQ(pool_bytes, static_cast<size_t>(num_slots) * row * KvDtypeElementBytes(dtype));

          // 20 tokens to distinct scrambled slots; every 4th token is skipped (slot -1).
          std::vector<int32_t> all_slots(num_slots);
          std::iota(all_slots.begin(), all_slots.end(), 0);
          std::shuffle(all_slots.begin(), all_slots.end(), rng);
          const int32_t tokens = 20;
          std::vector<int32_t> slots(tokens);
          for (int32_t t = 0; t < tokens; ++t) slots[t] = t % 4 == 3 ? -1 : all_slots[t];
          slots[0] = static_cast<int32_t>(num_slots - 1);  // the last slot of the pool
          if (std::find(slots.begin() + 1, slots.end(), slots[0]) != slots.end())
            std::replace(slots.begin() + 1, slots.end(), slots[0], all_slots[tokens]);
          std::vector<float> k = RandomVector(rng, tokens * row, -4.0f, 4.0f);
          std::vector<float> v = RandomVector(rng, tokens * row, -4.0f, 4.0f);
          k[1] = 1e-6f;  // below fp16's normal range
          v[2] = 3000.0f;

          const std::vector<uint8_t> sentinel(pool_bytes, 0xA5);
          BackendBuffer d_k = Upload(be_, k);
          BackendBuffer d_v = Upload(be_, v);
          BackendBuffer d_slots = Upload(be_, slots);
          BackendBuffer d_kpool = Upload(be_, sentinel);
          BackendBuffer d_vpool = Upload(be_, sentinel);
          KvWriteParams p;
          p.k = d_k.as<float>();
          p.v = d_v.as<float>();
          p.slot_mapping = d_slots.as<int32_t>();
          p.num_tokens = tokens;
          p.cache = KvLayerView{d_kpool.data(), d_vpool.data(), layout};
          be_->KvWrite(p);
          const std::vector<uint8_t> kpool = Download<uint8_t>(be_, d_kpool, pool_bytes);
          const std::vector<uint8_t> vpool = Download<uint8_t>(be_, d_vpool, pool_bytes);

          std::vector<int32_t> writer(num_slots, -1);  // token that owns each slot
          for (int32_t t = 0; t < tokens; ++t)
            if (slots[t] >= 0) writer[slots[t]] = t;
          // docs/kv-cache.md: a block is one tile per KV head, a tile holds its
          // block_size tokens' head vectors in order: element (slot s, head h, i)
          // is at ((s / bs * kv_heads + h) * bs + s % bs) * hd + i.
          auto element = [&](int64_t slot, size_t e) {
            const int64_t h = static_cast<int64_t>(e) / hd, i = static_cast<int64_t>(e) % hd;
            return static_cast<size_t>(
                ((slot / block_size * kv_heads + h) * block_size + slot % block_size) * hd + i);
          };
          const size_t elem_bytes = KvDtypeElementBytes(dtype);
          for (int64_t s = 0; s < num_slots; ++s) {
            const int32_t t = writer[s];
            if (t < 0) {  // untouched, including every skipped token's would-be slot
              for (size_t e = 0; e < row; ++e) {
                for (size_t b = element(s, e) * elem_bytes; b < (element(s, e) + 1) * elem_bytes;
                     ++b) {
                  ASSERT_EQ(kpool[b], 0xA5) << "slot " << s << " K written";
                  ASSERT_EQ(vpool[b], 0xA5) << "slot " << s << " V written";
                }
              }
              continue;
            }
            for (size_t e = 0; e < row; ++e) {
              const float want_k = k[t * row + e], want_v = v[t * row + e];
              const float got_k = DecodeElement(kpool, dtype, element(s, e));
              const float got_v = DecodeElement(vpool, dtype, element(s, e));
              if (dtype == KvDtype::kF32) {
                ASSERT_EQ(std::memcmp(&got_k, &want_k, 4), 0) << "slot " << s << " e " << e;
                ASSERT_EQ(std::memcmp(&got_v, &want_v, 4), 0) << "slot " << s << " e " << e;
              } else {
                // Round to nearest: within half a unit in the last place.
                const double rel =
                    dtype == KvDtype::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
                const double floor = dtype == KvDtype::kF16 ? std::ldexp(1.0, -25) : 0.0;
                ASSERT_TRUE(Near(got_k, want_k, rel * std::fabs(want_k) + floor))
                    << "slot " << s << " e " << e;
                ASSERT_TRUE(Near(got_v, want_v, rel * std::fabs(want_v) + floor))
                    << "slot " << s << " e " << e;
                ASSERT_EQ(got_k, StoredValue(want_k, dtype));
                ASSERT_EQ(got_v, StoredValue(want_v, dtype));
              }
            }
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// PagedAttention against naive causal softmax attention in double.

struct AttnConfig {
  KvDtype dtype;
  int32_t kv_heads;
  int32_t group;  // query heads per KV head
  int32_t hd;
  int32_t block_size;
};

std::string AttnName(const AttnConfig& c) {
  return DtypeName(c.dtype) + " kv_heads " + std::to_string(c.kv_heads) + " group " +
         std::to_string(c.group) + " hd " + std::to_string(c.hd) + " block " +
         std::to_string(c.block_size);
}

std::vector<AttnConfig> AttnConfigs() {
  std::vector<AttnConfig> configs;
  for (int32_t group : {1, 2, 4})
    for (int32_t hd : {8, 64, 128})
      for (int32_t block : {16, 5}) configs.push_back({KvDtype::kF32, 2, group, hd, block});
  configs.push_back({KvDtype::kF32, 1, 1, 64, 16});  // MHA with one head
  configs.push_back({KvDtype::kF32, 1, 4, 8, 1});    // one token per block
  for (KvDtype d : {KvDtype::kF16, KvDtype::kBF16})
    for (int32_t group : {1, 4}) configs.push_back({d, 2, group, 64, 5});
  return configs;
}

// A varlen batch over four sequences written through KvWrite into a paged pool
// with scrambled block tables, and its double-precision reference output.
struct AttnProblem {
  AttnConfig cfg;
  int32_t num_heads = 0;
  KvLayout layout;
  std::vector<int32_t> seq_len;
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks]
  int32_t max_blocks = 0;
  std::vector<std::vector<float>> k, v;  // per sequence [len, kv_heads, hd], as given
  // Query tokens.
  std::vector<int32_t> token_seq, token_pos;
  std::vector<float> q;
  std::vector<double> ref;
  std::vector<double> ref_scale;  // per output element: sum_j p_j |v_j| (for tolerances)
  float scale = 0.0f;

  // shuffle: the query tokens in a random order (else each sequence's in a run).
  AttnProblem(const AttnConfig& c, uint32_t seed, bool shuffle = true) : cfg(c) {
    std::mt19937 rng(seed);
    num_heads = c.kv_heads * c.group;
    scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    // The last "sequence" is a CUDA-graph padding row: no tokens, a block
    // table of -1 and one query at position -1, which must read nothing and
    // output zeros (PagedAttentionParams::token_pos).
    seq_len = {40, 1, 23, 7, 0};
    const auto num_seqs = static_cast<int32_t>(seq_len.size());
    std::vector<int32_t> blocks_needed(num_seqs);
    int32_t total_blocks = 0;
    for (int32_t s = 0; s < num_seqs; ++s) {
      blocks_needed[s] = (seq_len[s] + c.block_size - 1) / c.block_size;
      total_blocks += blocks_needed[s];
      max_blocks = std::max(max_blocks, blocks_needed[s]);
    }
    max_blocks += 1;  // a spare column pointing at a never-written (NaN) block
    layout.dtype = c.dtype;
    layout.num_blocks = total_blocks + 3;
    layout.block_size = c.block_size;
    layout.num_kv_heads = c.kv_heads;
    layout.head_dim = c.hd;
    std::vector<int32_t> ids(layout.num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int32_t poison_block = ids.back();
    block_tables.assign(static_cast<size_t>(num_seqs) * max_blocks, poison_block);
    size_t next = 0;
    for (int32_t s = 0; s < num_seqs; ++s)
      for (int32_t b = 0; b < blocks_needed[s]; ++b) block_tables[s * max_blocks + b] = ids[next++];
    std::fill(block_tables.end() - max_blocks, block_tables.end(), -1);

    const size_t row = static_cast<size_t>(c.kv_heads) * c.hd;
    for (int32_t s = 0; s < num_seqs; ++s) {
      k.push_back(RandomVector(rng, seq_len[s] * row));
      v.push_back(RandomVector(rng, seq_len[s] * row, -2.0f, 2.0f));
    }

    // Queries: all of seq 2 (prefill), the last and a middle token of seq 0
    // (decode; the middle one checks causality), seq 1's only token, and a
    // chunk of seq 3 — in shuffled order.
    for (int32_t pos = 0; pos < seq_len[2]; ++pos) AddToken(2, pos);
    AddToken(0, 39);
    AddToken(0, 17);
    AddToken(1, 0);
    for (int32_t pos = 3; pos < 7; ++pos) AddToken(3, pos);
    AddToken(4, -1);
    std::vector<size_t> order(token_seq.size());
    std::iota(order.begin(), order.end(), 0);
    if (shuffle) std::shuffle(order.begin(), order.end(), rng);
    std::vector<int32_t> ts, tp;
    for (size_t i : order) {
      ts.push_back(token_seq[i]);
      tp.push_back(token_pos[i]);
    }
    token_seq = ts;
    token_pos = tp;
    q = RandomVector(rng, token_seq.size() * num_heads * c.hd, -4.0f, 4.0f);
    ComputeReference();
  }

  void AddToken(int32_t seq, int32_t pos) {
    token_seq.push_back(seq);
    token_pos.push_back(pos);
  }

  int32_t num_tokens() const { return static_cast<int32_t>(token_seq.size()); }

  void ComputeReference() {
    const int32_t hd = cfg.hd;
    const size_t row = static_cast<size_t>(cfg.kv_heads) * hd;
    ref.assign(q.size(), 0.0);
    ref_scale.assign(q.size(), 0.0);
    for (int32_t t = 0; t < num_tokens(); ++t) {
      const int32_t s = token_seq[t], ctx = token_pos[t] + 1;
      if (ctx <= 0) continue;  // padding: the output stays 0
      for (int32_t h = 0; h < num_heads; ++h) {
        const int32_t kvh = h / cfg.group;
        const float* qh = &q[(static_cast<size_t>(t) * num_heads + h) * hd];
        std::vector<double> score(ctx);
        for (int32_t j = 0; j < ctx; ++j) {
          double dot = 0.0;
          for (int32_t i = 0; i < hd; ++i)
            dot += double{qh[i]} * StoredValue(k[s][j * row + kvh * hd + i], cfg.dtype);
          score[j] = dot * scale;
        }
        const double mx = *std::max_element(score.begin(), score.end());
        double z = 0.0;
        for (double& x : score) z += (x = std::exp(x - mx));
        double* out = &ref[(static_cast<size_t>(t) * num_heads + h) * hd];
        double* mag = &ref_scale[(static_cast<size_t>(t) * num_heads + h) * hd];
        for (int32_t j = 0; j < ctx; ++j) {
          const double pj = score[j] / z;
          for (int32_t i = 0; i < hd; ++i) {
            const double vj = StoredValue(v[s][j * row + kvh * hd + i], cfg.dtype);
            out[i] += pj * vj;
            mag[i] += pj * std::fabs(vj);
          }
        }
      }
    }
  }

  // Writes K/V through the backend's KvWrite, runs PagedAttention on query
  // tokens [first, first + count) (count < 0: all), returns their output.
  std::vector<float> Run(Backend* be, int32_t first = 0, int32_t count = -1) const {
    if (count < 0) count = num_tokens() - first;
    const size_t elements =
        static_cast<size_t>(layout.num_blocks) * layout.block_size * layout.num_kv_heads * cfg.hd;
    const std::vector<uint8_t> nan_pool = NanPool(cfg.dtype, elements);
    BackendBuffer d_kpool = Upload(be, nan_pool);
    BackendBuffer d_vpool = Upload(be, nan_pool);
    const KvLayerView cache{d_kpool.data(), d_vpool.data(), layout};

    // Every position of every sequence, in one KvWrite.
    std::vector<float> all_k, all_v;
    std::vector<int32_t> slots;
    for (size_t s = 0; s < seq_len.size(); ++s) {
      all_k.insert(all_k.end(), k[s].begin(), k[s].end());
      all_v.insert(all_v.end(), v[s].begin(), v[s].end());
      for (int32_t pos = 0; pos < seq_len[s]; ++pos)
        slots.push_back(block_tables[s * max_blocks + pos / layout.block_size] * layout.block_size +
                        pos % layout.block_size);
    }
    BackendBuffer d_k = Upload(be, all_k);
    BackendBuffer d_v = Upload(be, all_v);
    BackendBuffer d_slots = Upload(be, slots);
    KvWriteParams w;
    w.k = d_k.as<float>();
    w.v = d_v.as<float>();
    w.slot_mapping = d_slots.as<int32_t>();
    w.num_tokens = static_cast<int32_t>(slots.size());
    w.cache = cache;
    be->KvWrite(w);

    const size_t row = static_cast<size_t>(num_heads) * cfg.hd;
    BackendBuffer d_q =
        Upload(be, std::vector<float>(q.begin() + first * row, q.begin() + (first + count) * row));
    BackendBuffer d_seq = Upload(
        be, std::vector<int32_t>(token_seq.begin() + first, token_seq.begin() + first + count));
    BackendBuffer d_pos = Upload(
        be, std::vector<int32_t>(token_pos.begin() + first, token_pos.begin() + first + count));
    BackendBuffer d_tables = Upload(be, block_tables);
    BackendBuffer d_out = PoisonedOutput(be, count * row);
    PagedAttentionParams p;
    p.q = d_q.as<float>();
    p.out = d_out.as<float>();
    p.token_seq = d_seq.as<int32_t>();
    p.token_pos = d_pos.as<int32_t>();
    p.block_tables = d_tables.as<int32_t>();
    p.num_tokens = count;
    p.num_heads = num_heads;
    p.max_blocks_per_seq = max_blocks;
    p.scale = scale;
    p.cache = cache;
    be->PagedAttention(p);
    return ReadGuarded(be, d_out, count * row);
  }
};

TEST_P(CpuOpsTest, PagedAttention) {
  uint32_t seed = 100;
  for (const AttnConfig& c : AttnConfigs()) {
    SCOPED_TRACE(AttnName(c));
    const AttnProblem prob(c, seed++);
    const std::vector<float> out = prob.Run(be_);
    for (int32_t t = 0; t < prob.num_tokens(); ++t) {
      for (int32_t h = 0; h < prob.num_heads; ++h) {
        for (int32_t i = 0; i < c.hd; ++i) {
          const size_t idx = (static_cast<size_t>(t) * prob.num_heads + h) * c.hd + i;
          const double tol = 1e-5 * prob.ref_scale[idx] + 1e-7;
          ASSERT_TRUE(Near(out[idx], prob.ref[idx], tol))
              << "token " << t << " (seq " << prob.token_seq[t] << " pos " << prob.token_pos[t]
              << ") head " << h << " i " << i;
        }
      }
    }
  }
}

// Attention is split over (token, KV head) pairs, each computed whole by one
// thread, so the thread count must not change any bit either.
TEST(CpuOpsDeterminismTest, PagedAttentionIdenticalAcrossThreadCounts) {
  std::vector<std::unique_ptr<Backend>> backends;
  for (int threads : {1, 2, 3}) backends.push_back(CreateCpuBackend(threads));
  for (const AttnConfig& c :
       {AttnConfig{KvDtype::kF32, 2, 4, 64, 5}, AttnConfig{KvDtype::kF16, 2, 2, 128, 16}}) {
    SCOPED_TRACE(AttnName(c));
    const AttnProblem prob(c, 7);
    const std::vector<float> one = prob.Run(backends[0].get());
    for (size_t b = 1; b < backends.size(); ++b)
      EXPECT_TRUE(SameBits(one, prob.Run(backends[b].get()))) << b + 1 << " threads";
  }
}

// A query row's output must not depend on the other rows of its batch: the
// CPU kernels attend runs of one sequence's rows together (sharing the keys
// they read) with kernel variants chosen by the run's size, and a row decoded
// alone must still get the bits it gets inside a prefill batch.
TEST(CpuOpsDeterminismTest, PagedAttentionRowAloneEqualsBatch) {
  std::unique_ptr<Backend> be = CreateCpuBackend(2);
  for (const AttnConfig& c : AttnConfigs()) {
    SCOPED_TRACE(AttnName(c));
    const AttnProblem prob(c, 11, /*shuffle=*/false);
    const std::vector<float> all = prob.Run(be.get());
    const size_t row = static_cast<size_t>(prob.num_heads) * c.hd;
    for (int32_t t = 0; t < prob.num_tokens(); ++t) {
      const std::vector<float> alone = prob.Run(be.get(), t, 1);
      ASSERT_TRUE(
          SameBits(alone, std::vector<float>(all.begin() + t * row, all.begin() + (t + 1) * row)))
          << "token " << t << " (seq " << prob.token_seq[t] << " pos " << prob.token_pos[t] << ")";
    }
  }
}

}  // namespace
}  // namespace tq::kernels
