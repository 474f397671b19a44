// SentencePiece-backed tokenizer (see sentencepiece_tokenizer.h).
#include "engine/tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "engine/common/error.h"

namespace tq {

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::Load(
    const std::string& path, const TokenizerSettings& settings) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Error(path + ": not found");
  std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer());
  tok->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = tok->sp_->Load(path);
  if (!status.ok()) {
    throw Error(path + ": not a valid SentencePiece model: " + status.ToString());
  }
  if (tok->sp_->GetPieceSize() <= 0) {
    throw Error(path + ": not a valid SentencePiece model: empty vocabulary");
  }
  tok->settings_ = settings;
  tok->FindAnchor();
  return tok;
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::Encode(std::string_view text, bool add_special) const {
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

std::string SentencePieceTokenizer::Decode(std::span<const int32_t> ids) const {
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

std::string SentencePieceTokenizer::IdToPiece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return sp_->IdToPiece(id);
}

std::string SentencePieceTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  if (sp_->IsControl(id) || sp_->IsUnknown(id) || sp_->IsUnused(id)) return "";
  const std::string piece = sp_->IdToPiece(id);
  unsigned byte = 0;
  if (sp_->IsByte(id) && piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%2X>", &byte) == 1) {
    return std::string(1, static_cast<char>(byte));
  }
  static constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 "▁"
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
      out += ' ';
      i += kSpaceMark.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

int32_t SentencePieceTokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}
int32_t SentencePieceTokenizer::bos_id() const {
  return sp_->bos_id();
}
int32_t SentencePieceTokenizer::eos_id() const {
  return sp_->eos_id();
}

}  // namespace tq
