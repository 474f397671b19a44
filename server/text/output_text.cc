// Streamed output text with OpenAI stop strings (see output_text.h).
//
// Invariant after each token: held_ is the longest suffix of the decoded
// text that is a proper prefix of some stop string. Every occurrence of a
// stop string that a later token completes starts inside that suffix, so
// emitted text never contains any part of it, and the first occurrence found
// in held_ is the first in the whole text (an earlier one would have been
// found when its last character arrived).
#include "server/text/output_text.h"

#include <algorithm>
#include <utility>

namespace tq {

OutputTextStream::OutputTextStream(const Tokenizer* tokenizer, std::vector<int32_t> prompt_ids,
                                   std::vector<std::string> stop)
    : detokenizer_(tokenizer, std::move(prompt_ids)) {
  for (std::string& s : stop) {
    if (!s.empty() && std::find(stop_.begin(), stop_.end(), s) == stop_.end()) {
      stop_.push_back(std::move(s));
    }
  }
}

std::string OutputTextStream::Push(std::span<const int32_t> token_ids) {
  std::string out;
  for (const int32_t id : token_ids) {
    if (stopped_) break;
    ++num_tokens_;
    held_ += detokenizer_.Push(id);
    out += Release(/*final=*/false);
  }
  return out;
}

std::string OutputTextStream::Finish() {
  if (stopped_) return "";
  held_ += detokenizer_.Flush();
  return Release(/*final=*/true);
}

std::string OutputTextStream::Release(bool final) {
  size_t first = std::string::npos;
  const std::string* match = nullptr;
  for (const std::string& s : stop_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && (at < first || (at == first && s.size() < match->size()))) {
      first = at;
      match = &s;
    }
  }
  if (match != nullptr) {
    stopped_ = true;
    stop_string_ = *match;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  if (final) return std::exchange(held_, std::string());
  size_t keep = 0;
  for (const std::string& s : stop_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  // A stop string that is valid UTF-8 starts on a character boundary; step
  // back over continuation bytes in case one is not.
  size_t cut = held_.size() - keep;
  while (cut > 0 && cut < held_.size() && (static_cast<unsigned char>(held_[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  std::string out = held_.substr(0, cut);
  held_.erase(0, cut);
  return out;
}

}  // namespace tq
