// Recursive-descent parser of the Jinja subset, one function per grammar
// rule of jinja2/parser.py (so precedence matches: `~` binds tighter than
// `+`, unary minus tighter than `**`, filters and tests tighter than all
// binary operators).
#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "engine/common/error.h"
#include "server/text/jinja_ast.h"

namespace tq::jinja {
namespace {

using T = Token::Type;

// An expression node with `args` (evaluated by the caller, then moved in order).
template <typename... Args>
ExprPtr MakeExpr(Expr::Kind kind, int line, Args&&... args) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  (e->args.push_back(std::forward<Args>(args)), ...);
  return e;
}

Node MakeNode(Node::Kind kind, int line) {
  Node n;
  n.kind = kind;
  n.line = line;
  return n;
}

ExprPtr Literal(Value v, int line) {
  ExprPtr e = MakeExpr(Expr::Kind::kLiteral, line);
  e->literal = std::move(v);
  return e;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body Template() {
    std::string ended_by;
    return SubParse({}, &ended_by);
  }

 private:
  const std::vector<Token>& t_;
  size_t i_ = 0;
  int loop_depth_ = 0;  // for-loop bodies around the current statement

  const Token& Cur() const { return t_[i_]; }
  const Token& Look() const { return t_[i_ + 1 < t_.size() ? i_ + 1 : i_]; }
  void Next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool IsOp(std::string_view op) const { return Cur().type == T::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const { return Cur().type == T::kName && Cur().text == name; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  [[noreturn]] void Fail(const std::string& msg) const {
    throw Error("line " + std::to_string(Cur().line) + ": " + msg);
  }
  std::string Describe() const {
    switch (Cur().type) {
      case T::kEof:
        return "end of template";
      case T::kBlockEnd:
        return "end of statement block";
      case T::kVarEnd:
        return "end of print statement";
      case T::kString:
        return "string";
      default:
        return "'" + Cur().text + "'";
    }
  }
  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) Fail("expected '" + std::string(op) + "', got " + Describe());
  }
  std::string ExpectName() {
    if (Cur().type != T::kName) Fail("expected a name, got " + Describe());
    std::string name = Cur().text;
    Next();
    return name;
  }
  void ExpectBlockEnd() {
    if (Cur().type != T::kBlockEnd) Fail("expected end of statement block, got " + Describe());
    Next();
  }

  // Statements until one of `end_tags` (its name consumed, stored in
  // *ended_by) or, with no end tags, the end of the template.
  Body SubParse(std::initializer_list<std::string_view> end_tags, std::string* ended_by) {
    Body body;
    while (true) {
      const Token& tok = Cur();
      if (tok.type == T::kText) {
        Node n = MakeNode(Node::Kind::kText, tok.line);
        n.text = tok.text;
        body.push_back(std::move(n));
        Next();
      } else if (tok.type == T::kVarBegin) {
        Node n = MakeNode(Node::Kind::kOutput, tok.line);
        Next();
        n.expr = Tuple(true);
        if (Cur().type != T::kVarEnd) Fail("expected end of print statement, got " + Describe());
        Next();
        body.push_back(std::move(n));
      } else if (tok.type == T::kBlockBegin) {
        Next();
        if (Cur().type != T::kName) Fail("tag name expected");
        for (std::string_view end : end_tags) {
          if (Cur().text == end) {
            *ended_by = Cur().text;
            Next();
            return body;
          }
        }
        body.push_back(Statement());
      } else if (tok.type == T::kEof) {
        if (end_tags.size() != 0) {
          Fail("unexpected end of template, expected '" + std::string(*end_tags.begin()) + "'");
        }
        return body;
      } else {
        Fail("unexpected " + Describe());
      }
    }
  }

  Node Statement() {
    const int line = Cur().line;
    const std::string tag = Cur().text;
    Next();
    Node n = MakeNode(Node::Kind::kText, line);
    if (tag == "for") {
      For(n);
    } else if (tag == "if") {
      If(n);
    } else if (tag == "set") {
      Set(n);
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) Fail("'" + tag + "' outside of a loop");
      n.kind = tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      ExpectBlockEnd();
    } else {
      throw Error("line " + std::to_string(line) + ": unsupported tag '" + tag + "'");
    }
    return n;
  }

  std::vector<std::string> Targets() {
    const bool paren = SkipOp("(");
    std::vector<std::string> names{ExpectName()};
    while (SkipOp(",")) names.push_back(ExpectName());
    if (paren) ExpectOp(")");
    return names;
  }

  void For(Node& n) {
    n.kind = Node::Kind::kFor;
    n.targets = Targets();
    if (!SkipName("in")) Fail("expected 'in', got " + Describe());
    n.expr = Tuple(false);
    if (SkipName("if")) n.cond = Expression(true);
    if (IsName("recursive")) Fail("recursive loops are not supported");
    ExpectBlockEnd();
    std::string ended_by;
    ++loop_depth_;
    n.body = SubParse({"endfor", "else"}, &ended_by);
    --loop_depth_;
    if (ended_by == "else") {
      ExpectBlockEnd();
      n.else_body = SubParse({"endfor"}, &ended_by);
    }
    ExpectBlockEnd();
  }

  void If(Node& n) {
    n.kind = Node::Kind::kIf;
    while (true) {
      n.conds.push_back(Tuple(true));
      ExpectBlockEnd();
      std::string ended_by;
      n.bodies.push_back(SubParse({"elif", "else", "endif"}, &ended_by));
      if (ended_by == "elif") continue;
      if (ended_by == "else") {
        ExpectBlockEnd();
        n.bodies.push_back(SubParse({"endif"}, &ended_by));
      }
      ExpectBlockEnd();
      return;
    }
  }

  void Set(Node& n) {
    n.kind = Node::Kind::kSet;
    n.targets = Targets();
    if (n.targets.size() == 1 && SkipOp(".")) n.attr = ExpectName();
    if (SkipOp("=")) {
      n.expr = Tuple(true);
      ExpectBlockEnd();
      return;
    }
    if (n.targets.size() != 1 || !n.attr.empty()) Fail("expected '=', got " + Describe());
    n.kind = Node::Kind::kSetBlock;
    ExpectBlockEnd();
    std::string ended_by;
    n.body = SubParse({"endset"}, &ended_by);
    ExpectBlockEnd();
  }

  // expression (, expression)* — a bare comma list is a tuple.
  ExprPtr Tuple(bool with_condexpr) {
    const int line = Cur().line;
    ExprPtr first = Expression(with_condexpr);
    if (!IsOp(",")) return first;
    ExprPtr t = MakeExpr(Expr::Kind::kList, line, std::move(first));
    t->is_tuple = true;
    while (SkipOp(",")) {
      if (Cur().type == T::kBlockEnd || Cur().type == T::kVarEnd || IsOp(")") || IsName("if")) {
        break;
      }
      t->args.push_back(Expression(with_condexpr));
    }
    return t;
  }

  ExprPtr Expression(bool with_condexpr = true) { return with_condexpr ? CondExpr() : Or(); }

  ExprPtr CondExpr() {
    ExprPtr expr = Or();
    while (IsName("if")) {
      const int line = Cur().line;
      Next();
      ExprPtr e = MakeExpr(Expr::Kind::kCond, line);
      e->args.push_back(Or());
      e->args.push_back(std::move(expr));
      e->args.push_back(SkipName("else") ? CondExpr() : nullptr);
      expr = std::move(e);
    }
    return expr;
  }

  // One left-associative precedence level: operand (op operand)*, where an
  // op is an operator or a keyword token ("and", "or").
  ExprPtr LeftAssoc(Expr::Kind kind, std::initializer_list<std::string_view> ops,
                    ExprPtr (Parser::*operand)()) {
    ExprPtr left = (this->*operand)();
    while (Cur().type == T::kOp || Cur().type == T::kName) {
      const std::string op = Cur().text;
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) break;
      const int line = Cur().line;
      Next();
      ExprPtr e = MakeExpr(kind, line, std::move(left), (this->*operand)());
      e->name = op;
      left = std::move(e);
    }
    return left;
  }

  ExprPtr Or() { return LeftAssoc(Expr::Kind::kOr, {"or"}, &Parser::And); }
  ExprPtr And() { return LeftAssoc(Expr::Kind::kAnd, {"and"}, &Parser::Not); }

  ExprPtr Not() {
    if (!IsName("not")) return Compare();
    ExprPtr e = MakeExpr(Expr::Kind::kUnary, Cur().line);
    Next();
    e->name = "not";
    e->args.push_back(Not());
    return e;
  }

  ExprPtr Compare() {
    const int line = Cur().line;
    ExprPtr first = Math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == T::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                                   Cur().text == "<=" || Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Look().type == T::kName && Look().text == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      if (!cmp) cmp = MakeExpr(Expr::Kind::kCompare, line, std::move(first));
      cmp->ops.push_back(op);
      cmp->args.push_back(Math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr Math1() { return LeftAssoc(Expr::Kind::kBinary, {"+", "-"}, &Parser::Concat); }
  ExprPtr Concat() { return LeftAssoc(Expr::Kind::kBinary, {"~"}, &Parser::Math2); }
  ExprPtr Math2() { return LeftAssoc(Expr::Kind::kBinary, {"*", "/", "//", "%"}, &Parser::Pow); }
  ExprPtr Pow() { return LeftAssoc(Expr::Kind::kBinary, {"**"}, &Parser::FilteredUnary); }
  ExprPtr FilteredUnary() { return Unary(true); }

  ExprPtr Unary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = MakeExpr(Expr::Kind::kUnary, Cur().line);
      node->name = Cur().text;
      Next();
      node->args.push_back(Unary(false));
    } else {
      node = Primary();
    }
    node = Postfix(std::move(node));
    return with_filter ? FilterExpr(std::move(node)) : std::move(node);
  }

  ExprPtr Primary() {
    const Token& tok = Cur();
    const int line = tok.line;
    if (tok.type == T::kName) {
      const std::string name = tok.text;
      Next();
      if (name == "true" || name == "True") return Literal(Value(true), line);
      if (name == "false" || name == "False") return Literal(Value(false), line);
      if (name == "none" || name == "None") return Literal(Value::None(), line);
      ExprPtr e = MakeExpr(Expr::Kind::kName, line);
      e->name = name;
      return e;
    }
    if (tok.type == T::kString) {
      std::string s;
      while (Cur().type == T::kString) {  // adjacent literals concatenate
        s += Cur().text;
        Next();
      }
      return Literal(Value(std::move(s)), line);
    }
    if (tok.type == T::kInt) {
      const std::string digits = tok.text;
      Next();
      try {
        return Literal(Value(static_cast<int64_t>(std::stoll(digits))), line);
      } catch (const std::out_of_range&) {
        Fail("integer literal out of range");
      }
    }
    if (tok.type == T::kFloat) {
      const std::string text = tok.text;
      Next();
      // strtod, as Python's float(): 1e999 is inf and 1e-999 is 0 (std::stod
      // throws out_of_range for both; found by fuzz_chat_template).
      return Literal(Value(std::strtod(text.c_str(), nullptr)), line);
    }
    if (SkipOp("(")) {
      if (SkipOp(")")) {
        ExprPtr t = MakeExpr(Expr::Kind::kList, line);
        t->is_tuple = true;
        return t;
      }
      ExprPtr inner = Tuple(true);
      ExpectOp(")");
      return inner;
    }
    if (SkipOp("[")) return Collection(Expr::Kind::kList, "]", line);
    if (SkipOp("{")) return Collection(Expr::Kind::kDict, "}", line);
    Fail("unexpected " + Describe());
  }

  // The items of a [list] or {key: value} literal after its opening
  // bracket, through `close`; a trailing comma is allowed.
  ExprPtr Collection(Expr::Kind kind, std::string_view close, int line) {
    ExprPtr e = MakeExpr(kind, line);
    while (!IsOp(close)) {
      if (!e->args.empty()) ExpectOp(",");
      if (IsOp(close)) break;
      e->args.push_back(Expression());
      if (kind == Expr::Kind::kDict) {
        ExpectOp(":");
        e->args.push_back(Expression());
      }
    }
    ExpectOp(close);
    return e;
  }

  ExprPtr Postfix(ExprPtr node) {
    while (true) {
      const int line = Cur().line;
      if (SkipOp(".")) {
        if (Cur().type == T::kName) {
          ExprPtr e = MakeExpr(Expr::Kind::kGetAttr, line, std::move(node));
          e->name = ExpectName();
          node = std::move(e);
        } else if (Cur().type == T::kInt) {
          node = MakeExpr(Expr::Kind::kGetItem, line, std::move(node), Primary());
        } else {
          Fail("expected name or number, got " + Describe());
        }
      } else if (SkipOp("[")) {
        node = Subscript(std::move(node), line);
      } else if (IsOp("(")) {
        node = Call(std::move(node));
      } else {
        return node;
      }
    }
  }

  // After '[': an index or a slice start:stop:step, then ']'.
  ExprPtr Subscript(ExprPtr node, int line) {
    ExprPtr first = IsOp(":") ? nullptr : Expression();
    if (!IsOp(":")) {
      ExpectOp("]");
      return MakeExpr(Expr::Kind::kGetItem, line, std::move(node), std::move(first));
    }
    ExprPtr e = MakeExpr(Expr::Kind::kSlice, line, std::move(node), std::move(first));
    for (int part = 0; part < 2; ++part) {
      if (!SkipOp(":")) {
        e->args.push_back(nullptr);
        continue;
      }
      e->args.push_back(IsOp(":") || IsOp("]") ? nullptr : Expression());
    }
    ExpectOp("]");
    return e;
  }

  // '(' args ')' into e->args (after what is already there) and kwarg_names.
  void CallArgs(Expr& e) {
    ExpectOp("(");
    bool first = true;
    while (!IsOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) Fail("*args and **kwargs are not supported");
      if (Cur().type == T::kName && Look().type == T::kOp && Look().text == "=") {
        e.kwarg_names.push_back(ExpectName());
        Next();
      } else if (!e.kwarg_names.empty()) {
        Fail("positional argument after keyword argument");
      }
      e.args.push_back(Expression());
    }
    ExpectOp(")");
  }

  ExprPtr Call(ExprPtr callee) {
    ExprPtr e = MakeExpr(Expr::Kind::kCall, Cur().line, std::move(callee));
    CallArgs(*e);
    return e;
  }

  ExprPtr FilterExpr(ExprPtr node) {
    while (true) {
      const int line = Cur().line;
      if (SkipOp("|")) {
        ExprPtr e = MakeExpr(Expr::Kind::kFilter, line);
        e->name = ExpectName();
        if (!IsKnownFilter(e->name)) {
          throw Error("line " + std::to_string(line) + ": no filter named '" + e->name + "'");
        }
        e->args.push_back(std::move(node));
        if (IsOp("(")) CallArgs(*e);
        node = std::move(e);
      } else if (SkipName("is")) {
        ExprPtr e = MakeExpr(Expr::Kind::kTest, line);
        e->negated = SkipName("not");
        e->name = ExpectName();
        if (!IsKnownTest(e->name)) {
          throw Error("line " + std::to_string(line) + ": no test named '" + e->name + "'");
        }
        e->args.push_back(std::move(node));
        if (IsOp("(")) {
          CallArgs(*e);
        } else if ((Cur().type == T::kName || Cur().type == T::kString || Cur().type == T::kInt ||
                    Cur().type == T::kFloat || IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          if (IsName("is")) Fail("you cannot chain multiple tests with is");
          e->args.push_back(Postfix(Primary()));
        }
        node = std::move(e);
      } else if (IsOp("(")) {
        node = Call(std::move(node));
      } else {
        return node;
      }
    }
  }
};

}  // namespace

Body Parse(const std::vector<Token>& tokens) {
  return Parser(tokens).Template();
}

}  // namespace tq::jinja
