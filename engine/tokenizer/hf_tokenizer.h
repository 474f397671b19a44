// Hugging Face tokenizer.json (see tokenizer.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace tq {
namespace hf {
class AddedTokens;
class BpeModel;
class Decoder;
class Normalizer;
class PreTokenizer;
struct Piece;
}  // namespace hf

/// The Hugging Face `tokenizers` pipeline read from a tokenizer.json:
/// added tokens (matched first, never split) -> normalizer -> pre-tokenizer
/// -> BPE model -> post-processor, and decoder for the way back. Which
/// components are supported: hf_normalizers.h, hf_pre_tokenizers.h,
/// bpe_model.h, hf_decoders.h; post-processors TemplateProcessing, ByteLevel
/// and Sequence. Anything else is refused at load with one error line naming
/// the component. Encode/Decode give the ids and text of HF tokenizers
/// (encode(add_special_tokens), decode(skip_special_tokens=true)); the
/// differences: invalid UTF-8 input is first repaired to U+FFFD (HF takes only
/// valid strings). Thread-safe after Load.
class HfTokenizer final : public Tokenizer {
 public:
  /// Loads `path` (a tokenizer.json). Special tokens added by Encode: the
  /// post-processor's, except for tokenizer_config.json's Llama tokenizer
  /// classes (LlamaTokenizer[Fast], CodeLlamaTokenizer[Fast]), where
  /// add_bos_token / add_eos_token decide as transformers does. bos_id/eos_id:
  /// tokenizer_config.json's bos_token / eos_token. Throws tq::Error "<path>: ...".
  static std::unique_ptr<HfTokenizer> Load(const std::string& path,
                                           const TokenizerSettings& settings);
  ~HfTokenizer() override;

  std::vector<int32_t> Encode(std::string_view text, bool add_special = true) const override;
  /// Special added tokens and ids no token has are skipped.
  std::string Decode(std::span<const int32_t> ids) const override;
  std::string IdToPiece(int32_t id) const override;
  /// "" for special added tokens; else the token through the decoder, as raw
  /// bytes and without start-of-text rules.
  std::string TokenBytes(int32_t id) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  Kind kind() const override { return Kind::kTokenizerJson; }

 private:
  HfTokenizer() = default;
  std::unique_ptr<hf::AddedTokens> added_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::BpeModel> model_;
  std::unique_ptr<hf::Decoder> decoder_;
  std::vector<int32_t> prefix_, suffix_;  // special tokens around a single sequence
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;

  int32_t TokenToId(std::string_view token) const;
  const std::string* TokenOf(int32_t id) const;
  // Pre-tokenizes and BPE-encodes one normalized split (no added tokens in it).
  void EncodeText(std::string_view text, bool at_start, std::vector<int32_t>& ids) const;
  std::string RunDecoder(std::vector<std::string> tokens, bool raw) const;
};

/// HfTokenizer::Load, or in a build without tokenizer.json support
/// (-DTQ_TOKENIZER_JSON=OFF) a tq::Error saying so. What Tokenizer::Load calls.
std::unique_ptr<Tokenizer> LoadTokenizerJson(const std::string& path,
                                             const TokenizerSettings& settings);

}  // namespace tq
