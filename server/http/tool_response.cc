// Tool calls in chat responses (see tool_response.h).
#include "server/http/tool_response.h"

#include <random>

namespace tq::http {

using nlohmann::json;

std::string NewToolCallId() {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof kAlphabet - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

json ToolCallsJson(const std::vector<ParsedToolCall>& calls) {
  json out = json::array();
  for (const ParsedToolCall& c : calls) {
    out.push_back({{"id", NewToolCallId()},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

void ApplyToolCalls(ToolCallFormat format, json& body) {
  for (json& choice : body["choices"]) {
    json& message = choice["message"];
    if (!message["content"].is_string()) continue;
    ParsedToolOutput parsed = ParseToolCalls(format, message["content"].get<std::string>());
    if (parsed.calls.empty()) continue;
    message["content"] = parsed.content ? json(*parsed.content) : json(nullptr);
    message["tool_calls"] = ToolCallsJson(parsed.calls);
    choice["finish_reason"] = "tool_calls";
  }
}

nlohmann::json ToolCallPieceDelta(const ToolCallPiece& piece) {
  nlohmann::json call = {{"index", piece.index}};
  if (!piece.name.empty()) {
    call["id"] = NewToolCallId();
    call["type"] = "function";
    call["function"] = {{"name", piece.name}, {"arguments", ""}};
  } else {
    call["function"] = {{"arguments", piece.arguments}};
  }
  return {{"tool_calls", nlohmann::json::array({std::move(call)})}};
}

}  // namespace tq::http
