// What one choice of a request produced: the values between the engine-facing
// RequestRunner and the OpenAI response formatting (openai_responses.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/request.h"

namespace tq::http {

/// Log-probabilities of one position of a choice's text (a generated token,
/// or with echo a prompt token).
struct LogprobEntry {
  int32_t token = -1;
  std::optional<float> logprob;   // nullopt: the first prompt token (OpenAI echo shows null)
  std::vector<TokenLogprob> top;  // the most likely tokens, descending
  // Unicode code points of the choice's text before this token's text
  // (Python string offsets, as vLLM's text_offset).
  int64_t text_offset = 0;
};

/// A choice's output since the previous delta.
struct ChoiceDelta {
  int32_t index = 0;                   // OpenAI choices[].index
  std::string text;                    // new text (valid UTF-8, no part of a stop string)
  std::vector<LogprobEntry> logprobs;  // positions consumed by this delta
  std::string finish_reason;           // "" while running; then "stop" or "length"
  nlohmann::json stop_reason;          // vLLM: the matched stop string, a stop token id, or null
  bool finished() const { return !finish_reason.empty(); }
};

/// A whole choice (the non-streamed response): deltas appended in order.
struct ChoiceResult {
  int32_t index = 0;
  std::string text;
  std::vector<LogprobEntry> logprobs;
  std::string finish_reason;
  nlohmann::json stop_reason;

  void Append(ChoiceDelta&& delta) {
    index = delta.index;
    text += delta.text;
    for (LogprobEntry& e : delta.logprobs) logprobs.push_back(std::move(e));
    if (delta.finished()) {
      finish_reason = std::move(delta.finish_reason);
      stop_reason = std::move(delta.stop_reason);
    }
  }
};

/// OpenAI usage: prompt tokens count each prompt once; completion tokens sum
/// over all choices.
struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  // prompt_tokens_details.cached_tokens: prompt tokens whose K/V came from
  // the prefix cache (per prompt: its first choice's count).
  int32_t cached_tokens = 0;
};

}  // namespace tq::http
