// GBNF-like grammar text -> Grammar (see grammar.h). A recursive-descent
// parser builds rules of alternatives of items; repetition is lowered to
// helper rules (X* -> R ::= X R | ""; X{m,n} -> m copies, then nested
// optionals); code-point classes become alternatives of UTF-8 byte-class
// sequences (the standard range split, as RE2 and Rust's regex-syntax do).
#include "engine/structured/grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "engine/common/error.h"
#include "engine/structured/code_ranges.h"
#include "engine/tokenizer/utf8.h"

namespace tq::structured {
namespace {

[[noreturn]] void Fail(const std::string& message) {
  throw Error("grammar: " + message);
}

// One item of a sequence while building: a byte class or a rule reference.
struct Item {
  bool is_ref = false;
  int32_t arg = 0;  // class index or rule id
};
using Sequence = std::vector<Item>;

// Splits [lo, hi] (one encoded length, no surrogates) until every piece is a
// product of byte ranges, then emits the byte-range sequences.
void SplitUtf8(uint32_t lo, uint32_t hi,
               std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;  // the same length: [lo, hi] is within one encoded length
  utf8::Append(a, lo);
  utf8::Append(b, hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t i = 0; i < a.size(); ++i) {
    seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out->push_back(std::move(seq));
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Grammar Parse() {
    SkipSpace(true);
    while (pos_ < text_.size()) {
      const std::string name = Name();
      SkipSpace(true);
      if (text_.substr(pos_, 3) != "::=") Fail("expected '::=' after rule name at offset " + At());
      pos_ += 3;
      const int32_t id = RuleId(name);
      if (defined_[id]) Fail("rule '" + name + "' is defined twice");
      defined_[id] = true;
      rules_[id] = Alternatives(0);
      SkipSpace(true);
    }
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (!defined_[i]) Fail("rule '" + names_[i] + "' is used but not defined");
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) Fail("no 'root' rule");
    return Flatten(root->second);
  }

 private:
  std::string At() const { return std::to_string(pos_); }

  // Whitespace and comments; newlines too when `newlines`.
  void SkipSpace(bool newlines) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool NameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  }

  std::string Name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && NameChar(text_[pos_])) ++pos_;
    if (pos_ == start) Fail("expected a rule name at offset " + std::to_string(start));
    return std::string(text_.substr(start, pos_ - start));
  }

  // Whether a new rule (`name ::=`) starts at the current position.
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < text_.size() && NameChar(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  int32_t RuleId(const std::string& name) {
    const auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(rules_.size());
    ids_.emplace(name, id);
    names_.push_back(name);
    rules_.emplace_back();
    defined_.push_back(false);
    return id;
  }

  int32_t NewRule(std::vector<Sequence> alts) {
    const int32_t id = RuleId("_" + std::to_string(rules_.size()));
    rules_[id] = std::move(alts);
    defined_[id] = true;
    return id;
  }

  int32_t ClassIndex(const ByteSet& set) {
    const auto it = class_ids_.find(set);
    if (it != class_ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(classes_.size());
    classes_.push_back(set);
    class_ids_.emplace(set, id);
    return id;
  }

  Item ByteRange(uint8_t lo, uint8_t hi) {
    ByteSet s{};
    for (int b = lo; b <= hi; ++b) s[b >> 6] |= uint64_t{1} << (b & 63);
    return Item{false, ClassIndex(s)};
  }

  // A code-point set as one item: a byte class when ASCII only, else a rule
  // of UTF-8 sequences (lead bytes with the same continuation merged).
  Item CodePoints(const CodeRanges& ranges) {
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
    for (auto [lo, hi] : ranges) {
      // Split at the encoded-length boundaries and around the surrogates.
      const uint32_t bounds[] = {0x7F, 0x7FF, 0xD7FF, 0xDFFF, 0xFFFF, kMaxCodePoint};
      uint32_t start = lo;
      for (uint32_t b : bounds) {
        if (start > hi) break;
        const uint32_t end = std::min(hi, b);
        if (start <= end && !(start >= 0xD800 && end <= 0xDFFF)) SplitUtf8(start, end, &seqs);
        start = std::max(start, b + 1);
      }
    }
    if (seqs.empty()) Fail("empty character class at offset " + At());
    ByteSet single{};
    std::vector<Sequence> alts;
    for (const auto& seq : seqs) {
      if (seq.size() == 1) {
        for (int b = seq[0].first; b <= seq[0].second; ++b) {
          single[b >> 6] |= uint64_t{1} << (b & 63);
        }
        continue;
      }
      Sequence s;
      for (const auto& [lo, hi] : seq) s.push_back(ByteRange(lo, hi));
      alts.push_back(std::move(s));
    }
    const bool has_single = single != ByteSet{};
    if (alts.empty()) return Item{false, ClassIndex(single)};
    if (has_single) alts.insert(alts.begin(), Sequence{Item{false, ClassIndex(single)}});
    return Item{true, NewRule(std::move(alts))};
  }

  uint32_t Hex(int digits) {
    if (pos_ + digits > text_.size()) Fail("truncated escape at offset " + At());
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const int digit = utf8::HexDigit(text_[pos_++]);
      if (digit < 0) Fail("bad hex digit in escape at offset " + At());
      v = (v << 4) | static_cast<uint32_t>(digit);
    }
    if (v > kMaxCodePoint) Fail("code point out of range at offset " + At());
    return v;
  }

  // One code point of a literal or class (escapes resolved).
  uint32_t CodePoint() {
    if (pos_ >= text_.size()) Fail("unexpected end of grammar");
    const auto c = static_cast<uint8_t>(text_[pos_++]);
    if (c == '\\') {
      if (pos_ >= text_.size()) Fail("unexpected end of grammar after '\\'");
      const char e = text_[pos_++];
      if (e == 'x') return Hex(2);
      if (e == 'u') return Hex(4);
      if (e == 'U') return Hex(8);
      // \n \r \t, and the characters that stand for themselves.
      constexpr std::string_view kEscapes = "nrt\\\"'[]-^";
      constexpr std::string_view kEscaped = "\n\r\t\\\"'[]-^";
      const size_t k = kEscapes.find(e);
      if (k == std::string_view::npos) {
        Fail(std::string("unknown escape '\\") + e + "' at offset " + At());
      }
      return static_cast<uint8_t>(kEscaped[k]);
    }
    if (c < 0x80) return c;
    // UTF-8 in the grammar text.
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n < 0 || pos_ + n > text_.size()) Fail("invalid UTF-8 at offset " + At());
    uint32_t cp = c & (0x3F >> n);
    for (int i = 0; i < n; ++i) {
      const auto cc = static_cast<uint8_t>(text_[pos_++]);
      if ((cc & 0xC0) != 0x80) Fail("invalid UTF-8 at offset " + At());
      cp = (cp << 6) | (cc & 0x3F);
    }
    return cp;
  }

  Sequence Literal(char quote) {
    Sequence seq;
    while (true) {
      if (pos_ >= text_.size()) Fail("unterminated string literal");
      if (text_[pos_] == quote) {
        ++pos_;
        break;
      }
      std::string bytes;
      utf8::Append(bytes, CodePoint());
      for (const char ch : bytes) {
        const auto byte = static_cast<uint8_t>(ch);
        seq.push_back(ByteRange(byte, byte));
      }
    }
    return seq;
  }

  Item Class() {
    bool negate = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    CodeRanges ranges;
    while (true) {
      if (pos_ >= text_.size()) Fail("unterminated character class");
      if (text_[pos_] == ']') {
        ++pos_;
        break;
      }
      const uint32_t lo = CodePoint();
      uint32_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = CodePoint();
        if (hi < lo) Fail("character range out of order at offset " + At());
      }
      ranges.emplace_back(lo, hi);
    }
    ranges = NormalizeRanges(std::move(ranges));
    if (negate) ranges = ComplementRanges(ranges);
    return CodePoints(ranges);
  }

  // One primary item (with a group becoming a helper rule), as a sequence.
  Sequence Primary(int depth) {
    const char c = text_[pos_];
    if (c == '"' || c == '\'') {
      ++pos_;
      return Literal(c);
    }
    if (c == '[') {
      ++pos_;
      return {Class()};
    }
    if (c == '.') {
      ++pos_;
      return {CodePoints(ComplementRanges({{'\n', '\n'}}))};
    }
    if (c == '(') {
      ++pos_;
      std::vector<Sequence> alts = Alternatives(depth + 1);
      if (pos_ >= text_.size() || text_[pos_] != ')') Fail("expected ')' at offset " + At());
      ++pos_;
      if (alts.size() == 1) return alts[0];
      return {Item{true, NewRule(std::move(alts))}};
    }
    if (NameChar(c)) return {Item{true, RuleId(Name())}};
    Fail(std::string("unexpected '") + c + "' at offset " + At());
  }

  int64_t Number() {
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > kMaxRepetition) Fail("repetition bound above " + std::to_string(kMaxRepetition));
    }
    if (pos_ == start) Fail("expected a number at offset " + At());
    return v;
  }

  // X repeated [min, max] times (max < 0: unbounded), as a sequence.
  Sequence Repeat(const Sequence& x, int64_t min, int64_t max) {
    Sequence out;
    for (int64_t i = 0; i < min; ++i) out.insert(out.end(), x.begin(), x.end());
    if (max < 0) {  // R ::= X R | ""
      const int32_t r = NewRule({});
      Sequence loop = x;
      loop.push_back(Item{true, r});
      rules_[r] = {loop, Sequence{}};
      out.push_back(Item{true, r});
    } else if (max > min) {  // nested optionals: R_k ::= X R_{k-1} | "", R_1 ::= X | ""
      int32_t inner = NewRule({x, Sequence{}});
      for (int64_t k = 1; k < max - min; ++k) {
        Sequence s = x;
        s.push_back(Item{true, inner});
        inner = NewRule({s, Sequence{}});
      }
      out.push_back(Item{true, inner});
    }
    return out;
  }

  std::vector<Sequence> Alternatives(int depth) {
    if (depth > 200) Fail("groups nested too deeply");
    std::vector<Sequence> alts(1);
    while (true) {
      SkipSpace(true);
      if (pos_ >= text_.size()) break;
      const char c = text_[pos_];
      if (c == ')') break;
      if (c == '|') {
        ++pos_;
        alts.emplace_back();
        continue;
      }
      if (AtRuleStart()) break;
      Sequence item = Primary(depth);
      SkipSpace(false);
      while (pos_ < text_.size()) {
        const char q = text_[pos_];
        if (q == '*') {
          item = Repeat(item, 0, -1);
        } else if (q == '+') {
          item = Repeat(item, 1, -1);
        } else if (q == '?') {
          item = Repeat(item, 0, 1);
        } else if (q == '{') {
          ++pos_;
          SkipSpace(false);
          const int64_t min = Number();
          int64_t max = min;
          SkipSpace(false);
          if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            SkipSpace(false);
            max = pos_ < text_.size() && text_[pos_] == '}' ? -1 : Number();
          }
          SkipSpace(false);
          if (pos_ >= text_.size() || text_[pos_] != '}') Fail("expected '}' at offset " + At());
          if (max >= 0 && max < min) Fail("repetition {m,n} with n < m at offset " + At());
          item = Repeat(item, min, max);
        } else {
          break;
        }
        ++pos_;
        SkipSpace(false);
      }
      alts.back().insert(alts.back().end(), item.begin(), item.end());
      if (alts.back().size() > kMaxGrammarElements) Fail("grammar too large");
    }
    return alts;
  }

  // Nullable rules, then a DFS over "may start with" edges: a cycle is left
  // recursion, which a top-down matcher cannot run.
  void CheckLeftRecursion() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Sequence& s : rules_[r]) {
          const bool all = std::all_of(
              s.begin(), s.end(), [&](const Item& it) { return it.is_ref && nullable[it.arg]; });
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<int32_t>> starts(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Sequence& s : rules_[r]) {
        for (const Item& it : s) {
          if (!it.is_ref) break;
          starts[r].push_back(it.arg);
          if (!nullable[it.arg]) break;
        }
      }
    }
    std::vector<int> state(n, 0);  // 0 new, 1 on the DFS path, 2 done
    std::function<void(int32_t)> visit = [&](int32_t r) {
      state[r] = 1;
      for (int32_t s : starts[r]) {
        if (state[s] == 1) Fail("rule '" + names_[s] + "' is left-recursive");
        if (state[s] == 0) visit(s);
      }
      state[r] = 2;
    };
    for (size_t r = 0; r < n; ++r) {
      if (state[r] == 0) visit(static_cast<int32_t>(r));
    }
  }

  Grammar Flatten(int32_t root) {
    CheckLeftRecursion();
    Grammar g;
    g.classes = classes_;
    g.root = root;
    g.rules.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Sequence& s : rules_[r]) {
        g.rules[r].push_back(static_cast<int32_t>(g.elements.size()));
        for (const Item& it : s) {
          g.elements.push_back({it.is_ref ? Grammar::Kind::kRef : Grammar::Kind::kBytes, it.arg});
        }
        g.elements.push_back({Grammar::Kind::kEnd, 0});
      }
      if (g.elements.size() > kMaxGrammarElements) Fail("grammar too large");
    }
    return g;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<ByteSet> classes_;
  std::map<ByteSet, int32_t> class_ids_;
};

}  // namespace

Grammar ParseGrammar(std::string_view text) {
  return Parser(text).Parse();
}

std::string GbnfLiteral(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<uint8_t>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

std::string GbnfAlternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string s = "(";
  for (size_t i = 0; i < alts.size(); ++i) s += (i ? " | " : "") + alts[i];
  return s + ")";
}

}  // namespace tq::structured
