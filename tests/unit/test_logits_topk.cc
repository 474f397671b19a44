// LogitsTopK on the CPU backend (the reference other backends are checked
// against) vs a naive full sort and exp sums written here from the op's
// definition (kernels/op_params.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/backend.h"

namespace tq::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Expected {
  std::vector<int32_t> ids;
  std::vector<float> values;
  double sum_exp = 0.0, sum_exp_scaled = 0.0;
};

// Full stable sort by descending value (NaN = -inf), so equal values keep
// ascending ids; sums in id order in double.
Expected Naive(const float* row, int32_t vocab, int32_t k, float inv_t) {
  std::vector<double> v(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) v[i] = std::isnan(row[i]) ? -INFINITY : row[i];
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  Expected e;
  for (int32_t j = 0; j < k; ++j) {
    e.ids.push_back(order[j]);
    e.values.push_back(static_cast<float>(v[order[j]]));
  }
  const double m = v[order[0]];
  const double ms = static_cast<float>(static_cast<float>(m) * inv_t);
  for (int32_t i = 0; i < vocab; ++i) {
    e.sum_exp += std::exp(v[i] - m);
    e.sum_exp_scaled += std::exp(static_cast<double>(static_cast<float>(v[i]) * inv_t) - ms);
  }
  return e;
}

std::vector<float> RandomRows(std::mt19937_64& rng, int32_t rows, int32_t vocab) {
  std::vector<float> x(static_cast<size_t>(rows) * vocab);
  std::uniform_int_distribution<int> kind(0, 19), level(-30, 30);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& l : x) {
    const int k = kind(rng);
    if (k == 0) {
      l = -kInf;
    } else if (k == 1) {
      l = std::numeric_limits<float>::quiet_NaN();
    } else if (k == 2) {
      l = -0.0f;  // equal to +0.0: ties by id, not by sign
    } else if (k < 10) {
      l = 0.5f * static_cast<float>(level(rng));  // many ties
    } else {
      l = normal(rng);
    }
  }
  return x;
}

void CheckAgainstNaive(Backend& backend, const std::vector<float>& logits, int32_t rows,
                       int32_t vocab, int32_t k, const std::vector<float>& inv_t) {
  const size_t n = static_cast<size_t>(rows) * k;
  std::vector<int32_t> ids(n, -7);
  std::vector<float> values(n, 12345.0f);
  std::vector<double> sums(2 * static_cast<size_t>(rows), -1.0);
  LogitsTopKParams p;
  p.logits = logits.data();
  p.inv_temperature = inv_t.data();
  p.ids = ids.data();
  p.values = values.data();
  p.sum_exp = sums.data();
  p.sum_exp_scaled = sums.data() + rows;
  p.rows = rows;
  p.vocab = vocab;
  p.k = k;
  backend.LogitsTopK(p);
  for (int32_t r = 0; r < rows; ++r) {
    const Expected e = Naive(logits.data() + static_cast<size_t>(r) * vocab, vocab, k, inv_t[r]);
    for (int32_t j = 0; j < k; ++j) {
      ASSERT_EQ(ids[static_cast<size_t>(r) * k + j], e.ids[j])
          << "row " << r << " rank " << j << " vocab " << vocab << " k " << k;
      ASSERT_EQ(values[static_cast<size_t>(r) * k + j], e.values[j]) << "row " << r;
    }
    if (std::isfinite(e.values[0])) {
      EXPECT_DOUBLE_EQ(sums[r], e.sum_exp) << "row " << r;
      EXPECT_DOUBLE_EQ(sums[rows + r], e.sum_exp_scaled) << "row " << r;
    }
  }
}

TEST(LogitsTopK, CpuMatchesFullSortWithTiesInfAndNan) {
  auto backend = CreateCpuBackend(2);
  std::mt19937_64 rng(5);
  for (int32_t vocab : {1, 2, 7, 333, 4099}) {
    for (int32_t k : {1, 3, 64, 1024, vocab}) {
      if (k > vocab || k > kMaxLogitsTopK) continue;
      const int32_t rows = 3;
      const std::vector<float> logits = RandomRows(rng, rows, vocab);
      CheckAgainstNaive(*backend, logits, rows, vocab, k, {1.0f, 0.7f, 2.5f});
    }
  }
}

TEST(LogitsTopK, AllMinusInfAndPlusInfRows) {
  auto backend = CreateCpuBackend(1);
  const int32_t vocab = 9;
  std::vector<float> logits(2 * vocab, -kInf);
  logits[vocab + 4] = kInf;
  logits[vocab + 6] = kInf;
  logits[3] = std::numeric_limits<float>::quiet_NaN();
  CheckAgainstNaive(*backend, logits, 2, vocab, 4, {1.0f, 1.0f});
}

TEST(LogitsTopK, BadParamsAreClearErrors) {
  auto backend = CreateCpuBackend(1);
  std::vector<float> logits(10), inv_t(1, 1.0f), values(10);
  std::vector<int32_t> ids(10);
  std::vector<double> sums(2);
  LogitsTopKParams p;
  p.logits = logits.data();
  p.inv_temperature = inv_t.data();
  p.ids = ids.data();
  p.values = values.data();
  p.sum_exp = sums.data();
  p.sum_exp_scaled = sums.data() + 1;
  p.rows = 1;
  p.vocab = 10;
  p.k = 11;
  try {
    backend->LogitsTopK(p);
    FAIL() << "k > vocab accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "cpu LogitsTopK: k must be <= min(vocab, 1024), got 11 for vocab 10");
  }
  p.k = 2;
  p.values = nullptr;
  EXPECT_THROW(backend->LogitsTopK(p), std::invalid_argument);
}

}  // namespace
}  // namespace tq::kernels
