// Context-free grammars over bytes: the representation the matcher runs, and
// the GBNF-like text form that every constraint compiles through.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tq::structured {

/// A set of byte values (bit b of word b / 64).
using ByteSet = std::array<uint64_t, 4>;

inline bool ByteSetHas(const ByteSet& s, uint8_t b) {
  return (s[b >> 6] >> (b & 63)) & 1;
}

/// A grammar flattened for matching, llama.cpp-GBNF style: each rule is a list
/// of alternatives, each alternative a sequence of elements ending in kEnd.
/// Positions index `elements`; an alternative starts at rules[r][i]. kBytes
/// matches one byte of classes[arg]; kRef expands rule arg. Immutable after
/// ParseGrammar; shared read-only between threads.
struct Grammar {
  enum class Kind : uint8_t { kBytes, kRef, kEnd };
  struct Element {
    Kind kind = Kind::kEnd;
    int32_t arg = 0;
  };
  std::vector<Element> elements;
  std::vector<ByteSet> classes;
  std::vector<std::vector<int32_t>> rules;  // rule -> alternative start positions
  int32_t root = 0;
};

/// The compile budget: limits that bound the work and memory of compiling
/// one constraint, each enforced while the grammar grows (before the
/// allocation it bounds), so that no input can allocate or run without limit.
/// Over a limit, compiling throws tq::Error whose message says "over the
/// compile budget" and names the limit (the front ends' 400 /
/// INVALID_ARGUMENT). docs/api.md lists them.
inline constexpr int32_t kMaxRepetition = 4096;  // {m,n} bounds
/// Elements of the flattened grammar (one per byte class or rule reference,
/// plus one per alternative), counted as rules are added.
inline constexpr size_t kMaxGrammarElements = 1 << 20;
/// Bytes of a constraint's source text (schema JSON, regex, grammar, choices).
inline constexpr size_t kMaxConstraintBytes = 1 << 20;
/// Ways any one rule can derive the empty string, and ways it can reach its
/// first byte (derivation paths the matcher enumerates): nested optional or
/// repeated groups multiply these.
inline constexpr int64_t kMaxExpansionPaths = 16384;
/// Wall-clock milliseconds for compiling one constraint.
inline constexpr int64_t kMaxCompileMillis = 2000;

/// A wall-clock bound on one compile (kMaxCompileMillis from construction).
/// Check() throws tq::Error ("grammar: over the compile budget of N ms")
/// once it has passed. Cheap enough to call per grammar item.
class CompileDeadline {
 public:
  CompileDeadline();
  void Check() const;

 private:
  int64_t end_ns_;
};

/// Parses the text form (UTF-8): rules `name ::= alternatives`, where an
/// alternative is a sequence of "literal" strings (escapes \n \r \t \\ \" \'
/// \[ \] \- \^ and \xHH \uHHHH \UHHHHHHHH for code points), [character classes] (ranges, leading ^
/// negates, same escapes),
/// `.` (any character but \n), rule names, ( groups ), each optionally followed
/// by * + ? {m} {m,} {m,n}; `|` separates alternatives; # starts a comment.
/// Characters are Unicode code points, matched as their UTF-8 bytes. The start
/// rule is `root`. Throws tq::Error naming the problem (syntax with its
/// offset, an undefined rule, left recursion, the compile budget).
/// Repetition of a group that can match the empty string (X* with X
/// nullable) is lowered through X without its empty string, so it is
/// neither left-recursive nor ambiguous: (a*)* matches what a* matches.
Grammar ParseGrammar(std::string_view text);

/// The GBNF literal for UTF-8 `text` (quotes included): ", \\ and control
/// characters escaped, everything else as is.
std::string GbnfLiteral(std::string_view text);
/// The grammar expression that matches any one of `alts` (grammar
/// expressions, at least one): the one alternative itself, else "(a | b | ...)".
std::string GbnfAlternatives(const std::vector<std::string>& alts);

}  // namespace tq::structured
