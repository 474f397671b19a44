// Tool-calling request fields and the forced-call grammar
// (server/http/tool_request.h): hand-written calls in each family's format
// are sentences of the grammar exactly when their arguments satisfy the
// function's schema.
#include <gtest/gtest.h>

#include "engine/structured/grammar.h"
#include "engine/structured/matcher.h"
#include "server/http/openai_errors.h"
#include "server/http/tool_request.h"

namespace tq::http {
namespace {

using nlohmann::json;
using structured::ByteMatcher;

ToolSettings Tools(const std::string& extra) {
  json body = json::parse(R"({"tools": [
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": false}}},
      {"type": "function", "function": {"name": "now"}}]})");
  body.update(json::parse(extra));
  return ParseToolSettings(body);
}

void ExpectSentences(const std::string& grammar_text, const std::vector<std::string>& good,
                     const std::vector<std::string>& bad) {
  const structured::Grammar g = structured::ParseGrammar(grammar_text);
  for (const std::string& s : good) EXPECT_TRUE(ByteMatcher(&g).AcceptsComplete(s)) << s;
  for (const std::string& s : bad) EXPECT_FALSE(ByteMatcher(&g).AcceptsComplete(s)) << s;
}

const std::string kWeather =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
    "\"c\"}}\n</tool_call>";
const std::string kNow = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";

TEST(ToolCallGrammarTest, HermesRequiredAllowsEveryToolWithValidArguments) {
  const ToolSettings t = Tools(R"({"tool_choice": "required", "parallel_tool_calls": false})");
  ExpectSentences(ToolCallGrammar(ToolCallFormat::kHermes, t), {kWeather, kNow},
                  {kWeather + "\n" + kNow,  // one call without parallel_tool_calls
                   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                   "\"Paris\", \"unit\": \"k\"}}\n</tool_call>",
                   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                   "\"Paris\"}}\n</tool_call>",
                   "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>", "hello"});
  const ToolSettings parallel = Tools(R"({"tool_choice": "required"})");
  ExpectSentences(ToolCallGrammar(ToolCallFormat::kHermes, parallel),
                  {kWeather, kWeather + "\n" + kNow}, {""});
}

TEST(ToolCallGrammarTest, NamedFunctionOnly) {
  const ToolSettings t =
      Tools(R"({"tool_choice": {"type": "function", "function": {"name": "now"}}})");
  ExpectSentences(ToolCallGrammar(ToolCallFormat::kHermes, t), {kNow}, {kWeather});
}

TEST(ToolCallGrammarTest, Llama3AndMistralFormats) {
  const ToolSettings t =
      Tools(R"({"tool_choice": {"type": "function", "function": {"name": "now"}}})");
  ExpectSentences(ToolCallGrammar(ToolCallFormat::kLlama3Json, t),
                  {"{\"name\": \"now\", \"parameters\": {}}"}, {kNow});
  ExpectSentences(ToolCallGrammar(ToolCallFormat::kMistral, t),
                  {"[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]"}, {kNow});
}

TEST(ToolCallGrammarTest, UnsupportedSchemaNamesTheToolsParameters) {
  const ToolSettings t = ParseToolSettings(json::parse(R"({"tool_choice": "required", "tools": [
      {"type": "function", "function": {"name": "a"}},
      {"type": "function", "function": {"name": "b", "parameters": {"type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}}}}}]})"));
  try {
    ToolCallGrammar(ToolCallFormat::kHermes, t);
    FAIL() << "compiled";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().param, "tools[1].function.parameters");
  }
}

TEST(ToolCallGrammarTest, PrefixRenamesRulesOnly) {
  EXPECT_EQ(PrefixGrammarRules("root ::= \"a b\" x{1,2} [a-z]* # c d\nx ::= 'q' y-z", "p-"),
            "p-root ::= \"a b\" p-x{1,2} [a-z]* # c d\np-x ::= 'q' p-y-z");
}

TEST(ToolSettingsTest, Choices) {
  EXPECT_EQ(Tools("{}").choice, ToolSettings::Choice::kAuto);
  EXPECT_EQ(Tools(R"({"tool_choice": "none"})").choice, ToolSettings::Choice::kNone);
  EXPECT_FALSE(Tools(R"({"tool_choice": "none"})").parse_output());
  EXPECT_TRUE(Tools(R"({"tool_choice": "auto"})").parse_output());
  EXPECT_FALSE(Tools(R"({"tool_choice": "auto"})").constrained());
  EXPECT_TRUE(Tools(R"({"tool_choice": "required"})").constrained());
  EXPECT_EQ(ParseToolSettings(json::object()).choice, ToolSettings::Choice::kNone);
  for (const char* bad : {R"({"tool_choice": "sometimes"})", R"({"tool_choice": 1})",
                          R"({"tool_choice": {"type": "function", "function": {"name": "x"}}})",
                          R"({"tool_choice": {"type": "function"}})"}) {
    try {
      Tools(bad);
      ADD_FAILURE() << bad;
    } catch (const ApiException& e) {
      EXPECT_EQ(e.error().param.rfind("tool_choice", 0), 0u) << bad;
    }
  }
  const std::vector<std::pair<const char*, const char*>> bad_tools = {
      {R"({"tools": [{"type": "code", "function": {"name": "f"}}]})", "tools[0].type"},
      {R"({"tools": [{"type": "function"}]})", "tools[0].function"},
      {R"({"tools": [{"type": "function", "function": {}}]})", "tools[0].function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]})",
       "tools[0].function.parameters"},
      {R"({"tools": [{"type": "function", "function": {"name": "f"}},
                     {"type": "function", "function": {"name": "f"}}]})",
       "tools[1].function.name"},
      {R"({"tools": "f"})", "tools"},
      {R"({"parallel_tool_calls": "yes"})", "parallel_tool_calls"},
  };
  for (const auto& [body, param] : bad_tools) {
    try {
      ParseToolSettings(json::parse(body));
      ADD_FAILURE() << body;
    } catch (const ApiException& e) {
      EXPECT_EQ(e.error().param, param) << body;
    }
  }
}

}  // namespace
}  // namespace tq::http
