// Sets of Unicode code points as sorted, disjoint [lo, hi] ranges, shared by
// the grammar parser (grammar.cc) and the regex translator (regex_grammar.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace tq::structured {

/// Code-point ranges [lo, hi]; sorted and disjoint after NormalizeRanges.
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

/// `r` sorted, with overlapping and adjacent ranges merged.
inline CodeRanges NormalizeRanges(CodeRanges r) {
  std::sort(r.begin(), r.end());
  CodeRanges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

/// The code points in [0, max] that normalized `r` does not contain.
inline CodeRanges ComplementRanges(const CodeRanges& r, uint32_t max = kMaxCodePoint) {
  CodeRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > max) break;
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= max) out.emplace_back(next, max);
  return out;
}

}  // namespace tq::structured
