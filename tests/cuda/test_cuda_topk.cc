// LogitsTopK on the CUDA backend against the CPU backend (itself checked
// against a full sort in tests/unit/test_logits_topk.cc): fresh random rows
// with ties, -inf, NaN and -0.0, odd vocabularies up to Llama 3's 128,256,
// k from 1 to 1024, outputs poisoned first. Ids and values must be equal;
// the double sums differ only by summation order.
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace tq::cudatest {
namespace {

class CudaTopK : public CudaVsCpu {};

std::vector<float> Rows(int32_t rows, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> kind(0, 99), level(-20, 20);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> x(static_cast<size_t>(rows) * vocab);
  for (float& l : x) {
    const int c = kind(rng);
    l = c == 0   ? -INFINITY
        : c == 1 ? std::numeric_limits<float>::quiet_NaN()
        : c == 2 ? -0.0f
        : c < 30 ? 0.5f * static_cast<float>(level(rng))  // ties
                 : normal(rng);
  }
  return x;
}

TEST_F(CudaTopK, MatchesCpuBackend) {
  for (const auto& [rows, vocab, k] : {std::tuple{1, 1, 1},
                                       {3, 7, 7},
                                       {5, 1000, 1},
                                       {4, 1000, 1000},
                                       {3, 4099, 64},
                                       {2, 32000, 1024},
                                       {7, 32001, 257},
                                       {3, 128256, 64},
                                       {2, 128256, 1024}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " vocab " + std::to_string(vocab) + " k " +
                 std::to_string(k));
    const std::vector<float> logits = Rows(rows, vocab, 1000u + vocab + k);
    std::vector<float> inv_t(static_cast<size_t>(rows));
    for (int32_t r = 0; r < rows; ++r) inv_t[r] = 1.0f / (0.5f + 0.3f * r);
    const size_t n = static_cast<size_t>(rows) * k;
    // CPU reference on host memory.
    std::vector<int32_t> want_ids(n);
    std::vector<float> want_values(n);
    std::vector<double> want_sums(2 * static_cast<size_t>(rows));
    kernels::LogitsTopKParams p;
    p.logits = logits.data();
    p.inv_temperature = inv_t.data();
    p.ids = want_ids.data();
    p.values = want_values.data();
    p.sum_exp = want_sums.data();
    p.sum_exp_scaled = want_sums.data() + rows;
    p.rows = rows;
    p.vocab = vocab;
    p.k = k;
    cpu_->LogitsTopK(p);
    // CUDA, outputs poisoned.
    kernels::BackendBuffer d_logits = Upload(logits), d_inv_t = Upload(inv_t);
    kernels::BackendBuffer d_ids = Upload(std::vector<int32_t>(n, -1));
    kernels::BackendBuffer d_values = Poisoned(n);
    kernels::BackendBuffer d_sums =
        Upload(std::vector<double>(2 * static_cast<size_t>(rows), std::nan("")));
    p.logits = d_logits.as<float>();
    p.inv_temperature = d_inv_t.as<float>();
    p.ids = d_ids.as<int32_t>();
    p.values = d_values.as<float>();
    p.sum_exp = d_sums.as<double>();
    p.sum_exp_scaled = d_sums.as<double>() + rows;
    cuda_->LogitsTopK(p);
    const std::vector<int32_t> ids = Download<int32_t>(d_ids, n);
    const std::vector<float> values = Download<float>(d_values, n);
    const std::vector<double> sums = Download<double>(d_sums, want_sums.size());
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] != want_ids[i] || !(values[i] == want_values[i])) {
        if (bad++ < 5) {
          ADD_FAILURE() << "entry " << i << ": id " << ids[i] << " value " << values[i]
                        << ", want id " << want_ids[i] << " value " << want_values[i];
        }
      }
    }
    EXPECT_EQ(bad, 0u);
    for (size_t r = 0; r < want_sums.size(); ++r) {
      EXPECT_NEAR(sums[r], want_sums[r], 1e-12 * want_sums[r]) << "sum " << r;
    }
  }
}

TEST_F(CudaTopK, KAboveTheLimitIsAClearError) {
  kernels::LogitsTopKParams p;
  p.rows = 1;
  p.vocab = 5000;
  p.k = kernels::kMaxLogitsTopK + 1;
  EXPECT_THROW(cuda_->LogitsTopK(p), std::invalid_argument);
}

}  // namespace
}  // namespace tq::cudatest
