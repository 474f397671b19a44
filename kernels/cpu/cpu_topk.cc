// LogitsTopK on the host: nth_element + sort of the k winners, then the two
// exp sums in id order (see cpu_topk.h).
#include "kernels/cpu/cpu_topk.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/backend.h"
#include "kernels/op_checks.h"

namespace tq::kernels {
namespace cpu {
namespace {

// The Sampler's rule: NaN is -inf, so the orderings stay total.
float Key(float l) {
  return std::isnan(l) ? -std::numeric_limits<float>::infinity() : l;
}

}  // namespace

void LogitsTopKRow(const float* logits, int32_t vocab, int32_t k, float inv_temperature,
                   int32_t* ids, float* values, double* sum_exp, double* sum_exp_scaled,
                   std::vector<int32_t>* scratch) {
  auto desc = [logits](int32_t a, int32_t b) {
    const float la = Key(logits[a]), lb = Key(logits[b]);
    return la > lb || (la == lb && a < b);
  };
  if (k == 1) {  // greedy: one pass, no permutation
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i) {
      if (Key(logits[i]) > Key(logits[best])) best = i;
    }
    ids[0] = best;
  } else {
    std::vector<int32_t> local;
    std::vector<int32_t>& perm = scratch ? *scratch : local;
    perm.resize(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) perm[i] = i;
    if (k < vocab) std::nth_element(perm.begin(), perm.begin() + (k - 1), perm.end(), desc);
    std::sort(perm.begin(), perm.begin() + k, desc);
    std::copy(perm.begin(), perm.begin() + k, ids);
  }
  for (int32_t i = 0; i < k; ++i) values[i] = Key(logits[ids[i]]);

  if (sum_exp) {
    const double m = values[0];
    double z = 0.0;
    for (int32_t i = 0; i < vocab; ++i) z += std::exp(static_cast<double>(Key(logits[i])) - m);
    *sum_exp = z;
  }
  if (sum_exp_scaled) {
    const double m =
        static_cast<double>(values[0] * inv_temperature);  // float product, as the Sampler
    double z = 0.0;
    for (int32_t i = 0; i < vocab; ++i) {
      z += std::exp(static_cast<double>(Key(logits[i]) * inv_temperature) - m);
    }
    *sum_exp_scaled = z;
  }
}

void LogitsTopK(const LogitsTopKParams& p, ThreadPool& pool) {
  pool.ParallelFor(p.rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> scratch;
    for (int64_t r = begin; r < end; ++r) {
      LogitsTopKRow(p.logits + r * p.vocab, p.vocab, p.k, p.inv_temperature[r], p.ids + r * p.k,
                    p.values + r * p.k, p.sum_exp + r, p.sum_exp_scaled + r, &scratch);
    }
  });
}

}  // namespace cpu

void Backend::LogitsTopK(const LogitsTopKParams& p) {
  CheckLogitsTopK(Name(), p);
  if (p.rows == 0) return;
  const size_t rows = static_cast<size_t>(p.rows), k = static_cast<size_t>(p.k);
  std::vector<float> logits(rows * static_cast<size_t>(p.vocab)), inv_t(rows), values(rows * k);
  std::vector<int32_t> ids(rows * k);
  std::vector<double> sum_exp(rows), sum_exp_scaled(rows);
  CopyToHost(logits.data(), p.logits, logits.size() * sizeof(float));
  CopyToHost(inv_t.data(), p.inv_temperature, rows * sizeof(float));
  std::vector<int32_t> scratch;
  for (size_t r = 0; r < rows; ++r) {
    cpu::LogitsTopKRow(logits.data() + r * p.vocab, p.vocab, p.k, inv_t[r], ids.data() + r * k,
                       values.data() + r * k, &sum_exp[r], &sum_exp_scaled[r], &scratch);
  }
  CopyToDevice(p.ids, ids.data(), ids.size() * sizeof(int32_t));
  CopyToDevice(p.values, values.data(), values.size() * sizeof(float));
  CopyToDevice(p.sum_exp, sum_exp.data(), rows * sizeof(double));
  CopyToDevice(p.sum_exp_scaled, sum_exp_scaled.data(), rows * sizeof(double));
}

}  // namespace tq::kernels
