// The CPU reference of LogitsTopK (kernels/op_params.h), also used by the
// Sampler on host rows.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "kernels/op_params.h"

namespace tq::kernels::cpu {

/// One row of LogitsTopK with any k in [1, vocab] (the backend op caps k at
/// kMaxLogitsTopK, this does not). `sum_exp` / `sum_exp_scaled` may be null
/// to skip that sum (one exp per logit each); both are accumulated in id
/// order, exactly as the Sampler sums. `scratch` is reused between calls
/// (a copy of the keys for nth_element); null allocates. Cost: O(vocab)
/// plus O(k log k).
void LogitsTopKRow(const float* logits, int32_t vocab, int32_t k, float inv_temperature,
                   int32_t* ids, float* values, double* sum_exp, double* sum_exp_scaled,
                   std::vector<float>* scratch);

/// The backend op, rows split over the pool.
void LogitsTopK(const LogitsTopKParams& p, ThreadPool& pool);

}  // namespace tq::kernels::cpu
