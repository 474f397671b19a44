// Byte-level pushdown matching (see matcher.h).
#include "engine/structured/matcher.h"

#include <algorithm>

namespace tq::structured {

bool ExpandStack(const Grammar& g, Stack stack, std::vector<Stack>* out, size_t* budget) {
  // Pending stacks (other alternatives of references met on the way),
  // expanded depth first in the order the recursive form would.
  std::vector<Stack> pending;
  pending.push_back(std::move(stack));
  while (!pending.empty()) {
    Stack s = std::move(pending.back());
    pending.pop_back();
    bool dead = false;
    while (!s.empty()) {
      const int32_t p = s.back();
      const Grammar::Element& e = g.elements[static_cast<size_t>(p)];
      if (e.kind == Grammar::Kind::kBytes) break;
      s.pop_back();
      if (e.kind == Grammar::Kind::kEnd) continue;  // the frame is done: back to the parent
      if (*budget == 0) return false;
      --*budget;
      // kRef: the frame continues after the reference (nothing to keep when
      // the reference ends its alternative: a tail call), the rule's
      // alternatives go on top.
      if (g.elements[static_cast<size_t>(p) + 1].kind != Grammar::Kind::kEnd) s.push_back(p + 1);
      const std::vector<int32_t>& alts = g.rules[static_cast<size_t>(e.arg)];
      if (alts.empty()) {  // a rule with no alternative matches nothing (never built)
        dead = true;
        break;
      }
      for (size_t i = alts.size() - 1; i >= 1; --i) {  // popped in order: alts[1] first
        Stack copy = s;
        copy.push_back(alts[i]);
        pending.push_back(std::move(copy));
      }
      s.push_back(alts.front());
    }
    if (!dead) out->push_back(std::move(s));
  }
  return true;
}

void Canonicalize(std::vector<Stack>* stacks) {
  std::sort(stacks->begin(), stacks->end());
  stacks->erase(std::unique(stacks->begin(), stacks->end()), stacks->end());
  if (stacks->size() > kMaxStacks) stacks->resize(kMaxStacks);
}

bool AdvanceStacks(const Grammar& g, const std::vector<Stack>& in, uint8_t byte,
                   std::vector<Stack>* out) {
  out->clear();
  size_t budget = kMaxExpandSteps;
  bool complete = true;
  for (const Stack& s : in) {
    if (s.empty()) continue;
    const int32_t top = s.back();
    if (!ByteSetHas(g.classes[static_cast<size_t>(g.elements[static_cast<size_t>(top)].arg)],
                    byte)) {
      continue;
    }
    Stack next = s;
    next.back() = top + 1;
    if (!ExpandStack(g, std::move(next), out, &budget)) {
      complete = false;
      break;
    }
  }
  Canonicalize(out);
  return complete;
}

bool StartStacks(const Grammar& g, std::vector<Stack>* out) {
  out->clear();
  size_t budget = kMaxExpandSteps;
  bool complete = true;
  for (int32_t alt : g.rules[static_cast<size_t>(g.root)]) {
    if (!ExpandStack(g, Stack{alt}, out, &budget)) {
      complete = false;
      break;
    }
  }
  Canonicalize(out);
  return complete;
}

ByteMatcher::ByteMatcher(const Grammar* grammar) : grammar_(grammar) {
  StartStacks(*grammar, &stacks_);
}

ByteMatcher::ByteMatcher(const Grammar* grammar, std::vector<Stack> stacks)
    : grammar_(grammar), stacks_(std::move(stacks)) {}

bool ByteMatcher::Advance(uint8_t byte) {
  AdvanceStacks(*grammar_, stacks_, byte, &scratch_);
  if (scratch_.empty()) return false;
  stacks_.swap(scratch_);
  return true;
}

bool ByteMatcher::AdvanceAll(std::string_view bytes) {
  return std::ranges::all_of(bytes, [this](char c) { return Advance(static_cast<uint8_t>(c)); });
}

bool ByteMatcher::CanEnd() const {
  return !stacks_.empty() && stacks_.front().empty();  // sorted: the empty stack first
}

bool ByteMatcher::Accepts(std::string_view bytes) const {
  ByteMatcher copy(grammar_, stacks_);
  return copy.AdvanceAll(bytes);
}

bool ByteMatcher::AcceptsComplete(std::string_view bytes) const {
  ByteMatcher copy(grammar_, stacks_);
  return copy.AdvanceAll(bytes) && copy.CanEnd();
}

}  // namespace tq::structured
