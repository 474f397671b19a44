// Byte-level pushdown matching of a Grammar: the set of parse stacks after a
// prefix, advanced one byte at a time (llama.cpp's GBNF matcher design).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/structured/grammar.h"

namespace tq::structured {

/// One parse stack: grammar positions, bottom first. The top is always a
/// kBytes element (the next byte to match); an empty stack means the whole
/// grammar is complete.
using Stack = std::vector<int32_t>;

/// At most this many stacks are kept (an ambiguous grammar could make
/// exponentially many); beyond it the smallest ones in sort order are kept,
/// so every byte accepted is still valid (sound, possibly incomplete).
inline constexpr size_t kMaxStacks = 256;

/// The parse state of one sequence: a sorted, duplicate-free set of stacks.
/// Not thread-safe; the Grammar must outlive it.
class ByteMatcher {
 public:
  explicit ByteMatcher(const Grammar* grammar);
  /// A matcher whose stacks are `stacks` (normalized: tops are kBytes or
  /// empty), e.g. CompiledGrammar's precomputed start.
  ByteMatcher(const Grammar* grammar, std::vector<Stack> stacks);

  /// Consumes one byte; false (state unchanged) when no stack accepts it.
  bool Advance(uint8_t byte);
  /// Consumes all of `bytes`; false (state unspecified) when one is rejected.
  bool AdvanceAll(std::string_view bytes);
  /// Whether the input so far is a complete sentence of the grammar.
  bool CanEnd() const;
  /// Whether `bytes` would be accepted from here (state unchanged).
  bool Accepts(std::string_view bytes) const;
  /// Whether the input so far plus `bytes` is a complete sentence.
  bool AcceptsComplete(std::string_view bytes) const;
  const std::vector<Stack>& stacks() const { return stacks_; }

 private:
  const Grammar* grammar_;
  std::vector<Stack> stacks_;
  std::vector<Stack> scratch_;
};

/// At most this many stacks are expanded (rule references followed) per
/// ExpandStack call and per AdvanceStacks call, which bounds the work and
/// memory of one step whatever the grammar (an ambiguous one has
/// exponentially many derivation paths). Beyond it the expansion stops:
/// every stack found is still valid (sound, possibly incomplete, as
/// kMaxStacks). Compiled grammars are checked against kMaxExpansionPaths
/// (grammar.h), so their start state stays within it.
inline constexpr size_t kMaxExpandSteps = 16384;

/// Pushes every normalization of `stack` (refs expanded, finished frames
/// popped) to `out`: stacks whose top is a kBytes position, or the empty
/// stack when the grammar can end there. Iterative. Expands at most `*budget`
/// references (decremented); returns false when it stopped there.
bool ExpandStack(const Grammar& g, Stack stack, std::vector<Stack>* out, size_t* budget);

/// Sorts and deduplicates `stacks`, keeping at most kMaxStacks.
void Canonicalize(std::vector<Stack>* stacks);

/// For every stack of `in` whose top accepts `byte`: the stack advanced past
/// it and normalized, into `out` (cleared first, then canonicalized); at most
/// kMaxExpandSteps expansions in all. Returns false when it stopped there.
bool AdvanceStacks(const Grammar& g, const std::vector<Stack>& in, uint8_t byte,
                   std::vector<Stack>* out);

/// The normalized stacks of the grammar's start (root's alternatives
/// expanded, canonicalized). Returns false when the expansion stopped at
/// kMaxExpandSteps (the stacks are then a valid subset).
bool StartStacks(const Grammar& g, std::vector<Stack>* out);

}  // namespace tq::structured
