// Checks of a flattened Grammar that the byte matcher relies on: no left
// recursion (a top-down matcher would loop), and the compile budget's bound
// on derivation paths (kMaxExpansionPaths), which keeps every expansion of
// the matcher small. Iterative throughout: no recursion on grammar size.
#pragma once

#include <string>
#include <vector>

#include "engine/structured/grammar.h"

namespace tq::structured {

/// Which rules of `g` derive the empty string (one linear worklist pass).
std::vector<bool> NullableRules(const Grammar& g);

/// Throws tq::Error "grammar: rule 'NAME' is left-recursive" for a cycle of
/// rules that can start with each other (through nullable prefixes), and
/// "grammar: over the compile budget: ..." when a rule derives the empty
/// string, or reaches its first byte, in more than kMaxExpansionPaths ways.
/// `names[r]` names rule r in messages; `deadline` is checked as it goes.
void CheckGrammar(const Grammar& g, const std::vector<std::string>& names,
                  const CompileDeadline& deadline);

}  // namespace tq::structured
