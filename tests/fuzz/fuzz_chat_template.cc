// Fuzz target: a chat template and the messages it renders, both fuzzed.
// Parts (fuzz_common.h kPartSeparator): the Jinja source (as
// tokenizer_config.json's chat_template), then a chat request body whose
// "messages", "tools" and "add_generation_prompt" the route would pass
// (ParseChatMessages, ParseToolSettings, TemplateTools). ChatTemplate's
// constructor, Render and Tokenize run as the daemon runs them. A bad
// template must end in tq::Error, bad messages in ApiException or
// ChatTemplateError, nothing else.
#include <cstddef>
#include <cstdint>

#include "engine/common/error.h"
#include "server/http/chat_request.h"
#include "server/http/openai_errors.h"
#include "server/http/tool_request.h"
#include "tests/fuzz/fuzz_http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  using namespace tq::http;
  const std::vector<std::string_view> parts = fuzz::SplitParts(data, size, 2);
  ModelFiles files = fuzz::BundledFiles();
  files.tokenizer.chat_template = std::string(parts[0]);
  files.tokenizer.bos_token = "<s>";
  files.tokenizer.eos_token = "</s>";
  const std::string body_text = parts.size() > 1 ? std::string(parts[1]) : "{}";
  std::unique_ptr<ChatTemplate> chat;
  try {
    chat = std::make_unique<ChatTemplate>(files, fuzz::BundledTokenizer());
  } catch (const Error& e) {
    fuzz::Expected(e);
    return 0;
  } catch (const std::exception& e) {
    fuzz::Unexpected("ChatTemplate", e);
  }
  const nlohmann::json body = nlohmann::json::parse(body_text, nullptr, false);
  if (!body.is_object()) return 0;
  try {
    const std::vector<ChatMessage> messages = ParseChatMessages(body);
    const nlohmann::ordered_json tools = TemplateTools(body_text, ParseToolSettings(body), *chat);
    const bool add_generation_prompt =
        !body.contains("add_generation_prompt") || body["add_generation_prompt"] == true;
    const std::string prompt =
        chat->Render(messages, add_generation_prompt, tools.is_null() ? nullptr : &tools);
    (void)chat->Tokenize(prompt);
  } catch (const ApiException& e) {
    fuzz::Expected(e);
  } catch (const ChatTemplateError& e) {
    fuzz::Expected(e);
  } catch (const std::exception& e) {
    fuzz::Unexpected("chat template render", e);
  }
  return 0;
}
