// Pre-tokenizers of tokenizer.json (see hf_pre_tokenizers.h).
#include "engine/tokenizer/hf_pre_tokenizers.h"

#include <utf8proc.h>

#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "engine/common/error.h"
#include "engine/tokenizer/hf_pattern.h"
#include "engine/tokenizer/utf8.h"

namespace tq::hf {
namespace {

using json = nlohmann::json;
using Spans = std::vector<std::pair<size_t, size_t>>;

// HF tokenizers' SplitDelimiterBehavior.
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior ParseBehavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  throw Error(where + ": unsupported Split behavior \"" + name + "\"");
}

struct Span {
  size_t begin, end;
  bool match;
};

// Splits `piece` at the `matches` (sorted, non-overlapping) as NormalizedString::split does.
void SplitPiece(Piece&& piece, const Spans& matches, Behavior behavior, bool invert,
                std::vector<Piece>& out) {
  const std::string& text = piece.text;
  if (matches.empty() && !invert) {
    if (!text.empty()) out.push_back(std::move(piece));
    return;
  }
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev < b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < text.size()) spans.push_back({prev, text.size(), invert});
  std::vector<Span> kept;  // `match` now means "remove"
  kept.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const Span& s : spans) kept.push_back({s.begin, s.end, false});
      break;
    case Behavior::kRemoved:
      kept = spans;
      break;
    case Behavior::kContiguous:
    case Behavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        const bool merge = behavior == Behavior::kContiguous ? s.match == previous_match
                                                             : s.match && !previous_match;
        if (merge && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous_match = s.match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back({it->begin, it->end, false});
        }
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Span& s : kept) {
    if (s.match || s.end <= s.begin) continue;
    out.push_back({text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
  }
}

// Each character for which `pred` holds is a match of its own.
template <typename Pred>
void CharMatches(std::string_view text, Pred pred, Spans& out) {
  for (size_t i = 0; i < text.size();) {
    const size_t begin = i;
    const char32_t cp = utf8::Next(text, i);
    if (pred(cp)) out.emplace_back(begin, i);
  }
}

class Split final : public PreTokenizer {
 public:
  Split(const json& spec, const std::string& where)
      : pattern_(spec.at("pattern"), where + ": pre_tokenizer Split"),
        behavior_(ParseBehavior(spec.at("behavior").get<std::string>(), where)),
        invert_(spec.value("invert", false)) {}
  void PreTokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 4);
    Spans matches;
    for (Piece& p : pieces) {
      matches.clear();
      pattern_.FindAll(p.text, matches);
      SplitPiece(std::move(p), matches, behavior_, invert_, out);
    }
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

const std::array<std::string, 256>& ByteLevelTable() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      utf8::Append(t[b], printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++));
    }
    return t;
  }();
  return table;
}

class ByteLevel final : public PreTokenizer {
 public:
  explicit ByteLevel(const json& spec)
      : add_prefix_space_(spec.value("add_prefix_space", true)),
        use_regex_(spec.value("use_regex", true)) {
    if (use_regex_) {
      static const json kGpt2 = {
          {"Regex",
           R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}};
      regex_ = std::make_unique<Pattern>(kGpt2, "ByteLevel");
    }
  }
  void PreTokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> split;
    split.reserve(pieces.size());
    Spans matches;
    for (Piece& p : pieces) {
      if (add_prefix_space_ && !p.text.starts_with(' ')) p.text.insert(0, 1, ' ');
      if (!use_regex_) {
        split.push_back(std::move(p));
        continue;
      }
      matches.clear();
      regex_->FindAll(p.text, matches);
      SplitPiece(std::move(p), matches, Behavior::kIsolated, false, split);
    }
    const auto& table = ByteLevelTable();
    for (Piece& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char c : p.text) mapped += table[static_cast<unsigned char>(c)];
      p.text = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  bool use_regex_;
  std::unique_ptr<Pattern> regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  Metaspace(const json& spec, const std::string& where) {
    const std::string rep = spec.value("replacement", std::string("\xE2\x96\x81"));
    size_t i = 0;
    if (rep.empty()) throw Error(where + ": Metaspace replacement is empty");
    replacement_cp_ = utf8::Next(rep, i);
    replacement_ = rep.substr(0, i);
    split_ = spec.value("split", true);
    if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string()) {
      const std::string s = spec["prepend_scheme"].get<std::string>();
      if (s == "always") {
        prepend_ = Prepend::kAlways;
      } else if (s == "first") {
        prepend_ = Prepend::kFirst;
      } else if (s == "never") {
        prepend_ = Prepend::kNever;
      } else {
        throw Error(where + ": unsupported Metaspace prepend_scheme \"" + s + "\"");
      }
    } else {
      prepend_ = spec.value("add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
    }
  }
  void PreTokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    Spans matches;
    for (Piece& p : pieces) {
      std::string text;
      text.reserve(p.text.size() + 3);
      for (char c : p.text) {
        if (c == ' ') {
          text += replacement_;
        } else {
          text += c;
        }
      }
      const bool prepend =
          prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_start);
      if (prepend && !text.starts_with(replacement_)) text.insert(0, replacement_);
      p.text = std::move(text);
      if (!split_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        continue;
      }
      matches.clear();
      CharMatches(
          p.text, [this](char32_t c) { return c == replacement_cp_; }, matches);
      SplitPiece(std::move(p), matches, Behavior::kMergedWithNext, false, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  char32_t replacement_cp_ = 0;
  bool split_ = true;
  Prepend prepend_ = Prepend::kAlways;
};

// Rust's char::is_numeric: general categories Nd, Nl, No.
bool IsNumeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

class Digits final : public PreTokenizer {
 public:
  explicit Digits(const json& spec) : individual_(spec.value("individual_digits", false)) {}
  void PreTokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 2);
    Spans matches;
    for (Piece& p : pieces) {
      matches.clear();
      CharMatches(p.text, IsNumeric, matches);
      SplitPiece(std::move(p), matches, individual_ ? Behavior::kIsolated : Behavior::kContiguous,
                 false, out);
    }
    pieces = std::move(out);
  }

 private:
  bool individual_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void PreTokenize(std::vector<Piece>& pieces) const override {
    for (const auto& s : steps_) s->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

const std::string& ByteLevelChar(unsigned char b) {
  return ByteLevelTable()[b];
}

std::unique_ptr<PreTokenizer> MakePreTokenizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  if (type == "Split") return std::make_unique<Split>(spec, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(spec);
  if (type == "Metaspace") return std::make_unique<Metaspace>(spec, where);
  if (type == "Digits") return std::make_unique<Digits>(spec);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& s : spec.at("pretokenizers")) {
      if (auto p = MakePreTokenizer(s, where)) steps.push_back(std::move(p));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw Error(where + ": unsupported pre_tokenizer \"" + type + "\"");
}

}  // namespace tq::hf
