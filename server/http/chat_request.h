// POST /v1/chat/completions: the request body, parsed and validated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "server/http/generation_params.h"
#include "server/http/tool_request.h"
#include "server/text/chat_template.h"

namespace tq::http {

/// A validated chat request (OpenAI "Create chat completion" plus vLLM's
/// extensions; docs/api.md lists every field and what we do with it).
struct ChatRequest {
  GenerationParams params;  // max_tokens default: up to max_model_len (OpenAI, vLLM)
  std::vector<ChatMessage> messages;
  bool logprobs = false;
  int32_t top_logprobs = 0;           // 0..20, only with logprobs
  bool add_generation_prompt = true;  // vLLM extension
  ToolSettings tools;                 // tools, tool_choice, parallel_tool_calls
};

/// Parses `body`. Throws ApiException (400 with param).
ChatRequest ParseChatRequest(const nlohmann::json& body, const guard::ModelLimits& ctx);

/// The `messages` member of `body` (also /tokenize's): a non-empty list of
/// {"role": "system"|"developer"|"user"|"assistant"|"tool", "content": string
/// | [{"type": "text", "text": ...}, ...]}; text parts are joined with "\n"
/// (ChatMessage). An assistant's content may be null and it may carry
/// "tool_calls": [{"id", "type": "function", "function": {"name",
/// "arguments": JSON text of an object}}]; a tool message needs
/// "tool_call_id". Other fields of a message are ignored.
std::vector<ChatMessage> ParseChatMessages(const nlohmann::json& body);

}  // namespace tq::http
