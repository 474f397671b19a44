// `--kv-cache-dtype auto`: the KV format chosen at start-up from measured
// quality. After the tq key calibration, a held-out part of the calibration
// text is scored (perplexity) once with an uncompressed fp32 cache and once
// with each candidate format; the smallest format (bits per element at the
// model's head_dim) whose perplexity ratio to fp32 is within the quality
// budget wins. docs/kv-cache.md ("Choosing the format: auto") has the rule
// and its cost.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/model_executor.h"
#include "kernels/kv_layout.h"

namespace tq {

/// One format's measured quality on the held-out tokens.
struct KvQualityScore {
  kernels::KvDtype dtype = kernels::KvDtype::kF32;
  double bits_per_element = 0.0;  // KvBitsPerElement at the model's head_dim
  double perplexity = 0.0;
  double ratio = 0.0;  // perplexity / the fp32 cache's perplexity
};

/// What `auto` measured and chose (automatic == false: the dtype came from the flag).
struct KvDtypeChoice {
  bool automatic = false;
  double budget = 0.0;  // --kv-quality-budget
  kernels::KvDtype dtype = kernels::KvDtype::kF32;
  double reference_perplexity = 0.0;   // fp32 cache
  int64_t scored_tokens = 0;           // predictions per format
  double seconds = 0.0;                // wall time of all the scoring passes
  std::vector<KvQualityScore> scores;  // the candidates, fewest bits first

  /// One line for the start-up log, e.g. "auto: tq3 (ppl ratio vs fp32 on 170 held-out
  /// tokens: tq3 1.0021, tq4 1.0012, int8 1.0000; budget 1.01; 0.41 s)"; "" when not automatic.
  std::string Describe() const;
};

/// Tokens of a calibration text of n tokens held out for scoring: n / 3, at
/// most kMaxHeldOutTokens (the bound on auto's cost), 0 when n < 3.
inline constexpr int32_t kMaxHeldOutTokens = 256;
int32_t HeldOutTokenCount(int32_t n);

/// The formats auto may pick, fewest bits per element at head_dim first
/// (tq3, tq4, int8; `extra` formats are merged in by their bits: the loader
/// adds tqk3v2 when the backend implements it, i.e. on the CPU).
std::vector<kernels::KvDtype> AutoKvCandidates(int32_t head_dim,
                                               std::span<const kernels::KvDtype> extra = {});

/// The first score (fewest bits) whose ratio is <= budget; fp16 when none is.
kernels::KvDtype PickKvDtype(std::span<const KvQualityScore> scores, double budget);

/// Builds empty caches (one per rank: ModelExecutor::MakeCaches) of `dtype`
/// with `num_blocks` blocks of the model's layout (tq formats with the
/// calibrated statistics); the caller's.
using ScoringCacheFactory = std::function<RankCaches(kernels::KvDtype dtype, int32_t num_blocks)>;

/// Scores `held_out` (one sequence, its first token unscored) with fp32 and
/// with each candidate, in prefill chunks of `chunk` tokens, and picks with
/// PickKvDtype, on every rank of `executor`. The loading thread only (runs
/// the model). Throws tq::Error when held_out has fewer than 2 tokens, or
/// when a perplexity is not finite.
KvDtypeChoice ChooseKvDtype(ModelExecutor& executor, std::span<const int32_t> held_out,
                            std::span<const kernels::KvDtype> candidates, double budget,
                            int32_t block_size, int32_t chunk,
                            const ScoringCacheFactory& make_cache);

}  // namespace tq
