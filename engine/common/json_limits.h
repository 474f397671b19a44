// Bounds on JSON text that a client sends inside a request field (a schema
// as text, tool-call arguments, a choice list): nesting and size are checked
// by a linear scan BEFORE the text is parsed, so that no value deep enough to
// overflow the stack in the recursive code that later copies, prints or
// compiles it (nlohmann's copy and dump, the schema compiler) is ever built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "engine/common/error.h"

namespace tq {

/// The deepest nesting of JSON arrays and objects accepted in client text,
/// the same bound as a request body's (no OpenAI request nests beyond ~6).
inline constexpr int64_t kMaxJsonNesting = 64;
/// The longest JSON text accepted inside a string field that is not a
/// constraint (tool-call arguments); constraints have kMaxConstraintBytes
/// (engine/structured/grammar.h).
inline constexpr size_t kMaxJsonTextBytes = size_t{8} << 20;

/// One byte of JSON text read in order, outside or inside strings (escapes
/// honoured; `*in_string`, `*escape` carry the state between bytes): +1 when
/// it opens an array or object, -1 when it closes one, else 0. Does not
/// validate the JSON.
inline int JsonBracketStep(char c, bool* in_string, bool* escape) {
  if (*escape) {
    *escape = false;
  } else if (*in_string) {
    if (c == '\\') {
      *escape = true;
    } else if (c == '"') {
      *in_string = false;
    }
  } else if (c == '"') {
    *in_string = true;
  } else if (c == '{' || c == '[') {
    return 1;
  } else if (c == '}' || c == ']') {
    return -1;
  }
  return 0;
}

/// The deepest nesting of arrays and objects in JSON text: brackets inside
/// strings (escapes honoured) do not count; an unbalanced closer never makes
/// the count go below zero, so the result is never less than the nesting any
/// parse of a prefix of `text` reaches. One pass, no recursion; the text need
/// not be valid JSON.
int64_t JsonTextDepth(std::string_view text);

/// Thrown for client JSON text over a bound: what() names the field and the
/// limit, e.g. "'guided_json' is nested more than 64 levels deep". The HTTP
/// front end answers 400 and gRPC INVALID_ARGUMENT.
class JsonLimitError : public Error {
 public:
  JsonLimitError(std::string_view field, std::string problem)
      : Error("'" + std::string(field) + "' " + problem), problem_(std::move(problem)) {}
  /// The message without the field: "is nested more than 64 levels deep".
  const std::string& problem() const { return problem_; }

 private:
  std::string problem_;
};

/// Throws JsonLimitError when `text` (the value of field `field`) is longer
/// than `max_bytes` or nests deeper than `max_depth`; returns normally otherwise.
void CheckJsonText(std::string_view text, std::string_view field, size_t max_bytes,
                   int64_t max_depth = kMaxJsonNesting);

/// Parses client JSON text after CheckJsonText: `Json` is nlohmann::json or
/// nlohmann::ordered_json; a syntax error gives a discarded value (as
/// Json::parse(text, nullptr, false) does), a bound a JsonLimitError.
template <class Json>
Json ParseJsonBounded(std::string_view text, std::string_view field, size_t max_bytes,
                      int64_t max_depth = kMaxJsonNesting) {
  CheckJsonText(text, field, max_bytes, max_depth);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace tq
