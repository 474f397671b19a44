// Chat messages -> prompt text (tokenizer_config.json chat_template).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/text/tool_calls.h"

namespace tq {

/// One OpenAI chat message after the front end flattened its content (a
/// string, or the text parts of an array joined with "\n"). The template sees
/// a dict {"role", "content", and where set "tool_calls", "tool_call_id"}.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
  bool content_null = false;  // an assistant turn that only called tools: content is None
  // An assistant's calls: [{"id", "type": "function", "function": {"name",
  // "arguments": an object}}] (arguments parsed from the request's JSON
  // text, as vLLM passes them to templates); null when none.
  nlohmann::ordered_json tool_calls = nullptr;
  std::string tool_call_id = {};  // role "tool": the call it answers
};

/// A template error that is the request's fault (the template called
/// raise_exception, e.g. "roles must alternate": what() is its message), or
/// any other error while rendering these messages ("chat template error:
/// line N: ..."): the front end answers 400 with what().
class ChatTemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Renders chat messages with the model's Jinja chat template (a subset of
/// Jinja2 sufficient for the Llama-2, Llama-3, ChatML and Mistral templates;
/// see server/text/jinja.h), or with the documented plain fallback when the
/// model has none (docs/chat.md). Thread-safe after construction (Render and
/// Tokenize are const); the Tokenizer must outlive it.
class ChatTemplate {
 public:
  /// Parses files.tokenizer.chat_template (throws tq::Error naming
  /// tokenizer_config.json and the line when it cannot be parsed or uses an
  /// unsupported construct) or selects the fallback. With a template, scans
  /// the vocabulary once for special-token pieces (O(vocab_size)).
  ChatTemplate(const ModelFiles& files, const Tokenizer& tokenizer);
  ~ChatTemplate();

  /// The prompt text for `messages`; add_generation_prompt appends the
  /// assistant turn's header; `tools` (OpenAI's list of function tools, key
  /// order as sent) is the template's `tools` variable when non-null, as
  /// transformers' apply_chat_template(tools=...) passes it. Throws
  /// ChatTemplateError (see above).
  std::string Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json* tools = nullptr) const;

  /// Token ids of a rendered prompt: special-token strings in the text (the
  /// template's own "<s>", "</s>", "<|begin_of_text|>"...) become their ids,
  /// the rest is encoded without adding BOS/EOS again. The fallback adds BOS
  /// as the tokenizer config says.
  std::vector<int32_t> Tokenize(const std::string& prompt) const;

  bool uses_fallback() const { return uses_fallback_; }
  /// The template uses the `tools` variable (tool calling is offered).
  bool uses_tools() const { return uses_tools_; }
  /// How this model writes tool calls (ToolCallFormatForTemplate).
  ToolCallFormat tool_call_format() const { return tool_call_format_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool uses_fallback_ = true;
  bool uses_tools_ = false;
  ToolCallFormat tool_call_format_ = ToolCallFormat::kNone;
};

}  // namespace tq
