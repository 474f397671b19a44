// Jinja tokenizer following jinja2/lexer.py (see jinja_lexer.h).
#include "server/text/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "engine/common/error.h"
#include "engine/tokenizer/utf8.h"
#include "server/text/jinja_strings.h"

namespace tq::jinja {
namespace {

[[noreturn]] void Fail(int line, const std::string& msg) {
  throw Error("line " + std::to_string(line) + ": " + msg);
}

bool IsHex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}
bool IsNameStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// Python's one-letter escapes (\a \b \f \n \r \t \v) and the characters they stand for.
constexpr std::string_view kLetterEscapes = "abfnrtv";
constexpr std::string_view kLetterValues = "\a\b\f\n\r\t\v";

// Python's "unicode-escape" decoding, which jinja2 applies to string
// literals: \n \t \\ \' \xhh \uXXXX \UXXXXXXXX \ooo ...; an unknown escape
// keeps its backslash; a backslash-newline is removed.
std::string DecodeEscapes(std::string_view raw, int line) {
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 >= raw.size()) {
      out += raw[i];
      continue;
    }
    const char e = raw[++i];
    const auto hex = [&](size_t n) {
      std::string digits(raw.substr(i + 1, n));
      if (digits.size() != n || !std::all_of(digits.begin(), digits.end(), IsHex)) {
        Fail(line, "truncated \\" + std::string(1, e) + " escape in string literal");
      }
      i += n;
      return static_cast<char32_t>(std::stoul(digits, nullptr, 16));
    };
    switch (e) {
      case '\n':
        break;
      case '\\':
      case '\'':
      case '"':
        out += e;
        break;
      case 'x':
        utf8::Append(out, hex(2));
        break;
      case 'u':
        utf8::Append(out, hex(4));
        break;
      case 'U': {
        const char32_t cp = hex(8);
        if (cp > 0x10FFFF) Fail(line, "illegal Unicode character in string literal");
        utf8::Append(out, cp);
        break;
      }
      default:
        if (const size_t letter = kLetterEscapes.find(e); letter != std::string_view::npos) {
          out += kLetterValues[letter];
        } else if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<char32_t>(raw[++i] - '0');
          }
          utf8::Append(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& options) : src_(std::move(src)), opt_(options) {}

  std::vector<Token> Run() {
    while (pos_ < src_.size()) {
      const size_t start = FindTagStart(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      if (start == src_.size()) {
        Emit(Token::Type::kText, std::move(text), line_);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (sign == '-') {
        text = PyStrip(text, std::nullopt, false, true);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        // Spaces/tabs between the line start and a block or comment tag go.
        const size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((l_pos > 0 || line_starting_) &&
            text.find_first_not_of(" \t", l_pos) == std::string::npos) {
          text.resize(l_pos);
        }
      }
      const int text_line = line_;
      Advance(start);
      Emit(Token::Type::kText, std::move(text), text_line);
      const bool has_sign = sign == '-' || sign == '+';
      const int tag_line = line_;
      Advance(start + 2 + (has_sign ? 1 : 0));
      if (kind == '#') {
        Comment(tag_line);
      } else {
        Tag(kind == '%', tag_line);
      }
    }
    tokens_.push_back({Token::Type::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  std::string src_;
  LexOptions opt_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the last consumed text ended a line

  size_t FindTagStart(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  void Advance(size_t to) {
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(pos_),
                                         src_.begin() + static_cast<std::ptrdiff_t>(to), '\n'));
    pos_ = to;
  }

  void Emit(Token::Type type, std::string text, int line) {
    if (type == Token::Type::kText && text.empty()) return;
    tokens_.push_back({type, std::move(text), line});
  }

  // After a tag's end marker at pos_ (already past it): `strip` removes all
  // following whitespace (`-%}`), `trim` one newline (trim_blocks).
  void AfterTagEnd(size_t end, bool strip, bool trim) {
    size_t to = end;
    if (strip) {
      while (to < src_.size()) {
        size_t k = to;
        if (!IsPySpace(utf8::Next(src_, k, utf8::Invalid::kByte))) break;
        to = k;
      }
    } else if (trim && to < src_.size() && src_[to] == '\n') {
      ++to;
    }
    Advance(to);
    line_starting_ = to > 0 && src_[to - 1] == '\n';
  }

  void Comment(int tag_line) {
    const size_t content = pos_;
    const size_t end = src_.find("#}", content);
    if (end == std::string::npos) Fail(tag_line, "missing end of comment tag");
    const char before = end > content ? src_[end - 1] : '\0';
    AfterTagEnd(end + 2, before == '-', before != '+' && opt_.trim_blocks);
  }

  void Tag(bool block, int tag_line) {
    Emit(block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", tag_line);
    int depth = 0;  // open brackets: tag ends are not recognized inside them
    while (true) {
      while (pos_ < src_.size()) {
        size_t k = pos_;
        if (!IsPySpace(utf8::Next(src_, k, utf8::Invalid::kByte))) break;
        Advance(k);
      }
      if (pos_ >= src_.size()) {
        Fail(tag_line,
             std::string("unexpected end of template, expected '") + (block ? "%}" : "}}") + "'");
      }
      if (depth == 0 && EndTag(block)) return;
      Expression(depth);
    }
  }

  bool StartsWith(std::string_view s) const { return src_.compare(pos_, s.size(), s) == 0; }

  bool EndTag(bool block) {
    const std::string close = block ? "%}" : "}}";
    const Token::Type type = block ? Token::Type::kBlockEnd : Token::Type::kVarEnd;
    if (StartsWith("-" + close)) {
      Emit(type, "", line_);
      AfterTagEnd(pos_ + 3, true, false);
      return true;
    }
    if (block && StartsWith("+" + close)) {
      Emit(type, "", line_);
      AfterTagEnd(pos_ + 3, false, false);
      return true;
    }
    if (StartsWith(close)) {
      Emit(type, "", line_);
      AfterTagEnd(pos_ + 2, false, block && opt_.trim_blocks);
      return true;
    }
    return false;
  }

  // Digits with single underscores between them (Python 1_000); returns the
  // digits without underscores and advances `i`.
  std::string Digits(size_t& i) const {
    std::string d;
    while (i < src_.size()) {
      if (IsDigit(src_[i])) {
        d += src_[i++];
      } else if (src_[i] == '_' && !d.empty() && i + 1 < src_.size() && IsDigit(src_[i + 1])) {
        ++i;
      } else {
        break;
      }
    }
    return d;
  }

  void Expression(int& depth) {
    const char c = src_[pos_];
    const int line = line_;
    if (IsDigit(c)) {
      size_t i = pos_;
      std::string num = Digits(i);
      bool is_float = false;
      // No fraction right after a '.' (jinja2: `foo.0.1` is two lookups).
      const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
      if (!after_dot && i + 1 < src_.size() && src_[i] == '.' && IsDigit(src_[i + 1])) {
        ++i;
        num += "." + Digits(i);
        is_float = true;
      }
      if (!after_dot && i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
        size_t j = i + 1;
        std::string exp = "e";
        if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) exp += src_[j++];
        const std::string digits = Digits(j);
        if (!digits.empty()) {
          num += exp + digits;
          i = j;
          is_float = true;
        }
      }
      Emit(is_float ? Token::Type::kFloat : Token::Type::kInt, num, line);
      Advance(i);
      return;
    }
    if (IsNameStart(c)) {
      size_t i = pos_;
      while (i < src_.size() && (IsNameStart(src_[i]) || IsDigit(src_[i]))) ++i;
      Emit(Token::Type::kName, src_.substr(pos_, i - pos_), line);
      Advance(i);
      return;
    }
    if (c == '\'' || c == '"') {
      size_t i = pos_ + 1;
      while (i < src_.size() && src_[i] != c) i += src_[i] == '\\' ? 2 : 1;
      if (i >= src_.size()) Fail(line, "unterminated string literal");
      Emit(Token::Type::kString,
           DecodeEscapes(std::string_view(src_).substr(pos_ + 1, i - pos_ - 1), line), line);
      Advance(i + 1);
      return;
    }
    static constexpr std::string_view kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo) {
      if (StartsWith(op)) {
        Emit(Token::Type::kOp, std::string(op), line);
        Advance(pos_ + 2);
        return;
      }
    }
    static constexpr std::string_view kOne = "+-*/%~<>=.:|,()[]{}";
    if (kOne.find(c) == std::string_view::npos) {
      Fail(line, std::string("unexpected char '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') {
      if (depth == 0) Fail(line, std::string("unexpected '") + c + "'");
      --depth;
    }
    Emit(Token::Type::kOp, std::string(1, c), line);
    Advance(pos_ + 1);
  }
};

}  // namespace

std::vector<Token> Lex(std::string_view source, const LexOptions& options) {
  // jinja2 normalizes \r\n and \r to \n, then drops one trailing newline.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!options.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), options).Run();
}

}  // namespace tq::jinja
