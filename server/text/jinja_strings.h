// Python str methods on UTF-8 strings, for the Jinja interpreter's filters
// and methods (jinja2 calls the Python methods of the same names).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/utf8.h"

namespace tq::jinja {

// Code points are decoded with utf8::Next(s, i, utf8::Invalid::kByte): an
// invalid byte decodes as itself (one byte), so every input is consumed.
/// Number of code points (Python len()).
size_t CodePointCount(std::string_view s);
/// Byte offset of every code point of `s`, plus s.size() at the end.
std::vector<size_t> CodePointOffsets(std::string_view s);

/// Python str.isspace() for one code point (Unicode White_Space plus the
/// ASCII separators U+001C..U+001F).
bool IsPySpace(char32_t cp);

/// str.strip/lstrip/rstrip: without `chars`, Python whitespace; with it,
/// any of its code points.
std::string PyStrip(std::string_view s, std::optional<std::string_view> chars, bool left,
                    bool right);
/// str.split(sep, maxsplit): without sep, runs of whitespace and no empty
/// fields; maxsplit < 0 means no limit. Throws RenderError for an empty sep.
std::vector<std::string> PySplit(std::string_view s, std::optional<std::string_view> sep,
                                 int64_t maxsplit);
/// str.replace(old, new, count); count < 0 replaces all. An empty `old`
/// inserts `new` around every code point, as Python does.
std::string PyReplace(std::string_view s, std::string_view old_s, std::string_view new_s,
                      int64_t count);

/// str.upper/lower/capitalize/title. Case mapping covers ASCII only (other
/// characters are kept): chat templates apply these to roles and keywords.
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyCapitalize(std::string_view s);
std::string PyTitle(std::string_view s);

}  // namespace tq::jinja
