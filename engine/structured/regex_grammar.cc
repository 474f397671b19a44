// Regular expressions and choice lists -> grammar text (see json_schema.h).
// A recursive-descent regex parser that writes the equivalent grammar
// expression; character sets are code-point ranges written as [\U...] classes.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/structured/code_ranges.h"
#include "engine/structured/grammar.h"
#include "engine/structured/json_schema.h"
#include "engine/tokenizer/utf8.h"

namespace tq::structured {
namespace {

[[noreturn]] void Unsupported(const std::string& what, const std::string& why) {
  throw UnsupportedConstraint(what, "regex: " + why);
}

CodeRanges Intersect(const CodeRanges& a, const CodeRanges& b) {
  CodeRanges out;
  for (const auto& [alo, ahi] : a) {
    for (const auto& [blo, bhi] : b) {
      const uint32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  }
  return NormalizeRanges(out);
}

std::string Hex8(uint32_t cp) {
  static const char kHex[] = "0123456789abcdef";
  std::string s = "\\U";
  for (int i = 7; i >= 0; --i) s += kHex[(cp >> (4 * i)) & 15];
  return s;
}

std::string ClassText(const CodeRanges& r) {
  std::string s = "[";
  for (const auto& [lo, hi] : r) {
    s += Hex8(lo);
    if (hi != lo) s += "-" + Hex8(hi);
  }
  return s + "]";
}

const CodeRanges kDigit = {{'0', '9'}};
const CodeRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodeRanges kSpace = {{'\t', '\r'}, {' ', ' '}};
const CodeRanges kAscii = {{0, 0x7F}};

class RegexParser {
 public:
  RegexParser(std::string_view p, bool json) : p_(p), json_(json) {}

  std::string Parse() {
    if (!p_.empty() && p_[0] == '^') ++pos_;
    std::string out = Alternation(0);
    if (pos_ < p_.size()) Unsupported("pattern", "unbalanced ')' at offset " + At());
    return out;
  }

 private:
  std::string At() const { return std::to_string(pos_); }
  bool More() const { return pos_ < p_.size(); }

  std::string Alternation(int depth) {
    if (depth > 100) Unsupported("pattern", "groups nested too deeply");
    std::vector<std::string> alts{Concat(depth)};
    while (More() && p_[pos_] == '|') {
      ++pos_;
      alts.push_back(Concat(depth));
    }
    return GbnfAlternatives(alts);
  }

  std::string Concat(int depth) {
    std::string s = "(\"\"";
    while (More() && p_[pos_] != '|' && p_[pos_] != ')') {
      if (p_[pos_] == '$' && pos_ + 1 == p_.size()) {
        ++pos_;
        break;
      }
      std::string atom = Atom(depth);
      s += " " + Quantified(std::move(atom));
    }
    return s + ")";
  }

  int Number() {
    const size_t start = pos_;
    int v = 0;
    while (More() && p_[pos_] >= '0' && p_[pos_] <= '9') {
      v = v * 10 + (p_[pos_++] - '0');
      if (v > kMaxRepetition) Unsupported("pattern", "repetition bound too large");
    }
    if (pos_ == start) Unsupported("pattern", "bad repetition at offset " + At());
    return v;
  }

  std::string Quantified(std::string atom) {
    while (More()) {
      const char c = p_[pos_];
      std::string q;
      if (c == '*' || c == '+' || c == '?') {
        q = std::string(1, c);
        ++pos_;
      } else if (c == '{' && pos_ + 1 < p_.size() && p_[pos_ + 1] >= '0' && p_[pos_ + 1] <= '9') {
        ++pos_;
        const int min = Number();
        q = "{" + std::to_string(min);
        if (More() && p_[pos_] == ',') {
          ++pos_;
          q += ",";
          if (More() && p_[pos_] != '}') q += std::to_string(Number());
        }
        if (!More() || p_[pos_] != '}') Unsupported("pattern", "bad repetition at offset " + At());
        ++pos_;
        q += "}";
      } else {
        break;
      }
      if (More() && (p_[pos_] == '?' || p_[pos_] == '+')) {
        if (p_[pos_] == '+') Unsupported("pattern", "possessive quantifiers are not supported");
        ++pos_;  // lazy: same language
      }
      atom = "(" + atom + ")" + q;
    }
    return atom;
  }

  // One code point of the pattern (UTF-8 decoded).
  uint32_t Char() {
    const auto c = static_cast<uint8_t>(p_[pos_++]);
    if (c < 0x80) return c;
    const int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n < 0 || pos_ + n > p_.size()) Unsupported("pattern", "invalid UTF-8");
    uint32_t cp = c & (0x3F >> n);
    for (int i = 0; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(p_[pos_++]) & 0x3F);
    return cp;
  }

  uint32_t HexEscape(int digits) {
    if (pos_ + digits > p_.size()) Unsupported("pattern", "truncated escape");
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const int digit = utf8::HexDigit(p_[pos_++]);
      if (digit < 0) Unsupported("pattern", "bad hex escape");
      v = (v << 4) | static_cast<uint32_t>(digit);
    }
    return v;
  }

  // After a backslash: a set (for shorthand classes) or a single code point.
  // `negated_shorthand` tells a negated shorthand, which is limited to ASCII.
  CodeRanges Escape() {
    if (!More()) Unsupported("pattern", "trailing backslash");
    const char e = p_[pos_++];
    switch (e) {
      case 'd':
        return kDigit;
      case 'w':
        return kWord;
      case 's':
        return kSpace;
      case 'D':
        return ComplementRanges(kDigit, 0x7F);
      case 'W':
        return ComplementRanges(kWord, 0x7F);
      case 'S':
        return ComplementRanges(kSpace, 0x7F);
      case 'x':
      case 'u': {
        const uint32_t v = HexEscape(e == 'x' ? 2 : 4);
        return {{v, v}};
      }
      default:
        break;
    }
    // \n \t \r \f \v
    if (const size_t k = std::string_view("ntrfv").find(e); k != std::string_view::npos) {
      const uint32_t c = static_cast<uint8_t>("\n\t\r\f\v"[k]);
      return {{c, c}};
    }
    if ((e >= '0' && e <= '9')) Unsupported("pattern", "backreferences are not supported");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
      Unsupported("pattern", std::string("the escape \\") + e + " is not supported");
    }
    --pos_;
    const uint32_t cp = Char();
    return {{cp, cp}};
  }

  CodeRanges ClassSet() {
    bool negate = false;
    if (More() && p_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    CodeRanges r;
    bool shorthand = false;
    bool first = true;
    while (true) {
      if (!More()) Unsupported("pattern", "unterminated character class");
      if (p_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      if (p_[pos_] == '[' && pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
        Unsupported("pattern", "POSIX classes are not supported");
      }
      CodeRanges lo_set;
      if (p_[pos_] == '\\') {
        ++pos_;
        const char e = More() ? p_[pos_] : 0;
        shorthand = shorthand || std::string_view("dwsDWS").find(e) != std::string_view::npos;
        lo_set = Escape();
      } else {
        const uint32_t cp = Char();
        lo_set = {{cp, cp}};
      }
      if (lo_set.size() == 1 && lo_set[0].first == lo_set[0].second && pos_ + 1 < p_.size() &&
          p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        CodeRanges hi_set;
        if (p_[pos_] == '\\') {
          ++pos_;
          hi_set = Escape();
        } else {
          const uint32_t cp = Char();
          hi_set = {{cp, cp}};
        }
        if (hi_set.size() != 1 || hi_set[0].first != hi_set[0].second ||
            hi_set[0].first < lo_set[0].first) {
          Unsupported("pattern", "bad character range at offset " + At());
        }
        r.emplace_back(lo_set[0].first, hi_set[0].first);
      } else {
        r.insert(r.end(), lo_set.begin(), lo_set.end());
      }
    }
    r = NormalizeRanges(r);
    // A negated class with a shorthand would exclude Unicode members the
    // ASCII shorthand misses: stay within ASCII there.
    if (negate) r = ComplementRanges(r, shorthand ? 0x7F : kMaxCodePoint);
    return r;
  }

  // A character set as grammar text (JSON-escaped inside a JSON string).
  std::string SetText(const CodeRanges& set) {
    if (set.empty()) Unsupported("pattern", "empty character class");
    if (!json_) return ClassText(set);
    // Plain members, plus the escaped form of " \ and control characters.
    const CodeRanges plain =
        Intersect(set, ComplementRanges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
    std::vector<std::string> alts;
    if (!plain.empty()) alts.push_back(ClassText(plain));
    for (const auto& [lo, hi] : set) {
      for (uint32_t c = lo; c <= std::min(hi, uint32_t{0x5C}); ++c) {
        if (c < 0x20 || c == '"' || c == '\\') alts.push_back(GbnfLiteral(JsonEscape(c)));
      }
    }
    return GbnfAlternatives(alts);
  }

  // " \ or a control character (c <= 0x5C) as JSON writes it in a string.
  static std::string JsonEscape(uint32_t c) {
    constexpr std::string_view kShort = "\"\\\n\t\r";  // with a letter escape
    constexpr std::string_view kLetter = "\"\\ntr";
    if (const size_t k = kShort.find(static_cast<char>(c)); k != std::string_view::npos) {
      return std::string("\\") + kLetter[k];
    }
    static const char kHex[] = "0123456789abcdef";
    return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
  }

  std::string Atom(int depth) {
    const char c = p_[pos_];
    if (c == '(') {
      ++pos_;
      if (More() && p_[pos_] == '?') {
        ++pos_;
        if (More() && p_[pos_] == ':') {
          ++pos_;
        } else if (More() && p_[pos_] == 'P' && pos_ + 1 < p_.size() && p_[pos_ + 1] == '<') {
          pos_ = p_.find('>', pos_);
          if (pos_ == std::string_view::npos) Unsupported("pattern", "bad group name");
          ++pos_;
        } else if (More() && p_[pos_] == '<' && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' &&
                   p_[pos_ + 1] != '!') {
          pos_ = p_.find('>', pos_);
          if (pos_ == std::string_view::npos) Unsupported("pattern", "bad group name");
          ++pos_;
        } else {
          Unsupported("pattern", "lookaround and inline flags are not supported");
        }
      }
      std::string inner = Alternation(depth + 1);
      if (!More() || p_[pos_] != ')') Unsupported("pattern", "missing ')'");
      ++pos_;
      return "(" + inner + ")";
    }
    if (c == '[') {
      ++pos_;
      return SetText(ClassSet());
    }
    if (c == '.') {
      ++pos_;
      return SetText(ComplementRanges({{'\n', '\n'}}));
    }
    if (c == '\\') {
      ++pos_;
      if (More() && (p_[pos_] == 'b' || p_[pos_] == 'B' || p_[pos_] == 'A' || p_[pos_] == 'Z')) {
        Unsupported("pattern", "anchors other than ^ and $ are not supported");
      }
      return SetText(Escape());
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      Unsupported("pattern", "nothing to repeat at offset " + At());
    }
    if (c == '^' || c == '$') Unsupported("pattern", "anchors are only supported at the ends");
    const uint32_t cp = Char();
    return SetText({{cp, cp}});
  }

  std::string_view p_;
  bool json_;
  size_t pos_ = 0;
};

}  // namespace

std::string RegexGrammar(std::string_view pattern) {
  return "root ::= " + RegexParser(pattern, false).Parse() + "\n";
}

std::string RegexJsonStringBody(std::string_view pattern) {
  return "\"\\\"\" " + RegexParser(pattern, true).Parse() + " \"\\\"\"";
}

std::string ChoiceGrammar(const std::vector<std::string>& choices) {
  if (choices.empty()) throw UnsupportedConstraint("choice", "guided_choice must not be empty");
  std::string s = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) s += (i ? " | " : "") + GbnfLiteral(choices[i]);
  return s + "\n";
}

}  // namespace tq::structured
