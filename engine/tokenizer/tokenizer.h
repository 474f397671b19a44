// Text <-> token ids for a model directory: one interface for SentencePiece
// tokenizer.model and Hugging Face tokenizer.json.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"

namespace tq {

/// The tokenizer of a model. Implementations: SentencePieceTokenizer
/// (tokenizer.model; engine/tokenizer/sentencepiece_tokenizer.h) and
/// HfTokenizer (tokenizer.json; engine/tokenizer/hf_tokenizer.h). All methods
/// are const and thread-safe for concurrent use after Load.
class Tokenizer {
 public:
  /// Which file a tokenizer was loaded from.
  enum class Kind { kSentencePiece, kTokenizerJson };

  /// Loads the tokenizer of `model_dir`: `<model_dir>/tokenizer.json` when
  /// present (it wins over tokenizer.model, as in transformers' fast
  /// tokenizers), else `<model_dir>/tokenizer.model` (SentencePiece). Throws
  /// tq::Error naming the file when neither exists ("<dir>/tokenizer.model:
  /// not found"), or when it is invalid or uses an unsupported component.
  static std::unique_ptr<Tokenizer> Load(const std::string& model_dir,
                                         const TokenizerSettings& settings);
  virtual ~Tokenizer();

  /// Token ids of `text`; with add_special, BOS (and EOS) are added as
  /// tokenizer_config.json's add_bos_token / add_eos_token say. Empty text
  /// gives just the special tokens.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_special = true) const = 0;
  /// Text of `ids` (byte-fallback pieces become their bytes; invalid UTF-8 is
  /// replaced by U+FFFD). Control tokens (BOS/EOS; for tokenizer.json every
  /// added token marked special) and out-of-range ids are skipped; for
  /// SentencePiece <unk> is not a control token and renders as " ⁇ ", as in
  /// sentencepiece.
  virtual std::string Decode(std::span<const int32_t> ids) const = 0;
  /// The piece string of one id as the vocabulary spells it (e.g. "▁time",
  /// "<0x0A>"); "" when out of range.
  virtual std::string IdToPiece(int32_t id) const = 0;
  /// The raw bytes token `id` contributes to decoded text in the middle of a
  /// text: "▁time" -> " time", "<0x0A>" -> "\n", "<0xE4>" -> the single byte
  /// 0xE4 (not valid UTF-8 on its own); byte-level BPE "Ġtime" -> " time",
  /// "Ã©" -> the two bytes of "é". Decode's start-of-text rule is not
  /// applied (SentencePiece drops the leading space of the first piece of a
  /// decode; TokenBytes keeps it). "" for tokens that are not text: control
  /// tokens (BOS/EOS), <unk>, unused pieces and out-of-range ids. For the
  /// vocabulary trie of structured outputs.
  virtual std::string TokenBytes(int32_t id) const = 0;

  /// A piece whose text is itself, non-empty and without a leading space
  /// (e.g. "he"); -1 if none. Decoding a mid-text window behind it keeps the
  /// window's leading spaces, which SentencePiece strips at the start of a
  /// decode. Found once at load (a vocabulary scan), used per streamed token.
  int32_t anchor_id() const { return anchor_id_; }

  virtual int32_t vocab_size() const = 0;
  /// BOS / EOS ids; -1 when the tokenizer has none.
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual Kind kind() const = 0;

 protected:
  Tokenizer() = default;
  /// Sets anchor_id() by a vocabulary scan; implementations call it at the
  /// end of loading.
  void FindAnchor();

 private:
  int32_t anchor_id_ = -1;
};

}  // namespace tq
