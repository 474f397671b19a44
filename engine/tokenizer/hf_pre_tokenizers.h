// tokenizer.json "pre_tokenizer" components (HF tokenizers' pre_tokenizers).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tq::hf {

/// One split of the text on its way to the model. `at_start`: the split
/// begins at offset 0 of the original text (Metaspace's prepend_scheme
/// "first").
struct Piece {
  std::string text;
  bool at_start = false;
};

/// Splits pieces further (and may rewrite them, as ByteLevel does).
/// Immutable, thread-safe.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Replaces `pieces` by their splits, in order; empty splits are dropped.
  virtual void PreTokenize(std::vector<Piece>& pieces) const = 0;
};

/// Builds the pre-tokenizer `spec` describes: Split (String/Regex pattern,
/// the five delimiter behaviours, invert), ByteLevel (add_prefix_space,
/// use_regex with GPT-2's pattern), Metaspace (replacement, prepend_scheme,
/// split), Digits, Sequence; nullptr for JSON null. Throws tq::Error
/// "<where>: unsupported pre_tokenizer \"<type>\"" for any other type.
std::unique_ptr<PreTokenizer> MakePreTokenizer(const nlohmann::json& spec,
                                               const std::string& where);

/// The UTF-8 text of byte `b` in GPT-2's byte-to-unicode alphabet (printable
/// Latin-1 bytes map to themselves, the others to U+0100..U+0143).
const std::string& ByteLevelChar(unsigned char b);

}  // namespace tq::hf
