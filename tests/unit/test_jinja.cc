// The Jinja subset interpreter against Python jinja2: every case of
// tests/data/jinja_cases.json and every chat template x conversation of
// tests/data/chat_templates.json (with tools and other extra variables) must
// render to the same bytes, or fail the same way, as jinja2 renders them in
// tests/reference/jinja_ref.py (the tq_reference fixture).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "engine/common/error.h"
#include "server/text/jinja.h"

namespace tq::testing {

// Also used by test_chat_template.cc (same test executable). Keys keep
// their file order, as Python's json.load keeps them.
nlohmann::ordered_json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

}  // namespace tq::testing

namespace tq::jinja {
namespace {

using json = nlohmann::ordered_json;
using testing::ReadJsonFile;

// JSON -> template value, as Python's json.load gives it to jinja2.
Value FromJson(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return Value::None();
    case json::value_t::boolean:
      return Value(j.get<bool>());
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return Value(j.get<int64_t>());
    case json::value_t::number_float:
      return Value(j.get<double>());
    case json::value_t::string:
      return Value(j.get<std::string>());
    case json::value_t::array: {
      std::vector<Value> items;
      for (const json& e : j) items.push_back(FromJson(e));
      return Value::List(std::move(items));
    }
    case json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      for (const auto& [k, v] : j.items()) items.emplace_back(k, FromJson(v));
      return Value::Dict(std::move(items));
    }
    default:
      ADD_FAILURE() << "unsupported JSON value " << j.dump();
      return Value();
  }
}

struct Raised : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// {"output": ...} or {"error": "syntax"|"render"|"raise", "message": ...},
// as jinja_ref.py writes them.
json RenderResult(const std::string& source, Context context) {
  context.emplace_back("raise_exception", Value::Func([](const CallArgs& args) -> Value {
                         throw Raised(args.positional.at(0).Str());
                       }));
  std::optional<Template> tmpl;
  try {
    tmpl.emplace(source);
  } catch (const Error& e) {
    return {{"error", "syntax"}, {"message", e.what()}};
  }
  try {
    return {{"output", tmpl->Render(context)}};
  } catch (const Raised& e) {
    return {{"error", "raise"}, {"message", e.what()}};
  } catch (const RenderError& e) {
    return {{"error", "render"}, {"message", e.what()}};
  }
}

// Outputs must match byte for byte; errors by kind, and raise_exception's
// message exactly (the other messages are ours, not jinja2's).
void ExpectSame(const std::string& name, const json& ours, const json& ref) {
  if (ref.contains("output")) {
    ASSERT_TRUE(ours.contains("output"))
        << name << ": jinja2 renders " << ref["output"].dump() << ", we fail: " << ours.dump();
    EXPECT_EQ(ours["output"].get<std::string>(), ref["output"].get<std::string>()) << name;
    return;
  }
  ASSERT_TRUE(ours.contains("error"))
      << name << ": jinja2 fails (" << ref.dump() << "), we render " << ours.dump();
  EXPECT_EQ(ours["error"], ref["error"])
      << name << ": ours " << ours.dump() << " jinja2 " << ref.dump();
  if (ref["error"] == "raise") {
    EXPECT_EQ(ours["message"], ref["message"]) << name;
  }
}

class JinjaReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ref_ = new json(ReadJsonFile(std::string(TQ_REF_DIR) + "/jinja_reference.json"));
  }
  static void TearDownTestSuite() {
    delete ref_;
    ref_ = nullptr;
  }
  static json* ref_;
};
json* JinjaReferenceTest::ref_ = nullptr;

TEST_F(JinjaReferenceTest, SmallTemplatesMatchJinja2) {
  const json cases = ReadJsonFile(std::string(TQ_TEST_DATA_DIR) + "/jinja_cases.json")["cases"];
  ASSERT_GE(cases.size(), 100u);
  ASSERT_EQ(cases.size(), (*ref_)["cases"].size()) << "reference out of date";
  size_t outputs = 0;
  for (const json& c : cases) {
    const std::string name = c["name"];
    ASSERT_TRUE((*ref_)["cases"].contains(name)) << name;
    const json& ref = (*ref_)["cases"][name];
    outputs += ref.contains("output");
    Context context;
    for (const auto& [k, v] : c["context"].items()) context.emplace_back(k, FromJson(v));
    ExpectSame(name, RenderResult(c["template"], context), ref);
  }
  EXPECT_GE(outputs, cases.size() * 3 / 4) << "most cases should render, not fail";
}

TEST_F(JinjaReferenceTest, ChatTemplatesWithExtraVariablesMatchJinja2) {
  const json chat = ReadJsonFile(std::string(TQ_TEST_DATA_DIR) + "/chat_templates.json");
  size_t rendered = 0;
  for (const json& t : chat["templates"]) {
    for (const json& c : chat["conversations"]) {
      if (c.contains("templates") && std::find(c["templates"].begin(), c["templates"].end(),
                                               t["name"]) == c["templates"].end()) {
        continue;
      }
      const std::string key = t["name"].get<std::string>() + "/" + c["name"].get<std::string>();
      ASSERT_TRUE((*ref_)["chat"].contains(key)) << key;
      Context context = {{"messages", FromJson(c["messages"])},
                         {"add_generation_prompt", FromJson(c["add_generation_prompt"])},
                         {"bos_token", FromJson(t["bos_token"])},
                         {"eos_token", FromJson(t["eos_token"])}};
      if (c.contains("extra")) {
        for (const auto& [k, v] : c["extra"].items()) context.emplace_back(k, FromJson(v));
      }
      ExpectSame(key, RenderResult(t["source"], context), (*ref_)["chat"][key]);
      ++rendered;
    }
  }
  EXPECT_EQ(rendered, (*ref_)["chat"].size());
}

// Constructs the interpreter rejects that jinja2 accepts: a clear parse-time
// error instead of a wrong rendering.
TEST(JinjaTest, UnsupportedTagsFailAtParseTimeWithLine) {
  for (const char* src : {"a\n{% macro m() %}x{% endmacro %}", "a\n{% include 'x' %}",
                          "a\n{% for x in y recursive %}{% endfor %}", "a\n{{ f(*args) }}"}) {
    try {
      Template t(src);
      ADD_FAILURE() << "accepted: " << src;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("line 2: ", 0), 0u) << e.what();
    }
  }
}

TEST(JinjaTest, SyntaxErrorNamesTheLine) {
  try {
    Template t("line one\n{{ x }}\n{% if %}");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("line 3: ", 0), 0u) << e.what();
  }
}

TEST(JinjaTest, RenderErrorNamesTheLine) {
  Template t("a\n\n{{ 'x' + 1 }}");
  try {
    t.Render({});
    FAIL() << "rendered";
  } catch (const RenderError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("line 3: ", 0), 0u) << e.what();
  }
}

// A namespace is shared by reference: a set inside a loop body is seen after
// the loop, while a plain variable set there is not (jinja2 scoping).
TEST(JinjaTest, NamespaceOutlivesLoopScope) {
  Template t(
      "{% set ns = namespace(n=0) %}{% set n = 0 %}"
      "{% for m in messages %}{% set ns.n = ns.n + m %}{% set n = n + m %}{% endfor %}"
      "{{ ns.n }} {{ n }}");
  EXPECT_EQ(t.Render({{"messages", Value::List({1, 2, 3})}}), "6 0");
}

TEST(JinjaTest, RenderIsRepeatableAndDoesNotMutateContext) {
  Template t("{% set messages = messages[1:] %}{{ messages|length }}");
  const Value list = Value::List({1, 2, 3});
  EXPECT_EQ(t.Render({{"messages", list}}), "2");
  EXPECT_EQ(t.Render({{"messages", list}}), "2");
  EXPECT_EQ(list.list().size(), 3u);
}

TEST(JinjaTest, FloatReprMatchesPython) {
  // Values of Python's repr(float), written out by hand.
  EXPECT_EQ(FormatFloat(0.1), "0.1");
  EXPECT_EQ(FormatFloat(1.0), "1.0");
  EXPECT_EQ(FormatFloat(-2.5), "-2.5");
  EXPECT_EQ(FormatFloat(1e16), "1e+16");
  EXPECT_EQ(FormatFloat(1e15), "1000000000000000.0");
  EXPECT_EQ(FormatFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatFloat(0.00001), "1e-05");
  EXPECT_EQ(FormatFloat(1.5e-300), "1.5e-300");
  EXPECT_EQ(FormatFloat(123.456), "123.456");
  EXPECT_EQ(FormatFloat(0.0), "0.0");
}

}  // namespace
}  // namespace tq::jinja
