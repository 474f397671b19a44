// Shared driver of the constraint fuzz targets (fuzz_json_schema.cc,
// fuzz_regex.cc, fuzz_grammar.cc): compiles one constraint the way the
// daemon does (GrammarCache::Get on a fresh cache), then decodes a few
// tokens of a byte-level vocabulary (FuzzVocabulary) with the token mask,
// checking its invariants. Bad input must end in tq::Error or
// UnsupportedConstraint (the daemon's 400 / INVALID_ARGUMENT); anything else,
// or a broken invariant, aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/structured/grammar_cache.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/token_mask.h"
#include "tests/fuzz/fuzz_common.h"

namespace tq::fuzz {

/// The vocabulary the constraint targets decode with: EOS (id 0), the 255
/// non-zero single bytes (every byte the grammar engine can be asked about)
/// and multi-byte pieces that cross JSON and UTF-8 boundaries (as real
/// vocabularies' tokens do), so a mask exercises both the suffix cache and
/// the uncertain-token walk. Built once.
inline std::shared_ptr<const structured::TokenVocabulary> FuzzVocabulary() {
  static const auto vocab = [] {
    std::vector<std::string> bytes = {""};  // 0: EOS
    for (int b = 1; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    for (const char* piece :
         {"{\"",  "\":",   "\": ", ", \"", "\"}", "null",     "true",     "false",
          "ab",   "abc",   "aaaa", "\",",  "\"]", "[1",       "12",       "1.",
          "e5",   "\\u00", "\\\"", "{}",   "[]",  "\xc3\xa9", "\xe4\xb8", "\x80\x80",
          " \"a", "-1",    "00",   "T1",   ":0",  "\n\n"}) {
      bytes.emplace_back(piece);
    }
    return std::make_shared<const structured::TokenVocabulary>(std::move(bytes),
                                                               std::vector<int32_t>{0});
  }();
  return vocab;
}

/// Compiles `spec` and decodes up to 8 tokens: each step's mask must be
/// non-empty, and its `pick`-th set bit (mod the count) must be accepted;
/// EOS ends the walk (before the end only as the mask's only token).
inline void RunConstraint(const structured::ConstraintSpec& spec, uint32_t pick) {
  std::shared_ptr<const structured::CompiledGrammar> compiled;
  try {
    structured::GrammarCache cache(FuzzVocabulary(), 1);
    compiled = cache.Get(spec);
  } catch (const structured::UnsupportedConstraint& e) {
    Expected(e);
    return;
  } catch (const Error& e) {
    Expected(e);
    return;
  } catch (const std::exception& e) {
    Unexpected("GrammarCache::Get", e);
  }
  structured::GrammarMatcher matcher(compiled);
  const structured::TokenVocabulary& vocab = compiled->vocab();
  std::vector<uint64_t> mask;
  for (int step = 0; step < 8; ++step) {
    matcher.FillMask(&mask);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < vocab.size(); ++t) {
      if ((mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) allowed.push_back(t);
    }
    if (allowed.empty()) {
      std::fprintf(stderr, "fuzz: empty token mask at step %d\n", step);
      std::abort();
    }
    const int32_t token = allowed[(pick + static_cast<uint32_t>(step) * 7919u) % allowed.size()];
    if (token == 0 && !matcher.CanEnd()) {
      // EOS where the sentence cannot end: only as the mask's last resort
      // (no token continues it, e.g. a byte no token has), and then alone.
      if (allowed.size() != 1) {
        std::fprintf(stderr, "fuzz: EOS allowed before the end with %zu other tokens\n",
                     allowed.size() - 1);
        std::abort();
      }
      break;
    }
    if (!matcher.AcceptToken(token)) {
      std::fprintf(stderr, "fuzz: token %d in the mask was rejected at step %d\n", token, step);
      std::abort();
    }
    if (token == 0) break;  // EOS
  }
}

}  // namespace tq::fuzz
