// Request limits shared by the HTTP and gRPC front ends (issue 20 items 3
// and 5): pure checks on a request's size that say why a request is refused
// (a Refusal) instead of throwing, so that each protocol reports it its own
// way (HTTP 400 OpenAI error JSON, gRPC INVALID_ARGUMENT) and both count it
// in tqserve_requests_refused_total{reason}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"

namespace tq {
class Engine;
class Tokenizer;
}  // namespace tq

namespace tq::guard {

/// Why a request was refused: `reason` is the metrics label (a fixed,
/// small set: see docs/api.md "Limits"), `param` the request field at fault
/// (OpenAI's `param`; gRPC's field path is the caller's), `message` the text.
struct Refusal {
  std::string reason;
  std::string param;
  std::string message;
};

/// What request validation (HTTP and gRPC) needs to know about the served
/// model. Plain values so that parsing is testable without a loaded engine.
struct ModelLimits {
  std::string served_model_name;  // a request's model must be this (gRPC: or "")
  int32_t max_model_len = 0;      // tokens (prompt + output)
  int32_t vocab_size = 0;         // token ids must be in [0, vocab_size)
  GenerationDefaults defaults;    // generation_config.json (vLLM's --generation-config auto)
  int64_t max_prompt_bytes = 0;   // MaxPromptBytes (0 = no byte bound)
  int32_t max_logprobs = 20;      // --max-logprobs (vLLM's name and default)
};

/// The limits of `engine`'s model served as `served_model_name`. Scans the
/// vocabulary once (MaxPromptBytes): call when the engine is set.
ModelLimits ServedModelLimits(const Engine& engine, const std::string& served_model_name);

/// Limits we choose (docs/api.md "Limits").
inline constexpr size_t kMaxStopStrings = 64;        // OpenAI: 4; vLLM: unlimited
inline constexpr size_t kMaxStopStringBytes = 1024;  // each stop string
/// Logprob entries one request may produce: sum over its choices of
/// max_tokens x (1 + top logprobs). 8 prompts x n 128 x 16 tokens x (1 + 20)
/// logprobs (a 100-byte request, a 17 MB response) is 344K: refused.
inline constexpr int64_t kMaxLogprobEntries = int64_t{1} << 18;
/// Requests whose body is at least this big release freed heap afterwards.
inline constexpr size_t kTrimAfterBytes = size_t{1} << 20;

/// The byte length above which a prompt cannot fit `max_model_len` tokens:
/// max_model_len x the most prompt bytes one token can stand for (the
/// longest vocabulary piece in bytes, at least 4: one unknown or
/// byte-fallback UTF-8 character). Prompt bytes are counted by
/// CountPromptBytes. 0 (no byte bound, only the token count after
/// tokenizing) when the tokenizer fails the probes that make the bound exact:
/// decoding the encoding of probe texts gives them back (no normalization
/// beyond collapsing runs of spaces) and no probe needs fewer tokens than the
/// bound assumes. Scans the vocabulary once: call at start-up.
int64_t MaxPromptBytes(const Tokenizer& tokenizer, int32_t max_model_len);

/// The bytes of `text` as MaxPromptBytes counts them: every run of ASCII
/// spaces counts as one byte (SentencePiece's remove_extra_whitespaces
/// collapses such runs before tokenizing). O(size).
size_t CountPromptBytes(std::string_view text);

/// Refuses (reason "prompt_too_long") a prompt of `text` that cannot fit:
/// CountPromptBytes(text) > max_prompt_bytes (0 = no bound). `param` is the
/// field ("prompt", "messages", "text").
std::optional<Refusal> CheckPromptBytes(std::string_view text, int64_t max_prompt_bytes,
                                        int32_t max_model_len, const std::string& param);

/// Refuses (reason "stop_strings") more than kMaxStopStrings stop strings
/// (`count`), before they are read.
std::optional<Refusal> CheckStopCount(size_t count, const std::string& param);

/// Refuses (reason "stop_strings") more than kMaxStopStrings stop strings or
/// one longer than kMaxStopStringBytes. `param` is the field ("stop").
std::optional<Refusal> CheckStopStrings(const std::vector<std::string>& stops,
                                        const std::string& param);

/// Refuses (reason "logprobs_volume") a request whose choices together may
/// return more than kMaxLogprobEntries logprob entries: `output_tokens` is
/// the sum of the choices' max_tokens, `num_logprobs` the top logprobs per
/// token (-1: none asked for, never refused).
std::optional<Refusal> CheckLogprobVolume(int64_t output_tokens, int32_t num_logprobs);

/// Returns freed heap to the system (glibc malloc_trim) after a request of
/// `request_bytes` (body plus prompt) of at least kTrimAfterBytes: a big
/// prompt's JSON, strings and token ids are freed into glibc's arenas, which
/// keep them (RSS stays up) until trimmed. Thread-safe; costs a few ms, so
/// only big requests pay it.
void ReleaseFreedMemory(size_t request_bytes);

}  // namespace tq::guard
