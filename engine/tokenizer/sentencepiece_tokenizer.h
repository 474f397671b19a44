// SentencePiece tokenizer.model (see tokenizer.h).
#pragma once

#include <memory>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tq {

/// Wraps the sentencepiece library (Kudo & Richardson 2018) for a Llama
/// tokenizer.model: BPE with byte fallback. Thread-safe for concurrent
/// Encode/Decode after construction (sentencepiece's processor is const-safe).
class SentencePieceTokenizer final : public Tokenizer {
 public:
  /// Loads the SentencePiece model at `path`. Throws tq::Error naming the
  /// file when it is missing or not a valid SentencePiece model.
  static std::unique_ptr<SentencePieceTokenizer> Load(const std::string& path,
                                                      const TokenizerSettings& settings);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> Encode(std::string_view text, bool add_special = true) const override;
  std::string Decode(std::span<const int32_t> ids) const override;
  std::string IdToPiece(int32_t id) const override;
  std::string TokenBytes(int32_t id) const override;
  int32_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  Kind kind() const override { return Kind::kSentencePiece; }

 private:
  SentencePieceTokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  TokenizerSettings settings_;
};

}  // namespace tq
