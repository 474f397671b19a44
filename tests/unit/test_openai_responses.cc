// OpenAI response bodies, stream chunks and SSE framing. The expected key
// sets are those of the OpenAI API reference ("The completion object", "The
// chat completion object", "The chat completion chunk object", "logprobs")
// plus vLLM's stop_reason; token texts follow from the SentencePiece pieces.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "server/http/openai_responses.h"

namespace tq::http {
namespace {

using nlohmann::json;

std::set<std::string> Keys(const json& object) {
  std::set<std::string> keys;
  for (const auto& item : object.items()) keys.insert(item.key());
  return keys;
}

class OpenAiResponses : public ::testing::Test {
 protected:
  // The id of a piece, found by scanning the vocabulary.
  static int32_t PieceId(const std::string& piece) {
    for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
      if (tok_->IdToPiece(id) == piece) return id;
    }
    ADD_FAILURE() << "no piece " << piece;
    return 0;
  }
  // The bundled model's tokenizer, loaded once for the suite.
  static inline const Tokenizer* tok_ = Tokenizer::Load(TQ_MODEL_DIR, {}).release();
  const ResponseMeta meta_{"cmpl-abc", 1700000000, "stories260K"};
};

TEST_F(OpenAiResponses, TokenTextOfPieces) {
  // SentencePiece marks a leading space with U+2581; OpenAI shows " time".
  const int32_t time_id = PieceId("\xe2\x96\x81time");
  EXPECT_EQ(TokenTextOf(*tok_, time_id).text, " time");
  EXPECT_EQ(TokenTextOf(*tok_, time_id).bytes, (std::vector<uint8_t>{' ', 't', 'i', 'm', 'e'}));
  // Byte-fallback pieces <0x0A> and <0xE2>: ASCII as itself, else OpenAI's "bytes:\xNN".
  const int32_t newline = PieceId("<0x0A>");
  EXPECT_EQ(TokenTextOf(*tok_, newline).text, "\n");
  EXPECT_EQ(TokenTextOf(*tok_, newline).bytes, std::vector<uint8_t>{0x0A});
  const int32_t e2 = PieceId("<0xE2>");
  EXPECT_EQ(TokenTextOf(*tok_, e2).text, "bytes:\\xe2");
  EXPECT_EQ(TokenTextOf(*tok_, e2).bytes, std::vector<uint8_t>{0xE2});
  EXPECT_EQ(TokenTextOf(*tok_, 2).text, "</s>");  // EOS shows its piece
}

TEST_F(OpenAiResponses, UsageTotals) {
  const json u = UsageJson(Usage{5, 7, 3});
  EXPECT_EQ(Keys(u), (std::set<std::string>{"prompt_tokens", "completion_tokens", "total_tokens",
                                            "prompt_tokens_details"}));
  EXPECT_EQ(u["total_tokens"], 12);
  // OpenAI's shape: usage.prompt_tokens_details.cached_tokens.
  EXPECT_EQ(u["prompt_tokens_details"], (json{{"cached_tokens", 3}}));
}

TEST_F(OpenAiResponses, CompletionBodyShape) {
  ChoiceResult r;
  r.index = 0;
  r.text = " there";
  r.finish_reason = "length";
  const json body = CompletionResponseJson(meta_, {r}, Usage{4, 1}, *tok_, false);
  EXPECT_EQ(Keys(body),
            (std::set<std::string>{"id", "object", "created", "model", "choices", "usage"}));
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["id"], "cmpl-abc");
  EXPECT_EQ(body["created"], 1700000000);
  EXPECT_EQ(body["model"], "stories260K");
  ASSERT_EQ(body["choices"].size(), 1u);
  const json& c = body["choices"][0];
  EXPECT_EQ(Keys(c),
            (std::set<std::string>{"index", "text", "logprobs", "finish_reason", "stop_reason"}));
  EXPECT_EQ(c["text"], " there");
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_TRUE(c["stop_reason"].is_null());
  EXPECT_EQ(body["usage"]["total_tokens"], 5);
}

TEST_F(OpenAiResponses, CompletionLogprobs) {
  const int32_t once = PieceId("\xe2\x96\x81Once");
  const int32_t upon = PieceId("\xe2\x96\x81upon");
  const int32_t time_id = PieceId("\xe2\x96\x81time");
  std::vector<LogprobEntry> entries = {
      {once, std::nullopt, {}, 0},  // first prompt token: null, as OpenAI's echo
      {upon, -0.25f, {{time_id, -0.5f}}, 4},
      {time_id, -std::numeric_limits<float>::infinity(), {{time_id, -1.0f}}, 9},
  };
  const json lp = CompletionLogprobsJson(entries, *tok_);
  EXPECT_EQ(Keys(lp),
            (std::set<std::string>{"tokens", "token_logprobs", "top_logprobs", "text_offset"}));
  EXPECT_EQ(lp["tokens"], json::array({" Once", " upon", " time"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["token_logprobs"][1], -0.25);
  // The chosen token is always in top_logprobs ("up to logprobs+1 elements").
  EXPECT_EQ(lp["top_logprobs"][1], (json{{" time", -0.5}, {" upon", -0.25}}));
  EXPECT_EQ(lp["token_logprobs"][2], -9999.0);  // -inf has no JSON form (vLLM's value)
  EXPECT_EQ(lp["top_logprobs"][2].size(), 1u);  // chosen == top: one key
  EXPECT_EQ(lp["text_offset"], json::array({0, 4, 9}));
}

TEST_F(OpenAiResponses, ChatBodyShapeAndLogprobs) {
  const int32_t time_id = PieceId("\xe2\x96\x81time");
  const int32_t upon = PieceId("\xe2\x96\x81upon");
  ChoiceResult r;
  r.index = 1;
  r.text = " time";
  r.finish_reason = "stop";
  r.stop_reason = "The";
  r.logprobs = {{time_id, -0.125f, {{time_id, -0.125f}, {upon, -3.0f}}, 0}};
  const json body = ChatResponseJson(meta_, {r}, Usage{3, 1}, *tok_, true, 1);
  EXPECT_EQ(body["object"], "chat.completion");
  const json& c = body["choices"][0];
  EXPECT_EQ(Keys(c), (std::set<std::string>{"index", "message", "logprobs", "finish_reason",
                                            "stop_reason"}));
  EXPECT_EQ(c["index"], 1);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], " time");
  EXPECT_EQ(c["stop_reason"], "The");
  const json& item = c["logprobs"]["content"][0];
  EXPECT_EQ(Keys(item), (std::set<std::string>{"token", "logprob", "bytes", "top_logprobs"}));
  EXPECT_EQ(item["token"], " time");
  EXPECT_EQ(item["logprob"], -0.125);
  EXPECT_EQ(item["bytes"], json::array({32, 116, 105, 109, 101}));
  ASSERT_EQ(item["top_logprobs"].size(), 1u);  // top_logprobs = 1 of the 2 given
  EXPECT_EQ(Keys(item["top_logprobs"][0]), (std::set<std::string>{"token", "logprob", "bytes"}));
  EXPECT_TRUE(
      ChatResponseJson(meta_, {r}, Usage{}, *tok_, false, 0)["choices"][0]["logprobs"].is_null());
}

TEST_F(OpenAiResponses, ChunksCarryUsageNullOnlyWithIncludeUsage) {
  ChoiceDelta d;
  d.index = 2;
  d.text = "a";
  const json with = CompletionChunkJson(meta_, d, *tok_, false, true);
  EXPECT_EQ(Keys(with),
            (std::set<std::string>{"id", "object", "created", "model", "choices", "usage"}));
  EXPECT_TRUE(with["usage"].is_null());
  EXPECT_EQ(with["object"], "text_completion");
  EXPECT_EQ(with["choices"][0]["index"], 2);
  EXPECT_TRUE(with["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(CompletionChunkJson(meta_, d, *tok_, false, false).contains("usage"));

  const json last = UsageChunkJson(meta_, "chat.completion.chunk", Usage{2, 3});
  EXPECT_EQ(last["choices"], json::array());
  EXPECT_EQ(last["usage"]["total_tokens"], 5);
  EXPECT_EQ(last["object"], "chat.completion.chunk");
}

TEST_F(OpenAiResponses, ChatChunkShapes) {
  const json role = ChatChunkJson(meta_, 0, {{"role", "assistant"}, {"content", ""}}, nullptr, "",
                                  nullptr, false);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(Keys(role["choices"][0]),
            (std::set<std::string>{"index", "delta", "logprobs", "finish_reason"}));
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  const json end = ChatChunkJson(meta_, 0, json::object(), nullptr, "length", nullptr, false);
  EXPECT_EQ(end["choices"][0]["delta"], json::object());
  EXPECT_EQ(end["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(end["choices"][0].contains("stop_reason"));
}

TEST_F(OpenAiResponses, SseFraming) {
  // One event per chunk: "data: " + one line of JSON + a blank line. A
  // newline in the text is escaped inside the JSON, so it cannot end the event.
  const json chunk = {{"text", "line one\nline two\r\n\n"}};
  const std::string event = SseEvent(chunk);
  ASSERT_EQ(event.rfind("data: ", 0), 0u);
  ASSERT_GE(event.size(), 8u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  const std::string payload = event.substr(6, event.size() - 8);
  EXPECT_EQ(payload.find('\n'), std::string::npos);
  EXPECT_EQ(payload.find('\r'), std::string::npos);
  EXPECT_EQ(json::parse(payload), chunk);
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST_F(OpenAiResponses, ResponseIds) {
  const std::string a = NewResponseId("chatcmpl-");
  const std::string b = NewResponseId("chatcmpl-");
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 9u + 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef", 9), std::string::npos);
  EXPECT_NE(a, b);
  EXPECT_GT(UnixSeconds(), 1700000000);
}

}  // namespace
}  // namespace tq::http
