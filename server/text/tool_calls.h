// Tool calls in generated text: which format a model writes them in (chosen
// from its chat template) and the parsers that turn its output into OpenAI
// tool calls, whole or streamed (docs/api.md "Tool calling").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tq {

/// How a model family writes a tool call.
///  - kHermes: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`,
///    one block per call (Hermes, Qwen2.5, Qwen3); text before the first
///    block is the message content.
///  - kLlama3Json: the whole reply is `{"name": ..., "parameters": {...}}`
///    (Llama 3.1/3.2 "JSON based tool calling"; several calls separated by
///    ";"), optionally after `<|python_tag|>`.
///  - kMistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`
///    (Mistral v0.3); the marker is optional (a control token the detokenizer
///    may drop), a reply that starts with `[{` counts too.
enum class ToolCallFormat : uint8_t { kNone, kHermes, kLlama3Json, kMistral };

/// The format a chat template's own instructions ask for, from its source:
/// "<tool_call>" -> kHermes, "[TOOL_CALLS]" -> kMistral, "<|python_tag|>" or
/// "<|start_header_id|>" with "parameters" -> kLlama3Json; kNone when the
/// template never uses the `tools` variable or names none of these.
ToolCallFormat ToolCallFormatForTemplate(std::string_view template_source);

/// True when the template source uses the `tools` variable (the
/// transformers apply_chat_template convention).
bool TemplateUsesTools(std::string_view template_source);

/// "hermes", "llama3_json", "mistral" or "none" (logs and errors).
std::string_view ToolCallFormatName(ToolCallFormat format);

/// One parsed call: the function's name and its arguments as compact JSON
/// text (an object; key order as the model wrote it).
struct ParsedToolCall {
  std::string name;
  std::string arguments;
};

/// A reply split into message content and tool calls. With no calls,
/// content is the whole text. With calls, content is the text before the
/// first call, or nullopt when that is empty or only whitespace.
struct ParsedToolOutput {
  std::optional<std::string> content;
  std::vector<ParsedToolCall> calls;
};

/// Parses a complete reply in `format`. A reply whose call part does not
/// parse (bad JSON, no "name", arguments not an object) has no calls: its
/// whole text is content (as vLLM's parsers fall back). Never throws.
ParsedToolOutput ParseToolCalls(ToolCallFormat format, std::string_view text);

/// The same split, fed a reply in pieces as it streams. Text that cannot
/// start a call is released as content at once; from the first possible call
/// marker on, text is held and parsed when the reply ends, so the content
/// pieces joined plus Finish() always equal ParseToolCalls on the whole text.
/// One instance per choice; not thread-safe.
class ToolCallStreamParser {
 public:
  explicit ToolCallStreamParser(ToolCallFormat format) : format_(format) {}

  /// Content that can be sent now (possibly empty).
  std::string Feed(std::string_view delta);
  /// At the end of the reply: the remaining content and the calls.
  ParsedToolOutput Finish();

 private:
  ToolCallFormat format_;
  std::string text_;      // everything fed so far
  size_t released_ = 0;   // bytes of text_ already returned as content
  bool holding_ = false;  // a call may have started at text_[released_]
};

}  // namespace tq
