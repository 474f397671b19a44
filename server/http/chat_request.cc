// POST /v1/chat/completions request parsing (see chat_request.h).
#include "server/http/chat_request.h"

#include "server/http/json_fields.h"
#include "server/http/openai_errors.h"

namespace tq::http {
namespace {

using nlohmann::json;

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

// An assistant's tool_calls, arguments parsed into objects (key order kept)
// for the chat template.
nlohmann::ordered_json ParseToolCallsField(const json& message, const std::string& param) {
  const json* calls = FindField(message, "tool_calls");
  if (calls == nullptr) return nullptr;
  if (!calls->is_array())
    Fail("'" + param + "' must be a list, got " + JsonTypeName(*calls), param);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t j = 0; j < calls->size(); ++j) {
    const json& call = (*calls)[j];
    const std::string cparam = param + "[" + std::to_string(j) + "]";
    if (!call.is_object()) {
      Fail("'" + cparam + "' must be an object, got " + JsonTypeName(call), cparam);
    }
    const auto id = GetString(call, "id", cparam + ".id");
    const auto type = GetString(call, "type", cparam + ".type");
    if (type && *type != "function") {
      Fail("'" + cparam + ".type' must be \"function\", got \"" + *type + "\"", cparam + ".type");
    }
    const json* fn = FindField(call, "function");
    if (fn == nullptr || !fn->is_object()) {
      Fail("'" + cparam + ".function' must be an object", cparam + ".function");
    }
    const auto name = GetString(*fn, "name", cparam + ".function.name");
    if (!name) Fail("'" + cparam + ".function.name' is required", cparam + ".function.name");
    const std::string aparam = cparam + ".function.arguments";
    const json* args = FindField(*fn, "arguments");
    nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
    if (args != nullptr && args->is_string()) {
      arguments = ParseEmbeddedJson<nlohmann::ordered_json>(args->get<std::string>(), aparam,
                                                            kMaxJsonTextBytes);
      if (!arguments.is_object()) Fail("'" + aparam + "' must be JSON text of an object", aparam);
    } else if (args != nullptr && args->is_object()) {
      arguments = nlohmann::ordered_json(*args);
    } else if (args != nullptr) {
      Fail("'" + aparam + "' must be JSON text of an object, got " + JsonTypeName(*args), aparam);
    }
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    if (id) entry["id"] = *id;
    entry["type"] = "function";
    entry["function"] = {{"name", *name}, {"arguments", std::move(arguments)}};
    out.push_back(std::move(entry));
  }
  return out;
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
    if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" &&
        *role != "tool") {
      Fail("'" + param +
               ".role' must be \"system\", \"developer\", \"user\", \"assistant\" or \"tool\", "
               "got \"" +
               *role + "\"",
           param + ".role");
    }
    // OpenAI's newer clients send "developer" for what chat templates know as
    // "system" (OpenAI: developer messages replace system messages).
    ChatMessage m;
    m.role = *role == "developer" ? "system" : *role;
    m.content = ParseContent(message, *role, param + ".content");
    m.content_null = *role == "assistant" && FindField(message, "content") == nullptr;
    if (*role == "assistant") m.tool_calls = ParseToolCallsField(message, param + ".tool_calls");
    if (*role == "tool") {
      const auto id = GetString(message, "tool_call_id", param + ".tool_call_id");
      if (!id)
        Fail("'" + param + ".tool_call_id' is required for role 'tool'", param + ".tool_call_id");
      m.tool_call_id = *id;
    }
    out.push_back(std::move(m));
  }
  return out;
}

ChatRequest ParseChatRequest(const json& body, const guard::ModelLimits& ctx) {
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
  r.tools = ParseToolSettings(body);
  if (r.tools.constrained() && r.params.constraint) {
    throw ApiException(BadRequest(
        "'tool_choice' \"" +
            std::string(r.tools.choice == ToolSettings::Choice::kNamed ? "function" : "required") +
            "\" cannot be combined with '" + r.params.constraint->param + "'",
        "tool_choice"));
  }
  return r;
}

}  // namespace tq::http
