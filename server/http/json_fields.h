// Typed access to the fields of a JSON request body, with OpenAI errors.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/common/json_limits.h"

namespace tq::http {

/// Every getter below reads member `name` of `obj` (a JSON object) and treats
/// an absent member and an explicit null alike (OpenAI's "not set"). A value
/// of the wrong type or outside [min, max] throws ApiException: 400
/// invalid_request_error with param = `param` (default: `name`) and a message
/// naming the field, the expectation and (briefly) what was sent.

/// Throws that ApiException with `message` and `param`.
[[noreturn]] void Fail(std::string message, std::string_view param);

/// The member, or nullptr when absent or null.
const nlohmann::json* FindField(const nlohmann::json& obj, std::string_view name);

/// An integer in [min, max]. Floats with an integral value (16.0) are accepted,
/// as pydantic's lax mode does for vLLM; booleans are not numbers.
std::optional<int64_t> GetInt(const nlohmann::json& obj, std::string_view name,
                              int64_t min = std::numeric_limits<int32_t>::min(),
                              int64_t max = std::numeric_limits<int32_t>::max(),
                              std::string_view param = {});
/// A finite number (1e999 parses to infinity and is rejected here).
std::optional<double> GetNumber(const nlohmann::json& obj, std::string_view name,
                                std::string_view param = {});
std::optional<bool> GetBool(const nlohmann::json& obj, std::string_view name,
                            std::string_view param = {});
std::optional<std::string> GetString(const nlohmann::json& obj, std::string_view name,
                                     std::string_view param = {});
/// A string or a list of strings (OpenAI `stop`): at most `max_items`.
std::vector<std::string> GetStringOrList(const nlohmann::json& obj, std::string_view name,
                                         size_t max_items);
/// A list of integers in [min, max] (`stop_token_ids`, `tokens`).
std::vector<int32_t> GetIntList(const nlohmann::json& obj, std::string_view name, int32_t min,
                                int32_t max, std::string_view param = {});

/// An integer element of a list: `value` must be an integer in [min, max];
/// `param` names it in errors (e.g. "prompt[1][3]").
int32_t ToInt32(const nlohmann::json& value, int32_t min, int32_t max, const std::string& param);

/// The deepest nesting of arrays and objects in JSON text (brackets inside
/// strings do not count); for rejecting absurd bodies before parsing
/// (tq::JsonTextDepth).
int64_t JsonNestingDepth(std::string_view text);
/// Deeper request bodies are refused (no OpenAI request nests beyond ~6).
inline constexpr int64_t kMaxJsonDepth = tq::kMaxJsonNesting;

/// JSON text inside a string field `param` (a schema as text, tool-call
/// arguments): checked against the nesting bound (kMaxJsonDepth) and
/// `max_bytes` before it is parsed, so no value too deep for the recursive
/// code that copies, prints or compiles it is built; over a bound, a 400
/// naming `param` and the limit. A syntax error gives a discarded value.
/// `Json`: nlohmann::json or nlohmann::ordered_json.
template <class Json>
Json ParseEmbeddedJson(std::string_view text, std::string_view param, size_t max_bytes) {
  try {
    return tq::ParseJsonBounded<Json>(text, param, max_bytes, kMaxJsonDepth);
  } catch (const tq::JsonLimitError& e) {
    Fail(e.what(), param);
  }
}

/// JSON type name for error messages ("string", "array", "integer", ...).
std::string JsonTypeName(const nlohmann::json& value);

}  // namespace tq::http
