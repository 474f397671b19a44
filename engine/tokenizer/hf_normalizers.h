// tokenizer.json "normalizer" components (HF tokenizers' normalizers module).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace tq::hf {

/// Rewrites a piece of input text before pre-tokenization. Immutable,
/// thread-safe.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  /// Normalizes `text` (valid UTF-8) in place.
  virtual void Normalize(std::string& text) const = 0;
};

/// Builds the normalizer that `spec` describes: NFC (utf8proc), Prepend,
/// Replace (String or Regex pattern), Sequence; nullptr for JSON null. Throws
/// tq::Error "<where>: unsupported normalizer \"<type>\"" for any other type.
std::unique_ptr<Normalizer> MakeNormalizer(const nlohmann::json& spec, const std::string& where);

}  // namespace tq::hf
