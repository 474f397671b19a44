// Grammar-constrained decoding over a tokenizer's vocabulary: a byte trie of
// the tokens (once per tokenizer), per-grammar caches (the tokens each stack
// suffix accepts regardless of the stack below it, after XGrammar's
// "adaptive token mask cache", Dong et al. 2024; whole-state masks), and the
// per-sequence matcher that turns its parse state into a token mask each step.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/structured/grammar.h"
#include "engine/structured/matcher.h"

namespace tq::structured {

/// Every token's bytes (what it adds to the decoded text; empty for special
/// tokens, which a grammar never allows) in a byte trie, and the EOS ids.
/// Immutable after construction; shared between threads.
class TokenVocabulary {
 public:
  /// A trie node in DFS preorder: its subtree is [index, end); its tokens (all
  /// with exactly the bytes of the path to it) are sorted()[tok_begin, tok_end).
  struct Node {
    int32_t end = 0;
    int32_t tok_begin = 0, tok_end = 0;
    int32_t depth = 0;
    uint8_t byte = 0;
  };

  /// `token_bytes[id]`: the bytes of token id; `eos_ids`: the tokens allowed
  /// where the grammar can end.
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& sorted() const { return sorted_; }
  /// Bit i set when token i has bytes (the tokens a grammar can allow).
  const std::vector<uint64_t>& byte_tokens() const { return byte_tokens_; }
  /// 64-bit words of a mask over this vocabulary.
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> eos_ids_;
  std::vector<Node> nodes_;      // [0] is the root (no byte)
  std::vector<int32_t> sorted_;  // token ids with bytes, sorted by bytes
  std::vector<uint64_t> byte_tokens_;
};

/// How many of a stack's top positions key the context-independent cache: a
/// JSON string's content, the closing quote and the repetition frame between
/// them (the same three positions at every nesting depth and for keys and
/// values alike).
inline constexpr size_t kSuffixDepth = 3;

/// A grammar bound to a vocabulary, with two lazily filled, bounded caches
/// (XGrammar's "adaptive token mask cache", Dong et al. 2024, keyed by stack
/// suffixes instead of single positions, our variant):
///  - per stack suffix (the top kSuffixDepth positions): the tokens the suffix
///    accepts without running past its bottom (valid whatever lies below it),
///    found by one trie walk that cuts a subtree at the first rejected byte,
///    and the "uncertain" tokens that run past it, in trie (byte) order, left
///    to one walk (over all the state's entries at once) against the whole state;
///  - per whole matcher state (all stacks): the finished mask.
/// The grammar and vocabulary are immutable; the caches are guarded by a
/// mutex, so one CompiledGrammar may serve any number of sequences and
/// threads. Memory per grammar: at most kSuffixCacheBytes of suffix entries
/// and kStateCacheBytes of whole-state masks (a miss beyond either is
/// computed and not kept), plus the walk memo (kMaxWalkStates states or
/// kMaxWalkBytes, the first kDense with a 1 KiB transition table).
class CompiledGrammar {
 public:
  /// The context-independent part of one stack suffix.
  struct SuffixEntry {
    enum class Form : uint8_t { kList, kComplement, kBitset } form = Form::kList;
    std::vector<int32_t> list;       // kList: accepted ids; kComplement: byte tokens not accepted
    std::vector<uint64_t> bits;      // kBitset: accepted
    std::vector<int32_t> uncertain;  // indices into vocab().sorted(), ascending
    /// ORs the accepted tokens into `mask`.
    void OrAccepted(const TokenVocabulary& vocab, std::span<uint64_t> mask) const;
  };
  static constexpr size_t kSuffixCacheBytes = size_t{32} << 20;
  static constexpr size_t kStateCacheBytes = size_t{16} << 20;

  /// No vocabulary walk here (the caches fill as sequences decode); the
  /// start state is expanded once, here, on the compiling thread, so that a
  /// GrammarMatcher (engine thread) only copies it. Throws tq::Error ("over
  /// the compile budget") when that expansion passes kMaxExpandSteps.
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab);

  const Grammar& grammar() const { return grammar_; }
  /// The matcher's stacks before any byte (see StartStacks).
  const std::vector<Stack>& start_stacks() const { return start_; }
  const TokenVocabulary& vocab() const { return *vocab_; }

  /// The entry for the top kSuffixDepth positions of `stack` (non-empty),
  /// built on first use (one pruned trie walk: ~2-10 ms at a 128K vocabulary
  /// for a string's content, microseconds for a literal).
  std::shared_ptr<const SuffixEntry> Suffix(const Stack& stack) const;
  /// The cached mask of a whole state (key from StateKey), or null.
  std::shared_ptr<const std::vector<uint64_t>> CachedMask(const std::string& key) const;
  /// Keeps `mask` for the state `key` while the byte budget lasts.
  void StoreMask(const std::string& key, std::shared_ptr<const std::vector<uint64_t>> mask) const;

  /// Cache sizes (for logs and benchmarks).
  size_t num_suffix_entries() const;
  size_t num_state_masks() const;
  size_t num_uncertain() const;
  /// Bytes held by both caches (keys and entries).
  size_t cache_bytes() const;

 private:
  // Matcher states met by suffix walks, interned, with their byte
  // transitions memoized: a walk costs one table look-up per trie node, the
  // stack arithmetic once per distinct (state, byte). Shared by all walks of
  // this grammar (build_mu_); dropped when it outgrows kMaxWalkStates.
  struct WalkStates {
    static constexpr int32_t kUnknown = -2, kDead = -1;
    static constexpr size_t kDense = 4096;  // states with a 256-entry table
    std::vector<std::vector<Stack>> sets;
    std::vector<uint8_t> can_end;  // the set holds the empty stack
    std::unordered_map<std::string, int32_t> index;
    std::vector<int32_t> dense;                    // [id * 256 + byte] for id < kDense
    std::unordered_map<uint64_t, int32_t> sparse;  // (id << 8 | byte) beyond
    std::vector<Stack> scratch;
    size_t bytes = 0;  // held by sets and index (approximately)
    int32_t Intern(std::vector<Stack> set);
    int32_t Next(const Grammar& g, int32_t id, uint8_t byte);
  };
  static constexpr size_t kMaxWalkStates = 1 << 16;
  static constexpr size_t kMaxWalkBytes = size_t{64} << 20;

  SuffixEntry Build(const Stack& suffix, bool whole) const;

  mutable std::mutex build_mu_;
  mutable WalkStates walk_;

  Grammar grammar_;
  std::vector<Stack> start_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const SuffixEntry>> suffixes_;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> states_;
  mutable size_t state_bytes_ = 0;
  mutable size_t suffix_bytes_ = 0;
};

/// The cache key of a matcher state: its stacks' positions, serialized.
std::string StateKey(const std::vector<Stack>& stacks);

/// One sequence's constraint state: the parse stacks after its output so far.
/// Engine thread only (not thread-safe); keeps the CompiledGrammar alive.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  /// Sets `mask` (vocab().mask_words() words) to the tokens allowed next: bit
  /// i = token i keeps the output a prefix of a sentence; EOS ids only where
  /// the sentence may end, and when nothing else is left. Never empty.
  void FillMask(std::vector<uint64_t>* mask);
  /// Advances past `token`. Returns false (state unchanged) when the grammar
  /// rejects it; an EOS id is accepted where the sentence may end.
  bool AcceptToken(int32_t token);
  /// Whether the output so far is a complete sentence.
  bool CanEnd() const { return matcher_.CanEnd(); }
  const CompiledGrammar& compiled() const { return *grammar_; }

 private:
  // Sets the bits of the `uncertain` tokens (indices into vocab().sorted(),
  // ascending) that the whole state accepts: a walk over them in byte order,
  // reusing the states of the common prefix and skipping every token already
  // set or that extends a rejected prefix.
  void CheckUncertain(const std::vector<int32_t>& uncertain, std::span<uint64_t> mask);

  std::shared_ptr<const CompiledGrammar> grammar_;
  ByteMatcher matcher_;
  bool ended_ = false;
  std::vector<std::vector<Stack>> walk_;  // walk_[d]: states after d bytes
};

/// Sets logits[i] = -inf where bit i of `mask` is clear (i < logits.size()).
void ApplyTokenMask(std::span<float> logits, std::span<const uint64_t> mask);

}  // namespace tq::structured
