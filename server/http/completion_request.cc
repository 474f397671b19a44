// POST /v1/completions request parsing (see completion_request.h).
#include "server/http/completion_request.h"

#include "server/http/json_fields.h"
#include "server/http/openai_errors.h"
#include "server/http/unsupported_fields.h"

namespace tq::http {
namespace {

using nlohmann::json;

[[noreturn]] void PromptError(const std::string& message) {
  throw ApiException(BadRequest(message, "prompt"));
}

std::vector<int32_t> IdList(const json& list, int32_t vocab_size, const std::string& param) {
  if (list.empty()) PromptError("'" + param + "' must not be an empty list of token ids");
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    ids.push_back(ToInt32(list[i], 0, vocab_size - 1, param + "[" + std::to_string(i) + "]"));
  }
  return ids;
}

// OpenAI's four prompt forms; a list is classified by its first element.
std::vector<PromptInput> ParsePrompts(const json& body, const guard::ModelLimits& ctx) {
  const int32_t vocab_size = ctx.vocab_size;
  const json* prompt = FindField(body, "prompt");
  if (prompt == nullptr) PromptError("'prompt' is required");
  if (prompt->is_string()) {
    CheckPromptText(prompt->get_ref<const std::string&>(), ctx, "prompt");
    return {PromptInput{true, prompt->get<std::string>(), {}}};
  }
  if (!prompt->is_array()) {
    PromptError(
        "'prompt' must be a string, a list of strings, a list of token ids or a list of "
        "lists of token ids, got " +
        JsonTypeName(*prompt));
  }
  if (prompt->empty()) PromptError("'prompt' must not be an empty list");
  const json& first = prompt->front();
  if (first.is_number()) return {PromptInput{false, "", IdList(*prompt, vocab_size, "prompt")}};
  std::vector<PromptInput> out;
  for (size_t i = 0; i < prompt->size(); ++i) {
    const json& item = (*prompt)[i];
    const std::string param = "prompt[" + std::to_string(i) + "]";
    if (first.is_string() && item.is_string()) {
      CheckPromptText(item.get_ref<const std::string&>(), ctx, param);
      out.push_back(PromptInput{true, item.get<std::string>(), {}});
    } else if (first.is_array() && item.is_array()) {
      out.push_back(PromptInput{false, "", IdList(item, vocab_size, param)});
    } else {
      PromptError("'" + param + "' must be " +
                  (first.is_array() ? "a list of token ids" : "a string") +
                  " like prompt[0], got " + JsonTypeName(item));
    }
  }
  return out;
}

}  // namespace

CompletionRequest ParseCompletionRequest(const json& body, const guard::ModelLimits& ctx) {
  CompletionRequest r;
  r.params = ParseGenerationParams(body, ctx, /*default_max_tokens=*/16);
  RejectChatOnlyFields(body);
  r.prompts = ParsePrompts(body, ctx);
  if (static_cast<int64_t>(r.prompts.size()) * r.params.n > kMaxSubRequests) {
    throw ApiException(
        BadRequest("a request may ask for at most " + std::to_string(kMaxSubRequests) +
                       " choices in all (prompts x n), got " + std::to_string(r.prompts.size()) +
                       " x " + std::to_string(r.params.n),
                   "n"));
  }
  r.logprobs = static_cast<int32_t>(GetInt(body, "logprobs", 0, ctx.max_logprobs).value_or(-1));
  r.echo = GetBool(body, "echo").value_or(false);
  return r;
}

std::vector<int32_t> PromptIds(const PromptInput& prompt, const Tokenizer& tokenizer) {
  if (!prompt.is_text) return prompt.ids;
  return tokenizer.Encode(prompt.text, /*add_special=*/true);
}

}  // namespace tq::http
