// A Jinja2 subset interpreter for Hugging Face chat templates.
//
// Supported (with jinja2 3.1's semantics, checked against jinja2 itself by
// tests/unit/test_jinja.cc): text, {{ }}, {% %}, {# #}, whitespace control
// ({%- -%} {{- -}} {#- -#}, trim_blocks, lstrip_blocks); statements for/else
// (tuple targets, `if` filter, loop.index/index0/revindex/revindex0/first/
// last/length/previtem/nextitem/cycle), if/elif/else, set (name, tuple,
// namespace attribute, block set), break/continue (HF enables
// jinja2.ext.loopcontrols); expressions with jinja2's precedence: literals
// (str, int, float, list, tuple, dict, true/false/none), + - * / // % ** ~,
// comparisons (chained), and/or/not, in/not in, a if c else b, attribute and
// subscript access, slices, calls with keyword arguments; the filters and
// tests listed in jinja_builtins.cc; str methods (strip, split, startswith,
// replace, ...) and dict methods (items, keys, values, get); globals range,
// namespace, dict. Not supported (a tq::Error at parse time): macros, call
// blocks, include/extends/blocks, `with`, raw, recursive loops, *args.
// Known differences: case mapping (upper, lower, title, capitalize) is
// ASCII-only; `str % args` formatting is an error; ints are 64-bit.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/text/jinja_lexer.h"
#include "server/text/jinja_value.h"

namespace tq::jinja {

struct Node;

/// Variables visible to a template, in addition to the built-in globals.
using Context = std::vector<std::pair<std::string, Value>>;

/// A parsed template. Immutable after construction, so Render may run on
/// many threads at once.
class Template {
 public:
  /// Parses `source`. Throws tq::Error "line N: ..." for a syntax error or
  /// an unsupported construct.
  explicit Template(std::string_view source, const LexOptions& options = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  /// Renders with `context` (variables and functions, e.g. messages,
  /// raise_exception). Throws RenderError for errors jinja2 raises while
  /// rendering (undefined used as an object, type errors, bad calls);
  /// exceptions thrown by context functions propagate unchanged.
  std::string Render(const Context& context) const;

 private:
  std::unique_ptr<std::vector<Node>> body_;
};

}  // namespace tq::jinja
