// Tool calls in chat responses: the parsed calls (server/text/tool_calls.h)
// as OpenAI's message.tool_calls and streamed tool-call deltas.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/text/tool_calls.h"

namespace tq::http {

/// "call_" + 24 random alphanumerics (unique per call, as OpenAI's ids).
std::string NewToolCallId();

/// message.tool_calls: [{"id", "type": "function", "function": {"name",
/// "arguments": JSON text}}], each with a new id.
nlohmann::json ToolCallsJson(const std::vector<ParsedToolCall>& calls);

/// Rewrites the choices of a non-streamed chat body (ChatResponseJson):
/// where message.content parses as calls in `format`, message.tool_calls is
/// set, content becomes the text before the calls (null when none) and
/// finish_reason "tool_calls".
void ApplyToolCalls(ToolCallFormat format, nlohmann::json& body);

/// The chunk `delta` of one streamed call piece: a name piece is
/// {"tool_calls": [{"index", "id" (new), "type": "function", "function":
/// {"name", "arguments": ""}}]}, an arguments piece {"tool_calls":
/// [{"index", "function": {"arguments": fragment}}]}.
nlohmann::json ToolCallPieceDelta(const ToolCallPiece& piece);

}  // namespace tq::http
