// Tree-walking renderer of the Jinja subset (see jinja.h). Scoping follows
// jinja2: top-level `set` changes the template's variables; each for-loop
// iteration gets a fresh scope, so assignments in a loop body are not seen
// by the next iteration or after the loop (hence namespace()).
#include <unordered_map>

#include "server/text/jinja.h"
#include "server/text/jinja_ast.h"
#include "server/text/jinja_builtins.h"

namespace tq::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const Context& context) {
    frames_.emplace_back();
    for (auto& [name, value] : BuiltinGlobals()) frames_.back()[name] = std::move(value);
    frames_.emplace_back();
    for (const auto& [name, value] : context) frames_.back()[name] = value;
  }

  Flow Exec(const Body& body, std::string& out) {
    for (const Node& node : body) {
      Flow flow = Flow::kNormal;
      try {
        flow = ExecNode(node, out);
      } catch (const RenderError& err) {
        Relabel(err, node.line);
      }
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

 private:
  std::vector<std::unordered_map<std::string, Value>> frames_;  // globals, template, loop scopes

  [[noreturn]] static void Fail(int line, const std::string& msg) {
    throw RenderError("line " + std::to_string(line) + ": " + msg);
  }

  // Rethrows `err` naming `line`, unless an inner node already named one.
  [[noreturn]] static void Relabel(const RenderError& err, int line) {
    const std::string what = err.what();
    if (what.rfind("line ", 0) == 0) throw err;
    Fail(line, what);
  }

  Value Lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value::Undefined("'" + name + "' is undefined");
  }

  void Assign(const std::vector<std::string>& targets, const Value& value, int line) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = value;
      return;
    }
    if (!value.is_list() && !value.is_string()) {
      Fail(line, "cannot unpack non-iterable " + value.TypeName() + " object");
    }
    const std::vector<Value> items = value.Iterate();
    if (items.size() != targets.size()) {
      Fail(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                     std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) frames_.back()[targets[i]] = items[i];
  }

  Flow ExecNode(const Node& node, std::string& out) {
    switch (node.kind) {
      case Node::Kind::kText:
        out += node.text;
        return Flow::kNormal;
      case Node::Kind::kOutput:
        out += Eval(*node.expr).Str();
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (size_t i = 0; i < node.conds.size(); ++i) {
          if (Eval(*node.conds[i]).Truthy()) return Exec(node.bodies[i], out);
        }
        return node.bodies.size() > node.conds.size() ? Exec(node.bodies.back(), out)
                                                      : Flow::kNormal;
      case Node::Kind::kFor:
        For(node, out);
        return Flow::kNormal;
      case Node::Kind::kSet: {
        const Value value = Eval(*node.expr);
        if (node.attr.empty()) {
          Assign(node.targets, value, node.line);
          return Flow::kNormal;
        }
        const Value ns = Lookup(node.targets[0]);
        if (!ns.is_namespace()) Fail(node.line, "cannot assign attribute on non-namespace object");
        ns.mutable_dict().Set(node.attr, value);
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string text;
        Exec(node.body, text);
        Assign(node.targets, Value(std::move(text)), node.line);
        return Flow::kNormal;
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void For(const Node& node, std::string& out) {
    std::vector<Value> items = Eval(*node.expr).Iterate();  // undefined: no items
    if (node.cond) {
      // The filter sees the loop variables but not `loop` (jinja2).
      std::vector<Value> kept;
      for (const Value& item : items) {
        frames_.emplace_back();
        Assign(node.targets, item, node.line);
        const bool keep = Eval(*node.cond).Truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      frames_.emplace_back();
      Exec(node.else_body, out);
      frames_.pop_back();
      return;
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      frames_.emplace_back();
      Assign(node.targets, items[static_cast<size_t>(i)], node.line);
      frames_.back()["loop"] = LoopValue(items, i);
      const Flow flow = Exec(node.body, out);
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
  }

  static Value LoopValue(const std::vector<Value>& items, int64_t i) {
    const auto n = static_cast<int64_t>(items.size());
    std::vector<std::pair<std::string, Value>> fields = {
        {"index", i + 1},  {"index0", i},        {"revindex", n - i}, {"revindex0", n - i - 1},
        {"first", i == 0}, {"last", i == n - 1}, {"length", n},       {"depth", 1},
        {"depth0", 0}};
    if (i > 0) fields.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) fields.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
    fields.emplace_back("cycle", Value::Func([i](const CallArgs& args) -> Value {
                          if (args.positional.empty())
                            throw RenderError("no items for cycling given");
                          return args.positional[static_cast<size_t>(i) % args.positional.size()];
                        }));
    return Value::Dict(std::move(fields));
  }

  CallArgs Args(const Expr& e, size_t first) {
    CallArgs args;
    const size_t n_kw = e.kwarg_names.size();
    const size_t n_pos = e.args.size() - first - n_kw;
    for (size_t i = 0; i < n_pos; ++i) args.positional.push_back(Eval(*e.args[first + i]));
    for (size_t k = 0; k < n_kw; ++k) {
      args.keyword.emplace_back(e.kwarg_names[k], Eval(*e.args[first + n_pos + k]));
    }
    return args;
  }

  Value EvalOrNone(const ExprPtr& e) { return e ? Eval(*e) : Value::None(); }

  Value Eval(const Expr& e) {
    try {
      return EvalUnchecked(e);
    } catch (const RenderError& err) {
      Relabel(err, e.line);
    }
  }

  Value EvalUnchecked(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        std::vector<Value> items;
        for (const auto& a : e.args) items.push_back(Eval(*a));
        return Value::List(std::move(items), e.is_tuple);
      }
      case Expr::Kind::kDict: {
        Value dict = Value::Dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = Eval(*e.args[i]);
          if (!key.is_string()) throw RenderError("dict keys must be strings");
          dict.mutable_dict().Set(key.str(), Eval(*e.args[i + 1]));
        }
        return dict;
      }
      case Expr::Kind::kGetAttr:
        return GetAttr(Eval(*e.args[0]), e.name);
      case Expr::Kind::kGetItem:
        return GetItem(Eval(*e.args[0]), Eval(*e.args[1]));
      case Expr::Kind::kSlice:
        return Slice(Eval(*e.args[0]), EvalOrNone(e.args[1]), EvalOrNone(e.args[2]),
                     EvalOrNone(e.args[3]));
      case Expr::Kind::kCall: {
        const Value callee = Eval(*e.args[0]);
        if (callee.is_undefined()) throw RenderError(callee.undefined_hint());
        if (callee.type() != Value::Type::kFunction) {
          throw RenderError("'" + callee.TypeName() + "' object is not callable");
        }
        return callee.func()(Args(e, 1));
      }
      case Expr::Kind::kFilter:
        return ApplyFilter(e.name, Eval(*e.args[0]), Args(e, 1));
      case Expr::Kind::kTest:
        return ApplyTest(e.name, Eval(*e.args[0]), Args(e, 1)) != e.negated;
      case Expr::Kind::kUnary:
        if (e.name == "not") return !Eval(*e.args[0]).Truthy();
        return UnaryOp(e.name, Eval(*e.args[0]));
      case Expr::Kind::kBinary:
        return BinaryOp(e.name, Eval(*e.args[0]), Eval(*e.args[1]));
      case Expr::Kind::kAnd: {
        Value left = Eval(*e.args[0]);
        return left.Truthy() ? Eval(*e.args[1]) : left;
      }
      case Expr::Kind::kOr: {
        Value left = Eval(*e.args[0]);
        return left.Truthy() ? left : Eval(*e.args[1]);
      }
      case Expr::Kind::kCompare: {
        Value left = Eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = Eval(*e.args[i + 1]);
          if (!CompareOp(e.ops[i], left, right)) return false;
          left = std::move(right);
        }
        return true;
      }
      case Expr::Kind::kCond:
        if (Eval(*e.args[0]).Truthy()) return Eval(*e.args[1]);
        return e.args[2] ? Eval(*e.args[2]) : Value::Undefined("the inline if-expression");
    }
    return Value();
  }

  static bool CompareOp(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Value::Equal(a, b);
    if (op == "!=") return !Value::Equal(a, b);
    if (op == "in") return Contains(b, a);
    if (op == "not in") return !Contains(b, a);
    if (a.is_undefined() || b.is_undefined()) {
      throw RenderError((a.is_undefined() ? a : b).undefined_hint());
    }
    const int c = Value::Compare(a, b);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }
};

}  // namespace

Template::Template(std::string_view source, const LexOptions& options)
    : body_(std::make_unique<Body>(Parse(Lex(source, options)))) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::Render(const Context& context) const {
  Renderer renderer(context);
  std::string out;
  renderer.Exec(*body_, out);
  return out;
}

}  // namespace tq::jinja
