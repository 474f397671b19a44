// Per-request sampling parameters (OpenAI API semantics, vLLM extensions).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tq {

namespace structured {
class CompiledGrammar;
}

/// How one request picks tokens. Defaults match the OpenAI API (temperature 1,
/// top_p 1) and vLLM (top_k -1/0 = off, min_p 0, repetition_penalty 1).
struct SamplingParams {
  double temperature = 1.0;         // 0 = greedy
  double top_p = 1.0;               // (0, 1]
  int32_t top_k = 0;                // <= 0: disabled
  double min_p = 0.0;               // [0, 1]
  double repetition_penalty = 1.0;  // > 0; HF/CTRL rule on prompt + output tokens
  double presence_penalty = 0.0;    // [-2, 2]; OpenAI rule on output tokens
  double frequency_penalty = 0.0;   // [-2, 2]; OpenAI rule on output tokens
  std::optional<uint64_t> seed;     // per-request RNG; random when unset
  int32_t max_tokens = 16;          // >= 0 new tokens
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  /// Structured output (engine/structured): when set, every sampled token
  /// keeps the output a prefix of a sentence of this grammar (tokens it
  /// rejects get -inf before penalties, temperature and top-k/p), and EOS is
  /// allowed only where the sentence may end. Compiled by the front end
  /// (GrammarCache), shared read-only.
  std::shared_ptr<const structured::CompiledGrammar> grammar;

  /// "" when valid, else a message naming the field, e.g.
  /// "top_p must be in (0, 1], got 2".
  std::string Validate() const;
};

}  // namespace tq
