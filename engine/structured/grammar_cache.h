// Compiled constraints, once per distinct constraint (an LRU cache), and the
// vocabulary bytes of a Tokenizer.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/structured/token_mask.h"

namespace tq {
class Tokenizer;
}

namespace tq::structured {

/// A constraint as a request states it. `text`: the schema as JSON text
/// (kJsonSchema), the pattern (kRegex), the choices as a JSON list of strings
/// (kChoice), grammar text (kGrammar); empty for kJsonObject.
struct ConstraintSpec {
  enum class Kind : uint8_t { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kJsonObject;
  std::string text;
};

/// The grammar text a spec compiles through. Throws UnsupportedConstraint
/// (an unsupported keyword or construct) or tq::Error (text over
/// kMaxConstraintBytes; JSON text that is invalid or nested deeper than
/// kMaxJsonNesting, checked before it is parsed; bad grammar text).
std::string ConstraintGrammarText(const ConstraintSpec& spec);

/// The vocabulary of `tokenizer` for constrained decoding: token i's bytes
/// are Tokenizer::TokenBytes(i) (empty for control/unknown tokens, which a
/// grammar never allows); `eos_ids` are allowed where the grammar can end.
std::shared_ptr<const TokenVocabulary> TokenizerVocabulary(const Tokenizer& tokenizer,
                                                           std::vector<int32_t> eos_ids);

/// Compiles constraints for one vocabulary and keeps the last `capacity`
/// distinct ones. Thread-safe: called from the front end's request threads
/// (validation time), never from the engine thread, so a slow compile only
/// delays its own request. Two threads may compile the same new spec once
/// each; one result is kept.
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity = 64);

  /// The compiled grammar for `spec`. Throws as ConstraintGrammarText, or
  /// tq::Error for bad grammar text or a grammar over the compile budget
  /// (grammar.h; the work of one compile is bounded by it).
  std::shared_ptr<const CompiledGrammar> Get(const ConstraintSpec& spec);
  const TokenVocabulary& vocab() const { return *vocab_; }
  size_t size() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace tq::structured
