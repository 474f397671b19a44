// OpenAI tool-calling request fields (tools, tool_choice,
// parallel_tool_calls) and the grammar that forces a call
// (docs/api.md "Tool calling").
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/text/chat_template.h"
#include "server/text/tool_calls.h"

namespace tq::http {

/// One entry of `tools`: {"type": "function", "function": {"name",
/// "description", "parameters", "strict"}}.
struct ToolFunction {
  std::string name;
  nlohmann::json parameters;  // a JSON Schema object; {"type": "object"} when absent
};

/// The validated tool fields of a chat request.
struct ToolSettings {
  enum class Choice : uint8_t { kNone, kAuto, kRequired, kNamed };
  std::vector<ToolFunction> functions;  // empty: no tools
  Choice choice = Choice::kAuto;        // OpenAI: "none" without tools, "auto" with
  std::string named;                    // the function of kNamed
  bool parallel = true;                 // parallel_tool_calls
  bool any() const { return !functions.empty(); }
  /// Output is parsed for calls (auto, required, named).
  bool parse_output() const { return any() && choice != Choice::kNone; }
  /// Decoding is constrained to calls (required, named).
  bool constrained() const {
    return any() && (choice == Choice::kRequired || choice == Choice::kNamed);
  }
};

/// Reads tools (a list of function tools; names [A-Za-z0-9_-]{1,64},
/// unique), tool_choice ("none" | "auto" | "required" | {"type": "function",
/// "function": {"name": one of the tools}}; "required" or a named function
/// need tools) and parallel_tool_calls (a boolean). Throws ApiException 400
/// naming the offending param ("tools[1].function.name", "tool_choice", ...).
ToolSettings ParseToolSettings(const nlohmann::json& body);

/// Grammar text (engine/structured/grammar.h form) whose sentences are tool
/// calls in `format` for the functions `tools` allows (only the named one
/// for kNamed), the arguments valid against each function's parameters
/// (engine/structured/json_schema.h subset): one call, or with
/// tools.parallel and kRequired one or more. Throws ApiException 400 naming
/// "tools[i].function.parameters" for a schema the grammar engine cannot
/// compile, or "tools" for a format without a call grammar.
std::string ToolCallGrammar(ToolCallFormat format, const ToolSettings& tools);

/// The `tools` list of request body text `body_text` as the chat template
/// gets it (key order as sent), or null when `tools` has none. Throws
/// ApiException 400 naming "tools" when there are tools and `chat` does not
/// use them (a model without tool calling, or without a chat template), or
/// when output must be parsed and tqserve knows no call format for it.
nlohmann::ordered_json TemplateTools(std::string_view body_text, const ToolSettings& tools,
                                     const ChatTemplate& chat);

/// Renames every rule of grammar text `text` to `prefix` + name (literals,
/// classes and comments untouched), so grammars can be combined.
std::string PrefixGrammarRules(std::string_view text, std::string_view prefix);

}  // namespace tq::http
