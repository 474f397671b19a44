// Constraint sources -> grammar text (grammar.h's GBNF-like form): JSON
// Schema, JSON mode, regular expressions and choice lists.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tq::structured {

/// Thrown for a constraint tqserve cannot compile; `keyword` names the
/// offending schema keyword or regex construct (the HTTP layer's 400 param
/// detail), what() says why.
class UnsupportedConstraint : public std::runtime_error {
 public:
  UnsupportedConstraint(std::string keyword, const std::string& message)
      : std::runtime_error(message), keyword_(std::move(keyword)) {}
  const std::string& keyword() const { return keyword_; }

 private:
  std::string keyword_;
};

/// Grammar text whose sentences are JSON documents valid against `schema`
/// (draft 2020-12 subset): type (one or a list), properties, required,
/// additionalProperties (false, true or a schema when there are no
/// properties), propertyNames (string keywords only, without properties), enum, const, anyOf, oneOf
/// (as anyOf: exact when the branches are disjoint), allOf with one entry, items, minItems,
/// maxItems, minLength, maxLength, pattern, format (date, time, date-time, uuid, ipv4, email), $ref
/// to #/$defs/... or #/definitions/... (recursion allowed), and the annotations (title,
/// description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly). Output
/// is compact: ", " and
/// ": " separators, no other whitespace; properties in key order (required
/// ones always, optional ones may be left out); no properties beyond those
/// declared unless the schema has none. Numbers have at most 16 integer and
/// 16 fraction digits and a 2-digit exponent. Throws UnsupportedConstraint
/// for any other keyword (e.g. minimum, uniqueItems, patternProperties).
std::string JsonSchemaGrammar(const nlohmann::json& schema);

/// Grammar text for JSON mode (OpenAI response_format json_object): any JSON
/// object, compact as above.
std::string JsonObjectGrammar();

/// Grammar text whose sentences fully match `pattern` (Python re /
/// ECMAScript subset: literals, ., [classes], \d \w \s and negations, groups,
/// (?:...), |, * + ? {m} {m,} {m,n} (lazy forms alike), ^ at the start and $
/// at the end). Shorthand classes match their ASCII members only (a subset of
/// Python's Unicode ones). Throws UnsupportedConstraint for backreferences,
/// lookaround, \b, inline flags and anything else.
std::string RegexGrammar(std::string_view pattern);

/// Grammar text for exactly one of `choices` (vLLM guided_choice).
std::string ChoiceGrammar(const std::vector<std::string>& choices);

/// The rule body (no `root ::=`) for a JSON string whose content fully
/// matches `pattern`, with `"`, `\` and control characters JSON-escaped.
std::string RegexJsonStringBody(std::string_view pattern);

}  // namespace tq::structured
