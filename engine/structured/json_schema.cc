// JSON Schema -> grammar text (see json_schema.h). Each subschema becomes one
// rule; shared pieces (strings, numbers, any value) are fixed rules.
#include "engine/structured/json_schema.h"

#include <map>
#include <set>

#include "engine/structured/grammar.h"

namespace tq::structured {
namespace {

using nlohmann::json;

// The fixed rules every JSON grammar uses. Strings: one code point per char
// (a \u escape is one BMP non-surrogate code point, so lengths count as
// Python's len does).
constexpr const char* kBaseRules =
    R"(json-char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" json-u4)
json-hex ::= [0-9a-fA-F]
json-u4 ::= [0-9a-cA-C] json-hex json-hex json-hex | [dD] [0-7] json-hex json-hex | [e-fE-F] json-hex json-hex json-hex
json-string ::= "\"" json-char* "\""
json-int ::= "-"? ("0" | [1-9] [0-9]{0,15})
json-number ::= json-int ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
json-bool ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null
json-object ::= "{" (json-string ": " json-value (", " json-string ": " json-value)*)? "}"
json-array ::= "[" (json-value (", " json-value)*)? "]"
)";

const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {"title",    "description", "default",  "examples",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly",   "$defs",    "definitions"};
  return k;
}

// Formats as regular expressions over the string content (RFC 3339 dates and
// times, RFC 4122 UUIDs, dotted-quad IPv4, a simple e-mail address).
const std::map<std::string, std::string>& Formats() {
  static const std::map<std::string, std::string> k = {
      {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8]))"},
      {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"date-time",
       R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"uuid", R"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"},
      {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
      {"email", R"([a-z0-9]{1,20}(\.[a-z0-9]{1,20}){0,2}@[a-z0-9]{1,20}\.[a-z]{2,6})"},
  };
  return k;
}

[[noreturn]] void Unsupported(const std::string& keyword, const std::string& why) {
  throw UnsupportedConstraint(keyword, "JSON Schema: " + why);
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root) {}

  std::string Compile() {
    const std::string root = Rule(root_, "root", 0);
    std::string out = "root ::= " + root + "\n" + kBaseRules;
    for (const auto& r : rules_) out += r + "\n";
    return out;
  }

 private:
  std::string NewRule(const std::string& body) {
    const std::string name = "s" + std::to_string(rules_.size());
    rules_.push_back(name + " ::= " + body);
    return name;
  }

  // The rule body of `schema` at `path` (for messages).
  std::string Rule(const json& schema, const std::string& path, int depth) {
    if (depth > 64) Unsupported("schema", "nested too deeply at " + path);
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) Unsupported("false", "the schema false matches nothing at " + path);
      return "json-value";
    }
    if (!schema.is_object()) Unsupported("schema", "a schema must be an object at " + path);
    for (const auto& [key, value] : schema.items()) {
      static const std::set<std::string> known = {
          "type",      "properties",   "required", "additionalProperties",
          "enum",      "const",        "anyOf",    "oneOf",
          "allOf",     "items",        "minItems", "maxItems",
          "minLength", "maxLength",    "pattern",  "format",
          "$ref",      "propertyNames"};
      if (known.count(key) == 0 && Annotations().count(key) == 0) {
        Unsupported(key, "the keyword '" + key + "' is not supported (at " + path + ")");
      }
    }
    if (const auto it = schema.find("$ref"); it != schema.end()) {
      if (schema.size() > 1 && !OnlyAnnotationsBesides(schema, "$ref")) {
        Unsupported("$ref", "$ref next to other keywords is not supported (at " + path + ")");
      }
      return Ref(*it, path, depth);
    }
    if (const auto it = schema.find("const"); it != schema.end()) return GbnfLiteral(it->dump());
    if (const auto it = schema.find("enum"); it != schema.end()) {
      if (!it->is_array() || it->empty()) Unsupported("enum", "enum must be a non-empty list");
      std::vector<std::string> alts;
      for (const json& v : *it) alts.push_back(GbnfLiteral(v.dump()));
      return GbnfAlternatives(alts);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const auto it = schema.find(key); it != schema.end()) {
        if (!it->is_array() || it->empty()) Unsupported(key, std::string(key) + " must be a list");
        std::vector<std::string> alts;
        for (size_t i = 0; i < it->size(); ++i) {
          alts.push_back(
              NewRule(Rule((*it)[i], path + "/" + key + "/" + std::to_string(i), depth + 1)));
        }
        return GbnfAlternatives(alts);
      }
    }
    if (const auto it = schema.find("allOf"); it != schema.end()) {
      if (!it->is_array() || it->size() != 1) {
        Unsupported("allOf", "allOf with more than one schema is not supported (at " + path + ")");
      }
      return Rule((*it)[0], path + "/allOf/0", depth + 1);
    }
    std::vector<std::string> types;
    if (const auto it = schema.find("type"); it != schema.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array()) {
        for (const json& t : *it) {
          if (!t.is_string()) Unsupported("type", "type must be a string or list of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        Unsupported("type", "type must be a string or list of strings");
      }
    } else {
      // No type: infer it from the keywords present, else any value.
      if (schema.contains("properties") || schema.contains("additionalProperties") ||
          schema.contains("required")) {
        types.push_back("object");
      } else if (schema.contains("items") || schema.contains("minItems") ||
                 schema.contains("maxItems")) {
        types.push_back("array");
      } else if (schema.contains("minLength") || schema.contains("maxLength") ||
                 schema.contains("pattern") || schema.contains("format")) {
        types.push_back("string");
      } else {
        return "json-value";
      }
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) alts.push_back(Typed(schema, t, path, depth));
    return GbnfAlternatives(alts);
  }

  static bool OnlyAnnotationsBesides(const json& schema, const std::string& key) {
    for (const auto& [k, v] : schema.items()) {
      if (k != key && Annotations().count(k) == 0) return false;
    }
    return true;
  }

  std::string Ref(const json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) Unsupported("$ref", "$ref must be a string");
    const std::string r = ref.get<std::string>();
    if (r == "#") return "root";
    std::string section;
    if (r.rfind("#/$defs/", 0) == 0) {
      section = "$defs";
    } else if (r.rfind("#/definitions/", 0) == 0) {
      section = "definitions";
    } else {
      Unsupported("$ref", "only local $ref (#/$defs/NAME, #/definitions/NAME) is supported, got '" +
                              r + "'");
    }
    const std::string name = r.substr(section.size() + 3);
    if (const auto it = refs_.find(r); it != refs_.end()) return it->second;
    const auto defs = root_.find(section);
    if (defs == root_.end() || !defs->is_object() || !defs->contains(name)) {
      Unsupported("$ref", "$ref '" + r + "' names no definition");
    }
    // Reserve the rule first so that recursive references find it.
    const std::string rule = "s" + std::to_string(rules_.size());
    rules_.emplace_back();
    refs_[r] = rule;
    const size_t index = rules_.size() - 1;
    rules_[index] = rule + " ::= " + Rule((*defs)[name], r, depth + 1);
    (void)path;
    return rule;
  }

  static int64_t Count(const json& schema, const char* key, int64_t fallback) {
    const auto it = schema.find(key);
    if (it == schema.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      Unsupported(key, std::string(key) + " must be a non-negative integer");
    }
    if (it->get<int64_t>() > kMaxRepetition) {
      Unsupported(
          key, std::string(key) + " above " + std::to_string(kMaxRepetition) + " is not supported");
    }
    return it->get<int64_t>();
  }

  static std::string Bounds(int64_t min, int64_t max) {
    if (max < 0) return min == 0 ? "*" : min == 1 ? "+" : "{" + std::to_string(min) + ",}";
    return "{" + std::to_string(min) + "," + std::to_string(max) + "}";
  }

  std::string Typed(const json& schema, const std::string& type, const std::string& path,
                    int depth) {
    if (type == "string") return String(schema, path);
    if (type == "integer") return "json-int";
    if (type == "number") return "json-number";
    if (type == "boolean") return "json-bool";
    if (type == "null") return "json-null";
    if (type == "array") return Array(schema, path, depth);
    if (type == "object") return Object(schema, path, depth);
    Unsupported("type", "unknown type '" + type + "'");
  }

  std::string String(const json& schema, const std::string& path) {
    const int64_t min = Count(schema, "minLength", 0);
    const int64_t max = Count(schema, "maxLength", -1);
    if (max >= 0 && max < min) Unsupported("maxLength", "maxLength < minLength at " + path);
    const auto pattern = schema.find("pattern");
    const auto format = schema.find("format");
    if (pattern != schema.end() || format != schema.end()) {
      if (schema.contains("minLength") || schema.contains("maxLength")) {
        Unsupported(pattern != schema.end() ? "pattern" : "format",
                    "pattern/format together with minLength/maxLength is not supported");
      }
      if (pattern != schema.end() && format != schema.end()) {
        Unsupported("format", "pattern together with format is not supported");
      }
      std::string regex;
      if (pattern != schema.end()) {
        if (!pattern->is_string()) Unsupported("pattern", "pattern must be a string");
        regex = pattern->get<std::string>();
      } else {
        if (!format->is_string() || Formats().count(format->get<std::string>()) == 0) {
          Unsupported("format",
                      "format '" +
                          (format->is_string() ? format->get<std::string>() : format->dump()) +
                          "' is not supported");
        }
        regex = Formats().at(format->get<std::string>());
      }
      try {
        return NewRule(RegexJsonStringBody(regex));
      } catch (const UnsupportedConstraint& e) {
        throw UnsupportedConstraint(pattern != schema.end() ? "pattern" : "format", e.what());
      }
    }
    if (min == 0 && max < 0) return "json-string";
    return NewRule("\"\\\"\" json-char" + Bounds(min, max) + " \"\\\"\"");
  }

  std::string Array(const json& schema, const std::string& path, int depth) {
    const int64_t min = Count(schema, "minItems", 0);
    const int64_t max = Count(schema, "maxItems", -1);
    if (max >= 0 && max < min) Unsupported("maxItems", "maxItems < minItems at " + path);
    std::string item = "json-value";
    if (const auto it = schema.find("items"); it != schema.end()) {
      if (it->is_array()) Unsupported("items", "items as a list (tuples) is not supported");
      item = NewRule(Rule(*it, path + "/items", depth + 1));
    }
    if (max == 0) return "\"[]\"";
    const std::string rest =
        "(\", \" " + item + ")" + Bounds(min > 0 ? min - 1 : 0, max - (max > 0));
    const std::string body = item + " " + rest;
    if (min == 0) return NewRule("\"[\" (" + body + ")? \"]\"");
    return NewRule("\"[\" " + body + " \"]\"");
  }

  std::string Object(const json& schema, const std::string& path, int depth) {
    const auto props = schema.find("properties");
    std::set<std::string> required;
    if (const auto it = schema.find("required"); it != schema.end()) {
      if (!it->is_array()) Unsupported("required", "required must be a list of names");
      for (const json& r : *it) {
        if (!r.is_string()) Unsupported("required", "required must be a list of names");
        required.insert(r.get<std::string>());
      }
    }
    const auto additional = schema.find("additionalProperties");
    if (props == schema.end() || props->empty()) {
      for (const std::string& r : required) {
        (void)r;
        Unsupported("required", "required names no property in 'properties' (at " + path + ")");
      }
      if (additional != schema.end() && additional->is_boolean() && !additional->get<bool>()) {
        return "\"{}\"";
      }
      std::string value = "json-value";
      if (additional != schema.end() && additional->is_object()) {
        value = NewRule(Rule(*additional, path + "/additionalProperties", depth + 1));
      }
      std::string key = "json-string";
      if (const auto names = schema.find("propertyNames"); names != schema.end()) {
        // Keys are strings: only string keywords are meaningful here.
        if (!names->is_object()) Unsupported("propertyNames", "propertyNames must be a schema");
        for (const auto& [k, v] : names->items()) {
          const bool string_keyword = k == "minLength" || k == "maxLength" || k == "pattern" ||
                                      k == "format" || (k == "type" && v == "string") ||
                                      Annotations().count(k) > 0;
          if (!string_keyword) {
            Unsupported("propertyNames", "propertyNames with '" + k + "' is not supported");
          }
        }
        key = NewRule(String(*names, path + "/propertyNames"));
      }
      const std::string pair = key + " \": \" " + value;
      return NewRule("\"{\" (" + pair + " (\", \" " + pair + ")*)? \"}\"");
    }
    if (!props->is_object()) Unsupported("properties", "properties must be an object");
    if (schema.contains("propertyNames")) {
      Unsupported("propertyNames", "propertyNames next to properties is not supported");
    }
    if (additional != schema.end() && !additional->is_boolean() && !additional->is_object()) {
      Unsupported("additionalProperties", "additionalProperties must be a boolean or a schema");
    }
    for (const std::string& r : required) {
      if (!props->contains(r)) {
        Unsupported("required",
                    "required property '" + r + "' is not in 'properties' (at " + path + ")");
      }
    }
    // Properties in schema order. tail[k][c]: the properties from k on, where
    // c says whether one was written already (so a ", " comes first).
    std::vector<std::pair<std::string, std::string>> list;  // (key literal, value rule)
    std::vector<bool> is_required;
    for (const auto& [key, value] : props->items()) {
      list.emplace_back(GbnfLiteral(json(key).dump()),
                        NewRule(Rule(value, path + "/properties/" + key, depth + 1)));
      is_required.push_back(required.count(key) > 0);
    }
    std::string next[2] = {"\"\"", "\"\""};
    for (size_t k = list.size(); k-- > 0;) {
      std::string cur[2];
      for (int c = 0; c < 2; ++c) {
        const std::string prop =
            (c ? "\", \" " : "") + list[k].first + " \": \" " + list[k].second + " " + next[1];
        cur[c] = NewRule(is_required[k] ? prop : prop + " | " + next[c]);
      }
      next[0] = cur[0];
      next[1] = cur[1];
    }
    return NewRule("\"{\" " + next[0] + " \"}\"");
  }

  const json& root_;
  std::vector<std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

std::string JsonSchemaGrammar(const json& schema) {
  return SchemaCompiler(schema).Compile();
}

std::string JsonObjectGrammar() {
  return std::string("root ::= json-object\n") + kBaseRules;
}

}  // namespace tq::structured
