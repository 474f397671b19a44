// Constraint compilation with an LRU cache (see grammar_cache.h).
#include "engine/structured/grammar_cache.h"

#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/common/json_limits.h"
#include "engine/structured/json_schema.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::structured {

std::string ConstraintGrammarText(const ConstraintSpec& spec) {
  // The front ends check these too (naming their field); the engine does
  // not rely on it.
  if (spec.text.size() > kMaxConstraintBytes) {
    throw Error("over the compile budget: the constraint is " + std::to_string(spec.text.size()) +
                " bytes, more than " + std::to_string(kMaxConstraintBytes) +
                " (kMaxConstraintBytes)");
  }
  const auto parse = [&spec](const char* what) {
    nlohmann::json j =
        ParseJsonBounded<nlohmann::json>(spec.text, what, kMaxConstraintBytes, kMaxJsonNesting);
    if (j.is_discarded()) throw Error(std::string("the ") + what + " is not valid JSON");
    return j;
  };
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonObject:
      return JsonObjectGrammar();
    case ConstraintSpec::Kind::kJsonSchema:
      return JsonSchemaGrammar(parse("schema"));
    case ConstraintSpec::Kind::kRegex:
      return RegexGrammar(spec.text);
    case ConstraintSpec::Kind::kChoice: {
      const nlohmann::json list = parse("choice list");
      if (!list.is_array()) throw Error("the choice list is not a JSON list of strings");
      std::vector<std::string> choices;
      for (const nlohmann::json& c : list) {
        if (!c.is_string()) throw Error("the choice list is not a JSON list of strings");
        choices.push_back(c.get<std::string>());
      }
      return ChoiceGrammar(choices);
    }
    case ConstraintSpec::Kind::kGrammar:
      return spec.text;
  }
  return spec.text;
}

std::shared_ptr<const TokenVocabulary> TokenizerVocabulary(const Tokenizer& tokenizer,
                                                           std::vector<int32_t> eos_ids) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    bytes[static_cast<size_t>(id)] = tokenizer.TokenBytes(id);
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes), std::move(eos_ids));
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity) {}

std::shared_ptr<const CompiledGrammar> GrammarCache::Get(const ConstraintSpec& spec) {
  const std::string key = std::to_string(static_cast<int>(spec.kind)) + ":" + spec.text;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto compiled =
      std::make_shared<const CompiledGrammar>(ParseGrammar(ConstraintGrammarText(spec)), vocab_);
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace tq::structured
