// Added tokens of tokenizer.json (see hf_added_tokens.h).
#include "engine/tokenizer/hf_added_tokens.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/tokenizer/hf_normalizers.h"
#include "engine/tokenizer/hf_regex.h"
#include "engine/tokenizer/utf8.h"

namespace tq::hf {
namespace {

// Unicode White_Space (what \s means in HF's Rust regexes).
bool IsWhiteSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Start of the code point that ends `s` (s non-empty, valid UTF-8).
size_t LastCharStart(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// A word character (\w) starts / ends `s`.
bool IsWordChar(std::string_view one_char) {
  static const Regex word(R"(\A\w\z)", "added_tokens");
  std::vector<std::pair<size_t, size_t>> m;
  word.FindAll(one_char, m);
  return !m.empty();
}
bool StartsWithWord(std::string_view s) {
  if (s.empty()) return false;
  return IsWordChar(s.substr(0, utf8::SeqLen(static_cast<unsigned char>(s[0]))));
}
bool EndsWithWord(std::string_view s) {
  return !s.empty() && IsWordChar(s.substr(LastCharStart(s)));
}

// Start of the whitespace run that ends `s` (s.size() when none).
size_t SpaceRunAtEnd(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    const size_t b = LastCharStart(s.substr(0, end));
    size_t i = b;
    if (!IsWhiteSpace(utf8::Next(s, i))) break;
    end = b;
  }
  return end;
}

// Length of the whitespace run that starts `s`.
size_t SpaceRunAtStart(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!IsWhiteSpace(utf8::Next(s, j))) break;
    i = j;
  }
  return i;
}

}  // namespace

AddedTokens::AddedTokens(const nlohmann::json& spec, const Normalizer* normalizer,
                         const std::string& where) {
  if (!spec.is_null() && !spec.is_array()) throw Error(where + ": added_tokens is not an array");
  if (spec.is_array()) {
    for (const auto& t : spec) {
      AddedToken a;
      a.id = t.at("id").get<int32_t>();
      a.content = t.at("content").get<std::string>();
      a.single_word = t.value("single_word", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.normalized = t.value("normalized", false);
      a.special = t.value("special", false);
      if (a.id < 0) throw Error(where + ": added token \"" + a.content + "\" has a negative id");
      if (a.content.empty())
        throw Error(where + ": added token " + std::to_string(a.id) + " is empty");
      by_id_[a.id] = tokens_.size();
      tokens_.push_back(std::move(a));
    }
  }
  for (const AddedToken& t : tokens_) {
    std::string p = t.content;
    if (t.normalized && normalizer != nullptr) normalizer->Normalize(p);
    pattern_.push_back(std::move(p));
  }
  Build(raw_, false);
  Build(normalized_, true);
}

void AddedTokens::Build(Matcher& m, bool normalized) {
  m.by_first_byte.assign(256, {});
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].normalized != normalized || pattern_[i].empty()) continue;
    m.by_first_byte[static_cast<unsigned char>(pattern_[i][0])].push_back(&tokens_[i]);
    m.any = true;
  }
  for (auto& bucket : m.by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](const AddedToken* a, const AddedToken* b) {
      return pattern_[a - tokens_.data()].size() > pattern_[b - tokens_.data()].size();
    });
  }
}

const AddedToken* AddedTokens::ById(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedTokens::IdOf(std::string_view content) const {
  for (const AddedToken& t : tokens_) {
    if (t.content == content) return t.id;
  }
  return -1;
}

void AddedTokens::Split(std::string_view text, bool normalized, std::vector<TextSplit>& out) const {
  const Matcher& m = normalized ? normalized_ : raw_;
  size_t start_offset = 0;
  if (m.any) {
    for (size_t pos = 0; pos < text.size();) {
      const AddedToken* hit = nullptr;
      for (const AddedToken* t : m.by_first_byte[static_cast<unsigned char>(text[pos])]) {
        const std::string& p = pattern_[t - tokens_.data()];
        if (text.compare(pos, p.size(), p) == 0) {
          hit = t;
          break;
        }
      }
      if (hit == nullptr) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + pattern_[hit - tokens_.data()].size();
      pos = stop;
      if (hit->single_word) {
        const bool start_space = start == 0 || !EndsWithWord(text.substr(0, start));
        const bool stop_space = stop == text.size() || !StartsWithWord(text.substr(stop));
        if (!start_space || !stop_space) continue;
      }
      if (hit->lstrip) start = std::max(SpaceRunAtEnd(text.substr(0, start)), start_offset);
      if (hit->rstrip) stop += SpaceRunAtStart(text.substr(stop));
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, hit->id});
      start_offset = stop;
      pos = std::max(pos, stop);
    }
  }
  if (start_offset < text.size() || (text.empty() && out.empty())) {
    out.push_back({start_offset, text.size(), -1});
  }
}

}  // namespace tq::hf
