// tokenizer.json patterns (see hf_pattern.h).
#include "engine/tokenizer/hf_pattern.h"

#include <nlohmann/json.hpp>

#include "engine/common/error.h"

namespace tq::hf {

Pattern::Pattern(const nlohmann::json& spec, const std::string& what) {
  if (spec.is_object() && spec.contains("String") && spec["String"].is_string()) {
    literal_ = spec["String"].get<std::string>();
    if (literal_.empty()) throw Error(what + ": empty String pattern");
  } else if (spec.is_object() && spec.contains("Regex") && spec["Regex"].is_string()) {
    regex_ = std::make_unique<Regex>(spec["Regex"].get<std::string>(), what);
  } else {
    throw Error(what + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }
}

void Pattern::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex_) return regex_->FindAll(text, out);
  for (size_t pos = text.find(literal_); pos != std::string_view::npos;
       pos = text.find(literal_, pos + literal_.size())) {
    out.emplace_back(pos, pos + literal_.size());
  }
}

std::string Pattern::ReplaceAll(std::string_view text, std::string_view content) const {
  std::vector<std::pair<size_t, size_t>> spans;
  FindAll(text, spans);
  if (spans.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (const auto& [b, e] : spans) {
    out.append(text.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace tq::hf
