// Tool-calling request fields and the forced-call grammar (see tool_request.h).
#include "server/http/tool_request.h"

#include <limits>
#include <set>

#include "engine/structured/grammar.h"
#include "engine/structured/json_schema.h"
#include "server/http/json_fields.h"
#include "server/http/openai_errors.h"

namespace tq::http {
namespace {

using nlohmann::json;

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

ToolFunction ParseTool(const json& tool, const std::string& param) {
  if (!tool.is_object())
    Fail("'" + param + "' must be an object, got " + JsonTypeName(tool), param);
  const auto type = GetString(tool, "type", param + ".type");
  if (type != "function") {
    Fail("'" + param + ".type' must be \"function\"" + (type ? ", got \"" + *type + "\"" : ""),
         param + ".type");
  }
  const json* fn = FindField(tool, "function");
  if (fn == nullptr || !fn->is_object()) {
    Fail("'" + param + ".function' must be an object", param + ".function");
  }
  const std::string fparam = param + ".function";
  ToolFunction out;
  const auto name = GetString(*fn, "name", fparam + ".name");
  if (!name) Fail("'" + fparam + ".name' is required", fparam + ".name");
  if (!ValidName(*name)) {
    Fail("'" + fparam + ".name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -, got \"" + *name + "\"",
         fparam + ".name");
  }
  out.name = *name;
  GetString(*fn, "description", fparam + ".description");
  GetBool(*fn, "strict", fparam + ".strict");
  const json* params = FindField(*fn, "parameters");
  if (params != nullptr && !params->is_object()) {
    Fail("'" + fparam + ".parameters' must be a JSON Schema object, got " + JsonTypeName(*params),
         fparam + ".parameters");
  }
  out.parameters = params != nullptr ? *params : json{{"type", "object"}};
  return out;
}

// The text of one call of `fn` in `format`, as grammar text with rule `call`
// (arguments from the prefixed rules of the parameters' grammar).
std::string CallRule(ToolCallFormat format, const ToolFunction& fn, const std::string& args_rule) {
  const std::string name = json(fn.name).dump();
  switch (format) {
    case ToolCallFormat::kHermes:
      return structured::GbnfLiteral("<tool_call>\n{\"name\": " + name + ", \"arguments\": ") +
             " " + args_rule + " " + structured::GbnfLiteral("}\n</tool_call>");
    case ToolCallFormat::kLlama3Json:
      return structured::GbnfLiteral("{\"name\": " + name + ", \"parameters\": ") + " " +
             args_rule + " " + structured::GbnfLiteral("}");
    case ToolCallFormat::kMistral:
      return structured::GbnfLiteral("{\"name\": " + name + ", \"arguments\": ") + " " + args_rule +
             " " + structured::GbnfLiteral("}");
    case ToolCallFormat::kNone:
      break;
  }
  Fail("this model's chat template has no tool-call format to constrain to", "tools");
}

bool IdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

}  // namespace

ToolSettings ParseToolSettings(const json& body) {
  ToolSettings out;
  if (const json* tools = FindField(body, "tools")) {
    if (!tools->is_array()) Fail("'tools' must be a list, got " + JsonTypeName(*tools), "tools");
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string param = "tools[" + std::to_string(i) + "]";
      out.functions.push_back(ParseTool((*tools)[i], param));
      if (!names.insert(out.functions.back().name).second) {
        Fail("'" + param + ".function.name' repeats \"" + out.functions.back().name + "\"",
             param + ".function.name");
      }
    }
  }
  out.choice = out.any() ? ToolSettings::Choice::kAuto : ToolSettings::Choice::kNone;
  if (const json* choice = FindField(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") {
        out.choice = ToolSettings::Choice::kNone;
      } else if (c == "auto") {
        out.choice = out.any() ? ToolSettings::Choice::kAuto : ToolSettings::Choice::kNone;
      } else if (c == "required") {
        out.choice = ToolSettings::Choice::kRequired;
      } else {
        Fail("'tool_choice' must be \"none\", \"auto\", \"required\" or a named function, got \"" +
                 c + "\"",
             "tool_choice");
      }
    } else if (choice->is_object()) {
      const auto type = GetString(*choice, "type", "tool_choice.type");
      const json* fn = FindField(*choice, "function");
      if (type != "function" || fn == nullptr || !fn->is_object()) {
        Fail("'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
             "tool_choice");
      }
      const auto name = GetString(*fn, "name", "tool_choice.function.name");
      if (!name) Fail("'tool_choice.function.name' is required", "tool_choice.function.name");
      out.choice = ToolSettings::Choice::kNamed;
      out.named = *name;
      bool known = false;
      for (const ToolFunction& f : out.functions) known = known || f.name == *name;
      if (!known) {
        Fail("'tool_choice' names function \"" + *name + "\", which is not in 'tools'",
             "tool_choice");
      }
    } else {
      Fail("'tool_choice' must be a string or an object, got " + JsonTypeName(*choice),
           "tool_choice");
    }
    if (out.choice == ToolSettings::Choice::kRequired && !out.any()) {
      Fail("'tool_choice' \"required\" needs a non-empty 'tools'", "tool_choice");
    }
  }
  out.parallel = GetBool(body, "parallel_tool_calls").value_or(true);
  return out;
}

nlohmann::ordered_json TemplateTools(std::string_view body_text, const ToolSettings& tools,
                                     const ChatTemplate& chat) {
  if (!tools.any()) return nullptr;
  if (!chat.uses_tools()) {
    Fail(
        "this model's chat template does not support tools (it does not use the 'tools' "
        "variable)",
        "tools");
  }
  if (tools.parse_output() && chat.tool_call_format() == ToolCallFormat::kNone) {
    Fail(
        "this model's chat template renders tools, but in a tool-call format tqserve cannot "
        "parse (known: Hermes <tool_call>, Llama 3 JSON, Mistral [TOOL_CALLS])",
        "tools");
  }
  // The body parsed again keeping key order: the template prints the tools
  // with tojson, which must show them as the client wrote them.
  // (ParseJsonBody has checked its nesting; the check is repeated here, as
  // for every parse of client text, and the size is the body limit's.)
  nlohmann::ordered_json body = ParseEmbeddedJson<nlohmann::ordered_json>(
      body_text, "tools", std::numeric_limits<size_t>::max());
  return body.is_object() && body.contains("tools") ? body["tools"] : nlohmann::ordered_json();
}

std::string PrefixGrammarRules(std::string_view text, std::string_view prefix) {
  std::string out;
  out.reserve(text.size() * 2);
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"' || c == '\'' || c == '[') {
      // A literal or a class: copy through its (unescaped) end.
      const char close = c == '[' ? ']' : c;
      size_t j = i + 1;
      while (j < text.size() && text[j] != close) j += text[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, text.size());
      out.append(text.substr(i, j - i));
      i = j;
    } else if (c == '#') {
      const size_t j = std::min(text.find('\n', i), text.size());
      out.append(text.substr(i, j - i));
      i = j;
    } else if (c == '{') {  // a repetition {m,n}
      const size_t j = std::min(text.find('}', i) + 1, text.size());
      out.append(text.substr(i, j - i));
      i = j;
    } else if (IdentChar(c)) {
      size_t j = i;
      while (j < text.size() && IdentChar(text[j])) ++j;
      out.append(prefix);
      out.append(text.substr(i, j - i));
      i = j;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

std::string ToolCallGrammar(ToolCallFormat format, const ToolSettings& tools) {
  std::string rules;
  std::string calls;  // alternatives of rule `call`
  for (size_t i = 0; i < tools.functions.size(); ++i) {
    const ToolFunction& fn = tools.functions[i];
    if (tools.choice == ToolSettings::Choice::kNamed && fn.name != tools.named) continue;
    const std::string prefix = "t" + std::to_string(i) + "-";
    std::string args;
    try {
      args = structured::JsonSchemaGrammar(fn.parameters);
    } catch (const structured::UnsupportedConstraint& e) {
      const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
      Fail(std::string(e.what()) + " (unsupported: '" + e.keyword() + "')", param);
    }
    rules += PrefixGrammarRules(args, prefix);
    rules += "\n";
    calls += (calls.empty() ? "" : " | ") + CallRule(format, fn, prefix + "root");
  }
  std::string root;
  const bool many = tools.parallel && tools.choice == ToolSettings::Choice::kRequired;
  switch (format) {
    case ToolCallFormat::kHermes:
      root = many ? "call (\"\\n\" call)*" : "call";
      break;
    case ToolCallFormat::kLlama3Json:
      root = many ? "call (\"; \" call)*" : "call";
      break;
    case ToolCallFormat::kMistral:
      root = "\"[TOOL_CALLS][\" call " + std::string(many ? "(\", \" call)* " : "") + "\"]\"";
      break;
    case ToolCallFormat::kNone:
      Fail("this model's chat template has no tool-call format to constrain to", "tools");
  }
  return "root ::= " + root + "\ncall ::= " + calls + "\n" + rules;
}

}  // namespace tq::http
