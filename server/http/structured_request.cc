// Structured-output request fields (see structured_request.h).
#include "server/http/structured_request.h"

#include <vector>

#include "engine/common/error.h"
#include "engine/structured/grammar.h"
#include "engine/structured/json_schema.h"
#include "server/http/json_fields.h"
#include "server/http/openai_errors.h"

namespace tq::http {
namespace {

using nlohmann::json;
using Kind = structured::ConstraintSpec::Kind;

// A schema given as an object or as JSON text (vLLM accepts both).
std::string SchemaText(const json& v, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    const json parsed =
        ParseEmbeddedJson<json>(v.get<std::string>(), param, structured::kMaxConstraintBytes);
    if (parsed.is_object() || parsed.is_boolean()) return parsed.dump();
  }
  Fail("'" + param + "' must be a JSON Schema object", param);
}

std::string StringOf(const json& v, const std::string& param) {
  if (!v.is_string()) Fail("'" + param + "' must be a string, got " + JsonTypeName(v), param);
  return v.get<std::string>();
}

std::string ChoicesOf(const json& v, const std::string& param) {
  if (!v.is_array() || v.empty())
    Fail("'" + param + "' must be a non-empty list of strings", param);
  for (const json& c : v) {
    if (!c.is_string()) Fail("'" + param + "' must be a non-empty list of strings", param);
  }
  return v.dump();
}

RequestConstraint Make(Kind kind, std::string text, std::string param) {
  RequestConstraint c;
  c.spec.kind = kind;
  c.spec.text = std::move(text);
  c.param = std::move(param);
  return c;
}

std::optional<RequestConstraint> FromResponseFormat(const json& body) {
  const json* rf = FindField(body, "response_format");
  if (rf == nullptr) return std::nullopt;
  if (!rf->is_object()) {
    Fail("'response_format' must be an object, got " + JsonTypeName(*rf), "response_format");
  }
  const auto type = GetString(*rf, "type", "response_format.type");
  if (!type) Fail("'response_format.type' is required", "response_format.type");
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") return Make(Kind::kJsonObject, "", "response_format");
  if (*type != "json_schema") {
    Fail("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"" +
             *type + "\"",
         "response_format.type");
  }
  const json* js = FindField(*rf, "json_schema");
  if (js == nullptr || !js->is_object()) {
    Fail("'response_format.json_schema' must be an object", "response_format.json_schema");
  }
  GetString(*js, "name", "response_format.json_schema.name");
  GetBool(*js, "strict", "response_format.json_schema.strict");
  const json* schema = FindField(*js, "schema");
  if (schema == nullptr) return Make(Kind::kJsonObject, "", "response_format");
  return Make(Kind::kJsonSchema, SchemaText(*schema, "response_format.json_schema.schema"),
              "response_format");
}

}  // namespace

std::optional<RequestConstraint> ParseConstraint(const json& body) {
  std::vector<RequestConstraint> found;
  if (auto c = FromResponseFormat(body)) found.push_back(std::move(*c));
  if (const json* v = FindField(body, "guided_json")) {
    found.push_back(Make(Kind::kJsonSchema, SchemaText(*v, "guided_json"), "guided_json"));
  }
  if (const json* v = FindField(body, "guided_regex")) {
    found.push_back(Make(Kind::kRegex, StringOf(*v, "guided_regex"), "guided_regex"));
  }
  if (const json* v = FindField(body, "guided_choice")) {
    found.push_back(Make(Kind::kChoice, ChoicesOf(*v, "guided_choice"), "guided_choice"));
  }
  if (const json* v = FindField(body, "guided_grammar")) {
    found.push_back(Make(Kind::kGrammar, StringOf(*v, "guided_grammar"), "guided_grammar"));
  }
  if (const json* so = FindField(body, "structured_outputs")) {
    if (!so->is_object()) {
      Fail("'structured_outputs' must be an object, got " + JsonTypeName(*so),
           "structured_outputs");
    }
    for (const auto& [key, value] : so->items()) {
      const std::string param = "structured_outputs." + key;
      if (value.is_null()) continue;
      if (key == "json") {
        found.push_back(Make(Kind::kJsonSchema, SchemaText(value, param), param));
      } else if (key == "regex") {
        found.push_back(Make(Kind::kRegex, StringOf(value, param), param));
      } else if (key == "choice") {
        found.push_back(Make(Kind::kChoice, ChoicesOf(value, param), param));
      } else if (key == "grammar") {
        found.push_back(Make(Kind::kGrammar, StringOf(value, param), param));
      } else if (key == "json_object") {
        if (!value.is_boolean()) Fail("'" + param + "' must be a boolean", param);
        if (value.get<bool>()) found.push_back(Make(Kind::kJsonObject, "", param));
      } else {
        Fail("'" + param + "' is not supported (json, regex, choice, grammar, json_object)", param);
      }
    }
  }
  if (found.empty()) return std::nullopt;
  if (found.size() > 1) {
    Fail("only one structured-output constraint may be set, got '" + found[0].param + "' and '" +
             found[1].param + "'",
         found[1].param);
  }
  return std::move(found[0]);
}

std::shared_ptr<const structured::CompiledGrammar> CompileConstraint(
    const RequestConstraint& c, structured::GrammarCache& cache) {
  try {
    return cache.Get(c.spec);
  } catch (const structured::UnsupportedConstraint& e) {
    throw ApiException(
        BadRequest(std::string(e.what()) + " (unsupported: '" + e.keyword() + "')", c.param));
  } catch (const Error& e) {
    throw ApiException(BadRequest(e.what(), c.param));
  }
}

}  // namespace tq::http
