// Operators, attribute/item access and methods of the Jinja subset, with
// Python's semantics (see jinja_builtins.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>

#include "server/text/jinja_builtins.h"
#include "server/text/jinja_strings.h"

namespace tq::jinja {
namespace {

using Type = Value::Type;

[[noreturn]] void Undefined(const Value& v) {
  throw RenderError(v.undefined_hint().empty() ? "value is undefined" : v.undefined_hint());
}

bool IsIntLike(const Value& v) {
  return v.type() == Type::kInt || v.type() == Type::kBool;
}
int64_t AsInt(const Value& v) {
  return v.type() == Type::kBool ? static_cast<int64_t>(v.bool_value()) : v.int_value();
}

// An optional str argument of a method: absent or None -> nullopt.
std::optional<std::string> OptStr(const CallArgs& args, size_t i, std::string_view name,
                                  std::string_view method) {
  const Value* v = args.Get(i, name);
  if (v == nullptr || v->is_none()) return std::nullopt;
  if (!v->is_string()) {
    throw RenderError(std::string(method) + "() argument must be str or None, not " +
                      v->TypeName());
  }
  return v->str();
}

int64_t OptInt(const CallArgs& args, size_t i, std::string_view name, int64_t def) {
  const Value* v = args.Get(i, name);
  if (v == nullptr || v->is_none()) return def;
  if (!IsIntLike(*v))
    throw RenderError("'" + v->TypeName() + "' object cannot be interpreted as an integer");
  return AsInt(*v);
}

const Value& Arg(const CallArgs& args, size_t i, std::string_view name, std::string_view method) {
  const Value* v = args.Get(i, name);
  if (v == nullptr)
    throw RenderError(std::string(method) + "() missing required argument '" + std::string(name) +
                      "'");
  return *v;
}

// str.startswith / endswith with a str or a tuple of str.
bool AffixMatch(const std::string& s, const Value& affix, bool prefix) {
  const auto one = [&](const Value& a) {
    if (!a.is_string())
      throw RenderError("startswith/endswith first arg must be str or a tuple of str");
    const std::string& x = a.str();
    return x.size() <= s.size() && s.compare(prefix ? 0 : s.size() - x.size(), x.size(), x) == 0;
  };
  return affix.is_list() ? std::ranges::any_of(affix.list(), one) : one(affix);
}

std::optional<Value> StrMethod(const std::string& s, const std::string& name) {
  using F = std::function<Value(const CallArgs&)>;
  F f;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    f = [s, name](const CallArgs& a) -> Value {
      const auto chars = OptStr(a, 0, "chars", name);
      return PyStrip(s, chars ? std::optional<std::string_view>(*chars) : std::nullopt,
                     name != "rstrip", name != "lstrip");
    };
  } else if (name == "startswith" || name == "endswith") {
    f = [s, name](const CallArgs& a) -> Value {
      return AffixMatch(s, Arg(a, 0, "prefix", name), name == "startswith");
    };
  } else if (name == "upper") {
    f = [s](const CallArgs&) -> Value { return PyUpper(s); };
  } else if (name == "lower") {
    f = [s](const CallArgs&) -> Value { return PyLower(s); };
  } else if (name == "title") {
    f = [s](const CallArgs&) -> Value { return PyTitle(s); };
  } else if (name == "capitalize") {
    f = [s](const CallArgs&) -> Value { return PyCapitalize(s); };
  } else if (name == "split") {
    f = [s](const CallArgs& a) -> Value {
      const auto sep = OptStr(a, 0, "sep", "split");
      std::vector<Value> parts;
      for (std::string& p : PySplit(s, sep ? std::optional<std::string_view>(*sep) : std::nullopt,
                                    OptInt(a, 1, "maxsplit", -1))) {
        parts.emplace_back(std::move(p));
      }
      return Value::List(std::move(parts));
    };
  } else if (name == "replace") {
    f = [s](const CallArgs& a) -> Value {
      const Value& old_s = Arg(a, 0, "old", "replace");
      const Value& new_s = Arg(a, 1, "new", "replace");
      if (!old_s.is_string() || !new_s.is_string())
        throw RenderError("replace() arguments must be str");
      return PyReplace(s, old_s.str(), new_s.str(), OptInt(a, 2, "count", -1));
    };
  } else if (name == "join") {
    f = [s](const CallArgs& a) -> Value {
      std::string out;
      bool first = true;
      for (const Value& item : Arg(a, 0, "iterable", "join").Iterate()) {
        if (!item.is_string())
          throw RenderError("sequence item: expected str instance, " + item.TypeName() + " found");
        if (!first) out += s;
        out += item.str();
        first = false;
      }
      return out;
    };
  } else if (name == "find" || name == "count") {
    f = [s, name](const CallArgs& a) -> Value {
      const Value& sub = Arg(a, 0, "sub", name);
      if (!sub.is_string()) throw RenderError("must be str, not " + sub.TypeName());
      if (name == "count") {
        if (sub.str().empty()) return static_cast<int64_t>(CodePointCount(s)) + 1;
        int64_t n = 0;
        for (size_t at = s.find(sub.str()); at != std::string::npos;
             at = s.find(sub.str(), at + sub.str().size())) {
          ++n;
        }
        return n;
      }
      const size_t at = s.find(sub.str());
      return at == std::string::npos ? int64_t{-1}
                                     : static_cast<int64_t>(CodePointCount(s.substr(0, at)));
    };
  } else {
    return std::nullopt;
  }
  return Value::Func(std::move(f));
}

std::optional<Value> DictMethod(const Value& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::Func([d, name](const CallArgs&) -> Value {
      std::vector<Value> out;
      for (const auto& [k, v] : d.dict().items) {
        if (name == "items") out.push_back(Value::List({Value(k), v}, /*is_tuple=*/true));
        if (name == "keys") out.emplace_back(k);
        if (name == "values") out.push_back(v);
      }
      return Value::List(std::move(out));
    });
  }
  if (name == "get") {
    return Value::Func([d](const CallArgs& a) -> Value {
      const Value& key = Arg(a, 0, "key", "get");
      const Value* found = key.is_string() ? d.dict().Find(key.str()) : nullptr;
      if (found != nullptr) return *found;
      const Value* def = a.Get(1, "default");
      return def != nullptr ? *def : Value::None();
    });
  }
  return std::nullopt;
}

Value Missing(const Value& obj, const std::string& what) {
  return Value::Undefined("'" + obj.TypeName() + " object' has no attribute " + what);
}

}  // namespace

Value GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) Undefined(obj);
  if (obj.is_namespace()) {
    const Value* v = obj.dict().Find(name);
    return v != nullptr ? *v : Missing(obj, "'" + name + "'");
  }
  if (obj.is_dict()) {
    if (auto m = DictMethod(obj, name)) return *m;
    const Value* v = obj.dict().Find(name);
    return v != nullptr ? *v : Missing(obj, "'" + name + "'");
  }
  if (obj.is_string()) {
    if (auto m = StrMethod(obj.str(), name)) return *m;
  }
  return Missing(obj, "'" + name + "'");
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) Undefined(obj);
  if (IsIntLike(key) && (obj.is_list() || obj.is_string())) {
    int64_t i = AsInt(key);
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.list()[static_cast<size_t>(i)];
    } else {
      const std::vector<size_t> off = CodePointOffsets(obj.str());
      const auto n = static_cast<int64_t>(off.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        const auto k = static_cast<size_t>(i);
        return obj.str().substr(off[k], off[k + 1] - off[k]);
      }
    }
    return Missing(obj, key.Str());
  }
  if (obj.is_dict() && key.is_string()) {
    const Value* v = obj.dict().Find(key.str());
    if (v != nullptr) return *v;
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Missing(obj, key.Repr());
}

Value Slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) Undefined(obj);
  if (!obj.is_list() && !obj.is_string()) {
    throw RenderError("'" + obj.TypeName() + "' object is not subscriptable");
  }
  const auto part = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!IsIntLike(v)) throw RenderError("slice indices must be integers or None");
    return AsInt(v);
  };
  const int64_t step = part(step_v).value_or(1);
  if (step == 0) throw RenderError("slice step cannot be zero");
  const std::vector<size_t> off =
      obj.is_string() ? CodePointOffsets(obj.str()) : std::vector<size_t>{};
  const int64_t n = obj.is_string() ? static_cast<int64_t>(off.size()) - 1
                                    : static_cast<int64_t>(obj.list().size());
  // CPython's PySlice_AdjustIndices.
  const auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t start = adjust(part(start_v), step < 0 ? n - 1 : 0);
  const int64_t stop = adjust(part(stop_v), step < 0 ? -1 : n);
  std::vector<Value> items;
  std::string text;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    const auto k = static_cast<size_t>(i);
    if (obj.is_string()) {
      text.append(obj.str(), off[k], off[k + 1] - off[k]);
    } else {
      items.push_back(obj.list()[k]);
    }
  }
  if (obj.is_string()) return text;
  return Value::List(std::move(items), obj.is_tuple());
}

namespace {

[[noreturn]] void Unsupported(std::string_view op, const Value& a, const Value& b) {
  throw RenderError("unsupported operand type(s) for " + std::string(op) + ": '" + a.TypeName() +
                    "' and '" + b.TypeName() + "'");
}

[[noreturn]] void Overflow() {
  throw RenderError("integer overflow (this interpreter's ints are 64-bit)");
}
int64_t Add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) Overflow();
  return r;
}
int64_t Sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) Overflow();
  return r;
}
int64_t Mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) Overflow();
  return r;
}

Value Repeat(const Value& seq, int64_t times) {
  const int64_t n = std::max<int64_t>(times, 0);
  if (seq.is_string()) {
    if (n > 0 && seq.str().size() * static_cast<size_t>(n) > (size_t{1} << 28)) {
      throw RenderError("repeated string too long");
    }
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return out;
  }
  if (n > 0 && seq.list().size() * static_cast<size_t>(n) > (size_t{1} << 24)) {
    throw RenderError("repeated list too long");
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value::List(std::move(out), seq.is_tuple());
}

Value IntPow(int64_t base, int64_t exp) {
  int64_t r = 1;
  for (int64_t i = 0; i < exp; ++i) {
    r = Mul(r, base);
    if (r == 0 || r == 1) break;
  }
  return r;
}

}  // namespace

Value BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return a.Str() + b.Str();
  if (a.is_undefined()) Undefined(a);
  if (b.is_undefined()) Undefined(b);
  const bool ints = IsIntLike(a) && IsIntLike(b);
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return Add(AsInt(a), AsInt(b));
    if (nums) return a.AsDouble() + b.AsDouble();
    if (a.is_string() && b.is_string()) return a.str() + b.str();
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(items), a.is_tuple());
    }
    if (a.is_string()) {
      throw RenderError("can only concatenate str (not \"" + b.TypeName() + "\") to str");
    }
    Unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) return Sub(AsInt(a), AsInt(b));
    if (nums) return a.AsDouble() - b.AsDouble();
    Unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) return Mul(AsInt(a), AsInt(b));
    if (nums) return a.AsDouble() * b.AsDouble();
    if ((a.is_string() || a.is_list()) && IsIntLike(b)) return Repeat(a, AsInt(b));
    if ((b.is_string() || b.is_list()) && IsIntLike(a)) return Repeat(b, AsInt(a));
    Unsupported(op, a, b);
  }
  if (!nums) {
    if (op == "%" && a.is_string())
      throw RenderError("printf-style '%' string formatting is not supported");
    Unsupported(op, a, b);
  }
  if (op == "/") {
    if (b.AsDouble() == 0.0) throw RenderError("division by zero");
    return a.AsDouble() / b.AsDouble();
  }
  if (op == "//" || op == "%") {
    if (b.AsDouble() == 0.0) throw RenderError("integer division or modulo by zero");
    if (ints) {
      const int64_t x = AsInt(a);
      const int64_t y = AsInt(b);
      if (x == std::numeric_limits<int64_t>::min() && y == -1) Overflow();
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {  // Python rounds toward -infinity
        --q;
        m += y;
      }
      return op == "//" ? q : m;
    }
    // CPython float_divmod.
    const double x = a.AsDouble();
    const double y = b.AsDouble();
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    if (op == "%") return mod;
    if (div == 0) return std::copysign(0.0, x / y);
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return floordiv;
  }
  if (op == "**") {
    if (ints && AsInt(b) >= 0) return IntPow(AsInt(a), AsInt(b));
    return std::pow(a.AsDouble(), b.AsDouble());
  }
  Unsupported(op, a, b);
}

Value UnaryOp(std::string_view op, const Value& a) {
  if (a.is_undefined()) Undefined(a);
  if (IsIntLike(a)) {
    if (op == "+") return AsInt(a);
    return Sub(0, AsInt(a));
  }
  if (a.is_number()) return op == "+" ? a.AsDouble() : -a.AsDouble();
  throw RenderError("bad operand type for unary " + std::string(op) + ": '" + a.TypeName() + "'");
}

bool Contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Type::kUndefined:
      return false;
    case Type::kString:
      if (!item.is_string()) {
        throw RenderError("'in <string>' requires string as left operand, not " + item.TypeName());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Type::kList:
      return std::ranges::any_of(container.list(),
                                 [&](const Value& v) { return Value::Equal(v, item); });
    case Type::kDict:
      if (!container.is_namespace()) return item.is_string() && container.dict().Find(item.str());
      break;
    default:
      break;
  }
  throw RenderError("argument of type '" + container.TypeName() + "' is not iterable");
}

}  // namespace tq::jinja
