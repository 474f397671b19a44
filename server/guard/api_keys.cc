// API keys (see api_keys.h).
#include "server/guard/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>

#include "engine/common/error.h"

namespace tq::guard {

ApiKeys::Digest ApiKeys::Hash(std::string_view key) {
  Digest digest{};
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest.data());
  return digest;
}

ApiKeys ApiKeys::Load(const std::vector<std::string>& keys, const std::string& env_key,
                      const std::string& key_file) {
  ApiKeys out;
  for (const std::string& key : keys) {
    if (key.empty()) throw Error("--api-key: the key is empty");
    out.digests_.push_back(Hash(key));
  }
  if (!env_key.empty()) out.digests_.push_back(Hash(env_key));
  if (!key_file.empty()) {
    std::ifstream in(key_file);
    if (!in) throw Error("--api-key-file " + key_file + ": cannot read the file");
    size_t found = 0;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      out.digests_.push_back(Hash(line));
      ++found;
    }
    if (found == 0) throw Error("--api-key-file " + key_file + ": no key in the file");
  }
  return out;
}

bool ApiKeys::Accepts(const std::optional<std::string_view>& authorization) const {
  if (!authorization) return false;
  constexpr std::string_view kScheme = "Bearer ";  // RFC 6750 section 2.1
  std::string_view value = *authorization;
  if (value.size() <= kScheme.size() || value.substr(0, kScheme.size()) != kScheme) return false;
  const Digest presented = Hash(value.substr(kScheme.size()));
  int matches = 0;
  for (const Digest& accepted : digests_) {
    matches |= CRYPTO_memcmp(presented.data(), accepted.data(), presented.size()) == 0;
  }
  return matches != 0;
}

}  // namespace tq::guard
