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

/// One streamed piece of a tool call (OpenAI's delta.tool_calls[i]). The
/// first piece of call `index` carries its `name` and empty `arguments`;
/// later pieces have an empty name and a fragment of the arguments' JSON
/// text, which joined in order are the arguments object.
struct ToolCallPiece {
  int32_t index = 0;
  std::string name;
  std::string arguments;
};

/// Finds where a JSON object or array closes, fed text in order: counts
/// brackets outside strings (escapes honoured). State carries over between
/// calls of Run() on a growing text. Does not validate the JSON.
struct JsonBracketScan {
  int64_t depth = 0;
  bool in_string = false;
  bool escape = false;
  int64_t deepest = 0;  // the largest depth reached

  /// Scans s[from, s.size()) and returns the position just after the byte
  /// that brings the depth back to zero, or npos when the text ends first.
  size_t Run(std::string_view s, size_t from);
};

/// The same split, fed a reply in pieces as it streams. Text that cannot
/// start a call is released as content at once (a possible prefix of the
/// call marker is held back). Calls stream incrementally in every format:
/// once a call's name is known its name piece is queued, then its arguments
/// text as the model writes it (never text after the arguments object). A
/// call part of an unexpected shape (keys in another order, arguments as a
/// JSON string) is left to Finish(), which queues its pieces whole. Without
/// streamed calls, the content pieces joined plus Finish() equal
/// ParseToolCalls on the whole text; once a call has streamed it is never
/// taken back (Finish() then adds no content). One instance per choice; not
/// thread-safe.
class ToolCallStreamParser {
 public:
  explicit ToolCallStreamParser(ToolCallFormat format) : format_(format) {}

  /// Content that can be sent now (possibly empty); call pieces found are
  /// queued for TakePieces().
  std::string Feed(std::string_view delta);
  /// At the end of the reply: the remaining content and all the calls
  /// (ParseToolCalls of the whole text); the pieces of calls not yet
  /// streamed are queued for TakePieces().
  ParsedToolOutput Finish();
  /// The call pieces queued since the last TakePieces(), in order.
  std::vector<ToolCallPiece> TakePieces();
  /// Calls whose name piece has been queued so far.
  int32_t calls_started() const { return calls_started_; }

 private:
  // Advances the incremental call scan over text_ as far as it can.
  void Scan();
  // kOutside / kBetween for the JSON formats (Llama 3, Mistral): finds the
  // next call object's `{`; false when more text is needed or the scan ends.
  bool NextJsonCall(const std::string_view s);

  //  kOutside: before the call part's first call (Hermes: between blocks).
  //  kHead: reading `{"name": "..."`; kArgsStart: `, "arguments": {`.
  //  kArgs: inside the arguments object (streamed); kAfterArgs: after it, to
  //  the end of the call. kBetween: JSON formats, after a call object.
  //  kOpaque: the rest is left to Finish(); kDone: the call list closed.
  enum class Block : uint8_t {
    kOutside,
    kHead,
    kArgsStart,
    kArgs,
    kAfterArgs,
    kBetween,
    kOpaque,
    kDone
  };

  ToolCallFormat format_;
  std::string text_;      // everything fed so far
  size_t released_ = 0;   // bytes of text_ already returned as content
  bool holding_ = false;  // a call may have started at text_[released_]
  std::vector<ToolCallPiece> pieces_;
  int32_t calls_started_ = 0;
  // Scan state: where the next call search starts, the current call's phase,
  // its body start, the next byte of its arguments to scan/emit, and the
  // bracket scanner of the arguments (kArgs) or of the rest of the call
  // object (kAfterArgs, JSON formats).
  size_t scan_ = 0;
  Block block_ = Block::kOutside;
  size_t body_ = 0;
  size_t args_pos_ = 0;
  JsonBracketScan brackets_;
  bool args_sent_ = false;  // some arguments text of the current call queued
};

}  // namespace tq
