// The grammar engine's bounds (issue 41): repetition of groups that match
// the empty string against Python's re.fullmatch (tests/data/regex_oracle.json,
// from tests/data/make_regex_oracle.py); the compile budget (grammar.h) for
// nested repetitions, ambiguous grammars and copies; the nesting and size
// bounds of constraint JSON text; the matcher's expansion budget.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/common/json_limits.h"
#include "engine/structured/grammar_cache.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"
#include "engine/structured/token_mask.h"
#include "tests/unit/sanitizer_build.h"

namespace tq::structured {
namespace {

using nlohmann::json;

// A vocabulary of the single bytes 'a'..'c', "aa", "ab", "xy" and EOS (id 0).
std::shared_ptr<const TokenVocabulary> SmallVocab() {
  return std::make_shared<const TokenVocabulary>(
      std::vector<std::string>{"", "a", "b", "c", "aa", "ab", "xy"}, std::vector<int32_t>{0});
}

// The time bound of the checks below: a Release build takes a fraction of
// it on a loaded 2-core machine; sanitizer builds run ~15x slower.
constexpr double kBoundMs = kSanitizerBuild ? 30000.0 : 2000.0;

// Milliseconds that `fn` takes.
template <typename Fn>
double Millis(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The message of the tq::Error that `fn` throws; fails the test when it
// throws nothing or something else.
template <typename Fn>
std::string ErrorMessage(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a tq::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(StructuredLimits, NullableRepetitionsMatchPythonRe) {
  std::ifstream in(std::string(TQ_TEST_DATA_DIR) + "/regex_oracle.json");
  ASSERT_TRUE(in.good());
  const json cases = json::parse(in);
  ASSERT_GE(cases.size(), 10u);
  for (const json& c : cases) {
    const std::string pattern = c["pattern"];
    SCOPED_TRACE(pattern);
    Grammar g;
    try {
      g = ParseGrammar(RegexGrammar(pattern));
    } catch (const std::exception& e) {
      ADD_FAILURE() << pattern << ": " << e.what();
      continue;
    }
    for (const std::string s : c["accept"]) {
      EXPECT_TRUE(ByteMatcher(&g).AcceptsComplete(s)) << "should accept: '" << s << "'";
    }
    for (const std::string s : c["reject"]) {
      EXPECT_FALSE(ByteMatcher(&g).AcceptsComplete(s)) << "should reject: '" << s << "'";
    }
  }
}

TEST(StructuredLimits, GrammarTextStarOverANullableGroup) {
  // The same lowering for grammar text: ("a"*)* is a*, (x)* with x nullable is (x')*.
  const Grammar g = ParseGrammar("root ::= (\"a\"*)* \"b\"");
  for (const char* s : {"b", "ab", "aaab"}) EXPECT_TRUE(ByteMatcher(&g).AcceptsComplete(s)) << s;
  for (const char* s : {"", "a", "ba", "abb"})
    EXPECT_FALSE(ByteMatcher(&g).AcceptsComplete(s)) << s;
  const Grammar h = ParseGrammar("root ::= x*\nx ::= \"a\"? \"b\"?");
  for (const char* s : {"", "a", "b", "ab", "ba", "abba"}) {
    EXPECT_TRUE(ByteMatcher(&h).AcceptsComplete(s)) << s;
  }
  EXPECT_FALSE(ByteMatcher(&h).AcceptsComplete("c"));
  // Real left recursion is still refused.
  EXPECT_NE(ErrorMessage([] { ParseGrammar("root ::= root* \"a\""); }).find("left-recursive"),
            std::string::npos);
}

TEST(StructuredLimits, NestedRepetitionsCompileAndDecodeInBoundedTime) {
  // Nested bounded repetitions (the issue's 24-byte regex grew RSS by
  // 250 MB/s on the engine thread): lowered without ambiguity they compile
  // to small grammars, and each token's mask is quick.
  using Kind = ConstraintSpec::Kind;
  const std::vector<ConstraintSpec> specs = {
      {Kind::kRegex, "((a{0,10}){0,10}){0,10}"},
      {Kind::kRegex, "((((a{0,10}){0,10}){0,10}){0,10}){0,10}"},
      {Kind::kRegex, "((a{0,4096}){0,4096}){0,4096}"},
      {Kind::kRegex, "a((((a{0,10}){0,10}){0,10}){0,10}){0,10}"},
      {Kind::kJsonSchema,
       R"({"type": "string", "pattern": "((((a{0,10}){0,10}){0,10}){0,10}){0,10}"})"},
      {Kind::kGrammar, "root ::= ((((\"a\"{0,10}){0,10}){0,10}){0,10}){0,10}"},
  };
  for (const ConstraintSpec& spec : specs) {
    SCOPED_TRACE(spec.text);
    GrammarCache cache(SmallVocab());
    std::shared_ptr<const CompiledGrammar> g;
    const double compile_ms = Millis([&] { g = cache.Get(spec); });
    EXPECT_LT(compile_ms, kBoundMs);
    GrammarMatcher m(g);
    std::vector<uint64_t> mask;
    const double ms = Millis([&] {
      for (int i = 0; i < 40; ++i) {
        m.FillMask(&mask);
        if (spec.kind == Kind::kJsonSchema) break;  // starts with a quote: not in SmallVocab
        ASSERT_TRUE((mask[0] >> 1) & 1) << "token 'a' after " << i;
        EXPECT_FALSE((mask[0] >> 2) & 1) << "token 'b' after " << i;
        ASSERT_TRUE(m.AcceptToken(1));
      }
    });
    EXPECT_LT(ms, kBoundMs);
    std::printf("%s: compile %.1f ms, 40 tokens %.1f ms\n", spec.text.c_str(), compile_ms, ms);
  }
}

TEST(StructuredLimits, OverTheBudgetIsAnErrorNamingIt) {
  GrammarCache cache(SmallVocab());
  using Kind = ConstraintSpec::Kind;
  // Copies multiply sizes: counted before they are built (300 x 4096 x 4096).
  const std::string copies = "((" + std::string(300, 'a') + "){4096}){4096}";
  std::string message;
  double ms = Millis([&] { message = ErrorMessage([&] { cache.Get({Kind::kRegex, copies}); }); });
  EXPECT_NE(message.find("over the compile budget"), std::string::npos) << message;
  EXPECT_NE(message.find("kMaxGrammarElements"), std::string::npos) << message;
  EXPECT_LT(ms, kBoundMs);
  // Ambiguity multiplies derivation paths: "(|)" matches "" in 2 ways, 15 of
  // them in 2^15 (more than kMaxExpansionPaths), and reach a byte after them
  // in as many.
  std::string ambiguous;
  for (int i = 0; i < 15; ++i) ambiguous += "(|)";
  for (const auto& [pattern, what] :
       {std::pair<std::string, std::string>{ambiguous, "matches the empty string"},
        {ambiguous + "a", "reaches its first byte"}}) {
    ms = Millis([&] { message = ErrorMessage([&] { cache.Get({Kind::kRegex, pattern}); }); });
    EXPECT_NE(message.find(what + " in more than 16384 ways (kMaxExpansionPaths"),
              std::string::npos)
        << message;
    EXPECT_LT(ms, kBoundMs);
  }
}

TEST(StructuredLimits, AmbiguousGrammarIsOverTheBudget) {
  // x0 ::= x1 x1, ..., x20 ::= "" | "" | "a": 2^(2^20) ways to match "".
  std::string text = "root ::= x0\n";
  for (int i = 0; i < 20; ++i) {
    text += "x" + std::to_string(i) + " ::= x" + std::to_string(i + 1) + " x" +
            std::to_string(i + 1) + "\n";
  }
  text += "x20 ::= \"\" | \"\" | \"a\"\n";
  const std::string message = ErrorMessage([&] { ParseGrammar(text); });
  EXPECT_NE(message.find("over the compile budget"), std::string::npos) << message;
}

TEST(StructuredLimits, ConstraintJsonTextIsBoundedBeforeParsing) {
  using Kind = ConstraintSpec::Kind;
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  deep += "1";
  deep.append(100000, '}');
  std::string message = ErrorMessage([&] { ConstraintGrammarText({Kind::kJsonSchema, deep}); });
  EXPECT_NE(message.find("nested more than 64 levels deep"), std::string::npos) << message;
  const std::string deep_list = std::string(100000, '[') + std::string(100000, ']');
  message = ErrorMessage([&] { ConstraintGrammarText({Kind::kChoice, deep_list}); });
  EXPECT_NE(message.find("nested more than 64 levels deep"), std::string::npos) << message;
  // 65 levels refused, 64 accepted as far as the bound goes (then the schema
  // compiler refuses the unknown keyword 'a' itself).
  EXPECT_EQ(JsonTextDepth(std::string(64, '[') + std::string(64, ']')), 64);
  EXPECT_EQ(JsonTextDepth(R"({"a": "[[[[\"[[[[", "b": [[]]})"), 3);
  EXPECT_EQ(JsonTextDepth("]]]][[["), 3);  // closers never take it below zero
  // Size: the text of any constraint.
  message = ErrorMessage([&] {
    ConstraintGrammarText({Kind::kRegex, std::string(kMaxConstraintBytes + 1, 'a')});
  });
  EXPECT_NE(message.find("kMaxConstraintBytes"), std::string::npos) << message;
}

TEST(StructuredLimits, ExpandStackStopsAtItsBudget) {
  // Built by hand (ParseGrammar refuses it): r_i ::= r_{i+1} r_{i+1} | "",
  // r_40 ::= [a]: exponentially many derivation paths to the first byte.
  Grammar g;
  g.classes.push_back(ByteSet{});
  g.classes[0]['a' >> 6] |= uint64_t{1} << ('a' & 63);
  constexpr int kRules = 40;
  g.rules.resize(kRules + 1);
  using K = Grammar::Kind;
  for (int i = 0; i < kRules; ++i) {
    g.rules[static_cast<size_t>(i)].push_back(static_cast<int32_t>(g.elements.size()));
    g.elements.push_back({K::kRef, i + 1});
    g.elements.push_back({K::kRef, i + 1});
    g.elements.push_back({K::kEnd, 0});
    g.rules[static_cast<size_t>(i)].push_back(static_cast<int32_t>(g.elements.size()));
    g.elements.push_back({K::kEnd, 0});
  }
  g.rules[kRules].push_back(static_cast<int32_t>(g.elements.size()));
  g.elements.push_back({K::kBytes, 0});
  g.elements.push_back({K::kEnd, 0});
  std::vector<Stack> out;
  const double ms = Millis([&] { EXPECT_FALSE(StartStacks(g, &out)); });
  EXPECT_LT(ms, kBoundMs);
  EXPECT_FALSE(out.empty());
  EXPECT_LE(out.size(), kMaxStacks);
  // What it found is valid: the byte 'a' from there.
  ByteMatcher m(&g, out);
  EXPECT_TRUE(m.Advance('a'));
  EXPECT_THROW(CompiledGrammar(g, SmallVocab()), Error);
}

}  // namespace
}  // namespace tq::structured
