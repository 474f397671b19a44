// Chat messages -> prompt text and tokens (see chat_template.h and
// docs/chat.md). Rendering follows transformers' apply_chat_template:
// jinja2 with trim_blocks and lstrip_blocks, variables messages,
// add_generation_prompt, bos_token, eos_token and the raise_exception and
// strftime_now globals; the text is then tokenized with special-token
// strings split out.
#include "server/text/chat_template.h"

#include <algorithm>
#include <array>
#include <ctime>
#include <optional>

#include "engine/common/error.h"
#include "server/text/jinja.h"

namespace tq {

namespace {

// The plain format of models without a chat template (docs/chat.md).
constexpr std::string_view kFallbackSeparator = "\n\n";

// transformers' strftime_now(format): the local time formatted by strftime
// (Llama 3.2's template stamps "Today Date: 02 Dec 2026" with it).
jinja::Value StrftimeNow(const jinja::CallArgs& args) {
  if (args.positional.size() != 1 || !args.positional[0].is_string()) {
    throw ChatTemplateError("chat template error: strftime_now takes one format string");
  }
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, args.positional[0].Str().c_str(), &local);
  return std::string(buf, n);
}

// JSON -> a template value (objects keep their key order).
jinja::Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return jinja::Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return j.get<bool>();
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return j.get<int64_t>();
    case nlohmann::ordered_json::value_t::number_float:
      return j.get<double>();
    case nlohmann::ordered_json::value_t::string:
      return j.get<std::string>();
    case nlohmann::ordered_json::value_t::array: {
      std::vector<jinja::Value> items;
      for (const auto& e : j) items.push_back(FromJson(e));
      return jinja::Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<std::string, jinja::Value>> items;
      for (const auto& [k, v] : j.items()) items.emplace_back(k, FromJson(v));
      return jinja::Value::Dict(std::move(items));
    }
    default:
      return jinja::Value::None();
  }
}

jinja::Value MessageValue(const ChatMessage& m) {
  std::vector<std::pair<std::string, jinja::Value>> items = {
      {"role", m.role},
      {"content", m.content_null ? jinja::Value::None() : jinja::Value(m.content)}};
  if (!m.tool_calls.is_null()) items.emplace_back("tool_calls", FromJson(m.tool_calls));
  if (!m.tool_call_id.empty()) items.emplace_back("tool_call_id", m.tool_call_id);
  return jinja::Value::Dict(std::move(items));
}

}  // namespace

struct ChatTemplate::Impl {
  const Tokenizer* tokenizer = nullptr;
  std::optional<jinja::Template> tmpl;
  std::string bos_token;
  std::string eos_token;
  bool add_bos = true;
  // Special-token strings by first byte, longest first within each bucket,
  // so a scan tests only the candidates at positions that can match.
  std::array<std::vector<std::pair<std::string, int32_t>>, 256> specials;

  void AddSpecial(const std::string& piece, int32_t id) {
    auto& bucket = specials[static_cast<unsigned char>(piece[0])];
    for (const auto& [p, existing] : bucket) {
      if (p == piece) return;
    }
    bucket.emplace_back(piece, id);
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }

  // The special token starting at text[i], if any (longest match).
  const std::pair<std::string, int32_t>* SpecialAt(std::string_view text, size_t i) const {
    for (const auto& entry : specials[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, entry.first.size(), entry.first) == 0) return &entry;
    }
    return nullptr;
  }
};

ChatTemplate::ChatTemplate(const ModelFiles& files, const Tokenizer& tokenizer)
    : impl_(std::make_unique<Impl>()) {
  Impl& im = *impl_;
  im.tokenizer = &tokenizer;
  im.add_bos = files.tokenizer.add_bos_token;
  // Without the strings in tokenizer_config.json, the pieces of the ids.
  im.bos_token = !files.tokenizer.bos_token.empty() ? files.tokenizer.bos_token
                                                    : tokenizer.IdToPiece(tokenizer.bos_id());
  im.eos_token = !files.tokenizer.eos_token.empty() ? files.tokenizer.eos_token
                                                    : tokenizer.IdToPiece(tokenizer.eos_id());
  uses_fallback_ = files.tokenizer.chat_template.empty();
  if (uses_fallback_) return;
  uses_tools_ = TemplateUsesTools(files.tokenizer.chat_template);
  tool_call_format_ = ToolCallFormatForTemplate(files.tokenizer.chat_template);
  try {
    im.tmpl.emplace(files.tokenizer.chat_template);
  } catch (const Error& e) {
    throw Error(files.dir +
                "/tokenizer_config.json: chat_template (or chat_template.jinja): " + e.what());
  }
  // Control pieces (<s>, </s>, <|im_start|>...) decode to nothing; the
  // configured bos/eos strings count even when they are not control pieces.
  const int32_t n = tokenizer.vocab_size();
  for (int32_t id = 0; id < n; ++id) {
    const std::string piece = tokenizer.IdToPiece(id);
    if (piece.empty()) continue;
    const std::array<int32_t, 1> one = {id};
    if (piece == im.bos_token || piece == im.eos_token || tokenizer.Decode(one).empty()) {
      im.AddSpecial(piece, id);
    }
  }
}

ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt,
                                 const nlohmann::ordered_json* tools) const {
  if (uses_fallback_) {
    std::string out;
    for (size_t i = 0; i < messages.size(); ++i) {
      if (i > 0) out += kFallbackSeparator;
      out += messages[i].content;
    }
    return out;
  }
  std::vector<jinja::Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) list.push_back(MessageValue(m));
  jinja::Context context = {
      {"messages", jinja::Value::List(std::move(list))},
      {"add_generation_prompt", add_generation_prompt},
      {"bos_token", impl_->bos_token},
      {"eos_token", impl_->eos_token},
      {"raise_exception", jinja::Value::Func([](const jinja::CallArgs& args) -> jinja::Value {
         throw ChatTemplateError(args.positional.empty() ? "chat template raised an exception"
                                                         : args.positional[0].Str());
       })},
      {"strftime_now", jinja::Value::Func(StrftimeNow)},
  };
  if (tools != nullptr) context.emplace_back("tools", FromJson(*tools));
  try {
    return impl_->tmpl->Render(context);
  } catch (const jinja::RenderError& e) {
    throw ChatTemplateError(std::string("chat template error: ") + e.what());
  }
}

std::vector<int32_t> ChatTemplate::Tokenize(const std::string& prompt) const {
  const Tokenizer& tok = *impl_->tokenizer;
  std::vector<int32_t> ids;
  if (uses_fallback_) {
    if (impl_->add_bos && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
    const std::vector<int32_t> text = tok.Encode(prompt, /*add_special=*/false);
    ids.insert(ids.end(), text.begin(), text.end());
    return ids;
  }
  // Text between special tokens is encoded on its own, as transformers'
  // tokenizers do (with legacy=True SentencePiece adds its "▁" prefix to
  // each span).
  size_t span_start = 0;
  const auto flush = [&](size_t end) {
    if (end > span_start) {
      const std::vector<int32_t> text =
          tok.Encode(std::string_view(prompt).substr(span_start, end - span_start), false);
      ids.insert(ids.end(), text.begin(), text.end());
    }
  };
  for (size_t i = 0; i < prompt.size();) {
    const auto* special = impl_->SpecialAt(prompt, i);
    if (special == nullptr) {
      ++i;
      continue;
    }
    flush(i);
    ids.push_back(special->second);
    i += special->first.size();
    span_start = i;
  }
  flush(prompt.size());
  return ids;
}

}  // namespace tq
