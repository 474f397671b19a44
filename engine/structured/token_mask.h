// Grammar-constrained decoding over a tokenizer's vocabulary: a byte trie of
// the tokens (once per tokenizer), per-grammar caches of the tokens each
// grammar position accepts regardless of the stack below it (XGrammar's
// "adaptive token mask cache", Dong et al. 2024), and the per-sequence
// matcher that turns its parse state into a token mask each step.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
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

/// A grammar bound to a vocabulary, with per-position token caches: for each
/// kBytes position p, the tokens accepted by the rest of p's frame alone
/// (valid whatever lies below it on the stack), and the "uncertain" ones that
/// run past the frame's end and must be checked against the whole stack.
/// Built once per distinct constraint (GrammarCache); immutable afterwards,
/// shared read-only between the front end and the engine thread.
class CompiledGrammar {
 public:
  /// Cost: one pruned trie walk per kBytes position (milliseconds for a
  /// string position at a 128K vocabulary, microseconds for a literal byte).
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab);

  const Grammar& grammar() const { return grammar_; }
  const TokenVocabulary& vocab() const { return *vocab_; }

  /// ORs the tokens position `p` accepts context-independently into `mask`.
  void OrAccepted(int32_t p, std::span<uint64_t> mask) const;
  /// The tokens position `p` leaves to a full-stack check.
  const std::vector<int32_t>& Uncertain(int32_t p) const;
  /// Totals over all positions (for logs and benchmarks).
  size_t num_positions() const { return cache_.size(); }
  size_t num_uncertain() const;

 private:
  struct PositionCache {
    enum class Form : uint8_t { kList, kComplement, kBitset } form = Form::kList;
    std::vector<int32_t> list;   // kList: accepted; kComplement: byte tokens not accepted
    std::vector<uint64_t> bits;  // kBitset
    std::vector<int32_t> uncertain;
  };
  PositionCache Build(int32_t p) const;

  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::vector<int32_t> cache_index_;  // position -> cache_ entry, -1 for non-kBytes
  std::vector<PositionCache> cache_;
};

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
  std::shared_ptr<const CompiledGrammar> grammar_;
  ByteMatcher matcher_;
  bool ended_ = false;
  std::vector<int32_t> tops_;
};

/// Sets logits[i] = -inf where bit i of `mask` is clear (i < logits.size()).
void ApplyTokenMask(std::span<float> logits, std::span<const uint64_t> mask);

}  // namespace tq::structured
