// Left recursion and derivation-path bounds of a Grammar (see grammar_check.h).
#include "engine/structured/grammar_check.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "engine/common/error.h"

namespace tq::structured {
namespace {

[[noreturn]] void Fail(const std::string& message) {
  throw Error("grammar: " + message);
}

// Saturating arithmetic on path counts: anything above the budget is "too many".
constexpr int64_t kSaturated = kMaxExpansionPaths + 1;
int64_t Add(int64_t a, int64_t b) {
  return std::min(a + b, kSaturated);
}
int64_t Mul(int64_t a, int64_t b) {
  return a == 0 || b == 0 ? 0 : (a > kSaturated / b ? kSaturated : std::min(a * b, kSaturated));
}

}  // namespace

CompileDeadline::CompileDeadline()
    : end_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now().time_since_epoch())
                  .count() +
              kMaxCompileMillis * 1000000) {}

void CompileDeadline::Check() const {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (now > end_ns_) {
    Fail("over the compile budget of " + std::to_string(kMaxCompileMillis) +
         " ms (kMaxCompileMillis)");
  }
}

std::vector<bool> NullableRules(const Grammar& g) {
  const size_t n = g.rules.size();
  std::vector<bool> nullable(n, false);
  // pending[a]: references of alternative a not yet known nullable; an
  // alternative with a byte class never is. uses[s]: the alternatives
  // (owner rule, index) that reference rule s, once per reference.
  std::vector<std::pair<int32_t, size_t>> alts;  // (owner, pending count)
  std::vector<std::vector<size_t>> uses(n);
  std::vector<int32_t> queue;
  for (size_t r = 0; r < n; ++r) {
    for (const int32_t start : g.rules[r]) {
      size_t refs = 0;
      bool bytes = false;
      for (int32_t p = start; g.elements[static_cast<size_t>(p)].kind != Grammar::Kind::kEnd; ++p) {
        const Grammar::Element& e = g.elements[static_cast<size_t>(p)];
        if (e.kind == Grammar::Kind::kBytes) {
          bytes = true;
          break;
        }
        uses[static_cast<size_t>(e.arg)].push_back(alts.size());
        ++refs;
      }
      if (bytes) {
        // Drop the uses recorded for this alternative: it never becomes nullable.
        for (int32_t p = start; g.elements[static_cast<size_t>(p)].kind == Grammar::Kind::kRef;
             ++p) {
          uses[static_cast<size_t>(g.elements[static_cast<size_t>(p)].arg)].pop_back();
        }
        continue;
      }
      if (refs == 0 && !nullable[r]) {
        nullable[r] = true;
        queue.push_back(static_cast<int32_t>(r));
      }
      alts.emplace_back(static_cast<int32_t>(r), refs);
    }
  }
  while (!queue.empty()) {
    const auto s = static_cast<size_t>(queue.back());
    queue.pop_back();
    for (const size_t a : uses[s]) {
      if (--alts[a].second == 0 && !nullable[static_cast<size_t>(alts[a].first)]) {
        nullable[static_cast<size_t>(alts[a].first)] = true;
        queue.push_back(alts[a].first);
      }
    }
  }
  return nullable;
}

void CheckGrammar(const Grammar& g, const std::vector<std::string>& names,
                  const CompileDeadline& deadline) {
  const size_t n = g.rules.size();
  const std::vector<bool> nullable = NullableRules(g);
  // starts[r]: the rules r may start with (reached through nullable prefixes).
  std::vector<std::vector<int32_t>> starts(n);
  for (size_t r = 0; r < n; ++r) {
    for (const int32_t start : g.rules[r]) {
      for (int32_t p = start; g.elements[static_cast<size_t>(p)].kind == Grammar::Kind::kRef; ++p) {
        const int32_t s = g.elements[static_cast<size_t>(p)].arg;
        starts[r].push_back(s);
        if (!nullable[static_cast<size_t>(s)]) break;
      }
    }
  }
  // Iterative DFS: a back edge is left recursion; `order` is the post-order
  // (every rule after the rules it may start with).
  std::vector<uint8_t> state(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<int32_t> order;
  order.reserve(n);
  std::vector<std::pair<int32_t, size_t>> path;  // (rule, next edge)
  for (size_t root = 0; root < n; ++root) {
    if (state[root] != 0) continue;
    path.emplace_back(static_cast<int32_t>(root), 0);
    state[root] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      const auto& edges = starts[static_cast<size_t>(r)];
      if (next < edges.size()) {
        const int32_t s = edges[next++];
        if (state[static_cast<size_t>(s)] == 1) {
          Fail("rule '" + names[static_cast<size_t>(s)] + "' is left-recursive");
        }
        if (state[static_cast<size_t>(s)] == 0) {
          state[static_cast<size_t>(s)] = 1;
          path.emplace_back(s, 0);
        }
        continue;
      }
      state[static_cast<size_t>(r)] = 2;
      order.push_back(r);
      path.pop_back();
    }
  }
  deadline.Check();
  // empty[r]: ways r derives the empty string; first[r]: ways it reaches its
  // first byte (the paths an expansion of r walks), both saturated.
  std::vector<int64_t> empty(n, 0), first(n, 0);
  for (const int32_t r : order) {
    int64_t e = 0, f = 0;
    for (const int32_t start : g.rules[static_cast<size_t>(r)]) {
      int64_t prefix = 1;  // ways the elements so far derive the empty string
      for (int32_t p = start; prefix > 0; ++p) {
        const Grammar::Element& el = g.elements[static_cast<size_t>(p)];
        if (el.kind == Grammar::Kind::kEnd) {
          e = Add(e, prefix);
          break;
        }
        if (el.kind == Grammar::Kind::kBytes) {
          f = Add(f, prefix);
          break;
        }
        f = Add(f, Mul(prefix, first[static_cast<size_t>(el.arg)]));
        prefix = Mul(prefix, empty[static_cast<size_t>(el.arg)]);
      }
    }
    if (e > kMaxExpansionPaths || f > kMaxExpansionPaths) {
      Fail("over the compile budget: rule '" + names[static_cast<size_t>(r)] + "' " +
           (e > kMaxExpansionPaths ? "matches the empty string" : "reaches its first byte") +
           " in more than " + std::to_string(kMaxExpansionPaths) +
           " ways (kMaxExpansionPaths; nested optional or repeated groups multiply them)");
    }
    empty[static_cast<size_t>(r)] = e;
    first[static_cast<size_t>(r)] = f;
  }
}

}  // namespace tq::structured
