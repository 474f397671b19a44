// Request limits (see request_limits.h).
#include "server/guard/request_limits.h"

#include <malloc.h>

#include <algorithm>

#include "engine/runtime/engine.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::guard {
namespace {

constexpr size_t kMinBytesPerToken = 4;  // one UTF-8 character (byte fallback or <unk>)

// Texts that would break the byte bound if the tokenizer normalized them
// away: tabs and newlines (kept), full-width and combining characters (NFKC
// would fold them), a no-break space, a run of rare 4-byte characters (one
// <unk> for the run would be fewer tokens than the bound assumes).
const char* const kProbes[] = {
    "a\t\tb\n\nc\r\nd",
    "\xef\xbd\x84\xef\xbd\x85 e\xcc\x81 \xc2\xa0z",
    "\xf4\x8f\xbf\xbd\xf4\x8f\xbf\xbd\xf4\x8f\xbf\xbd\xf4\x8f\xbf\xbd\xf4\x8f\xbf\xbd",
    "The quick brown fox; 12345 ...!",
};

}  // namespace

size_t CountPromptBytes(std::string_view text) {
  size_t bytes = 0;
  bool in_space_run = false;
  for (const char c : text) {
    const bool space = c == ' ';
    if (!space || !in_space_run) ++bytes;
    in_space_run = space;
  }
  return bytes;
}

ModelLimits ServedModelLimits(const Engine& engine, const std::string& served_model_name) {
  ModelLimits m;
  m.served_model_name = served_model_name;
  m.max_model_len = engine.info().max_model_len;
  m.vocab_size = engine.info().vocab_size;
  m.defaults = engine.files().generation;
  m.max_prompt_bytes = MaxPromptBytes(engine.tokenizer(), m.max_model_len);
  m.max_logprobs = engine.info().max_logprobs;
  return m;
}

int64_t MaxPromptBytes(const Tokenizer& tokenizer, int32_t max_model_len) {
  size_t bytes_per_token = kMinBytesPerToken;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    bytes_per_token = std::max(bytes_per_token, tokenizer.IdToPiece(id).size());
  }
  for (const char* probe : kProbes) {
    const std::vector<int32_t> ids = tokenizer.Encode(probe, /*add_special=*/false);
    if (tokenizer.Decode(ids) != probe) return 0;
    if (ids.size() * bytes_per_token < CountPromptBytes(probe)) return 0;
  }
  return static_cast<int64_t>(max_model_len) * static_cast<int64_t>(bytes_per_token);
}

std::optional<Refusal> CheckPromptBytes(std::string_view text, int64_t max_prompt_bytes,
                                        int32_t max_model_len, const std::string& param) {
  if (max_prompt_bytes <= 0 || static_cast<int64_t>(text.size()) <= max_prompt_bytes) {
    return std::nullopt;  // the full scan only for a prompt that might be too long
  }
  const size_t bytes = CountPromptBytes(text);
  if (static_cast<int64_t>(bytes) <= max_prompt_bytes) return std::nullopt;
  return Refusal{"prompt_too_long", param,
                 "This model's maximum context length is " + std::to_string(max_model_len) +
                     " tokens, and `" + param + "` holds " + std::to_string(text.size()) +
                     " bytes of text: more than " + std::to_string(max_prompt_bytes) +
                     " bytes cannot fit in that many tokens. Please reduce the length of `" +
                     param + "`."};
}

std::optional<Refusal> CheckStopCount(size_t count, const std::string& param) {
  if (count <= kMaxStopStrings) return std::nullopt;
  return Refusal{"stop_strings", param,
                 "'" + param + "' may have at most " + std::to_string(kMaxStopStrings) +
                     " entries, got " + std::to_string(count)};
}

std::optional<Refusal> CheckStopStrings(const std::vector<std::string>& stops,
                                        const std::string& param) {
  if (auto refusal = CheckStopCount(stops.size(), param)) return refusal;
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].size() > kMaxStopStringBytes) {
      return Refusal{"stop_strings", param,
                     "'" + param + "[" + std::to_string(i) + "]' may be at most " +
                         std::to_string(kMaxStopStringBytes) + " bytes long, got " +
                         std::to_string(stops[i].size())};
    }
  }
  return std::nullopt;
}

std::optional<Refusal> CheckLogprobVolume(int64_t output_tokens, int32_t num_logprobs) {
  if (num_logprobs < 0) return std::nullopt;
  const int64_t entries = output_tokens * (1 + static_cast<int64_t>(num_logprobs));
  if (entries <= kMaxLogprobEntries) return std::nullopt;
  return Refusal{"logprobs_volume", "logprobs",
                 "the request may return " + std::to_string(entries) +
                     " logprob entries (choices x max_tokens x (1 + logprobs) = " +
                     std::to_string(output_tokens) + " x " + std::to_string(1 + num_logprobs) +
                     "), more than the limit of " + std::to_string(kMaxLogprobEntries) +
                     ": ask for fewer choices, tokens or logprobs"};
}

void ReleaseFreedMemory(size_t request_bytes) {
  if (request_bytes >= kTrimAfterBytes) malloc_trim(0);
}

}  // namespace tq::guard
