// Incremental detokenization (see detokenizer.h).
//
// vLLM's detokenize_incrementally: keep a short window ids[prefix_offset:] of
// which ids[prefix_offset:read_offset] were already emitted; each step decode
// the emitted part and the whole window and emit the difference, unless the
// window's text ends with U+FFFD (a byte-fallback character still incomplete).
//
// One change for SentencePiece: its decoder drops *every* leading "▁" of a
// decode, not just one, so a window that starts with whitespace-only pieces
// ("▁", "▁▁") would lose spaces that the full decode keeps. Windows that do not
// start at the beginning of the sequence are therefore decoded behind an anchor
// piece (a plain non-space piece such as "he"), whose text is then removed.
#include "server/text/detokenizer.h"

#include <algorithm>
#include <span>
#include <string_view>

namespace tq {
namespace {

constexpr size_t kInitialWindow = 5;                       // prompt tokens of context, as vLLM
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= kReplacement.size() &&
         std::string_view(s).substr(s.size() - kReplacement.size()) == kReplacement;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer,
                                               std::vector<int32_t> prompt_ids)
    : tokenizer_(tokenizer), ids_(std::move(prompt_ids)) {
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kInitialWindow ? ids_.size() - kInitialWindow : 0;
}

std::string IncrementalDetokenizer::DecodeWindow(size_t begin, size_t end) const {
  std::span<const int32_t> window(ids_.data() + begin, end - begin);
  if (begin == 0 || tokenizer_->anchor_id() < 0) return tokenizer_->Decode(window);
  std::vector<int32_t> with_anchor;
  with_anchor.reserve(window.size() + 1);
  with_anchor.push_back(tokenizer_->anchor_id());
  with_anchor.insert(with_anchor.end(), window.begin(), window.end());
  std::string text = tokenizer_->Decode(with_anchor);
  const size_t anchor_len = tokenizer_->IdToPiece(tokenizer_->anchor_id()).size();
  return text.substr(std::min(anchor_len, text.size()));
}

std::string IncrementalDetokenizer::Emit(bool final) {
  const std::string prefix = DecodeWindow(prefix_offset_, read_offset_);
  const std::string full = DecodeWindow(prefix_offset_, ids_.size());
  if (full.size() <= prefix.size() || (!final && EndsWithReplacement(full))) return "";
  // `prefix` is a prefix of `full` (the window starts on a character
  // boundary); cut at the first difference otherwise, on a boundary.
  size_t cut = prefix.size();
  if (full.compare(0, cut, prefix) != 0) {
    cut = std::mismatch(prefix.begin(), prefix.end(), full.begin()).first - prefix.begin();
    while (cut > 0 && (static_cast<unsigned char>(full[cut]) & 0xC0) == 0x80) --cut;
  }
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return full.substr(cut);
}

std::string IncrementalDetokenizer::Push(int32_t token_id) {
  ids_.push_back(token_id);
  return Emit(/*final=*/false);
}

std::string IncrementalDetokenizer::Flush() {
  return Emit(/*final=*/true);
}

}  // namespace tq
