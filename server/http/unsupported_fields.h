// OpenAI / vLLM request fields that tqserve does not implement and that would
// change the output: refused with a 400 naming the field, never silently
// ignored (docs/api.md "Field status").
#pragma once

#include <nlohmann/json.hpp>

namespace tq::http {

/// Throws ApiException (400, param = the field) when `body` (a JSON object)
/// sets a field whose effect tqserve does not implement: functions, function_call
/// other than "none"/"auto",
/// best_of != n, modalities other than ["text"], audio, prediction,
/// web_search_options, stream_options.continuous_usage_stats,
/// guided_whitespace_pattern, and vLLM
/// sampling extensions (min_tokens, bad_words, allowed_token_ids, beam
/// search, logits_processors, ...). Absent and null mean "not set". Fields
/// that change nothing the client gets (user, store, metadata,
/// service_tier, reasoning_effort on a model without reasoning,
/// parallel_tool_calls without tools) pass. `n` is the request's n.
void RejectUnimplementedFields(const nlohmann::json& body, int64_t n);

/// /v1/completions: tools (non-empty) and tool_choice other than
/// "none"/"auto" are chat-only (tool_request.h) and refused with a 400.
void RejectChatOnlyFields(const nlohmann::json& body);

}  // namespace tq::http
