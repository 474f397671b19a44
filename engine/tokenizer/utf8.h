// UTF-8 helpers of the tokenizer.json pipeline (engine/tokenizer/hf_*), also
// used by the grammars, the Jinja interpreter and gRPC's string field check.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tq::utf8 {

/// Length of the UTF-8 sequence that starts with byte `lead` (1-4), 1 for a
/// byte that cannot start one. For walking valid UTF-8 only.
inline size_t SeqLen(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

/// The value of hex digit `c` (0-9, a-f, A-F), -1 for any other character.
inline int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// What Next does with a sequence that is not complete UTF-8 (a lead byte
/// without all its continuation bytes, or a byte that starts none).
enum class Invalid : uint8_t {
  kAssumeValid,  // for valid UTF-8 only: decodes what bytes there are
  kByte,         // the byte is a code point of its own (Python-like jinja strings)
};
/// The code point at s[i]; advances `i` past it.
char32_t Next(std::string_view s, size_t& i, Invalid invalid = Invalid::kAssumeValid);
/// Appends code point `cp` as UTF-8.
void Append(std::string& out, char32_t cp);

/// `bytes` with every ill-formed subsequence replaced by U+FFFD, one per
/// maximal subpart (Unicode 15 §3.9 "U+FFFD substitution of maximal
/// subparts", as Rust's String::from_utf8_lossy and WHATWG's decoder do).
std::string Lossy(std::string_view bytes);
/// True when `bytes` is well-formed UTF-8.
bool Valid(std::string_view bytes);

}  // namespace tq::utf8
