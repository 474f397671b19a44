// API keys (`--api-key`, TQSERVE_API_KEY, `--api-key-file`; issue 20 item 1):
// which keys the server accepts and a constant-time check of a presented
// `Authorization: Bearer KEY`, for the HTTP guard and the gRPC service alike.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tq::guard {

/// The accepted keys, kept as SHA-256 digests. Empty = no authentication
/// (the default). Immutable after construction; thread-safe to check.
class ApiKeys {
 public:
  ApiKeys() = default;
  /// `keys` as given (--api-key, repeatable), plus `env_key` when non-empty
  /// (TQSERVE_API_KEY), plus every non-empty line of `key_file` when it is
  /// non-empty (a mounted Kubernetes Secret; a trailing "\r" is dropped).
  /// Throws tq::Error for an empty key among `keys`, or a key file that cannot
  /// be read or holds no key.
  static ApiKeys Load(const std::vector<std::string>& keys, const std::string& env_key,
                      const std::string& key_file);

  bool enabled() const { return !digests_.empty(); }
  size_t size() const { return digests_.size(); }

  /// Whether `authorization` (an Authorization header or gRPC metadata value;
  /// nullopt when absent) is "Bearer <key>" for an accepted key. The key is
  /// hashed and every accepted digest compared with CRYPTO_memcmp, so the time
  /// taken does not depend on how much of a key matched or on which one.
  bool Accepts(const std::optional<std::string_view>& authorization) const;

 private:
  using Digest = std::array<unsigned char, 32>;
  static Digest Hash(std::string_view key);
  std::vector<Digest> digests_;
};

}  // namespace tq::guard
