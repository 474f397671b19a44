// tokenizer.json "decoder" components (HF tokenizers' decoders module).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tq::hf {

/// Turns token strings back into text, as HF tokenizers' Decoder::decode_chain.
/// Immutable, thread-safe.
class Decoder {
 public:
  virtual ~Decoder() = default;
  /// Rewrites `tokens` in place (a step may fuse them). With `raw` (for
  /// Tokenizer::TokenBytes) the result is the bytes tokens contribute in
  /// the middle of a text: no UTF-8 repair (ByteLevel, ByteFallback keep the
  /// bytes) and no start-of-text rules (Metaspace's first-token space, Strip).
  virtual void DecodeChain(std::vector<std::string>& tokens, bool raw) const = 0;
};

/// Builds the decoder `spec` describes: ByteLevel, Metaspace, Replace,
/// ByteFallback, Fuse, Strip, Sequence; nullptr for JSON null (tokens are
/// then joined with spaces, as in HF). Throws tq::Error
/// "<where>: unsupported decoder \"<type>\"" for any other type.
std::unique_ptr<Decoder> MakeDecoder(const nlohmann::json& spec, const std::string& where);

}  // namespace tq::hf
