// The 400s for unimplemented output-changing fields (see unsupported_fields.h).
#include "server/http/unsupported_fields.h"

#include <string>
#include <string_view>

#include "server/http/json_fields.h"
#include "server/http/openai_errors.h"

namespace tq::http {
namespace {

using nlohmann::json;

[[noreturn]] void Refuse(const std::string& param, const std::string& why) {
  throw ApiException(BadRequest("'" + param + "' is not supported: " + why, param));
}

bool IsEmptyContainer(const json& v) {
  return (v.is_array() || v.is_object()) && v.empty();
}

// A field that is refused whenever it is set (not absent or null); empty lists
// and objects count as unset where `empty_ok`.
struct AlwaysRefused {
  std::string_view name;
  bool empty_ok;
  std::string_view why;
};

constexpr AlwaysRefused kAlwaysRefused[] = {
    {"functions", true, "the deprecated functions API is not implemented: use 'tools'"},
    {"audio", false, "tqserve generates text only"},
    {"prediction", false, "predicted outputs are not implemented"},
    {"web_search_options", false, "tqserve has no web search"},
    {"bad_words", true, "not implemented"},
    {"allowed_token_ids", true, "not implemented"},
    {"logits_processors", true, "not implemented"},
    {"truncate_prompt_tokens", false, "not implemented"},
    {"guided_whitespace_pattern", false, "whitespace in JSON output is fixed (\", \" and \": \")"},
    {"chat_template", false, "only the model's own chat template is used"},
    {"chat_template_kwargs", true, "only the model's own chat template is used"},
    {"documents", true, "not implemented"},
};

// A field that is fine at its default value (what an absent field means).
// `param` names it in the error (default: `name`).
void RequireDefault(const json& body, std::string_view name, const json& default_value,
                    const std::string& why, const std::string& param = "") {
  const json* v = FindField(body, name);
  if (v != nullptr && *v != default_value) Refuse(param.empty() ? std::string(name) : param, why);
}

void CheckToolChoice(const json& body, std::string_view name) {
  const json* v = FindField(body, name);
  if (v == nullptr) return;
  // Without tools, "none" and "auto" both mean plain text.
  if (v->is_string() && (*v == "none" || *v == "auto")) return;
  Refuse(std::string(name),
         name == "tool_choice"
             ? "tool calling is for /v1/chat/completions (only \"none\" or \"auto\" here)"
             : "use 'tools' and 'tool_choice' (only \"none\" or \"auto\")");
}

void CheckModalities(const json& body) {
  const json* v = FindField(body, "modalities");
  if (v == nullptr) return;
  if (v->is_array()) {
    bool text_only = true;
    for (const json& m : *v) text_only = text_only && m == "text";
    if (text_only) return;
  }
  Refuse("modalities", "tqserve generates text only ([\"text\"])");
}

}  // namespace

void RejectUnimplementedFields(const json& body, int64_t n) {
  for (const AlwaysRefused& f : kAlwaysRefused) {
    const json* v = FindField(body, f.name);
    if (v == nullptr || (f.empty_ok && IsEmptyContainer(*v))) continue;
    Refuse(std::string(f.name), std::string(f.why));
  }
  CheckToolChoice(body, "function_call");
  CheckModalities(body);
  if (const auto best_of = GetInt(body, "best_of", 1); best_of && *best_of != n) {
    Refuse("best_of", "only best_of == n is implemented (got " + std::to_string(*best_of) +
                          ", n = " + std::to_string(n) + ")");
  }
  if (const json* options = FindField(body, "stream_options"); options && options->is_object()) {
    RequireDefault(*options, "continuous_usage_stats", false,
                   "usage in every chunk is not implemented",
                   "stream_options.continuous_usage_stats");
  }
  RequireDefault(body, "min_tokens", 0, "not implemented");
  RequireDefault(body, "use_beam_search", false, "beam search is not implemented");
  RequireDefault(body, "length_penalty", 1.0, "beam search is not implemented");
  RequireDefault(body, "include_stop_str_in_output", false, "not implemented");
  RequireDefault(body, "skip_special_tokens", true, "special tokens are always skipped");
  RequireDefault(body, "continue_final_message", false, "not implemented");
}

void RejectChatOnlyFields(const json& body) {
  const json* tools = FindField(body, "tools");
  if (tools != nullptr && !IsEmptyContainer(*tools)) {
    Refuse("tools", "tool calling is for /v1/chat/completions");
  }
  CheckToolChoice(body, "tool_choice");
}

}  // namespace tq::http
