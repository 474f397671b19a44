// Text <-> token ids for a model directory (SentencePiece tokenizer.model).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tq {

/// Wraps the sentencepiece library (Kudo & Richardson 2018) for a Llama
/// tokenizer.model: BPE with byte fallback. Thread-safe for concurrent
/// Encode/Decode after construction (sentencepiece's processor is const-safe).
class Tokenizer {
 public:
  /// Loads `<model_dir>/tokenizer.model`. Throws tq::Error naming the file when
  /// it is missing or not a valid SentencePiece model.
  static std::unique_ptr<Tokenizer> Load(const std::string& model_dir,
                                         const TokenizerSettings& settings);
  ~Tokenizer();

  /// Token ids of `text`; with add_special, BOS (and EOS) are added as
  /// tokenizer_config.json's add_bos_token / add_eos_token say. Empty text
  /// gives just the special tokens.
  std::vector<int32_t> Encode(std::string_view text, bool add_special = true) const;
  /// Text of `ids` (byte-fallback pieces become their bytes; invalid UTF-8 is
  /// replaced by U+FFFD). Control tokens (BOS/EOS) and out-of-range ids are
  /// skipped; <unk> is not a control token and renders as " ⁇ ", as in
  /// sentencepiece.
  std::string Decode(std::span<const int32_t> ids) const;
  /// The piece string of one id (e.g. "▁time", "<0x0A>"); "" when out of range.
  std::string IdToPiece(int32_t id) const;

  /// A piece whose text is itself, non-empty and without a leading space
  /// (e.g. "he"); -1 if none. Decoding a mid-text window behind it keeps the
  /// window's leading spaces, which SentencePiece strips at the start of a
  /// decode. Found once at load (a vocabulary scan), used per streamed token.
  int32_t anchor_id() const { return anchor_id_; }

  int32_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;

 private:
  Tokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  TokenizerSettings settings_;
  int32_t anchor_id_ = -1;
};

}  // namespace tq
