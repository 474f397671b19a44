// The "pattern" of tokenizer.json components: {"String": s} or {"Regex": r}.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/tokenizer/hf_regex.h"

namespace tq::hf {

/// A literal string or a PCRE2 regex (HF tokenizers' SplitPattern /
/// ReplacePattern). Immutable, thread-safe.
class Pattern {
 public:
  /// Parses {"String": ...} or {"Regex": ...}; throws tq::Error naming
  /// `what` otherwise or on an invalid regex.
  Pattern(const nlohmann::json& spec, const std::string& what);

  /// Byte spans of the non-overlapping matches in `text`, left to right
  /// (appended to `out`).
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  /// `text` with every match replaced by `content`.
  std::string ReplaceAll(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace tq::hf
