// Syntax tree of the Jinja subset and its parser (server/text/jinja.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/text/jinja_lexer.h"
#include "server/text/jinja_value.h"

namespace tq::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// An expression node. One struct for all kinds keeps the tree small; the
/// fields each kind uses are listed beside it.
struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args = items; is_tuple
    kDict,     // args = key0, value0, key1, value1, ...
    kGetAttr,  // args[0].name (attribute first, then item, as jinja2 getattr)
    kGetItem,  // args[0][args[1]] (item first, then attribute)
    kSlice,    // args[0][args[1]:args[2]:args[3]], absent parts null
    kCall,     // args[0](args[1..]); the last kwarg_names.size() args are keywords
    kFilter,   // args[0] | name(args[1..]); kwargs as for kCall
    kTest,     // args[0] is [not] name(args[1..]); negated
    kUnary,    // name ("-", "+", "not") args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~
    kAnd,      // args[0] and args[1]
    kOr,       // args[0] or args[1]
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained, as Python)
    kCond,     // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::string> kwarg_names;
  std::vector<std::string> ops;
  bool is_tuple = false;
  bool negated = false;
};

struct Node;
using Body = std::vector<Node>;

/// A template statement.
struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; bodies.back() is else when larger
    kFor,       // for targets in expr [if cond] body [else else_body]
    kSet,       // set targets = expr, or set targets[0].attr = expr (namespace)
    kSetBlock,  // set targets[0] %}body{% endset
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  std::string attr;
  ExprPtr cond;  // kFor filter
  Body body;
  Body else_body;
};

/// Parses tokens (jinja_lexer.h) into statements, with jinja2's grammar and
/// operator precedence (jinja2/parser.py). Unknown filters and tests are
/// rejected here, as jinja2 does when it compiles a template. Throws
/// tq::Error "line N: ..." for syntax errors and unsupported constructs
/// (macro, call, include, extends, block, with, raw...).
Body Parse(const std::vector<Token>& tokens);

/// Names of the supported filters and tests (jinja_builtins.cc).
bool IsKnownFilter(const std::string& name);
bool IsKnownTest(const std::string& name);

}  // namespace tq::jinja
