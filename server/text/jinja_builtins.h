// Built-in filters, tests, methods, globals and operators of the Jinja
// subset (internal to server/text; see jinja.h for the supported list).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/text/jinja_value.h"

namespace tq::jinja {

/// value | name(args). The name was checked by the parser (IsKnownFilter).
/// Throws RenderError as the jinja2 filter would raise.
Value ApplyFilter(const std::string& name, const Value& value, const CallArgs& args);
/// value is name(args), before any `not`.
bool ApplyTest(const std::string& name, const Value& value, const CallArgs& args);

/// obj.name as jinja2's sandboxed getattr: an attribute or method first
/// (dict.items, str.strip, a namespace's field), then obj["name"]; a missing
/// one is undefined. Throws RenderError when obj is undefined.
Value GetAttr(const Value& obj, const std::string& name);
/// obj[key] as jinja2's getitem: the item first (negative indices count
/// from the end), then for a str key the attribute; missing is undefined.
Value GetItem(const Value& obj, const Value& key);
/// obj[start:stop:step] of a str, list or tuple (None/undefined parts are
/// omitted), with Python's clamping.
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

/// Binary operator `op` (+ - * / // % ** ~) with Python's semantics.
Value BinaryOp(std::string_view op, const Value& a, const Value& b);
/// Unary - or +.
Value UnaryOp(std::string_view op, const Value& a);
/// `item in container`.
bool Contains(const Value& container, const Value& item);

/// Globals every template sees: range, namespace, dict.
std::vector<std::pair<std::string, Value>> BuiltinGlobals();

}  // namespace tq::jinja
