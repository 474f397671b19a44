// Token selection from logits for one sequence.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "engine/sampling/sampling_params.h"

namespace tq {

/// The chosen token and its log-probability under the final (processed)
/// distribution; for greedy, the log-softmax of the logits after penalties.
struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;
};

/// Samples the tokens of one sequence. Owns the sequence's RNG (seeded from
/// params.seed, else from std::random_device), so results never depend on
/// other requests in the batch. Not thread-safe; one per sequence.
///
/// Order (as vLLM): repetition / presence / frequency penalties, temperature,
/// top-k, top-p, min-p, then a draw from the softmax. temperature < 1e-5 is greedy
/// (ties -> lowest id).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  /// logits: [vocab], modified in place. prompt/output: the sequence's token
  /// ids so far (penalties). Returns the chosen token.
  SampledToken Sample(std::span<float> logits, std::span<const int32_t> prompt,
                      std::span<const int32_t> output);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace tq
