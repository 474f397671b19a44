// OpenAI request parsing and validation: every rejected field gives 400 with
// `param` naming it (OpenAI's error format); accepted forms give the values
// the OpenAI API reference and vLLM's docs define (defaults, aliases).
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "server/http/chat_request.h"
#include "server/http/completion_request.h"
#include "server/http/json_fields.h"
#include "server/http/openai_errors.h"

namespace tq::http {
namespace {

using nlohmann::json;

guard::ModelLimits Ctx() {
  guard::ModelLimits ctx;
  ctx.served_model_name = "stories260K";
  ctx.max_model_len = 512;
  ctx.vocab_size = 512;
  return ctx;
}

// The ApiError a parse throws; fails the test when it throws nothing.
template <typename Fn>
ApiError ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "no ApiException";
  return {};
}

ApiError CompletionError(const std::string& body_text) {
  const json body = json::parse(body_text);
  return ErrorOf([&] { ParseCompletionRequest(body, Ctx()); });
}

ApiError ChatError(const std::string& body_text) {
  const json body = json::parse(body_text);
  return ErrorOf([&] { ParseChatRequest(body, Ctx()); });
}

struct ErrorCase {
  const char* body;
  const char* param;
};

TEST(OpenAiCompletionRequest, EachInvalidFieldIs400NamingIt) {
  const ErrorCase cases[] = {
      {R"({"prompt": 5})", "prompt"},
      {R"({})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": {"text": "x"}})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt[1]"},
      {R"({"prompt": ["a", 1]})", "prompt"},
      {R"({"prompt": [[1, 2], []]})", "prompt"},
      {R"({"prompt": [512]})", "prompt[0]"},  // vocab_size 512: ids 0..511
      {R"({"prompt": [-1]})", "prompt[0]"},
      {R"({"prompt": [[1], [2, 3.5]]})", "prompt[1][1]"},
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": "16"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 16.5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 99999999999})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 18446744073709551616})", "max_tokens"},
      {R"({"prompt": "x", "max_completion_tokens": true})", "max_completion_tokens"},
      {R"({"prompt": "x", "temperature": -1})", "temperature"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "top_k": 3000000000})", "top_k"},
      {R"({"prompt": "x", "min_p": 2})", "min_p"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "frequency_penalty": -2.5})", "frequency_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": -1})", "n"},
      {R"({"prompt": "x", "n": 129})", "n"},
      {R"({"prompt": "x", "n": true})", "n"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 5]})", "stop"},
      {R"({"prompt": "x", "stop_token_ids": [600]})", "stop_token_ids[0]"},
      {R"({"prompt": "x", "stop_token_ids": "x"})", "stop_token_ids"},
      {R"({"prompt": "x", "seed": "x"})", "seed"},
      {R"({"prompt": "x", "seed": 1.5})", "seed"},
      // Both sides of int64 (issue 41 defect 7): nlohmann reads an integer
      // below -2^63 as the double -2^63, so a float at -2^63 is out of range.
      {R"({"prompt": "x", "seed": 9223372036854775808})", "seed"},
      {R"({"prompt": "x", "seed": -9223372036854775809})", "seed"},
      {R"({"prompt": "x", "seed": -9223372036854775808.0})", "seed"},
      {R"({"prompt": "x", "seed": -1e19})", "seed"},
      {R"({"prompt": "x", "seed": 1e19})", "seed"},
      {R"({"prompt": "x", "max_tokens": -9223372036854775809})", "max_tokens"},
      {R"({"prompt": "x", "n": -9223372036854775809})", "n"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "logprobs": -1})", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": "x", "echo": "yes"})", "echo"},
      {R"({"prompt": "x", "stream": 1})", "stream"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": 3})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": "y"}})",
       "stream_options.include_usage"},
      {R"({"prompt": "x", "ignore_eos": 0})", "ignore_eos"},
      {R"({"prompt": "x", "priority": "high"})", "priority"},
      {R"({"prompt": "x", "user": 7})", "user"},
      {R"({"prompt": "x", "logit_bias": {"1": 5}})", "logit_bias"},
      {R"({"prompt": "x", "suffix": "end"})", "suffix"},
      {R"({"prompt": "x", "model": 3})", "model"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = CompletionError(c.body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
    EXPECT_FALSE(e.message.empty());
    EXPECT_EQ(ErrorJson(e)["error"]["type"], "invalid_request_error");
  }
}

TEST(OpenAiCompletionRequest, StopListLimitAndChoiceLimit) {
  json body = {{"prompt", "x"}, {"stop", json::array()}};
  for (size_t i = 0; i <= guard::kMaxStopStrings; ++i)
    body["stop"].push_back("s" + std::to_string(i));
  EXPECT_EQ(ErrorOf([&] { ParseCompletionRequest(body, Ctx()); }).param, "stop");
  // 10 prompts x n = 128 is 1280 choices, over the 1024 limit.
  json many = {{"prompt", json::array()}, {"n", 128}};
  for (int i = 0; i < 10; ++i) many["prompt"].push_back("p");
  EXPECT_EQ(ErrorOf([&] { ParseCompletionRequest(many, Ctx()); }).param, "n");
  many["n"] = 102;  // 1020 choices: allowed
  EXPECT_EQ(ParseCompletionRequest(many, Ctx()).prompts.size(), 10u);
}

TEST(OpenAiCompletionRequest, UnknownModelIsModelNotFound) {
  // OpenAI's API (and vLLM) answer an unknown model with 404 model_not_found.
  const ApiError e = CompletionError(R"({"prompt": "x", "model": "gpt-4"})");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_NE(e.message.find("gpt-4"), std::string::npos);
}

TEST(OpenAiCompletionRequest, BodyMustBeAnObject) {
  const ApiError e = ErrorOf([] { ParseCompletionRequest(json::array({1, 2}), Ctx()); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "");
  EXPECT_TRUE(ErrorJson(e)["error"]["param"].is_null());
}

TEST(OpenAiCompletionRequest, SeedTakesAllOfInt64) {
  // Both ends of int64 as integer literals (two's complement into uint64).
  for (const auto& [text, seed] : std::initializer_list<std::pair<const char*, uint64_t>>{
           {R"({"prompt": "x", "seed": -9223372036854775808})", uint64_t{1} << 63},
           {R"({"prompt": "x", "seed": 9223372036854775807})", (uint64_t{1} << 63) - 1},
           {R"({"prompt": "x", "seed": 1e18})", uint64_t{1000000000000000000}}}) {
    EXPECT_EQ(ParseCompletionRequest(json::parse(text), Ctx()).params.sampling.seed, seed) << text;
  }
}

TEST(OpenAiCompletionRequest, DefaultsAreOpenAis) {
  const CompletionRequest r = ParseCompletionRequest(json{{"prompt", "hi"}}, Ctx());
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_text);
  EXPECT_EQ(r.prompts[0].text, "hi");
  EXPECT_EQ(r.params.max_tokens, 16);  // OpenAI: max_tokens defaults to 16
  EXPECT_EQ(r.params.n, 1);
  EXPECT_EQ(r.params.sampling.temperature, 1.0);
  EXPECT_EQ(r.params.sampling.top_p, 1.0);
  EXPECT_EQ(r.params.sampling.presence_penalty, 0.0);
  EXPECT_EQ(r.params.sampling.repetition_penalty, 1.0);
  EXPECT_FALSE(r.params.sampling.seed.has_value());
  EXPECT_FALSE(r.params.stream);
  EXPECT_FALSE(r.params.include_usage);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.echo);
}

TEST(OpenAiCompletionRequest, GenerationConfigDefaultsApplyOnlyWhenUnset) {
  guard::ModelLimits ctx = Ctx();
  ctx.defaults.temperature = 0.6;
  ctx.defaults.top_p = 0.9;
  EXPECT_EQ(ParseCompletionRequest(json{{"prompt", "x"}}, ctx).params.sampling.temperature, 0.6);
  EXPECT_EQ(ParseCompletionRequest(json{{"prompt", "x"}}, ctx).params.sampling.top_p, 0.9);
  const CompletionRequest r =
      ParseCompletionRequest(json{{"prompt", "x"}, {"temperature", 0}, {"top_p", nullptr}}, ctx);
  EXPECT_EQ(r.params.sampling.temperature, 0.0);
  EXPECT_EQ(r.params.sampling.top_p, 0.9);  // null = not set
}

TEST(OpenAiCompletionRequest, PromptForms) {
  const auto texts = ParseCompletionRequest(json::parse(R"({"prompt": ["a", "b"]})"), Ctx());
  ASSERT_EQ(texts.prompts.size(), 2u);
  EXPECT_EQ(texts.prompts[1].text, "b");
  const auto ids = ParseCompletionRequest(json::parse(R"({"prompt": [1, 2, 511]})"), Ctx());
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_FALSE(ids.prompts[0].is_text);
  EXPECT_EQ(ids.prompts[0].ids, (std::vector<int32_t>{1, 2, 511}));
  const auto lists = ParseCompletionRequest(json::parse(R"({"prompt": [[1], [2, 3.0]]})"), Ctx());
  ASSERT_EQ(lists.prompts.size(), 2u);
  EXPECT_EQ(lists.prompts[1].ids, (std::vector<int32_t>{2, 3}));  // 3.0 is an integer
}

TEST(OpenAiCompletionRequest, FieldsAndAliases) {
  const CompletionRequest r = ParseCompletionRequest(json::parse(R"({
      "model": "stories260K", "prompt": "x", "max_tokens": 5, "max_completion_tokens": 7,
      "temperature": 0.5, "top_p": 0.8, "top_k": 40, "min_p": 0.1, "n": 3,
      "stop": ["a", "", "bc"], "stop_token_ids": [2, 13], "seed": -1,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2,
      "logprobs": 0, "echo": true, "ignore_eos": true, "stream": true,
      "stream_options": {"include_usage": true}, "user": "u1", "priority": -3,
      "best_of": 3, "some_future_field": {"nested": [1, 2]}})"),
                                                     Ctx());
  EXPECT_EQ(r.params.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_EQ(r.params.sampling.temperature, 0.5);
  EXPECT_EQ(r.params.sampling.top_p, 0.8);
  EXPECT_EQ(r.params.sampling.top_k, 40);
  EXPECT_EQ(r.params.sampling.min_p, 0.1);
  EXPECT_EQ(r.params.n, 3);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "bc"}));  // "" matches nothing
  EXPECT_EQ(r.params.sampling.stop_token_ids, (std::vector<int32_t>{2, 13}));
  EXPECT_EQ(r.params.sampling.seed, std::numeric_limits<uint64_t>::max());  // -1 two's complement
  EXPECT_EQ(r.params.sampling.presence_penalty, 0.5);
  EXPECT_EQ(r.params.sampling.frequency_penalty, -0.5);
  EXPECT_EQ(r.params.sampling.repetition_penalty, 1.2);
  EXPECT_TRUE(r.params.sampling.ignore_eos);
  EXPECT_EQ(r.logprobs, 0);
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.params.stream);
  EXPECT_TRUE(r.params.include_usage);
  EXPECT_EQ(r.params.user, "u1");
  EXPECT_EQ(r.params.priority, -3);
}

TEST(OpenAiCompletionRequest, NullMaxTokensMeansUpToTheContext) {
  EXPECT_FALSE(ParseCompletionRequest(json::parse(R"({"prompt": "x", "max_tokens": null})"), Ctx())
                   .params.max_tokens.has_value());
  EXPECT_EQ(
      ParseCompletionRequest(json::parse(R"({"prompt": "x", "stop": "end"})"), Ctx()).params.stop,
      std::vector<std::string>{"end"});
}

TEST(OpenAiChatRequest, EachInvalidFieldIs400NamingIt) {
  const ErrorCase cases[] = {
      {R"({})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [3]})", "messages[0]"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].tool_call_id"},
      {R"({"messages": [{"role": "tool", "tool_call_id": "c"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "assistant", "tool_calls": {}}]})", "messages[0].tool_calls"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function",
          "function": {"name": "f", "arguments": "{not json"}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function",
          "function": {"arguments": "{}"}}]}]})",
       "messages[0].tool_calls[0].function.name"},
      {R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
           {"type": "image_url", "image_url": {"url": "x"}}]}]})",
       "messages[0].content[1].type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0].text"},
      {R"({"messages": [{"role": "user", "content": ["a"]}]})", "messages[0].content[0]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
           "top_logprobs": 21})",
       "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": null,
           "top_p": -0.1})",
       "top_p"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = ChatError(c.body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
  }
}

TEST(OpenAiChatRequest, UnknownModelIsModelNotFound) {
  const ApiError e =
      ChatError(R"({"messages": [{"role": "user", "content": "x"}], "model": "other"})");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(ErrorJson(e)["error"]["type"], "invalid_request_error");
}

TEST(OpenAiChatRequest, MessagesAndDefaults) {
  const ChatRequest r = ParseChatRequest(json::parse(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
       "name": "bob"},
      {"role": "assistant", "content": null},
      {"role": "user", "content": ""}]})"),
                                         Ctx());
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].content, "one\ntwo");  // text parts joined with "\n" (ChatMessage)
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_FALSE(r.params.max_tokens.has_value());  // chat: up to the context (OpenAI, vLLM)
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_TRUE(r.add_generation_prompt);
}

TEST(OpenAiChatRequest, DeveloperRoleIsASystemMessage) {
  // OpenAI: "developer messages replace the previous system messages".
  const ChatRequest r =
      ParseChatRequest(json::parse(R"({"messages": [{"role": "developer", "content": "Be brief."},
                                    {"role": "user", "content": "Hi"}]})"),
                       Ctx());
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
}

TEST(OpenAiChatRequest, LogprobsAndMaxTokens) {
  const ChatRequest r = ParseChatRequest(
      json::parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
                      "top_logprobs": 20, "max_tokens": 9})"),
      Ctx());
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 20);
  EXPECT_EQ(r.params.max_tokens, 9);
}

TEST(OpenAiLengthRule, MaxTokensAgainstTheContext) {
  EXPECT_EQ(ResolveMaxTokens(10, 16, 512, "prompt"), 16);
  EXPECT_EQ(ResolveMaxTokens(10, std::nullopt, 512, "prompt"), 502);  // to max_model_len
  EXPECT_EQ(ResolveMaxTokens(512, 0, 512, "prompt"), 0);              // fits exactly
  EXPECT_EQ(ResolveMaxTokens(500, 12, 512, "prompt"), 12);

  const ApiError too_long = ErrorOf([] { ResolveMaxTokens(513, 1, 512, "prompt"); });
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.param, "prompt");
  EXPECT_EQ(too_long.code, "context_length_exceeded");
  EXPECT_NE(too_long.message.find("512"), std::string::npos);
  EXPECT_NE(too_long.message.find("513"), std::string::npos);

  // No room left for even one token when max_tokens is unset.
  EXPECT_EQ(ErrorOf([] { ResolveMaxTokens(512, std::nullopt, 512, "messages"); }).param,
            "messages");

  // 500 + 13 = 513 > 512: both numbers in the message, as vLLM writes it.
  const ApiError sum = ErrorOf([] { ResolveMaxTokens(500, 13, 512, "messages"); });
  EXPECT_EQ(sum.param, "max_tokens");
  EXPECT_EQ(sum.code, "context_length_exceeded");
  EXPECT_NE(sum.message.find("513 tokens (500 in the messages, 13 in the completion)"),
            std::string::npos)
      << sum.message;
}

TEST(OpenAiChoiceSeed, SeedPlusIndexWrapping) {
  EXPECT_EQ(ChoiceSeed(7, 2), 9u);
  EXPECT_EQ(ChoiceSeed(std::numeric_limits<uint64_t>::max(), 1), 0u);
  EXPECT_FALSE(ChoiceSeed(std::nullopt, 3).has_value());
}

TEST(OpenAiPromptIds, TextGetsBosIdsAreKept) {
  const auto tokenizer = Tokenizer::Load(TQ_MODEL_DIR, {});
  // tokenizer_config.json of the bundled model: add_bos_token true, BOS id 1.
  const std::vector<int32_t> ids = PromptIds(PromptInput{true, "Once upon a time", {}}, *tokenizer);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(tokenizer->Decode(ids), "Once upon a time");
  EXPECT_EQ(PromptIds(PromptInput{false, "", {5, 6}}, *tokenizer), (std::vector<int32_t>{5, 6}));
}

TEST(OpenAiJson, NestingDepthIgnoresBracketsInStrings) {
  EXPECT_EQ(JsonNestingDepth(R"({"a": [1, {"b": []}]})"), 4);
  EXPECT_EQ(JsonNestingDepth(R"({"a": "[[[[\"[[[["})"), 1);
  EXPECT_EQ(JsonNestingDepth(std::string(100000, '[')), 100000);
}

TEST(OpenAiErrors, ErrorJsonShape) {
  const json e = ErrorJson(BadRequest("bad n", "n"));
  // OpenAI: {"error": {"message", "type", "param", "code"}}
  ASSERT_TRUE(e.contains("error"));
  EXPECT_EQ(e.size(), 1u);
  EXPECT_EQ(e["error"].size(), 4u);
  EXPECT_EQ(e["error"]["message"], "bad n");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_TRUE(e["error"]["code"].is_null());
  const json u = ErrorJson(Unavailable("draining"));
  EXPECT_EQ(u["error"]["type"], "server_error");
  EXPECT_EQ(u["error"]["code"], "service_unavailable");
}

TEST(OpenAiErrors, DumpReplacesInvalidUtf8) {
  const json value = {{"text", std::string("a\xff"
                                           "b")}};
  std::string out;
  ASSERT_NO_THROW(out = DumpJson(value));
  EXPECT_EQ(out,
            "{\"text\":\"a\xef\xbf\xbd"
            "b\"}");  // U+FFFD
}

// Field status (docs/api.md "Field status"): every OpenAI / vLLM field that
// would change the output and is not implemented is a 400 naming it, on both
// generation endpoints; fields that change nothing the client gets pass.
// Adds `extra` (a JSON object's members) to a minimal body of each endpoint.
json Completion(const std::string& extra) {
  json body = json::parse(extra);
  body["prompt"] = "x";
  return body;
}
json Chat(const std::string& extra) {
  json body = json::parse(extra);
  body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
  return body;
}

// The param of the 400 a parse throws; "" when it throws nothing.
template <typename Fn>
std::string ParamOf(Fn&& fn) {
  try {
    fn();
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 400);
    return e.error().param;
  }
  return "";
}

struct Case {
  const char* extra;
  const char* param;                 // "" = accepted
  const char* chat_param = nullptr;  // where chat differs (tool calling is chat-only)
};

const Case kCases[] = {
    {R"({"tools": [{"type": "function", "function": {"name": "f"}}]})", "tools", ""},
    {R"({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"})",
     "tools", ""},
    {R"({"tools": [{"type": "function", "function": {"name": "a b"}}]})", "tools",
     "tools[0].function.name"},
    {R"({"tools": {"type": "function"}})", "tools", "tools"},
    {R"({"tools": [{"type": "function", "function": {"name": "f"}}],
         "tool_choice": {"type": "function", "function": {"name": "g"}}})",
     "tools", "tool_choice"},
    {R"({"tools": []})", ""},
    {R"({"tool_choice": "required"})", "tool_choice"},
    {R"({"tool_choice": {"type": "function", "function": {"name": "f"}}})", "tool_choice"},
    {R"({"tool_choice": "none"})", ""},
    {R"({"tool_choice": "auto"})", ""},
    {R"({"functions": [{"name": "f"}]})", "functions"},
    {R"({"function_call": {"name": "f"}})", "function_call"},
    {R"({"function_call": "none"})", ""},
    {R"({"parallel_tool_calls": false})", ""},  // no effect without tools
    {R"({"best_of": 2})", "best_of"},
    {R"({"best_of": 1})", ""},
    {R"({"best_of": 2, "n": 2})", ""},
    {R"({"modalities": ["text", "audio"]})", "modalities"},
    {R"({"modalities": ["text"]})", ""},
    {R"({"audio": {"voice": "alloy", "format": "wav"}})", "audio"},
    {R"({"prediction": {"type": "content", "content": "x"}})", "prediction"},
    {R"({"web_search_options": {}})", "web_search_options"},
    {R"({"stream": true, "stream_options": {"continuous_usage_stats": true}})",
     "stream_options.continuous_usage_stats"},
    {R"({"stream": true, "stream_options": {"continuous_usage_stats": false}})", ""},
    {R"({"response_format": {"type": "text"}})", ""},
    {R"({"response_format": "json"})", "response_format"},
    {R"({"response_format": {"type": "xml"}})", "response_format.type"},
    {R"({"response_format": {"type": "json_schema"}})", "response_format.json_schema"},
    {R"({"response_format": {"type": "json_object"}})", ""},
    {R"({"response_format": {"type": "json_object"}, "guided_regex": "a"})", "guided_regex"},
    {R"({"guided_choice": []})", "guided_choice"},
    {R"({"guided_json": "not json"})", "guided_json"},
    {R"({"structured_outputs": {"regex": "a", "json": {}}})", "structured_outputs.regex"},
    {R"({"structured_outputs": {"xml": "a"}})", "structured_outputs.xml"},
    {R"({"guided_whitespace_pattern": " "})", "guided_whitespace_pattern"},
    {R"({"min_tokens": 3})", "min_tokens"},
    {R"({"min_tokens": 0})", ""},
    {R"({"use_beam_search": true})", "use_beam_search"},
    {R"({"length_penalty": 1.0})", ""},
    {R"({"length_penalty": 2})", "length_penalty"},
    {R"({"include_stop_str_in_output": true})", "include_stop_str_in_output"},
    {R"({"skip_special_tokens": false})", "skip_special_tokens"},
    {R"({"bad_words": ["x"]})", "bad_words"},
    {R"({"allowed_token_ids": [1, 2]})", "allowed_token_ids"},
    {R"({"chat_template": "{{ x }}"})", "chat_template"},
    {R"({"user": "u", "store": true, "metadata": {"k": "v"}, "service_tier": "auto",
         "reasoning_effort": "low", "logit_bias": {}})",
     ""},
};

TEST(OpenAiFieldStatus, UnimplementedOutputFieldsAre400OnBothEndpoints) {
  for (const Case& c : kCases) {
    EXPECT_EQ(ParamOf([&] { ParseCompletionRequest(Completion(c.extra), Ctx()); }), c.param)
        << "completions " << c.extra;
    EXPECT_EQ(ParamOf([&] { ParseChatRequest(Chat(c.extra), Ctx()); }),
              c.chat_param != nullptr ? c.chat_param : c.param)
        << "chat " << c.extra;
  }
}

TEST(OpenAiFieldStatus, ConstraintFieldsGiveOneConstraint) {
  using Kind = structured::ConstraintSpec::Kind;
  const auto c = ParseChatRequest(Chat(R"({"response_format": {"type": "json_schema",
      "json_schema": {"name": "x", "schema": {"type": "integer"}, "strict": true}}})"),
                                  Ctx())
                     .params.constraint;
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->spec.kind, Kind::kJsonSchema);
  EXPECT_EQ(json::parse(c->spec.text), json::parse(R"({"type": "integer"})"));
  const auto g = ParseCompletionRequest(Completion(R"({"guided_choice": ["a", "b"]})"), Ctx())
                     .params.constraint;
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->spec.kind, Kind::kChoice);
  EXPECT_EQ(g->param, "guided_choice");
  const auto so =
      ParseCompletionRequest(Completion(R"({"structured_outputs": {"regex": "[0-9]+"}})"), Ctx())
          .params.constraint;
  ASSERT_TRUE(so.has_value());
  EXPECT_EQ(so->spec.kind, Kind::kRegex);
  EXPECT_EQ(so->spec.text, "[0-9]+");
  EXPECT_FALSE(ParseChatRequest(Chat(R"({"response_format": {"type": "text"}})"), Ctx())
                   .params.constraint.has_value());
}

TEST(OpenAiFieldStatus, MessageNamesTheField) {
  try {
    ParseChatRequest(Chat(R"({"tools": [{"type": "function"}]})"), Ctx());
    FAIL() << "tools accepted";
  } catch (const ApiException& e) {
    EXPECT_NE(e.error().message.find("'tools[0].function'"), std::string::npos)
        << e.error().message;
  }
}

// Issue 41: JSON text inside a string field nested 100,000 deep crashed the
// daemon (a recursive copy or dump overflowed the stack). Every such field
// is a 400 naming it and the bound, checked before the text is parsed.
TEST(OpenAiJson, JsonTextInsideStringFieldsIsBoundedBeforeParsing) {
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  deep += "1";
  deep.append(100000, '}');
  const auto check = [](const ApiError& e, const std::string& param) {
    EXPECT_EQ(e.status, 400) << param;
    EXPECT_EQ(e.param, param);
    EXPECT_NE(e.message.find("'" + param + "' is nested more than 64 levels deep"),
              std::string::npos)
        << e.message;
  };
  json body = Completion("{}");
  body["guided_json"] = deep;
  check(ErrorOf([&] { ParseCompletionRequest(body, Ctx()); }), "guided_json");
  body = Completion("{}");
  body["structured_outputs"] = {{"json", deep}};
  check(ErrorOf([&] { ParseCompletionRequest(body, Ctx()); }), "structured_outputs.json");
  body = Chat("{}");
  body["structured_outputs"] = {{"json", deep}};
  check(ErrorOf([&] { ParseChatRequest(body, Ctx()); }), "structured_outputs.json");
  body = Chat("{}");
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "x"}, {"schema", deep}}}};
  check(ErrorOf([&] { ParseChatRequest(body, Ctx()); }), "response_format.json_schema.schema");
  body = Chat("{}");
  body["messages"].push_back(
      {{"role", "assistant"},
       {"tool_calls", json::array({{{"id", "c1"},
                                    {"type", "function"},
                                    {"function", {{"name", "f"}, {"arguments", deep}}}}})}});
  check(ErrorOf([&] { ParseChatRequest(body, Ctx()); }),
        "messages[1].tool_calls[0].function.arguments");
  // 64 levels are accepted (the body's own bound).
  body = Completion("{}");
  body["guided_json"] = std::string(63, '[') + "{}" + std::string(63, ']');
  const ApiError e = ErrorOf([&] { ParseCompletionRequest(body, Ctx()); });
  EXPECT_EQ(e.message, "'guided_json' must be a JSON Schema object");  // parsed: an array
}

}  // namespace
}  // namespace tq::http
