// The grammar engine (engine/structured): hand-written accept/reject tables
// for the grammar text form, regexes, JSON Schema and JSON mode; the token
// mask against a brute-force check of every token; the LRU cache.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/structured/grammar_cache.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"
#include "engine/structured/token_mask.h"

namespace tq::structured {
namespace {

using nlohmann::json;

struct Table {
  std::vector<std::string> accept;
  std::vector<std::string> reject;
};

// Each accepted string is a complete sentence; each rejected one is not
// (it may be a prefix of one).
void CheckTable(const std::string& grammar_text, const Table& t) {
  SCOPED_TRACE(grammar_text);
  const Grammar g = ParseGrammar(grammar_text);
  for (const std::string& s : t.accept) {
    EXPECT_TRUE(ByteMatcher(&g).AcceptsComplete(s)) << "should accept: " << s;
  }
  for (const std::string& s : t.reject) {
    EXPECT_FALSE(ByteMatcher(&g).AcceptsComplete(s)) << "should reject: " << s;
  }
}

TEST(StructuredGrammar, TextFormTables) {
  CheckTable(R"(root ::= "a" | "bc")", {{"a", "bc"}, {"", "b", "abc", "ab", "c"}});
  CheckTable(R"(root ::= [a-c]+ "!")", {{"a!", "abcba!"}, {"!", "ad!", "a", "a!!"}});
  CheckTable(R"(root ::= [^a-z]*)", {{"", "ABC", "12", "é"}, {"a", "Az"}});
  CheckTable(R"(root ::= "x"{2,3})", {{"xx", "xxx"}, {"x", "xxxx", ""}});
  CheckTable(R"(root ::= "x"{2} "y"{1,})", {{"xxy", "xxyyy"}, {"xy", "xx", "xxxy"}});
  CheckTable(R"(root ::= ("ab" | "c")? "d" # comment
                 )",
             {{"d", "abd", "cd"}, {"abcd", "ad", ""}});
  CheckTable("root ::= item (\",\" item)*\nitem ::= [0-9]", {{"1", "1,2,3"}, {"1,", ",1", "12"}});
  CheckTable(R"x(root ::= "(" root ")" | "")x", {{"", "()", "((()))"}, {"(", "())", ")("}});
  CheckTable(R"(root ::= "\x41\u00e9\n" [\u4e00-\u9fff])", {{"A\xc3\xa9\n\xe4\xb8\x80"}, {"A"}});
  CheckTable(R"(root ::= . .)", {{"ab", "\xf0\x9f\x98\x80x"}, {"a", "\na", "\xff\x61"}});
  // Code points across UTF-8 length boundaries.
  CheckTable(R"(root ::= [\u007f-\u0801])",
             {{"\x7f", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xe0\xa0\x81"},
              {"\x7e", "\xe0\xa0\x82", "\xc0\x80"}});
}

TEST(StructuredGrammar, BadGrammarsAreErrors) {
  for (const char* bad : {
           "root ::= \"a",                 // unterminated literal
           "root ::= missing",             // undefined rule
           "rule ::= \"a\"",               // no root
           "root ::= root \"a\"",          // left recursion
           "root ::= x\nx ::= \"\" root",  // left recursion through a nullable prefix
           "root ::= \"a\"{3,1}",          // n < m
           "root ::= \"a\"{99999}",        // too large
           "root ::= [z-a]",               // bad range
           "root ::= (\"a\"",              // unbalanced
       }) {
    EXPECT_THROW(ParseGrammar(bad), Error) << bad;
  }
}

TEST(StructuredRegex, Tables) {
  auto check = [](const std::string& re, const Table& t) { CheckTable(RegexGrammar(re), t); };
  check(R"(\d{3}-\d{4})", {{"555-1234"}, {"5551234", "55-1234", "555-12345"}});
  check(R"(^(cat|dog)s?$)", {{"cat", "dogs"}, {"cats!", "bird", ""}});
  check(R"([A-Z][a-z]*)", {{"A", "Hello"}, {"hello", "HEllo"}});
  check(R"(a.c)", {{"abc", "a c",
                    "a\xc3\xa9"
                    "c"},
                   {"a\nc", "ac"}});
  check(R"([^0-9]+)", {{"abc", "\xc3\xa9"}, {"a1", ""}});
  check(R"(\w+@\w+\.com)", {{"a_b@x1.com"}, {"a@b.org", "@b.com"}});
  check(R"((?:ab)+?c)", {{"abc", "ababc"}, {"c", "abac"}});
  check(R"([\d.]+|x{2,})", {{"1.5", "xx", "xxxx"}, {"x", "1x"}});
  check(R"(\(\)\[\])", {{"()[]"}, {"()"}});
  for (const char* bad : {R"((a)\1)", R"((?=a)a)", R"(\bword)", R"((?i)a)", R"(*a)", "a(b"}) {
    EXPECT_THROW(RegexGrammar(bad), UnsupportedConstraint) << bad;
  }
}

Table JsonTable(const json& schema, const Table& t) {
  CheckTable(JsonSchemaGrammar(schema), t);
  return t;
}

TEST(StructuredJsonSchema, Tables) {
  JsonTable(json::parse(R"({"type": "integer"})"),
            {{"0", "-12", "123456"}, {"01", "1.5", "-", "+1"}});
  JsonTable(json::parse(R"({"type": "number"})"),
            {{"0", "-1.25", "3e5", "2.5E-10"}, {".5", "1.", "1e", "NaN"}});
  JsonTable(json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})"),
            {{R"("ab")", R"("abc")", R"("\n\u00e9")", "\"\xc3\xa9\xc3\xa9\""},
             {R"("a")", R"("abcd")", R"(ab)", "\"a\nb\"", R"("\ud800a")"}});
  JsonTable(json::parse(R"({"enum": ["red", 1, null, {"a": [true]}]})"),
            {{R"("red")", "1", "null", R"({"a":[true]})"}, {R"("blue")", "2", R"({"a": [true]})"}});
  JsonTable(json::parse(R"({"const": "x"})"), {{R"("x")"}, {R"("y")"}});
  JsonTable(json::parse(R"({"type": ["boolean", "null"]})"), {{"true", "false", "null"}, {"0"}});
  JsonTable(json::parse(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1,
                             "maxItems": 3})"),
            {{"[1]", "[1, 2, 3]"}, {"[]", "[1, 2, 3, 4]", "[1,2]", "[\"a\"]"}});
  JsonTable(json::parse(R"({"type": "array", "maxItems": 2})"),
            {{"[]", R"([1, "a"])", R"([{}, [null]])"}, {"[1, 2, 3]"}});
  JsonTable(
      json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"},
                              "b": {"type": "string"}}, "required": ["b"]})"),
      {{R"({"b": "x"})", R"({"a": 1, "b": "x"})"},
       {R"({"a": 1})", R"({"b": "x", "a": 1})", R"({})", R"({"b":"x"})", R"({"b": "x", "c": 1})"}});
  JsonTable(json::parse(R"({"properties": {"a": {"type": "null"}}})"),
            {{"{}", R"({"a": null})"}, {R"({"a": 1})"}});
  JsonTable(json::parse(R"({"type": "object", "additionalProperties": {"type": "integer"}})"),
            {{"{}", R"({"k": 1, "j": -2})"}, {R"({"k": "v"})"}});
  JsonTable(json::parse(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})"),
            {{"5", R"("a")"}, {R"("ab")", "true"}});
  JsonTable(json::parse(R"({"type": "string", "pattern": "^[a-z]+\"[0-9]$"})"),
            {{R"("ab\"1")"}, {R"("ab"1")", R"("ab1")"}});
  JsonTable(json::parse(R"({"type": "string", "format": "date"})"),
            {{R"("2024-02-28")"}, {R"("2024-13-01")", R"("24-01-01")"}});
  JsonTable(json::parse(R"({"$defs": {"node": {"type": "object", "properties": {
                              "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                              "required": ["next"]}}, "$ref": "#/$defs/node"})"),
            {{R"({"next": null})", R"({"next": {"next": null}})"}, {R"({"next": {}})"}});
  CheckTable(JsonObjectGrammar(), {{"{}", R"({"a": [1, {"b": null}], "c": "d"})"},
                                   {"[]", "1", R"({"a":1})", R"({"a": 1,})"}});
}

TEST(StructuredJsonSchema, UnsupportedKeywordsNameTheKeyword) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "integer", "minimum": 0})", "minimum"},
      {R"({"type": "array", "uniqueItems": true})", "uniqueItems"},
      {R"({"type": "object", "patternProperties": {}})", "patternProperties"},
      {R"({"type": "string", "format": "hostname"})", "format"},
      {R"x({"type": "string", "pattern": "(?=a)"})x", "pattern"},
      {R"({"$ref": "http://x/y"})", "$ref"},
      {R"({"allOf": [{}, {}]})", "allOf"},
      {R"({"type": "array", "items": [{}]})", "items"},
      {R"({"not": {}})", "not"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "required"},
  };
  for (const auto& [schema, keyword] : cases) {
    try {
      JsonSchemaGrammar(json::parse(schema));
      ADD_FAILURE() << "accepted " << schema;
    } catch (const UnsupportedConstraint& e) {
      EXPECT_EQ(e.keyword(), keyword) << schema << ": " << e.what();
    }
  }
}

// A vocabulary of single bytes, common JSON pieces and random byte strings.
std::shared_ptr<const TokenVocabulary> TestVocab() {
  std::vector<std::string> bytes = {"", "", ""};  // 0..2: specials (2 = EOS)
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece :
       {"{\"", "\":", "\": ", ", \"", "\"}", "}",  "null",  "true", " \"a", "ab", "abc",
        "\",", "\"]", "[1",   "12",   "1.",  "e5", "\\u00", "x\"y", "{}",   "[]", "\"a\": 1}"}) {
    bytes.push_back(piece);
  }
  std::mt19937 rng(7);
  const std::string alphabet = "ab\"{}[],: 0123456789.-e\\nul";
  for (int i = 0; i < 300; ++i) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 5);
    for (int j = 0; j < len; ++j) s += alphabet[rng() % alphabet.size()];
    bytes.push_back(s);
  }
  bytes.push_back(bytes[100]);  // a duplicate
  return std::make_shared<TokenVocabulary>(bytes, std::vector<int32_t>{2});
}

bool Bit(const std::vector<uint64_t>& m, int32_t i) {
  return (m[static_cast<size_t>(i) >> 6] >> (i & 63)) & 1;
}

// Walks random valid paths; at every step the mask equals the brute force
// (every token's bytes fed to a copy of the byte matcher), EOS included. The
// compiled grammar is shared by all seeds, so later walks run on filled
// suffix and state caches (the same answers from the cache as from a walk).
void CheckMaskAgainstBruteForce(const std::shared_ptr<const CompiledGrammar>& compiled,
                                uint32_t seed) {
  const TokenVocabulary& vocab = compiled->vocab();
  GrammarMatcher m(compiled);
  ByteMatcher reference(&compiled->grammar());
  std::mt19937 rng(seed);
  std::vector<uint64_t> mask;
  for (int step = 0; step < 40; ++step) {
    m.FillMask(&mask);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < vocab.size(); ++t) {
      const bool expect = t == 2 ? reference.CanEnd()
                                 : !vocab.bytes(t).empty() && reference.Accepts(vocab.bytes(t));
      ASSERT_EQ(Bit(mask, t), expect)
          << "seed " << seed << " step " << step << " token " << t << " '" << vocab.bytes(t) << "'";
      if (expect) allowed.push_back(t);
    }
    if (allowed.empty()) break;
    const int32_t t = allowed[rng() % allowed.size()];
    ASSERT_TRUE(m.AcceptToken(t));
    if (t == 2) break;
    ASSERT_TRUE(reference.AdvanceAll(vocab.bytes(t)));
  }
}

TEST(StructuredTokenMask, EqualsBruteForceOnRandomPaths) {
  const std::string grammars[] = {
      JsonObjectGrammar(),
      JsonSchemaGrammar(json::parse(R"({"type": "object", "properties": {
            "a": {"type": "array", "items": {"type": "number"}, "maxItems": 3},
            "b": {"enum": ["x\"y", "ab"]}}, "required": ["a"]})")),
      // Deep stacks: arrays of objects of arrays of strings.
      JsonSchemaGrammar(json::parse(R"({"type": "array", "items": {"type": "object",
            "properties": {"x": {"type": "array", "items": {"type": "string", "maxLength": 4}},
                           "y": {"type": ["integer", "null"]}}, "required": ["x", "y"]}})")),
      RegexGrammar(R"((ab|[0-9]{1,3})+\.?)"),
  };
  for (const std::string& text : grammars) {
    SCOPED_TRACE(text.substr(0, 60));
    auto compiled = std::make_shared<const CompiledGrammar>(ParseGrammar(text), TestVocab());
    for (uint32_t seed = 1; seed <= 5; ++seed) CheckMaskAgainstBruteForce(compiled, seed);
    EXPECT_GT(compiled->num_state_masks(), 0u);
    // The JSON grammars' stacks run deeper than a suffix: the walks checked
    // uncertain tokens against whole states.
    if (text != grammars[3]) {
      EXPECT_GT(compiled->num_uncertain(), 0u);
    }
    // The same walks again, every mask from the state cache.
    for (uint32_t seed = 1; seed <= 2; ++seed) CheckMaskAgainstBruteForce(compiled, seed);
  }
}

TEST(StructuredTokenMask, RejectsAndEos) {
  auto vocab = TestVocab();
  auto compiled = std::make_shared<const CompiledGrammar>(ParseGrammar(R"(root ::= "ab")"), vocab);
  GrammarMatcher m(compiled);
  EXPECT_FALSE(m.AcceptToken(2));  // EOS before the end
  EXPECT_FALSE(m.AcceptToken(3 + 'b' - 1));
  ASSERT_TRUE(m.AcceptToken(3 + 'a' - 1));
  ASSERT_TRUE(m.AcceptToken(3 + 'b' - 1));
  std::vector<uint64_t> mask;
  m.FillMask(&mask);
  for (int32_t t = 0; t < vocab->size(); ++t) EXPECT_EQ(Bit(mask, t), t == 2) << t;
  EXPECT_TRUE(m.AcceptToken(2));
}

TEST(StructuredTokenMask, ApplyMaskSetsMinusInfinity) {
  std::vector<float> logits(130, 1.0f);
  std::vector<uint64_t> mask(3, 0);
  mask[0] = 0b101;
  mask[1] = ~uint64_t{0};
  mask[2] = 0b10;
  ApplyTokenMask(logits, mask);
  for (size_t i = 0; i < logits.size(); ++i) {
    const bool keep = i == 0 || i == 2 || (i >= 64 && i < 128) || i == 129;
    EXPECT_EQ(logits[i] == 1.0f, keep) << i;
  }
}

TEST(StructuredGrammarCache, CompilesOncePerSpecAndEvicts) {
  GrammarCache cache(TestVocab(), 2);
  const ConstraintSpec a{ConstraintSpec::Kind::kRegex, "a+"};
  const ConstraintSpec b{ConstraintSpec::Kind::kChoice, R"(["x", "y"])"};
  const ConstraintSpec c{ConstraintSpec::Kind::kJsonObject, ""};
  const auto first = cache.Get(a);
  EXPECT_EQ(cache.Get(a), first);
  cache.Get(b);
  cache.Get(c);  // evicts a
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.Get(a), first);
  EXPECT_THROW(cache.Get({ConstraintSpec::Kind::kJsonSchema, R"({"minimum": 1})"}),
               UnsupportedConstraint);
  EXPECT_THROW(cache.Get({ConstraintSpec::Kind::kGrammar, "root ::= ("}), Error);
}

}  // namespace
}  // namespace tq::structured
