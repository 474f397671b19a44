// POST /v1/chat/completions request parsing (see chat_request.h).
#include "server/http/chat_request.h"

#include "server/http/json_fields.h"
#include "server/http/openai_errors.h"

namespace tq::http {
namespace {

using nlohmann::json;

[[noreturn]] void Fail(const std::string& message, const std::string& param) {
  throw ApiException(BadRequest(message, param));
}

std::string ParseContent(const json& message, const std::string& role, const std::string& param) {
  const json* content = FindField(message, "content");
  if (content == nullptr) {
    if (role == "assistant") return "";  // OpenAI: null when the turn only called tools
    Fail("'" + param + "' is required for role '" + role + "'", param);
  }
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) {
    Fail("'" + param + "' must be a string or a list of content parts, got " +
             JsonTypeName(*content),
         param);
  }
  std::string text;
  for (size_t j = 0; j < content->size(); ++j) {
    const json& part = (*content)[j];
    const std::string part_param = param + "[" + std::to_string(j) + "]";
    if (!part.is_object()) {
      Fail("'" + part_param + "' must be an object, got " + JsonTypeName(part), part_param);
    }
    const auto type = GetString(part, "type", part_param + ".type");
    if (type != "text") {
      Fail("'" + part_param + ".type' must be \"text\" (the only content part this model takes)" +
               (type ? ", got \"" + *type + "\"" : std::string(", got none")),
           part_param + ".type");
    }
    const auto part_text = GetString(part, "text", part_param + ".text");
    if (!part_text) Fail("'" + part_param + ".text' is required", part_param + ".text");
    if (j > 0) text += "\n";
    text += *part_text;
  }
  return text;
}

}  // namespace

std::vector<ChatMessage> ParseChatMessages(const json& body) {
  const json* messages = FindField(body, "messages");
  if (messages == nullptr) Fail("'messages' is required", "messages");
  if (!messages->is_array()) {
    Fail("'messages' must be a list, got " + JsonTypeName(*messages), "messages");
  }
  if (messages->empty()) Fail("'messages' must not be empty", "messages");
  std::vector<ChatMessage> out;
  out.reserve(messages->size());
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) {
      Fail("'" + param + "' must be an object, got " + JsonTypeName(message), param);
    }
    const auto role = GetString(message, "role", param + ".role");
    if (!role) Fail("'" + param + ".role' is required", param + ".role");
    if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant") {
      Fail("'" + param +
               ".role' must be \"system\", \"developer\", \"user\" or \"assistant\", got \"" +
               *role + "\"",
           param + ".role");
    }
    // OpenAI's newer clients send "developer" for what chat templates know as
    // "system" (OpenAI: developer messages replace system messages).
    const std::string template_role = *role == "developer" ? "system" : *role;
    out.push_back(ChatMessage{template_role, ParseContent(message, *role, param + ".content")});
  }
  return out;
}

ChatRequest ParseChatRequest(const json& body, const ModelContext& ctx) {
  ChatRequest r;
  r.params = ParseGenerationParams(body, ctx, /*default_max_tokens=*/std::nullopt);
  r.messages = ParseChatMessages(body);
  r.logprobs = GetBool(body, "logprobs").value_or(false);
  if (const auto top = GetInt(body, "top_logprobs", 0, ctx.max_logprobs)) {
    // OpenAI: "logprobs must be set to true if this parameter is used" (vLLM agrees).
    if (!r.logprobs) {
      throw ApiException(
          BadRequest("'top_logprobs' requires 'logprobs' to be true", "top_logprobs"));
    }
    r.top_logprobs = static_cast<int32_t>(*top);
  }
  r.add_generation_prompt = GetBool(body, "add_generation_prompt").value_or(true);
  return r;
}

}  // namespace tq::http
