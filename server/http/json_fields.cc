// Typed access to request fields (see json_fields.h).
#include "server/http/json_fields.h"

#include <algorithm>
#include <cmath>

#include "server/http/openai_errors.h"
#include "server/text/tool_calls.h"

namespace tq::http {
namespace {

using nlohmann::json;

std::string_view ParamOr(std::string_view param, std::string_view name) {
  return param.empty() ? name : param;
}

// The value as an int64 when it is an integer (or an integral float) that
// fits; nullopt otherwise. `*too_large` tells an out-of-range integer apart
// from a non-integer.
std::optional<int64_t> AsInt64(const json& value, bool* too_large) {
  *too_large = false;
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<int64_t>();
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(u);
    }
    *too_large = true;
    return std::nullopt;
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return std::nullopt;
    // 2^63 is the first double above int64. Below, nlohmann reads an integer
    // literal under -2^63 (-9223372036854775809) as a double, which rounds
    // to -2^63 itself: a double at -2^63 may stand for a literal out of
    // range, so it is refused too (-2^63 written as an integer is kept).
    if (d >= 9223372036854775808.0 || d <= -9223372036854775808.0) {
      *too_large = true;
      return std::nullopt;
    }
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

int64_t CheckedInt(const json& value, int64_t min, int64_t max, std::string_view param) {
  bool too_large = false;
  const std::optional<int64_t> v = AsInt64(value, &too_large);
  if (!v && !too_large) {
    Fail("'" + std::string(param) + "' must be an integer, got " + JsonTypeName(value), param);
  }
  if (!v || *v < min || *v > max) {
    const std::string got = v ? std::to_string(*v) : "a number out of range";
    Fail("'" + std::string(param) + "' must be an integer in [" + std::to_string(min) + ", " +
             std::to_string(max) + "], got " + got,
         param);
  }
  return *v;
}

}  // namespace

void Fail(std::string message, std::string_view param) {
  throw ApiException(BadRequest(std::move(message), std::string(param)));
}

std::string JsonTypeName(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "object";
    case json::value_t::array:
      return "array";
    case json::value_t::string:
      return "string";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return std::isfinite(value.get<double>()) ? "number" : "a non-finite number";
    default:
      return "an unsupported value";
  }
}

int64_t JsonNestingDepth(std::string_view text) {
  return tq::JsonTextDepth(text);
}

const json* FindField(const json& obj, std::string_view name) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> GetInt(const json& obj, std::string_view name, int64_t min, int64_t max,
                              std::string_view param) {
  const json* value = FindField(obj, name);
  if (value == nullptr) return std::nullopt;
  return CheckedInt(*value, min, max, ParamOr(param, name));
}

int32_t ToInt32(const json& value, int32_t min, int32_t max, const std::string& param) {
  return static_cast<int32_t>(CheckedInt(value, min, max, param));
}

std::optional<double> GetNumber(const json& obj, std::string_view name, std::string_view param) {
  const json* value = FindField(obj, name);
  if (value == nullptr) return std::nullopt;
  param = ParamOr(param, name);
  if (!value->is_number() || !std::isfinite(value->get<double>())) {
    Fail("'" + std::string(param) + "' must be a finite number, got " + JsonTypeName(*value),
         param);
  }
  return value->get<double>();
}

std::optional<bool> GetBool(const json& obj, std::string_view name, std::string_view param) {
  const json* value = FindField(obj, name);
  if (value == nullptr) return std::nullopt;
  param = ParamOr(param, name);
  if (!value->is_boolean()) {
    Fail("'" + std::string(param) + "' must be a boolean, got " + JsonTypeName(*value), param);
  }
  return value->get<bool>();
}

std::optional<std::string> GetString(const json& obj, std::string_view name,
                                     std::string_view param) {
  const json* value = FindField(obj, name);
  if (value == nullptr) return std::nullopt;
  param = ParamOr(param, name);
  if (!value->is_string()) {
    Fail("'" + std::string(param) + "' must be a string, got " + JsonTypeName(*value), param);
  }
  return value->get<std::string>();
}

std::vector<std::string> GetStringOrList(const json& obj, std::string_view name, size_t max_items) {
  const json* value = FindField(obj, name);
  if (value == nullptr) return {};
  const std::string param(name);
  if (value->is_string()) return {value->get<std::string>()};
  if (!value->is_array()) {
    Fail("'" + param + "' must be a string or a list of strings, got " + JsonTypeName(*value),
         param);
  }
  if (value->size() > max_items) {
    Fail("'" + param + "' may hold at most " + std::to_string(max_items) + " strings, got " +
             std::to_string(value->size()),
         param);
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < value->size(); ++i) {
    const json& item = (*value)[i];
    if (!item.is_string()) {
      Fail("'" + param + "[" + std::to_string(i) + "]' must be a string, got " + JsonTypeName(item),
           param);
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::vector<int32_t> GetIntList(const json& obj, std::string_view name, int32_t min, int32_t max,
                                std::string_view param) {
  const json* value = FindField(obj, name);
  if (value == nullptr) return {};
  const std::string p(ParamOr(param, name));
  if (!value->is_array()) {
    Fail("'" + p + "' must be a list of integers, got " + JsonTypeName(*value), p);
  }
  std::vector<int32_t> out;
  out.reserve(value->size());
  for (size_t i = 0; i < value->size(); ++i) {
    out.push_back(ToInt32((*value)[i], min, max, p + "[" + std::to_string(i) + "]"));
  }
  return out;
}

}  // namespace tq::http
