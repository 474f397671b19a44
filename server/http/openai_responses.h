// OpenAI response bodies and server-sent-event chunks for completions and
// chat completions, in the shapes of the OpenAI API reference ("The completion
// object", "The chat completion object", "The chat completion chunk object")
// with vLLM's additions (stop_reason).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "server/http/choice_output.h"

namespace tq::http {

/// Identity shared by a response and all its chunks.
struct ResponseMeta {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // the served model name
};

/// `prefix` + 32 random hex digits (vLLM: "cmpl-" / "chatcmpl-" + a UUID's hex).
std::string NewResponseId(std::string_view prefix);
/// Seconds since the Unix epoch (OpenAI `created`).
int64_t UnixSeconds();

/// A token as OpenAI's logprobs show it: Tokenizer::TokenBytes (the
/// SentencePiece piece with "▁" turned into a space, " time"; byte-level BPE
/// "Ġtime" likewise) when that is valid UTF-8, else "bytes:\xNN..." (OpenAI's
/// notation for a part of a UTF-8 character, e.g. a byte-fallback piece
/// <0xE4>); control tokens show their piece ("<s>"). `bytes` are the token's
/// bytes (chat logprobs).
struct TokenText {
  std::string text;
  std::vector<uint8_t> bytes;
};
TokenText TokenTextOf(const Tokenizer& tokenizer, int32_t token);

/// {"prompt_tokens", "completion_tokens", "total_tokens"}.
nlohmann::json UsageJson(const Usage& usage);

/// Completions `logprobs`: {"tokens", "token_logprobs", "top_logprobs",
/// "text_offset"}; top_logprobs maps token text to logprob and always holds
/// the chosen token (OpenAI: "up to logprobs+1 elements").
nlohmann::json CompletionLogprobsJson(const std::vector<LogprobEntry>& entries,
                                      const Tokenizer& tokenizer);
/// Chat `logprobs`: {"content": [{"token", "logprob", "bytes", "top_logprobs":
/// [{"token", "logprob", "bytes"}] (top_logprobs entries)}]}.
nlohmann::json ChatLogprobsJson(const std::vector<LogprobEntry>& entries,
                                const Tokenizer& tokenizer, int32_t top_logprobs);

/// The non-streamed bodies. `results` in index order; `logprobs` false ->
/// "logprobs": null in each choice.
nlohmann::json CompletionResponseJson(const ResponseMeta& meta,
                                      const std::vector<ChoiceResult>& results, const Usage& usage,
                                      const Tokenizer& tokenizer, bool logprobs);
nlohmann::json ChatResponseJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& results,
                                const Usage& usage, const Tokenizer& tokenizer, bool logprobs,
                                int32_t top_logprobs);

/// Streaming chunks. With include_usage every chunk carries "usage": null and
/// UsageChunkJson (choices: []) is the last one before [DONE] (OpenAI's
/// stream_options.include_usage).
/// A completions chunk (object "text_completion") with one choice's delta.
nlohmann::json CompletionChunkJson(const ResponseMeta& meta, const ChoiceDelta& delta,
                                   const Tokenizer& tokenizer, bool logprobs, bool include_usage);
/// A chat chunk (object "chat.completion.chunk") with one choice: `delta` is
/// {"role": "assistant", "content": ""} first, {"content": text} next, {} with
/// the finish_reason last; `logprobs` is null or ChatLogprobsJson.
nlohmann::json ChatChunkJson(const ResponseMeta& meta, int32_t index, nlohmann::json delta,
                             nlohmann::json logprobs, const std::string& finish_reason,
                             const nlohmann::json& stop_reason, bool include_usage);
/// The final usage chunk; `object` is "text_completion" or "chat.completion.chunk".
nlohmann::json UsageChunkJson(const ResponseMeta& meta, std::string_view object,
                              const Usage& usage);

/// One server-sent event carrying `value`: "data: <json>\n\n".
std::string SseEvent(const nlohmann::json& value);
/// The stream terminator OpenAI clients wait for.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace tq::http
