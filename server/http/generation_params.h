// Request fields shared by /v1/completions and /v1/chat/completions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling/sampling_params.h"
#include "server/guard/request_limits.h"
#include "server/http/structured_request.h"

namespace tq::http {

/// Limits we choose where OpenAI and vLLM differ (docs/api.md).
inline constexpr int32_t kMaxN = 128;             // choices per prompt
inline constexpr int32_t kMaxSubRequests = 1024;  // prompts x n per request

/// The generation fields of a request, validated (see docs/api.md for each
/// field's source and meaning). `sampling.max_tokens` is left for
/// ResolveMaxTokens, which needs the prompt length.
struct GenerationParams {
  std::string model;  // as sent ("" when absent: the served model, as vLLM)
  SamplingParams sampling;
  std::optional<int32_t> max_tokens;  // max_completion_tokens, else max_tokens; unset = to the end
  int32_t n = 1;
  std::vector<std::string> stop;  // OpenAI `stop`; empty strings dropped
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t priority = 0;        // vLLM extension: lower runs first
  std::string user;            // accepted, logged only
  // Structured output (response_format, structured_outputs, guided_*); the
  // route compiles it into sampling.grammar.
  std::optional<RequestConstraint> constraint;
};

/// Reads and validates the shared fields of `body` (a JSON object). Unknown
/// fields are ignored. `default_max_tokens` is the endpoint's default when the
/// client sends neither max_tokens nor max_completion_tokens (16 for
/// completions as OpenAI; nullopt for chat: up to max_model_len). Unset
/// sampling fields take ctx.defaults (temperature, top_p, top_k,
/// repetition_penalty), then OpenAI's. Throws ApiException (400, with param).
GenerationParams ParseGenerationParams(const nlohmann::json& body, const guard::ModelLimits& ctx,
                                       std::optional<int32_t> default_max_tokens);

/// 404 model_not_found (OpenAI's and vLLM's status) unless body["model"] is absent, null or
/// `served_name` (a wrong type is a 400 naming "model").
void CheckModelName(const nlohmann::json& body, const std::string& served_name);

/// Throws ApiException 400 context_length_exceeded (reason
/// "prompt_too_long") for a prompt text that cannot fit max_model_len tokens
/// (guard::CheckPromptBytes), before it is tokenized. `param`: "prompt",
/// "messages".
void CheckPromptText(std::string_view text, const guard::ModelLimits& ctx,
                     const std::string& param);

/// Throws ApiException 400 (reason "logprobs_volume") when the choices'
/// max_tokens summed (`output_tokens`) x (1 + num_logprobs) is over
/// guard::kMaxLogprobEntries; num_logprobs -1 (none) passes.
void CheckLogprobVolume(int64_t output_tokens, int32_t num_logprobs);

/// Seed of choice `i` of n: seed + i (wrapping), so that the n choices of a
/// seeded request differ from each other and each is reproducible.
std::optional<uint64_t> ChoiceSeed(const std::optional<uint64_t>& seed, int32_t i);

/// The max_tokens of one prompt of `prompt_len` tokens (vLLM's rule): a
/// prompt longer than max_model_len is rejected; when the client set
/// max_tokens, prompt + max_tokens must fit too; when unset, generation may
/// run to max_model_len (and a prompt that fills it leaves no room: rejected).
/// `input_name` is "prompt" or "messages" (message wording and param).
/// Throws ApiException 400 code "context_length_exceeded".
int32_t ResolveMaxTokens(int32_t prompt_len, std::optional<int32_t> max_tokens,
                         int32_t max_model_len, const std::string& input_name);

}  // namespace tq::http
