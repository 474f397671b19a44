// Tokenizer kind selection and shared helpers (see tokenizer.h).
#include "engine/tokenizer/tokenizer.h"

#include <filesystem>
#include <system_error>

#include "engine/common/error.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/sentencepiece_tokenizer.h"

namespace tq {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> Tokenizer::Load(const std::string& model_dir,
                                           const TokenizerSettings& settings) {
  const fs::path dir(model_dir);
  const std::string sp_path = (dir / "tokenizer.model").string();
  const std::string json_path = (dir / "tokenizer.json").string();
  std::error_code ec;
  // tokenizer.json wins, as in transformers' fast tokenizers.
  if (fs::is_regular_file(json_path, ec)) return LoadTokenizerJson(json_path, settings);
  return SentencePieceTokenizer::Load(sp_path, settings);
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::FindAnchor() {
  // A piece whose text is non-empty, starts with no space and is no byte or
  // control piece; -1 if the vocabulary has none (then windows decode bare).
  anchor_id_ = -1;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    const std::string piece = IdToPiece(id);
    if (piece.empty() || piece[0] == '<' || piece.starts_with("\xE2\x96\x81")) continue;
    const int32_t one[] = {id};
    const std::string text = Decode(one);
    if (!text.empty() && text == piece && static_cast<unsigned char>(text[0]) > ' ') {
      anchor_id_ = id;
      return;
    }
  }
}

}  // namespace tq
