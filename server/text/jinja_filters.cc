// Filters, tests and globals of the Jinja subset, each as jinja2 3.1
// defines it (jinja2/filters.py, tests.py, defaults.py), except `tojson`,
// which is Hugging Face's (see ToJson in jinja_value.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "server/text/jinja_ast.h"
#include "server/text/jinja_builtins.h"
#include "server/text/jinja_strings.h"

namespace tq::jinja {
namespace {

using Type = Value::Type;
using FilterFn = Value (*)(const Value&, const CallArgs&);
using TestFn = bool (*)(const Value&, const CallArgs&);

const Value* Opt(const CallArgs& a, size_t i, std::string_view name) {
  const Value* v = a.Get(i, name);
  return v != nullptr && !v->is_none() ? v : nullptr;
}

const Value& Required(const CallArgs& a, size_t i, std::string_view name) {
  const Value* v = a.Get(i, name);
  if (v == nullptr) throw RenderError("missing required argument '" + std::string(name) + "'");
  return *v;
}

std::string StrArg(const CallArgs& a, size_t i, std::string_view name) {
  const Value& v = Required(a, i, name);
  if (!v.is_string()) throw RenderError("argument '" + std::string(name) + "' must be str");
  return v.str();
}

int64_t IntArg(const CallArgs& a, size_t i, std::string_view name, int64_t def) {
  const Value* v = Opt(a, i, name);
  if (v == nullptr) return def;
  if (v->type() != Type::kInt)
    throw RenderError("argument '" + std::string(name) + "' must be int");
  return v->int_value();
}

// Positional arguments from `first` on, for filters that pass them along.
CallArgs Rest(const CallArgs& a, size_t first) {
  CallArgs rest;
  for (size_t i = first; i < a.positional.size(); ++i) rest.positional.push_back(a.positional[i]);
  rest.keyword = a.keyword;
  return rest;
}

// jinja2's make_attrgetter: "a.b" and integer parts ("0") look up in turn.
Value Attr(const Value& item, const std::string& path) {
  Value v = item;
  for (const std::string& part : PySplit(path, std::string_view("."), -1)) {
    // At most 18 digits fit int64_t; a longer index is no item of anything
    // (jinja2: undefined), so it is looked up as a key (std::stoll threw
    // out_of_range; found by fuzz_chat_template).
    const bool digits = !part.empty() && part.size() <= 18 &&
                        part.find_first_not_of("0123456789") == std::string::npos;
    v = digits ? GetItem(v, Value(static_cast<int64_t>(std::stoll(part))))
               : GetItem(v, Value(part));
  }
  return v;
}

std::optional<double> ParseNumber(const std::string& s, bool integer) {
  const std::string t = PyStrip(s, std::nullopt, true, true);
  if (t.empty()) return std::nullopt;
  size_t used = 0;
  try {
    const double d = integer ? static_cast<double>(std::stoll(t, &used)) : std::stod(t, &used);
    if (used == t.size()) return d;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// select/reject/selectattr/rejectattr: keep items whose (attribute) passes
// the named test, or is truthy without one.
Value Select(const Value& seq, const CallArgs& a, bool by_attr, bool keep_if) {
  const std::string attr = by_attr ? StrArg(a, 0, "attribute") : "";
  const size_t test_at = by_attr ? 1 : 0;
  std::vector<Value> out;
  for (const Value& item : seq.Iterate()) {
    const Value subject = by_attr ? Attr(item, attr) : item;
    bool pass;
    if (a.positional.size() > test_at) {
      if (!a.positional[test_at].is_string() || !IsKnownTest(a.positional[test_at].str())) {
        throw RenderError("no test named " + a.positional[test_at].Repr());
      }
      pass = ApplyTest(a.positional[test_at].str(), subject, Rest(a, test_at + 1));
    } else {
      pass = subject.Truthy();
    }
    if (pass == keep_if) out.push_back(item);
  }
  return Value::List(std::move(out));
}

const std::map<std::string, FilterFn, std::less<>>& Filters() {
  static const std::map<std::string, FilterFn, std::less<>> filters = {
      {"abs",
       [](const Value& v, const CallArgs&) -> Value {
         if (v.type() == Type::kFloat) return std::fabs(v.AsDouble());
         return UnaryOp(v.is_number() && v.AsDouble() < 0 ? "-" : "+", v);  // errors as abs()
       }},
      {"capitalize",
       [](const Value& v, const CallArgs&) -> Value { return PyCapitalize(v.Str()); }},
      {"count", [](const Value& v, const CallArgs&) -> Value { return v.Length(); }},
      {"default",
       [](const Value& v, const CallArgs& a) -> Value {
         const Value* def = a.Get(0, "default_value");
         const Value* boolean = a.Get(1, "boolean");
         const bool use =
             v.is_undefined() || (boolean != nullptr && boolean->Truthy() && !v.Truthy());
         return use ? (def != nullptr ? *def : Value("")) : v;
       }},
      {"first",
       [](const Value& v, const CallArgs&) -> Value {
         const std::vector<Value> items = v.Iterate();
         return items.empty() ? Value::Undefined("No first item, sequence was empty.")
                              : items.front();
       }},
      {"float",
       [](const Value& v, const CallArgs& a) -> Value {
         if (v.is_number()) return v.AsDouble();
         const Value* def = a.Get(0, "default");
         const std::optional<double> d = v.is_string() ? ParseNumber(v.str(), false) : std::nullopt;
         return d ? Value(*d) : (def != nullptr ? *def : Value(0.0));
       }},
      {"int",
       [](const Value& v, const CallArgs& a) -> Value {
         if (v.type() == Type::kFloat) return static_cast<int64_t>(std::trunc(v.AsDouble()));
         if (v.is_number()) return UnaryOp("+", v);
         std::optional<double> d = v.is_string() ? ParseNumber(v.str(), true) : std::nullopt;
         if (!d && v.is_string()) d = ParseNumber(v.str(), false);
         const Value* def = a.Get(0, "default");
         return d ? Value(static_cast<int64_t>(std::trunc(*d)))
                  : (def != nullptr ? *def : Value(0));
       }},
      {"items",
       [](const Value& v, const CallArgs&) -> Value {
         if (v.is_undefined()) return Value::List({});
         if (!v.is_dict() || v.is_namespace())
           throw RenderError("Can only get item pairs from a mapping.");
         return GetAttr(v, "items").func()(CallArgs{});
       }},
      {"join",
       [](const Value& v, const CallArgs& a) -> Value {
         const Value* sep = Opt(a, 0, "d");
         const Value* attr = Opt(a, 1, "attribute");
         std::string out;
         bool first = true;
         for (const Value& item : v.Iterate()) {
           if (!first && sep != nullptr) out += sep->Str();
           out += (attr != nullptr ? Attr(item, attr->Str()) : item).Str();
           first = false;
         }
         return out;
       }},
      {"last",
       [](const Value& v, const CallArgs&) -> Value {
         const std::vector<Value> items = v.Iterate();
         return items.empty() ? Value::Undefined("No last item, sequence was empty.")
                              : items.back();
       }},
      {"length", [](const Value& v, const CallArgs&) -> Value { return v.Length(); }},
      {"list", [](const Value& v, const CallArgs&) -> Value { return Value::List(v.Iterate()); }},
      {"lower", [](const Value& v, const CallArgs&) -> Value { return PyLower(v.Str()); }},
      {"map",
       [](const Value& v, const CallArgs& a) -> Value {
         std::vector<Value> out;
         const Value* attr = a.Get(SIZE_MAX, "attribute");
         if (attr == nullptr && (a.positional.empty() || !a.positional[0].is_string() ||
                                 !IsKnownFilter(a.positional[0].str()))) {
           throw RenderError("map requires a filter name or attribute=");
         }
         for (const Value& item : v.Iterate()) {
           if (attr != nullptr) {
             Value got = Attr(item, attr->Str());
             const Value* def = a.Get(SIZE_MAX, "default");
             out.push_back(got.is_undefined() && def != nullptr ? *def : got);
           } else {
             out.push_back(ApplyFilter(a.positional[0].str(), item, Rest(a, 1)));
           }
         }
         return Value::List(std::move(out));
       }},
      {"reject", [](const Value& v, const CallArgs& a) { return Select(v, a, false, false); }},
      {"rejectattr", [](const Value& v, const CallArgs& a) { return Select(v, a, true, false); }},
      {"replace",
       [](const Value& v, const CallArgs& a) -> Value {
         return PyReplace(v.Str(), StrArg(a, 0, "old"), StrArg(a, 1, "new"),
                          IntArg(a, 2, "count", -1));
       }},
      {"reverse",
       [](const Value& v, const CallArgs&) -> Value {
         std::vector<Value> items = v.Iterate();
         std::reverse(items.begin(), items.end());
         if (!v.is_string()) return Value::List(std::move(items));
         std::string out;
         for (const Value& c : items) out += c.str();
         return out;
       }},
      {"safe", [](const Value& v, const CallArgs&) -> Value { return v; }},
      {"select", [](const Value& v, const CallArgs& a) { return Select(v, a, false, true); }},
      {"selectattr", [](const Value& v, const CallArgs& a) { return Select(v, a, true, true); }},
      {"string", [](const Value& v, const CallArgs&) -> Value { return v.Str(); }},
      {"title", [](const Value& v, const CallArgs&) -> Value { return PyTitle(v.Str()); }},
      {"tojson",
       [](const Value& v, const CallArgs& a) -> Value {
         // transformers' signature: tojson(x, ensure_ascii=False, indent=None,
         // separators=None, sort_keys=False); only indent and sort_keys here.
         for (const auto& [key, value] : a.keyword) {
           if (key != "indent" && key != "sort_keys") {
             throw RenderError("tojson: argument '" + key + "' is not supported");
           }
         }
         if (!a.positional.empty()) throw RenderError("tojson: pass indent= or sort_keys= by name");
         const Value* sort = a.Get(3, "sort_keys");
         return ToJson(v, static_cast<int>(IntArg(a, 1, "indent", -1)),
                       sort != nullptr && sort->Truthy());
       }},
      {"trim",
       [](const Value& v, const CallArgs& a) -> Value {
         const Value* chars = Opt(a, 0, "chars");
         return PyStrip(v.Str(),
                        chars ? std::optional<std::string_view>(chars->Str()) : std::nullopt, true,
                        true);
       }},
      {"upper", [](const Value& v, const CallArgs&) -> Value { return PyUpper(v.Str()); }},
  };
  return filters;
}

bool DivisibleBy(const Value& v, const CallArgs& a) {
  const Value& n = Required(a, 0, "num");
  return Value::Equal(BinaryOp("%", v, n), Value(0));
}

const std::map<std::string, TestFn, std::less<>>& Tests() {
  static const std::map<std::string, TestFn, std::less<>> tests = {
      {"boolean", [](const Value& v, const CallArgs&) { return v.type() == Type::kBool; }},
      {"callable", [](const Value& v, const CallArgs&) { return v.type() == Type::kFunction; }},
      {"defined", [](const Value& v, const CallArgs&) { return !v.is_undefined(); }},
      {"divisibleby", DivisibleBy},
      {"eq",
       [](const Value& v, const CallArgs& a) { return Value::Equal(v, Required(a, 0, "other")); }},
      {"equalto",
       [](const Value& v, const CallArgs& a) { return Value::Equal(v, Required(a, 0, "other")); }},
      {"even", [](const Value& v,
                  const CallArgs&) { return Value::Equal(BinaryOp("%", v, Value(2)), Value(0)); }},
      {"false",
       [](const Value& v, const CallArgs&) { return v.type() == Type::kBool && !v.bool_value(); }},
      {"float", [](const Value& v, const CallArgs&) { return v.type() == Type::kFloat; }},
      {"ge", [](const Value& v,
                const CallArgs& a) { return Value::Compare(v, Required(a, 0, "other")) >= 0; }},
      {"gt", [](const Value& v,
                const CallArgs& a) { return Value::Compare(v, Required(a, 0, "other")) > 0; }},
      {"in", [](const Value& v, const CallArgs& a) { return Contains(Required(a, 0, "seq"), v); }},
      {"integer", [](const Value& v, const CallArgs&) { return v.type() == Type::kInt; }},
      {"iterable",
       [](const Value& v, const CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() ||
                (v.is_dict() && !v.is_namespace());
       }},
      {"le", [](const Value& v,
                const CallArgs& a) { return Value::Compare(v, Required(a, 0, "other")) <= 0; }},
      {"lt", [](const Value& v,
                const CallArgs& a) { return Value::Compare(v, Required(a, 0, "other")) < 0; }},
      {"mapping", [](const Value& v, const CallArgs&) { return v.is_dict() && !v.is_namespace(); }},
      {"ne",
       [](const Value& v, const CallArgs& a) { return !Value::Equal(v, Required(a, 0, "other")); }},
      {"none", [](const Value& v, const CallArgs&) { return v.is_none(); }},
      {"number", [](const Value& v, const CallArgs&) { return v.is_number(); }},
      {"odd", [](const Value& v,
                 const CallArgs&) { return Value::Equal(BinaryOp("%", v, Value(2)), Value(1)); }},
      {"sameas",
       [](const Value& v, const CallArgs& a) {
         const Value& o = Required(a, 0, "other");
         // Identity: singletons compare by value, containers by object.
         if (v.type() != o.type()) return false;
         if (v.is_list()) return &v.list() == &o.list();
         if (v.is_dict()) return &v.dict() == &o.dict();
         return Value::Equal(v, o);
       }},
      {"sequence",
       [](const Value& v, const CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() ||
                (v.is_dict() && !v.is_namespace());
       }},
      {"string", [](const Value& v, const CallArgs&) { return v.is_string(); }},
      {"true",
       [](const Value& v, const CallArgs&) { return v.type() == Type::kBool && v.bool_value(); }},
      {"undefined", [](const Value& v, const CallArgs&) { return v.is_undefined(); }},
  };
  return tests;
}

// Aliases jinja2 registers under a second name.
std::string_view Canonical(std::string_view name) {
  if (name == "d") return "default";
  if (name == "==") return "eq";
  if (name == "!=") return "ne";
  if (name == "lessthan") return "lt";
  if (name == "greaterthan") return "gt";
  return name;
}

}  // namespace

bool IsKnownFilter(const std::string& name) {
  return Filters().count(Canonical(name)) > 0;
}

bool IsKnownTest(const std::string& name) {
  return Tests().count(Canonical(name)) > 0;
}

Value ApplyFilter(const std::string& name, const Value& value, const CallArgs& args) {
  const auto it = Filters().find(Canonical(name));
  if (it == Filters().end()) throw RenderError("no filter named '" + name + "'");
  return it->second(value, args);
}

bool ApplyTest(const std::string& name, const Value& value, const CallArgs& args) {
  const auto it = Tests().find(Canonical(name));
  if (it == Tests().end()) throw RenderError("no test named '" + name + "'");
  return it->second(value, args);
}

std::vector<std::pair<std::string, Value>> BuiltinGlobals() {
  std::vector<std::pair<std::string, Value>> globals;
  globals.emplace_back("range", Value::Func([](const CallArgs& a) -> Value {
                         std::vector<int64_t> p;
                         for (const Value& v : a.positional) {
                           if (v.type() != Type::kInt)
                             throw RenderError("range() arguments must be int");
                           p.push_back(v.int_value());
                         }
                         if (p.empty() || p.size() > 3)
                           throw RenderError("range expected 1 to 3 arguments");
                         const int64_t start = p.size() == 1 ? 0 : p[0];
                         const int64_t stop = p.size() == 1 ? p[0] : p[1];
                         const int64_t step = p.size() == 3 ? p[2] : 1;
                         if (step == 0) throw RenderError("range() arg 3 must not be zero");
                         std::vector<Value> out;
                         for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                           // jinja2's sandbox caps ranges (MAX_RANGE).
                           if (out.size() >= 100000) throw RenderError("Range too big.");
                           out.emplace_back(i);
                         }
                         return Value::List(std::move(out));
                       }));
  const auto make_dict = [](const CallArgs& a, bool ns) -> Value {
    Value d = ns ? Value::Namespace() : Value::Dict();
    if (a.positional.size() > 1) throw RenderError("expected at most 1 positional argument");
    if (!a.positional.empty()) {
      if (!a.positional[0].is_dict()) throw RenderError("positional argument must be a dict");
      for (const auto& [k, v] : a.positional[0].dict().items) d.mutable_dict().Set(k, v);
    }
    for (const auto& [k, v] : a.keyword) d.mutable_dict().Set(k, v);
    return d;
  };
  globals.emplace_back("namespace",
                       Value::Func([make_dict](const CallArgs& a) { return make_dict(a, true); }));
  globals.emplace_back("dict",
                       Value::Func([make_dict](const CallArgs& a) { return make_dict(a, false); }));
  return globals;
}

}  // namespace tq::jinja
