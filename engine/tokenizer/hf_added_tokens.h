// tokenizer.json "added_tokens": tokens matched in the text before splitting.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tq::hf {

class Normalizer;

/// One entry of "added_tokens".
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

/// A span of text: an added token (id >= 0) or text to tokenize (id -1).
struct TextSplit {
  size_t begin, end;
  int32_t id;
};

/// Finds added tokens in text as HF's AddedVocabulary: leftmost-longest
/// matches, single_word / lstrip / rstrip honoured; non-normalized tokens are
/// matched on the raw text, normalized ones on the normalized pieces between
/// (their content normalized once at load). Immutable, thread-safe.
class AddedTokens {
 public:
  /// Reads the "added_tokens" array; `normalizer` (may be null) normalizes
  /// the content of tokens with normalized=true.
  AddedTokens(const nlohmann::json& spec, const Normalizer* normalizer, const std::string& where);

  /// Splits `text` at the tokens of one kind (normalized or not), in order.
  void Split(std::string_view text, bool normalized, std::vector<TextSplit>& out) const;

  const AddedToken* ById(int32_t id) const;
  /// Id of the added token whose content is `content`; -1 when none.
  int32_t IdOf(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Tokens of one kind bucketed by first byte, longest first.
  struct Matcher {
    std::vector<std::vector<const AddedToken*>> by_first_byte;
    bool any = false;
  };
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  Matcher raw_, normalized_;
  std::vector<std::string> pattern_;  // per token: the content as matched

  void Build(Matcher& m, bool normalized);
};

}  // namespace tq::hf
