// PCRE2 regular expressions for the tokenizer.json pre-tokenizers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tq::hf {

/// A compiled PCRE2 pattern (UTF + UCP: \p{L}, \s, \w are Unicode classes, as
/// in the Oniguruma/Rust regexes HF tokenizers uses), JIT-compiled when the
/// platform allows. Immutable after construction; FindAll is thread-safe.
class Regex {
 public:
  /// Compiles `pattern`; throws tq::Error("<what>: invalid regex ...") on a
  /// pattern PCRE2 rejects.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Byte spans [begin, end) of the successive non-overlapping matches in
  /// `text` (valid UTF-8), left to right; an empty match advances one
  /// character and is not reported.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq::hf
