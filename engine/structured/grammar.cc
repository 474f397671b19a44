// GBNF-like grammar text -> Grammar (see grammar.h). A recursive-descent
// parser builds rules of alternatives of items; repetition is lowered to
// helper rules once every rule is known (X* -> R ::= X R | ""; X{m,n} -> m
// copies, then nested optionals), through X' = X without the empty string
// when X can match it (X* = X'*, X{m,n} = X'{0,n}: not left-recursive, not
// ambiguous); code-point classes become alternatives of UTF-8 byte-class
// sequences (the standard range split, as RE2 and Rust's regex-syntax do).
// Sizes are counted against the compile budget (grammar.h) as rules grow.
#include "engine/structured/grammar.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "engine/common/error.h"
#include "engine/structured/code_ranges.h"
#include "engine/structured/grammar_check.h"
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
      CountElements(rules_[id]);
      SkipSpace(true);
    }
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (!defined_[i]) Fail("rule '" + names_[i] + "' is used but not defined");
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) Fail("no 'root' rule");
    LowerRepetitions();
    Grammar g = Flatten(rules_, root->second);
    CheckGrammar(g, names_, deadline_);
    return g;
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
    if (lowering_) {
      nullable_.push_back(false);
      non_empty_.push_back(kUnknown);
    }
    return id;
  }

  // Counts `n` more elements against kMaxGrammarElements (before they are
  // built, where the caller can say how many).
  void AddElements(size_t n) {
    elements_ += n;
    if (elements_ > kMaxGrammarElements) {
      Fail("over the compile budget: more than " + std::to_string(kMaxGrammarElements) +
           " grammar elements (kMaxGrammarElements)");
    }
    deadline_.Check();
  }
  void CountElements(const std::vector<Sequence>& alts) {
    size_t n = alts.size();  // one end element per alternative
    for (const Sequence& s : alts) n += s.size();
    AddElements(n);
  }

  // Sets the alternatives of rule `id` (counted; its nullability kept while lowering).
  void SetRule(int32_t id, std::vector<Sequence> alts) {
    CountElements(alts);
    rules_[id] = std::move(alts);
    defined_[id] = true;
    if (lowering_) {
      nullable_[id] = std::any_of(rules_[id].begin(), rules_[id].end(),
                                  [&](const Sequence& s) { return SequenceNullable(s); });
    }
  }

  int32_t NewRule(std::vector<Sequence> alts) {
    const int32_t id = RuleId("_" + std::to_string(rules_.size()));
    SetRule(id, std::move(alts));
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

  // X repeated [min, max] times (max < 0: unbounded), as a sequence: a
  // reference to a rule that LowerRepetitions fills in.
  Sequence Repeat(Sequence x, int64_t min, int64_t max) {
    if (min == 1 && max == 1) return x;
    const int32_t id = RuleId("_" + std::to_string(rules_.size()));
    defined_[id] = true;
    AddElements(x.size() + 1);
    sites_.emplace(id, Site{std::move(x), min, max});
    site_order_.push_back(id);
    return {Item{true, id}};
  }

  // X repeated [min, max] times, X not nullable: m copies, then R ::= X R | ""
  // (unbounded) or nested optionals R_k ::= X R_{k-1} | "", R_1 ::= X | "".
  Sequence Expand(const Sequence& x, int64_t min, int64_t max) {
    const int64_t optional = max < 0 ? 1 : max - min;
    // Checked before anything is built: copies multiply the size of X.
    AddElements(x.size() * static_cast<size_t>(min + optional) + static_cast<size_t>(optional));
    Sequence out;
    for (int64_t i = 0; i < min; ++i) out.insert(out.end(), x.begin(), x.end());
    if (max < 0) {
      const int32_t r = NewRule({});
      Sequence loop = x;
      loop.push_back(Item{true, r});
      SetRule(r, {loop, Sequence{}});
      out.push_back(Item{true, r});
    } else if (max > min) {
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

  bool SequenceNullable(const Sequence& s) const {
    return std::all_of(s.begin(), s.end(),
                       [&](const Item& it) { return it.is_ref && nullable_[it.arg]; });
  }

  // Lowers every repetition, in the order they were written. Nullability
  // first, over the rules with each repetition standing for X (min > 0) or
  // "" (min == 0), which derive the empty string exactly when it does.
  void LowerRepetitions() {
    std::vector<std::vector<Sequence>> provisional = rules_;
    for (const auto& [id, site] : sites_) {
      provisional[id] =
          site.min == 0 ? std::vector<Sequence>{Sequence{}} : std::vector<Sequence>{site.x};
    }
    nullable_ = NullableRules(Flatten(provisional, 0));
    non_empty_.assign(rules_.size(), kUnknown);
    lowering_ = true;
    for (const int32_t id : site_order_) LowerSite(id, 0);
  }

  void LowerSite(int32_t id, int depth) {
    Site& site = sites_.at(id);
    if (site.state == Site::kDone) return;
    if (site.state == Site::kLowering) Fail("rule '" + names_[id] + "' is left-recursive");
    site.state = Site::kLowering;
    Sequence x = site.x;
    int64_t min = site.min, max = site.max;
    if (SequenceNullable(x)) {  // X{m,n} = X'{0,n}, X* = X'*
      std::vector<Sequence> non_empty = NonEmpty(x, depth + 1);
      min = 0;
      if (non_empty.empty()) {  // X matches only ""
        x.clear();
        max = 0;
      } else {
        x = {Item{true, NewRule(std::move(non_empty))}};
      }
    }
    SetRule(id, {Expand(x, min, max)});
    sites_.at(id).state = Site::kDone;
  }

  // The sentences of `seq` but the empty one, as alternatives: for each
  // nullable item in front, that item's non-empty part and the rest, and at
  // the first item that is not nullable, the rest as it is.
  std::vector<Sequence> NonEmpty(const Sequence& seq, int depth) {
    std::vector<Sequence> out;
    for (size_t i = 0; i < seq.size(); ++i) {
      const Item& it = seq[i];
      AddElements(seq.size() - i + 1);
      if (!it.is_ref || !nullable_[it.arg]) {
        out.emplace_back(seq.begin() + static_cast<std::ptrdiff_t>(i), seq.end());
        break;
      }
      const int32_t part = NonEmptyRule(it.arg, depth);
      if (part != kNone) {
        Sequence s{Item{true, part}};
        s.insert(s.end(), seq.begin() + static_cast<std::ptrdiff_t>(i) + 1, seq.end());
        out.push_back(std::move(s));
      }
    }
    return out;
  }

  // A rule for the sentences of rule `r` but the empty one (kNone when it
  // has no other), made once per rule.
  int32_t NonEmptyRule(int32_t r, int depth) {
    if (depth > 200) Fail("groups nested too deeply");
    if (non_empty_[r] == kBusy) Fail("rule '" + names_[r] + "' is left-recursive");
    if (non_empty_[r] != kUnknown) return non_empty_[r];
    if (sites_.count(r) > 0) LowerSite(r, depth + 1);
    if (!nullable_[r]) return non_empty_[r] = r;
    non_empty_[r] = kBusy;
    const std::vector<Sequence> alts = rules_[r];  // NewRule may move rules_
    std::vector<Sequence> parts;
    for (const Sequence& s : alts) {
      for (Sequence& p : NonEmpty(s, depth + 1)) parts.push_back(std::move(p));
    }
    const int32_t id = parts.empty() ? kNone : NewRule(std::move(parts));
    non_empty_[r] = id;
    return id;
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
          item = Repeat(std::move(item), 0, -1);
        } else if (q == '+') {
          item = Repeat(std::move(item), 1, -1);
        } else if (q == '?') {
          item = Repeat(std::move(item), 0, 1);
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
          item = Repeat(std::move(item), min, max);
        } else {
          break;
        }
        ++pos_;
        SkipSpace(false);
      }
      alts.back().insert(alts.back().end(), item.begin(), item.end());
      if (alts.back().size() > kMaxGrammarElements) {
        AddElements(alts.back().size());  // fails
      }
      deadline_.Check();
    }
    return alts;
  }

  // The flat Grammar of `rules` (a site not yet lowered has no alternative).
  Grammar Flatten(const std::vector<std::vector<Sequence>>& rules, int32_t root) const {
    Grammar g;
    g.classes = classes_;
    g.root = root;
    g.rules.resize(rules.size());
    for (size_t r = 0; r < rules.size(); ++r) {
      for (const Sequence& s : rules[r]) {
        g.rules[r].push_back(static_cast<int32_t>(g.elements.size()));
        for (const Item& it : s) {
          g.elements.push_back({it.is_ref ? Grammar::Kind::kRef : Grammar::Kind::kBytes, it.arg});
        }
        g.elements.push_back({Grammar::Kind::kEnd, 0});
      }
    }
    return g;
  }

  // A repetition X{min,max} (max < 0: unbounded), lowered once every rule is
  // known, since whether X matches "" decides how.
  struct Site {
    enum State : uint8_t { kPending, kLowering, kDone };
    Sequence x;
    int64_t min = 0, max = 0;
    State state = kPending;
  };
  static constexpr int32_t kUnknown = -3, kBusy = -2, kNone = -1;  // non_empty_ values

  CompileDeadline deadline_;
  size_t elements_ = 0;
  std::unordered_map<int32_t, Site> sites_;
  std::vector<int32_t> site_order_;
  bool lowering_ = false;           // in LowerRepetitions: nullable_ and non_empty_ kept per rule
  std::vector<bool> nullable_;      // per rule, while lowering
  std::vector<int32_t> non_empty_;  // per rule: its non-empty part (NonEmptyRule), or a marker
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
