// SentencePiece-backed tokenizer (see tokenizer.h).
#include "engine/tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>
#include <system_error>

#include "engine/common/error.h"

namespace tq {

namespace {

// Tokenizer::anchor_id(): a piece whose text is non-empty, starts with no space and is no byte or
// control piece; -1 if the vocabulary has none (then windows decode bare).
int32_t FindAnchor(const Tokenizer& tok) {
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string piece = tok.IdToPiece(id);
    if (piece.empty() || piece[0] == '<' || piece.starts_with("\xE2\x96\x81")) continue;
    const int32_t one[] = {id};
    const std::string text = tok.Decode(one);
    if (!text.empty() && text == piece && static_cast<unsigned char>(text[0]) > ' ') return id;
  }
  return -1;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::Load(const std::string& model_dir,
                                           const TokenizerSettings& settings) {
  const std::string path = (std::filesystem::path(model_dir) / "tokenizer.model").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Error(path + ": not found");
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = tok->sp_->Load(path);
  if (!status.ok()) {
    throw Error(path + ": not a valid SentencePiece model: " + status.ToString());
  }
  if (tok->sp_->GetPieceSize() <= 0) {
    throw Error(path + ": not a valid SentencePiece model: empty vocabulary");
  }
  tok->settings_ = settings;
  tok->anchor_id_ = FindAnchor(*tok);
  return tok;
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special) const {
  std::vector<int> pieces;
  if (!text.empty()) {
    const auto status = sp_->Encode(absl::string_view(text.data(), text.size()), &pieces);
    // Encode only fails on an uninitialized processor, which Load rules out.
    if (!status.ok()) throw Error("tokenizer: encode failed: " + status.ToString());
  }
  std::vector<int32_t> ids;
  ids.reserve(pieces.size() + 2);
  if (add_special && settings_.add_bos_token && sp_->bos_id() >= 0) ids.push_back(sp_->bos_id());
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  if (add_special && settings_.add_eos_token && sp_->eos_id() >= 0) ids.push_back(sp_->eos_id());
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  // Control pieces (<s>, </s>) render as nothing; out-of-range ids (a model
  // whose embedding is padded past the tokenizer's vocabulary) are dropped.
  // <unk> is not a control piece and renders as sentencepiece does (" ⁇ ").
  const int32_t n = vocab_size();
  std::vector<int> kept;
  kept.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= n || sp_->IsControl(id)) continue;
    kept.push_back(id);
  }
  std::string text;
  if (kept.empty()) return text;
  const auto status = sp_->Decode(kept, &text);
  if (!status.ok()) throw Error("tokenizer: decode failed: " + status.ToString());
  return text;
}

std::string Tokenizer::IdToPiece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return sp_->IdToPiece(id);
}

int32_t Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}
int32_t Tokenizer::bos_id() const {
  return sp_->bos_id();
}
int32_t Tokenizer::eos_id() const {
  return sp_->eos_id();
}

}  // namespace tq
