// Token selection from logits for one sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "engine/sampling/sampling_params.h"

namespace tq {

/// The chosen token and its log-probability under the final (processed)
/// distribution: for greedy, 0 (all the mass on the argmax; -inf for a row
/// of -inf). The logprobs the APIs report are the raw distribution's
/// (LlamaModelRunner), not this.
struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;
};

/// A row of logits summarized by its k largest entries (kernels LogitsTopK,
/// kernels/op_params.h): ids/values descending with ties by lower id, NaN
/// read as -inf; sum_exp = Σ exp(l − values[0]) and sum_exp_scaled =
/// Σ exp(float(l · inv_t) − float(values[0] · inv_t)) over the whole row of
/// `vocab` logits, inv_t = Sampler::inverse_temperature(). Views; the caller
/// owns the memory.
struct LogitCandidates {
  std::span<const int32_t> ids;
  std::span<const float> values;
  int32_t vocab = 0;
  double sum_exp = 0.0;
  double sum_exp_scaled = 0.0;
};

/// Orders candidates by a key derived monotonically from their values
/// (keys[i] non-increasing in i): perm[j] is the candidate at rank j, ties
/// of the key (new ones appear when distinct logits round to one key) by
/// lower id. Returns how many leading ranks are certain for the whole row of
/// `vocab` tokens: all when the candidates are the whole row, else those
/// whose key beats the last candidate's (an outside token may tie with it and
/// have a lower id).
size_t OrderCandidates(std::span<const float> keys, std::span<const int32_t> ids, size_t vocab,
                       std::vector<int32_t>* perm);

/// Ranks the draw walks in descending order before it continues in id order.
constexpr int32_t kSortedDrawRanks = 256;

/// Samples the tokens of one sequence. Owns the sequence's RNG (seeded from
/// params.seed, else from std::random_device), so results never depend on
/// other requests in the batch. Not thread-safe; one per sequence.
///
/// Order (as vLLM): repetition / presence / frequency penalties, temperature,
/// top-k, top-p, min-p, then a draw from the softmax. temperature < 1e-5 is greedy
/// (ties -> lowest id). The draw walks the kept tokens until the cumulative
/// weight passes u·z, u uniform in [0, 1) from the top 53 bits of one
/// mt19937_64 output: the first kSortedDrawRanks in descending order (ties by
/// lower id), then the rest in id order (so a draw in a long flat tail needs
/// no sort of it).
///
/// Both entry points run the same decision code on a candidate set
/// (docs/engine.md "Sampling from candidates"): Sample builds the candidates
/// from the full row itself, SampleCandidates gets them from a backend. For
/// the same params, seed and logits they give identical tokens, logprobs
/// and RNG streams.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  /// logits: [vocab], modified in place. prompt/output: the sequence's token
  /// ids so far (penalties). Returns the chosen token. Continues a draw that
  /// SampleCandidates left undecided (same uniform, no new RNG output).
  SampledToken Sample(std::span<float> logits, std::span<const int32_t> prompt,
                      std::span<const int32_t> output);

  /// Samples from candidates of the row (no penalties: only for sequences
  /// where !has_penalties()). Returns nullopt when the candidates cannot
  /// decide exactly (top_k or the top-p / min-p cut or the draw reaches past
  /// them); the caller must then call Sample with the full row, which reuses
  /// any uniform drawn here.
  std::optional<SampledToken> SampleCandidates(const LogitCandidates& c);

  /// float(1 / temperature), the factor LogitsTopK's sum_exp_scaled needs; 1
  /// for greedy.
  float inverse_temperature() const { return inv_t_; }
  bool greedy() const;
  int32_t top_k() const { return params_.top_k; }
  /// Whether any penalty changes the logits (repetition, presence, frequency).
  bool has_penalties() const;
  /// Candidates a full-row Sample starts with before it tries the whole row.
  int32_t FirstCandidates(int32_t vocab) const;

 private:
  // `row`: the whole row after penalties (unscaled), or empty when only the
  // candidates are known.
  std::optional<SampledToken> Decide(const LogitCandidates& c, std::span<const float> row);

  SamplingParams params_;
  float inv_t_ = 1.0f;
  std::mt19937_64 rng_;
  std::optional<double> pending_u_;  // drawn, not yet used for a token
  // Scratch reused between calls.
  std::vector<int32_t> ids_, perm_, tail_;
  std::vector<float> values_, scaled_, keys_;
};

}  // namespace tq
