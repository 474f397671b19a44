// Values of the Jinja subset interpreter (server/text/jinja.h): Python's
// object model as far as chat templates use it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tq::jinja {

/// An error while rendering (a type error, an undefined value used as an
/// object, a failed call): the Python exception jinja2 would raise. what() is
/// one line.
class RenderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value;

/// Arguments of a call: positional values, then keyword arguments in the
/// order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  /// The argument at `index` or named `name` (keyword wins), or nullptr.
  const Value* Get(size_t index, std::string_view name) const;
};

/// A callable: a template global (range, namespace, raise_exception) or a
/// bound method ('abc'.upper). Throws RenderError on bad arguments.
using Function = std::function<Value(const CallArgs&)>;

/// A dynamically typed value with Python semantics: undefined (jinja2's
/// default Undefined: prints as "", is falsy, iterates as empty, fails when
/// used as an object), None, bool, int (64-bit; overflow is an error where
/// Python would grow), float, str (UTF-8, indexed by code point), list or
/// tuple, dict (string keys, insertion order), namespace, function.
/// Lists and dicts are shared (reference semantics, as in Python); only a
/// namespace is ever mutated after construction. Copying is cheap.
class Value {
 public:
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  struct ListData {
    std::vector<Value> items;
    bool is_tuple = false;  // prints as (a, b)
  };
  struct DictData {
    std::vector<std::pair<std::string, Value>> items;  // insertion order
    bool is_namespace = false;                         // jinja2 namespace(): attributes settable
    const Value* Find(std::string_view key) const;
    void Set(const std::string& key, Value value);
  };

  /// Undefined, as a missing variable or attribute.
  Value() = default;
  /// Undefined that names what was missing ("'x' is undefined") for errors.
  static Value Undefined(std::string hint);
  static Value None();
  Value(bool b) : v_(b) {}                       // NOLINT(google-explicit-constructor)
  Value(int64_t i) : v_(i) {}                    // NOLINT(google-explicit-constructor)
  Value(int i) : v_(static_cast<int64_t>(i)) {}  // NOLINT(google-explicit-constructor)
  Value(double d) : v_(d) {}                     // NOLINT(google-explicit-constructor)
  Value(std::string s) : v_(std::move(s)) {}     // NOLINT(google-explicit-constructor)
  Value(const char* s) : v_(std::string(s)) {}   // NOLINT(google-explicit-constructor)
  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value Dict(std::vector<std::pair<std::string, Value>> items = {});
  static Value Namespace(std::vector<std::pair<std::string, Value>> items = {});
  static Value Func(Function f);

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_undefined() const { return type() == Type::kUndefined; }
  bool is_none() const { return type() == Type::kNone; }
  bool is_string() const { return type() == Type::kString; }
  bool is_number() const {
    return type() == Type::kInt || type() == Type::kFloat || type() == Type::kBool;
  }
  bool is_list() const { return type() == Type::kList; }
  bool is_dict() const { return type() == Type::kDict; }
  bool is_namespace() const { return is_dict() && dict().is_namespace; }

  /// Accessors; the type must match (checked by the caller).
  bool bool_value() const { return std::get<bool>(v_); }
  int64_t int_value() const { return std::get<int64_t>(v_); }
  /// int, bool or float as a double.
  double AsDouble() const;
  const std::string& str() const { return std::get<std::string>(v_); }
  const std::vector<Value>& list() const { return std::get<std::shared_ptr<ListData>>(v_)->items; }
  bool is_tuple() const { return std::get<std::shared_ptr<ListData>>(v_)->is_tuple; }
  const DictData& dict() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  /// The shared dict itself (a namespace's attributes are set through it).
  DictData& mutable_dict() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  const Function& func() const { return *std::get<std::shared_ptr<Function>>(v_); }
  /// What an undefined value stands for ("'x' is undefined").
  const std::string& undefined_hint() const { return std::get<UndefinedData>(v_).hint; }

  /// Python truthiness (undefined, None, 0, "", [] and {} are false).
  bool Truthy() const;
  /// Python str(): what {{ value }} prints (undefined prints "").
  std::string Str() const;
  /// Python repr(), used inside printed lists and dicts.
  std::string Repr() const;
  /// Python type name for errors ("str", "int", "dict", ...).
  std::string TypeName() const;
  /// The elements a for loop visits: list items, dict keys, a string's
  /// characters; none for undefined. Throws RenderError for other types.
  std::vector<Value> Iterate() const;
  /// Python len(): code points of a str, items of a list or dict; 0 for
  /// undefined. Throws RenderError for other types.
  int64_t Length() const;

  /// Python ==: numbers by value (True == 1), lists and dicts deeply,
  /// undefined equals only undefined.
  static bool Equal(const Value& a, const Value& b);
  /// Python <, as -1/0/1 for numbers, strings (code point order) and lists;
  /// throws RenderError for other pairs.
  static int Compare(const Value& a, const Value& b);

 private:
  struct UndefinedData {
    std::string hint;
  };
  struct NoneData {};
  // Order matches Type.
  std::variant<UndefinedData, NoneData, bool, int64_t, double, std::string,
               std::shared_ptr<ListData>, std::shared_ptr<DictData>, std::shared_ptr<Function>>
      v_;
};

/// Python repr() of a float ("1.0", "0.1", "1e-05", "1e+16", "inf", "nan").
std::string FormatFloat(double d);
/// Python repr() of a str ('it''s' → "it's", control characters escaped).
std::string ReprString(std::string_view s);

/// Python json.dumps(value, ensure_ascii=False, indent=indent,
/// sort_keys=sort_keys) — Hugging Face's replacement for jinja2's `tojson`
/// (transformers chat_template_utils), which does not HTML-escape and keeps
/// key order. indent < 0 means None (one line, ", " and ": " separators).
/// Throws RenderError for undefined and functions (not JSON serializable).
std::string ToJson(const Value& value, int indent, bool sort_keys);

}  // namespace tq::jinja
