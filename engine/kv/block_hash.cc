#include "engine/kv/block_hash.h"

#include <cstdio>
#include <cstring>

namespace tq {
namespace {

// splitmix64's finalizer: spreads FNV's weak low bits over the whole word.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t Fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* b = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

BlockHash PrefixCacheSeed(std::string_view kv_dtype, std::string_view calibration_fingerprint,
                          uint64_t extra) {
  uint64_t h = Fnv1a(kv_dtype.data(), kv_dtype.size());
  h = Fnv1a("\0", 1, h);
  h = Fnv1a(calibration_fingerprint.data(), calibration_fingerprint.size(), h);
  h = Fnv1a(&extra, sizeof(extra), h);
  return Mix(h);
}

BlockHash HashBlock(BlockHash parent, std::span<const int32_t> tokens) {
  uint64_t h = Fnv1a(&parent, sizeof(parent));
  h = Fnv1a(tokens.data(), tokens.size_bytes(), h);
  return Mix(h);
}

void ExtendBlockHashes(BlockHash seed, std::span<const int32_t> tokens, int32_t block_size,
                       std::vector<BlockHash>* hashes) {
  const size_t full = tokens.size() / static_cast<size_t>(block_size);
  while (hashes->size() < full) {
    const BlockHash parent = hashes->empty() ? seed : hashes->back();
    hashes->push_back(HashBlock(parent, tokens.subspan(hashes->size() * block_size, block_size)));
  }
}

std::string_view FingerprintFloats(std::span<const float> floats, char (&hex)[17]) {
  const uint64_t h = Fnv1a(floats.data(), floats.size_bytes());
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return {hex, 16};
}

}  // namespace tq
