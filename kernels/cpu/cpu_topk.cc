// LogitsTopK on the host: nth_element + sort of the k winners, then the two
// exp sums in id order (see cpu_topk.h).
#include "kernels/cpu/cpu_topk.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

// This level's part of the file (isa_begin.h): everything above is baseline code.
#include "kernels/cpu/isa_begin.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {
namespace {

// The Sampler's rule: NaN is -inf, so the orderings stay total.
float Key(float l) {
  return std::isnan(l) ? -std::numeric_limits<float>::infinity() : l;
}

}  // namespace

void LogitsTopKRow(const float* logits, int32_t vocab, int32_t k, float inv_temperature,
                   int32_t* ids, float* values, double* sum_exp, double* sum_exp_scaled,
                   std::vector<float>* scratch) {
  if (k == 1) {  // greedy: one pass
    int32_t best = 0;
    float best_key = Key(logits[0]);
    for (int32_t i = 1; i < vocab; ++i) {
      const float key = Key(logits[i]);
      if (key > best_key) {
        best_key = key;
        best = i;
      }
    }
    ids[0] = best;
  } else {
    // The k-th largest key T by nth_element on the keys alone (cheaper than
    // on ids with an indirect comparator), then the ids in two passes: all
    // keys > T, and the lowest-id keys == T that complete k.
    std::vector<float> local;
    std::vector<float>& keys = scratch ? *scratch : local;
    keys.resize(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) keys[i] = Key(logits[i]);
    float t = -std::numeric_limits<float>::infinity();
    if (k < vocab) {
      std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<float>());
      t = keys[k - 1];
    }
    int32_t above = 0;
    for (int32_t i = 0; i < vocab; ++i) above += Key(logits[i]) > t;
    int32_t ties = k - above, n = 0;
    for (int32_t i = 0; i < vocab && n < k; ++i) {
      const float key = Key(logits[i]);
      if (key > t || (key == t && ties-- > 0)) ids[n++] = i;
    }
    std::sort(ids, ids + k, [logits](int32_t a, int32_t b) {
      const float la = Key(logits[a]), lb = Key(logits[b]);
      return la > lb || (la == lb && a < b);
    });
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
    std::vector<float> scratch;
    for (int64_t r = begin; r < end; ++r) {
      LogitsTopKRow(p.logits + r * p.vocab, p.vocab, p.k, p.inv_temperature[r], p.ids + r * p.k,
                    p.values + r * p.k, p.sum_exp + r, p.sum_exp_scaled + r, &scratch);
    }
  });
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
