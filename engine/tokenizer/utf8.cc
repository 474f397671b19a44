// UTF-8 helpers (see utf8.h).
#include "engine/tokenizer/utf8.h"

#include <algorithm>

namespace tq::utf8 {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed sequence at s[i], or 0 with `bad` set to the
// length of the maximal subpart to replace (Table 3-7 of the Unicode standard).
size_t WellFormed(std::string_view s, size_t i, size_t& bad) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const size_t left = s.size() - i;
  const unsigned char c = b(0);
  bad = 1;
  if (c < 0x80) return 1;
  unsigned char lo = 0x80, hi = 0xBF;
  size_t n = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (k >= left) return 0;
    const unsigned char x = b(k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) return 0;
    bad = k + 1;
  }
  return n;
}

}  // namespace

char32_t Next(std::string_view s, size_t& i, Invalid invalid) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = std::min(SeqLen(c), s.size() - i);
  if (invalid == Invalid::kByte &&
      (n < SeqLen(c) || std::any_of(s.begin() + i + 1, s.begin() + i + n, [](char b) {
         return (static_cast<unsigned char>(b) & 0xC0) != 0x80;
       }))) {
    n = 1;
  }
  char32_t cp = n == 1 ? c : c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void Append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool Valid(std::string_view bytes) {
  size_t bad = 0;
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = WellFormed(bytes, i, bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t bad = 0;
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = WellFormed(bytes, i, bad);
    if (n == 0) {
      out += kReplacement;
      i += bad;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace tq::utf8
