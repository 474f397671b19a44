// Python str methods on UTF-8 (see jinja_strings.h).
#include "server/text/jinja_strings.h"

#include "server/text/jinja_value.h"

namespace tq::jinja {

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) utf8::Next(s, i, utf8::Invalid::kByte);
  return n;
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  size_t i = 0;
  while (i < s.size()) {
    offsets.push_back(i);
    utf8::Next(s, i, utf8::Invalid::kByte);
  }
  offsets.push_back(s.size());
  return offsets;
}

bool IsPySpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

bool InSet(char32_t cp, std::optional<std::string_view> chars) {
  if (!chars) return IsPySpace(cp);
  size_t i = 0;
  while (i < chars->size()) {
    if (utf8::Next(*chars, i, utf8::Invalid::kByte) == cp) return true;
  }
  return false;
}

char AsciiUpper(char c) {
  return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
}
char AsciiLower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}
bool AsciiCased(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

}  // namespace

std::string PyStrip(std::string_view s, std::optional<std::string_view> chars, bool left,
                    bool right) {
  const std::vector<size_t> off = CodePointOffsets(s);
  size_t b = 0;
  size_t e = off.size() - 1;  // code point indices [b, e)
  const auto cp_at = [&](size_t k) {
    size_t i = off[k];
    return utf8::Next(s, i, utf8::Invalid::kByte);
  };
  if (left) {
    while (b < e && InSet(cp_at(b), chars)) ++b;
  }
  if (right) {
    while (e > b && InSet(cp_at(e - 1), chars)) --e;
  }
  return std::string(s.substr(off[b], off[e] - off[b]));
}

std::vector<std::string> PySplit(std::string_view s, std::optional<std::string_view> sep,
                                 int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw RenderError("empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  size_t i = 0;
  while (i < s.size()) {
    // Skip whitespace, then take a word (or the rest once maxsplit is used).
    size_t j = i;
    while (j < s.size()) {
      size_t k = j;
      if (!IsPySpace(utf8::Next(s, k, utf8::Invalid::kByte))) break;
      j = k;
    }
    if (j >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(PyStrip(s.substr(j), std::nullopt, false, true));
      return out;
    }
    size_t end = j;
    while (end < s.size()) {
      size_t k = end;
      if (IsPySpace(utf8::Next(s, k, utf8::Invalid::kByte))) break;
      end = k;
    }
    out.emplace_back(s.substr(j, end - j));
    i = end;
  }
  return out;
}

std::string PyReplace(std::string_view s, std::string_view old_s, std::string_view new_s,
                      int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old_s.empty()) {
    const std::vector<size_t> off = CodePointOffsets(s);
    const size_t n = off.size() - 1;
    for (size_t k = 0; k <= n; ++k) {
      if (count < 0 || done < count) {
        out.append(new_s);
        ++done;
      }
      if (k < n) out.append(s.substr(off[k], off[k + 1] - off[k]));
    }
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old_s, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(new_s);
    start = at + old_s.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string PyUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = AsciiUpper(c);
  return out;
}

std::string PyLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = AsciiLower(c);
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out = PyLower(s);
  if (!out.empty()) out[0] = AsciiUpper(out[0]);
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    c = prev_cased ? AsciiLower(c) : AsciiUpper(c);
    prev_cased = AsciiCased(c);
  }
  return out;
}

}  // namespace tq::jinja
