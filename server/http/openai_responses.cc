// OpenAI response bodies and SSE chunks (see openai_responses.h).
#include "server/http/openai_responses.h"

#include <chrono>
#include <cmath>
#include <random>

#include "engine/tokenizer/utf8.h"
#include "server/http/openai_errors.h"

namespace tq::http {
namespace {

using nlohmann::json;

// JSON has no -inf; vLLM reports a log-probability of -inf as -9999.0.
json LogprobValue(float logprob) {
  return std::isfinite(logprob) ? json(logprob) : json(-9999.0);
}

json OrNull(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

json ChatTokenJson(const Tokenizer& tokenizer, const TokenLogprob& lp) {
  TokenText t = TokenTextOf(tokenizer, lp.token);
  return {{"token", std::move(t.text)},
          {"logprob", LogprobValue(lp.logprob)},
          {"bytes", std::move(t.bytes)}};
}

json ChunkBase(const ResponseMeta& meta, std::string_view object, json choices,
               bool include_usage) {
  json chunk = {{"id", meta.id},
                {"object", object},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", std::move(choices)}};
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

}  // namespace

std::string NewResponseId(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (int word = 0; word < 2; ++word) {
    uint64_t bits = rng();
    for (int i = 0; i < 16; ++i, bits >>= 4) id += kHex[bits & 15];
  }
  return id;
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TokenText TokenTextOf(const Tokenizer& tokenizer, int32_t token) {
  TokenText out;
  std::string bytes = tokenizer.TokenBytes(token);
  // Control tokens (BOS/EOS) and <unk> carry no text: their piece names them.
  if (bytes.empty()) bytes = tokenizer.IdToPiece(token);
  out.bytes.assign(bytes.begin(), bytes.end());
  if (utf8::Valid(bytes)) {
    out.text = std::move(bytes);
    return out;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out.text = "bytes:";
  for (unsigned char b : bytes) out.text += std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
  return out;
}

json UsageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

json CompletionLogprobsJson(const std::vector<LogprobEntry>& entries, const Tokenizer& tokenizer) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(TokenTextOf(tokenizer, e.token).text);
    text_offset.push_back(e.text_offset);
    if (!e.logprob) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(LogprobValue(*e.logprob));
    json top = json::object();
    for (const TokenLogprob& t : e.top) {
      const std::string text = TokenTextOf(tokenizer, t.token).text;
      if (!top.contains(text)) top[text] = LogprobValue(t.logprob);
    }
    const std::string chosen = tokens.back().get<std::string>();
    if (!top.contains(chosen)) top[chosen] = LogprobValue(*e.logprob);
    top_logprobs.push_back(std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

json ChatLogprobsJson(const std::vector<LogprobEntry>& entries, const Tokenizer& tokenizer,
                      int32_t top_logprobs) {
  json content = json::array();
  for (const LogprobEntry& e : entries) {
    json item = ChatTokenJson(tokenizer, TokenLogprob{e.token, e.logprob.value_or(0.0f)});
    json top = json::array();
    for (size_t i = 0; i < e.top.size() && static_cast<int32_t>(i) < top_logprobs; ++i) {
      top.push_back(ChatTokenJson(tokenizer, e.top[i]));
    }
    item["top_logprobs"] = std::move(top);
    content.push_back(std::move(item));
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json CompletionResponseJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& results,
                            const Usage& usage, const Tokenizer& tokenizer, bool logprobs) {
  json choices = json::array();
  for (const ChoiceResult& r : results) {
    choices.push_back(
        {{"index", r.index},
         {"text", r.text},
         {"logprobs", logprobs ? CompletionLogprobsJson(r.logprobs, tokenizer) : json(nullptr)},
         {"finish_reason", OrNull(r.finish_reason)},
         {"stop_reason", r.stop_reason}});
  }
  return {{"id", meta.id},       {"object", "text_completion"}, {"created", meta.created},
          {"model", meta.model}, {"choices", choices},          {"usage", UsageJson(usage)}};
}

json ChatResponseJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& results,
                      const Usage& usage, const Tokenizer& tokenizer, bool logprobs,
                      int32_t top_logprobs) {
  json choices = json::array();
  for (const ChoiceResult& r : results) {
    choices.push_back(
        {{"index", r.index},
         {"message", {{"role", "assistant"}, {"content", r.text}, {"refusal", nullptr}}},
         {"logprobs",
          logprobs ? ChatLogprobsJson(r.logprobs, tokenizer, top_logprobs) : json(nullptr)},
         {"finish_reason", OrNull(r.finish_reason)},
         {"stop_reason", r.stop_reason}});
  }
  return {{"id", meta.id},       {"object", "chat.completion"}, {"created", meta.created},
          {"model", meta.model}, {"choices", choices},          {"usage", UsageJson(usage)}};
}

json CompletionChunkJson(const ResponseMeta& meta, const ChoiceDelta& delta,
                         const Tokenizer& tokenizer, bool logprobs, bool include_usage) {
  json choice = {
      {"index", delta.index},
      {"text", delta.text},
      {"logprobs", logprobs ? CompletionLogprobsJson(delta.logprobs, tokenizer) : json(nullptr)},
      {"finish_reason", OrNull(delta.finish_reason)},
      {"stop_reason", delta.stop_reason}};
  return ChunkBase(meta, "text_completion", json::array({std::move(choice)}), include_usage);
}

json ChatChunkJson(const ResponseMeta& meta, int32_t index, json delta, json logprobs,
                   const std::string& finish_reason, const json& stop_reason, bool include_usage) {
  json choice = {{"index", index},
                 {"delta", std::move(delta)},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", OrNull(finish_reason)}};
  if (!finish_reason.empty()) choice["stop_reason"] = stop_reason;
  return ChunkBase(meta, "chat.completion.chunk", json::array({std::move(choice)}), include_usage);
}

json UsageChunkJson(const ResponseMeta& meta, std::string_view object, const Usage& usage) {
  json chunk = ChunkBase(meta, object, json::array(), /*include_usage=*/false);
  chunk["usage"] = UsageJson(usage);
  return chunk;
}

std::string SseEvent(const json& value) {
  return "data: " + DumpJson(value) + "\n\n";
}

}  // namespace tq::http
