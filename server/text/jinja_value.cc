// Python semantics of jinja values (see jinja_value.h).
#include "server/text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "server/text/jinja_strings.h"

namespace tq::jinja {

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return index < positional.size() ? &positional[index] : nullptr;
}

const Value* Value::DictData::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::DictData::Set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::Undefined(std::string hint) {
  Value v;
  v.v_ = UndefinedData{std::move(hint)};
  return v;
}

Value Value::None() {
  Value v;
  v.v_ = NoneData{};
  return v;
}

Value Value::List(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.v_ = std::make_shared<ListData>(ListData{std::move(items), is_tuple});
  return v;
}

Value Value::Dict(std::vector<std::pair<std::string, Value>> items) {
  Value v;
  v.v_ = std::make_shared<DictData>(DictData{std::move(items), false});
  return v;
}

Value Value::Namespace(std::vector<std::pair<std::string, Value>> items) {
  Value v;
  v.v_ = std::make_shared<DictData>(DictData{std::move(items), true});
  return v;
}

Value Value::Func(Function f) {
  Value v;
  v.v_ = std::make_shared<Function>(std::move(f));
  return v;
}

double Value::AsDouble() const {
  switch (type()) {
    case Type::kBool:
      return bool_value() ? 1.0 : 0.0;
    case Type::kInt:
      return static_cast<double>(int_value());
    case Type::kFloat:
      return std::get<double>(v_);
    default:
      throw RenderError("expected a number, got " + TypeName());
  }
}

bool Value::Truthy() const {
  switch (type()) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
      return bool_value();
    case Type::kInt:
      return int_value() != 0;
    case Type::kFloat:
      return AsDouble() != 0.0;
    case Type::kString:
      return !str().empty();
    case Type::kList:
      return !list().empty();
    case Type::kDict:
      return dict().is_namespace || !dict().items.empty();
    case Type::kFunction:
      return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (type()) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "NoneType";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kList:
      return is_tuple() ? "tuple" : "list";
    case Type::kDict:
      return dict().is_namespace ? "Namespace" : "dict";
    case Type::kFunction:
      return "function";
  }
  return "object";
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's repr layout: positional for
  // decimal exponents in [-4, 16), else d.ddde+XX.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e_pos + 1));
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else {
      const auto int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() < int_len) digits.append(int_len - digits.size(), '0');
      const std::string frac = digits.substr(int_len);
      out = digits.substr(0, int_len) + "." + (frac.empty() ? "0" : frac);
    }
    return sign + out;
  }
  std::string mantissa = digits.substr(0, 1);
  if (digits.size() > 1) mantissa += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + mantissa + ebuf;
}

std::string ReprString(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t cp = utf8::Next(s, i, utf8::Invalid::kByte);
    char buf[16];
    if (cp == static_cast<char32_t>(quote) || cp == U'\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == U'\n') {
      out += "\\n";
    } else if (cp == U'\r') {
      out += "\\r";
    } else if (cp == U'\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (IsPySpace(cp) && cp != U' ') {  // U+2028 and friends are not printable
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += quote;
  return out;
}

namespace {

std::string JoinRepr(const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += items[i].Repr();
  }
  return out;
}

}  // namespace

std::string Value::Str() const {
  switch (type()) {
    case Type::kUndefined:
      return "";
    case Type::kNone:
      return "None";
    case Type::kBool:
      return bool_value() ? "True" : "False";
    case Type::kInt:
      return std::to_string(int_value());
    case Type::kFloat:
      return FormatFloat(AsDouble());
    case Type::kString:
      return str();
    case Type::kList:
      if (is_tuple()) return "(" + JoinRepr(list()) + (list().size() == 1 ? ",)" : ")");
      return "[" + JoinRepr(list()) + "]";
    case Type::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict().items.size(); ++i) {
        if (i > 0) out += ", ";
        out += ReprString(dict().items[i].first) + ": " + dict().items[i].second.Repr();
      }
      out += "}";
      return dict().is_namespace ? "<Namespace " + out + ">" : out;
    }
    case Type::kFunction:
      return "<function>";
  }
  return "";
}

std::string Value::Repr() const {
  if (is_string()) return ReprString(str());
  if (is_undefined()) return "Undefined";
  return Str();
}

std::vector<Value> Value::Iterate() const {
  switch (type()) {
    case Type::kUndefined:
      return {};
    case Type::kList:
      return list();
    case Type::kDict: {
      if (dict().is_namespace) break;
      std::vector<Value> keys;
      for (const auto& item : dict().items) keys.emplace_back(item.first);
      return keys;
    }
    case Type::kString: {
      std::vector<Value> chars;
      size_t i = 0;
      while (i < str().size()) {
        const size_t start = i;
        utf8::Next(str(), i, utf8::Invalid::kByte);
        chars.emplace_back(str().substr(start, i - start));
      }
      return chars;
    }
    default:
      break;
  }
  throw RenderError("'" + TypeName() + "' object is not iterable");
}

int64_t Value::Length() const {
  switch (type()) {
    case Type::kUndefined:
      return 0;
    case Type::kString:
      return static_cast<int64_t>(CodePointCount(str()));
    case Type::kList:
      return static_cast<int64_t>(list().size());
    case Type::kDict:
      if (!dict().is_namespace) return static_cast<int64_t>(dict().items.size());
      break;
    default:
      break;
  }
  throw RenderError("object of type '" + TypeName() + "' has no len()");
}

bool Value::Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type() != Type::kFloat && b.type() != Type::kFloat) {
      const int64_t x = a.type() == Type::kBool ? a.bool_value() : a.int_value();
      const int64_t y = b.type() == Type::kBool ? b.bool_value() : b.int_value();
      return x == y;
    }
    return a.AsDouble() == b.AsDouble();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::kUndefined:
    case Type::kNone:
      return true;
    case Type::kString:
      return a.str() == b.str();
    case Type::kList:
      return a.is_tuple() == b.is_tuple() &&
             std::equal(a.list().begin(), a.list().end(), b.list().begin(), b.list().end(), Equal);
    case Type::kDict: {
      if (a.dict().is_namespace || b.dict().is_namespace) return &a.dict() == &b.dict();
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [key, value] : a.dict().items) {
        const Value* other = b.dict().Find(key);
        if (other == nullptr || !Equal(value, *other)) return false;
      }
      return true;
    }
    case Type::kFunction:
      return &a.func() == &b.func();
    default:
      return false;
  }
}

int Value::Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (Equal(a, b)) return 0;
    if (a.type() != Type::kFloat && b.type() != Type::kFloat) {
      const int64_t x = a.type() == Type::kBool ? a.bool_value() : a.int_value();
      const int64_t y = b.type() == Type::kBool ? b.bool_value() : b.int_value();
      return x < y ? -1 : 1;
    }
    return a.AsDouble() < b.AsDouble() ? -1 : 1;  // NaN compares as greater, rarely matters
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order.
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list();
    const auto& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equal(x[i], y[i])) return Compare(x[i], y[i]);
    }
    return x.size() == y.size() ? 0 : (x.size() < y.size() ? -1 : 1);
  }
  throw RenderError("'<' not supported between instances of '" + a.TypeName() + "' and '" +
                    b.TypeName() + "'");
}

namespace {

void AppendJsonString(std::string_view s, std::string& out) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    // The characters with a short escape, and the letter after its backslash.
    constexpr std::string_view kShort = "\"\\\n\r\t\b\f";
    constexpr std::string_view kLetter = "\"\\nrtbf";
    if (const size_t k = kShort.find(ch); k != std::string_view::npos) {
      out += '\\';
      out += kLetter[k];
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

void AppendJson(const Value& v, int indent, bool sort_keys, int depth, std::string& out) {
  // json.dumps puts ",\n" + indentation between items when indent is set.
  const auto newline = [&](int level) {
    if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent * level), ' ');
  };
  const std::string item_sep = indent >= 0 ? "," : ", ";
  switch (v.type()) {
    case Value::Type::kNone:
      out += "null";
      return;
    case Value::Type::kBool:
      out += v.bool_value() ? "true" : "false";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.int_value());
      return;
    case Value::Type::kFloat: {
      const double d = v.AsDouble();
      out += std::isnan(d)   ? "NaN"
             : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                             : FormatFloat(d);
      return;
    }
    case Value::Type::kString:
      AppendJsonString(v.str(), out);
      return;
    case Value::Type::kList: {
      if (v.list().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        AppendJson(v.list()[i], indent, sort_keys, depth + 1, out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Type::kDict: {
      if (v.dict().is_namespace) break;
      auto items = v.dict().items;
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        AppendJsonString(items[i].first, out);
        out += ": ";
        AppendJson(items[i].second, indent, sort_keys, depth + 1, out);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      break;
  }
  throw RenderError("Object of type " + v.TypeName() + " is not JSON serializable");
}

}  // namespace

std::string ToJson(const Value& value, int indent, bool sort_keys) {
  std::string out;
  AppendJson(value, indent, sort_keys, 0, out);
  return out;
}

}  // namespace tq::jinja
