// Byte-level pushdown matching (see matcher.h).
#include "engine/structured/matcher.h"

#include <algorithm>

namespace tq::structured {

void ExpandStack(const Grammar& g, Stack stack, std::vector<Stack>* out) {
  while (!stack.empty()) {
    const int32_t p = stack.back();
    const Grammar::Element& e = g.elements[static_cast<size_t>(p)];
    if (e.kind == Grammar::Kind::kBytes) break;
    stack.pop_back();
    if (e.kind == Grammar::Kind::kEnd) continue;  // the frame is done: back to the parent
    // kRef: the frame continues after the reference (nothing to keep when the
    // reference ends its alternative: a tail call), the rule's alternatives go on top.
    if (g.elements[static_cast<size_t>(p) + 1].kind != Grammar::Kind::kEnd) {
      stack.push_back(p + 1);
    }
    const std::vector<int32_t>& alts = g.rules[static_cast<size_t>(e.arg)];
    for (size_t i = 0; i + 1 < alts.size(); ++i) {
      Stack copy = stack;
      copy.push_back(alts[i]);
      ExpandStack(g, std::move(copy), out);
    }
    stack.push_back(alts.back());
  }
  out->push_back(std::move(stack));
}

void Canonicalize(std::vector<Stack>* stacks) {
  std::sort(stacks->begin(), stacks->end());
  stacks->erase(std::unique(stacks->begin(), stacks->end()), stacks->end());
  if (stacks->size() > kMaxStacks) stacks->resize(kMaxStacks);
}

void AdvanceStacks(const Grammar& g, const std::vector<Stack>& in, uint8_t byte,
                   std::vector<Stack>* out) {
  out->clear();
  for (const Stack& s : in) {
    if (s.empty()) continue;
    const int32_t top = s.back();
    if (!ByteSetHas(g.classes[static_cast<size_t>(g.elements[static_cast<size_t>(top)].arg)],
                    byte)) {
      continue;
    }
    Stack next = s;
    next.back() = top + 1;
    ExpandStack(g, std::move(next), out);
  }
  Canonicalize(out);
}

ByteMatcher::ByteMatcher(const Grammar* grammar) : grammar_(grammar) {
  for (int32_t alt : grammar->rules[static_cast<size_t>(grammar->root)]) {
    ExpandStack(*grammar, Stack{alt}, &stacks_);
  }
  Canonicalize(&stacks_);
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
