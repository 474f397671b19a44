// Tool-call output parsers (server/text/tool_calls.h) on hand-written model
// replies in the formats the chat templates ask for (Qwen2.5's and Hermes'
// <tool_call> blocks, Llama 3.1's JSON, Mistral v0.3's [TOOL_CALLS]), and
// the streaming parser against the whole-text one.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "server/text/tool_calls.h"

namespace tq {
namespace testing {
nlohmann::ordered_json ReadJsonFile(const std::string& path);  // test_jinja.cc
}  // namespace testing

namespace {

using F = ToolCallFormat;

// Arguments compare as JSON values (the parser's spacing is its own).
void ExpectCall(const ParsedToolCall& call, const std::string& name, const std::string& args) {
  EXPECT_EQ(call.name, name);
  EXPECT_EQ(nlohmann::json::parse(call.arguments), nlohmann::json::parse(args)) << call.arguments;
}

TEST(ToolCallParse, HermesSingleCallHasNullContent) {
  const auto out = ParseToolCalls(F::kHermes,
                                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                  "{\"city\": \"Paris\"}}\n</tool_call>");
  EXPECT_FALSE(out.content.has_value());
  ASSERT_EQ(out.calls.size(), 1u);
  ExpectCall(out.calls[0], "get_weather", R"({"city": "Paris"})");
}

TEST(ToolCallParse, HermesTextBeforeAndSeveralCalls) {
  const auto out = ParseToolCalls(F::kHermes,
                                  "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": "
                                  "{\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n<tool_call>\n"
                                  "{\"arguments\": {}, \"name\": \"b\"}\n</tool_call>");
  ASSERT_TRUE(out.content.has_value());
  EXPECT_EQ(*out.content, "Let me check.\n");
  ASSERT_EQ(out.calls.size(), 2u);
  ExpectCall(out.calls[0], "a", R"({"x": [1, {"y": "}"}]})");
  ExpectCall(out.calls[1], "b", "{}");
}

TEST(ToolCallParse, HermesKeepsArgumentKeyOrderAndUnicode) {
  const auto out = ParseToolCalls(
      F::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"z\": \"café 中文\", \"a\": 1}}");
  ASSERT_EQ(out.calls.size(), 1u);  // the last block may be unterminated
  EXPECT_EQ(out.calls[0].arguments, "{\"z\":\"café 中文\",\"a\":1}");
}

TEST(ToolCallParse, HermesArgumentsAsJsonText) {
  const auto out = ParseToolCalls(
      F::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"n\\\": 2}\"}</tool_call>");
  ASSERT_EQ(out.calls.size(), 1u);
  ExpectCall(out.calls[0], "f", R"({"n": 2})");
}

TEST(ToolCallParse, HermesMalformedIsAllContent) {
  for (const std::string text : {
           "plain text, no call",
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1</tool_call>",  // bad JSON
           "<tool_call>{\"arguments\": {}}</tool_call>",                         // no name
           "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",       // not an object
           "<tool_call>[{\"name\": \"f\"}]</tool_call>",
           "<tool_call>",
       }) {
    const auto out = ParseToolCalls(F::kHermes, text);
    EXPECT_TRUE(out.calls.empty()) << text;
    ASSERT_TRUE(out.content.has_value());
    EXPECT_EQ(*out.content, text);
  }
}

TEST(ToolCallParse, Llama3Json) {
  auto out = ParseToolCalls(F::kLlama3Json,
                            " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  EXPECT_FALSE(out.content.has_value());
  ASSERT_EQ(out.calls.size(), 1u);
  ExpectCall(out.calls[0], "get_weather", R"({"city": "Oslo"})");

  out = ParseToolCalls(F::kLlama3Json,
                       "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
                       "\"parameters\": {\"k\": true}}");
  ASSERT_EQ(out.calls.size(), 2u);
  ExpectCall(out.calls[0], "a", "{}");
  ExpectCall(out.calls[1], "b", R"({"k": true})");

  for (const std::string text : {"The answer is {\"name\": \"a\"}", "{\"name\": \"a\"} trailing",
                                 "{\"city\": \"Oslo\"}", "{\"name\": \"a\", \"parameters\": 3}"}) {
    out = ParseToolCalls(F::kLlama3Json, text);
    EXPECT_TRUE(out.calls.empty()) << text;
    EXPECT_EQ(out.content.value_or("<null>"), text);
  }
}

TEST(ToolCallParse, Mistral) {
  auto out = ParseToolCalls(F::kMistral,
                            "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}}, "
                            "{\"name\": \"b\", \"arguments\": {}}]");
  EXPECT_FALSE(out.content.has_value());
  ASSERT_EQ(out.calls.size(), 2u);
  ExpectCall(out.calls[0], "a", R"({"q": "x"})");
  ExpectCall(out.calls[1], "b", "{}");
  // The marker is a control token; without it a reply that is a call list
  // still counts, and text before a marker is content.
  out = ParseToolCalls(F::kMistral, "[{\"name\": \"a\", \"arguments\": {}}]");
  ASSERT_EQ(out.calls.size(), 1u);
  out = ParseToolCalls(F::kMistral, "Sure. [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.content.value_or("<null>"), "Sure. ");
  out = ParseToolCalls(F::kMistral, "[1, 2, 3]");
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content.value_or("<null>"), "[1, 2, 3]");
}

TEST(ToolCallParse, NoneFormatIsPlainText) {
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  const auto out = ParseToolCalls(F::kNone, text);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content.value_or("<null>"), text);
}

TEST(ToolCallFormatTest, ChosenFromTheTemplateSource) {
  EXPECT_EQ(ToolCallFormatForTemplate("{% if tools %}<tool_call>{% endif %}"), F::kHermes);
  EXPECT_EQ(ToolCallFormatForTemplate("{{ tools | tojson }}[TOOL_CALLS]"), F::kMistral);
  EXPECT_EQ(ToolCallFormatForTemplate(
                "<|start_header_id|>{% for t in tools %}\"parameters\"{% endfor %}"),
            F::kLlama3Json);
  EXPECT_EQ(ToolCallFormatForTemplate("<tool_call> {{ builtin_tools }}"), F::kNone);
  EXPECT_EQ(ToolCallFormatForTemplate("{{ messages }}"), F::kNone);
  EXPECT_TRUE(TemplateUsesTools("{%- if tools is defined %}"));
  EXPECT_FALSE(TemplateUsesTools("{{ builtin_tools }} {{ tools_in_user_message }}"));
}

// The published templates of tests/data/chat_templates.json (their model
// cards say: Qwen and Hermes <tool_call>, Llama 3.1 JSON with "parameters",
// Mistral v0.3 [TOOL_CALLS]; the others render no tools).
TEST(ToolCallFormatTest, PublishedTemplates) {
  const auto chat = testing::ReadJsonFile(std::string(TQ_TEST_DATA_DIR) + "/chat_templates.json");
  const std::map<std::string, F> expected = {
      {"llama2", F::kNone},          {"llama3", F::kNone},    {"llama3.1", F::kLlama3Json},
      {"chatml", F::kNone},          {"qwen2.5", F::kHermes}, {"mistral-v0.1", F::kNone},
      {"mistral-v0.3", F::kMistral}, {"qwen3", F::kHermes},   {"smollm2", F::kNone}};
  for (const auto& t : chat["templates"]) {
    const std::string name = t["name"].get<std::string>();
    ASSERT_TRUE(expected.count(name)) << name;
    EXPECT_EQ(ToolCallFormatForTemplate(t["source"].get<std::string>()), expected.at(name)) << name;
  }
}

// The streamed pieces: per call (indices 0, 1, ... in order) a first piece
// with the name and empty arguments, then name-less fragments whose
// concatenation is the whole-text parse's arguments (as JSON values; the
// stream sends the model's own spacing).
void ExpectPiecesMatch(const std::vector<ToolCallPiece>& pieces, const ParsedToolOutput& whole,
                       const std::string& where) {
  std::vector<std::string> names, args;
  for (const ToolCallPiece& p : pieces) {
    if (static_cast<size_t>(p.index) == names.size()) {
      EXPECT_FALSE(p.name.empty()) << where;
      EXPECT_EQ(p.arguments, "") << where;
      names.push_back(p.name);
      args.emplace_back();
      continue;
    }
    ASSERT_EQ(static_cast<size_t>(p.index) + 1, names.size()) << where;
    EXPECT_EQ(p.name, "") << where;
    args.back() += p.arguments;
  }
  ASSERT_EQ(names.size(), whole.calls.size()) << where;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(names[i], whole.calls[i].name) << where;
    EXPECT_EQ(nlohmann::json::parse(args[i]), nlohmann::json::parse(whole.calls[i].arguments))
        << where;
  }
}

// Every split of a reply into two pieces streams to what the whole-text
// parser says: content pieces joined, then the calls.
void ExpectStreamMatchesWhole(F format, const std::string& text) {
  const ParsedToolOutput whole = ParseToolCalls(format, text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    for (size_t step : {size_t{1}, size_t{3}, text.size() + 1}) {
      ToolCallStreamParser stream(format);
      std::string content = stream.Feed(text.substr(0, cut));
      std::vector<ToolCallPiece> pieces = stream.TakePieces();
      for (size_t i = cut; i < text.size(); i += step) {
        content += stream.Feed(text.substr(i, step));
        for (ToolCallPiece& p : stream.TakePieces()) pieces.push_back(std::move(p));
      }
      const ParsedToolOutput rest = stream.Finish();
      for (ToolCallPiece& p : stream.TakePieces()) pieces.push_back(std::move(p));
      ExpectPiecesMatch(pieces, whole, text + " cut " + std::to_string(cut));
      if (rest.content) content += *rest.content;
      EXPECT_EQ(content, whole.content.value_or("")) << text << " cut " << cut << " step " << step;
      ASSERT_EQ(rest.calls.size(), whole.calls.size()) << text;
      for (size_t i = 0; i < rest.calls.size(); ++i) {
        EXPECT_EQ(rest.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(rest.calls[i].arguments, whole.calls[i].arguments);
      }
    }
  }
}

TEST(ToolCallStream, PiecesAgreeWithTheWholeText) {
  ExpectStreamMatchesWhole(
      F::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>");
  ExpectStreamMatchesWhole(F::kHermes,
                           "Hi <tool >there\n\n<tool_call>{\"name\": \"f\"}</tool_call>");
  ExpectStreamMatchesWhole(F::kHermes, "no calls <tool_cal at the end <");
  ExpectStreamMatchesWhole(F::kHermes, "bad <tool_call>{\"name\": 1}</tool_call> after");
  ExpectStreamMatchesWhole(F::kLlama3Json, "  {\"name\": \"f\", \"parameters\": {}}");
  ExpectStreamMatchesWhole(F::kLlama3Json, "  plain {\"name\": \"f\", \"parameters\": {}}");
  ExpectStreamMatchesWhole(F::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]");
  ExpectStreamMatchesWhole(F::kMistral, "[not a call");
  // Several calls, keys in another order (left to Finish), lead forms.
  ExpectStreamMatchesWhole(F::kLlama3Json,
                           "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": [1]}}; "
                           "{\"name\": \"b\", \"parameters\": {}}");
  ExpectStreamMatchesWhole(
      F::kLlama3Json,
      "{\"name\": \"a\", \"parameters\": {}} {\"parameters\": {}, \"name\": \"b\"}");
  ExpectStreamMatchesWhole(F::kLlama3Json, "{\"parameters\": {\"q\": 1}, \"name\": \"a\"}");
  ExpectStreamMatchesWhole(F::kLlama3Json, "{\"answer\": 42}");
  ExpectStreamMatchesWhole(F::kMistral,
                           "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"s\": \"]}\"}}, "
                           "{\"name\": \"b\", \"arguments\": {}}]");
  ExpectStreamMatchesWhole(F::kMistral, " [{\"name\": \"a\", \"arguments\": \"{}\"}]");
  ExpectStreamMatchesWhole(F::kMistral, "[1, 2, 3]");
}

// Every format streams its calls as written, byte by byte: the name piece
// as soon as the name's closing quote arrives, then the arguments in
// fragments; Finish() has nothing left to add.
void ExpectIncremental(F format, const std::string& text, const std::string& first_name,
                       const std::string& first_args_text, const std::string& content_before) {
  ExpectStreamMatchesWhole(format, text);
  ToolCallStreamParser stream(format);
  std::vector<ToolCallPiece> pieces;
  std::string content;
  size_t name_at = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    content += stream.Feed(text.substr(i, 1));
    for (ToolCallPiece& p : stream.TakePieces()) {
      if (pieces.empty()) name_at = i;
      pieces.push_back(std::move(p));
    }
  }
  EXPECT_EQ(name_at, text.find(first_name) + first_name.size()) << text;
  const size_t streamed = pieces.size();
  (void)stream.Finish();
  EXPECT_TRUE(stream.TakePieces().empty()) << text;  // everything streamed already
  EXPECT_GT(streamed, 10u) << text;                  // byte by byte
  EXPECT_EQ(content, content_before) << text;
  std::string first_args;
  for (const ToolCallPiece& p : pieces) {
    if (p.index == 0) first_args += p.arguments;
  }
  EXPECT_EQ(first_args, first_args_text) << text;
}

TEST(ToolCallStream, EveryFormatStreamsArgumentsAsWritten) {
  const std::string args = "{\"city\": \"Par}is \\\"x\\\"\", \"days\": [1, {\"a\": 2}]}";
  ExpectIncremental(F::kLlama3Json,
                    "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": " + args +
                        "}; {\"name\": \"f\", \"parameters\": {}}",
                    "get_weather", args, "");
  ExpectIncremental(F::kLlama3Json, "{\"name\": \"get_weather\", \"parameters\": " + args + "}",
                    "get_weather", args, "");
  ExpectIncremental(F::kMistral,
                    "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": " + args +
                        "}, {\"name\": \"f\", \"arguments\": {}}]",
                    "get_weather", args, "");
  ExpectIncremental(F::kMistral,
                    "Sure.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + args + "}]",
                    "get_weather", args, "Sure.");
}

TEST(ToolCallStream, HermesArgumentsStreamAsWritten) {
  const std::string args = "{\"city\": \"Par}is \\\"x\\\"\", \"days\": [1, {\"a\": 2}]}";
  ExpectIncremental(
      F::kHermes,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args +
          "}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"parameters\": {}}\n</tool_call>",
      "get_weather", args, "Let me check.");
}

TEST(ToolCallStream, ContentBeforeACallStreamsAtOnce) {
  ToolCallStreamParser stream(F::kHermes);
  EXPECT_EQ(stream.Feed("Hello "), "Hello");  // trailing whitespace waits
  EXPECT_EQ(stream.Feed("world <tool"), " world");
  EXPECT_EQ(stream.Feed("_call>{\"name\": \"f\", \"arguments\": {}}"), "");
  EXPECT_EQ(stream.Feed("</tool_call>"), "");
  const ParsedToolOutput rest = stream.Finish();
  EXPECT_EQ(rest.content.value_or("<null>"), " ");
  ASSERT_EQ(rest.calls.size(), 1u);
  EXPECT_EQ(rest.calls[0].name, "f");
}

}  // namespace
}  // namespace tq
