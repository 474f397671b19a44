// Content hashes of full KV blocks for the prefix cache (DESIGN.md "Additions
// for the second wave": a hash chained over the parent block's hash, the
// block's token ids and extra keys, as vLLM v1's automatic prefix caching).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tq {

/// 64-bit content hash of a full block and, through the parent, of every
/// token before it. A hit is also checked against the block's stored token
/// ids (BlockPool::Lookup), so a collision needs equal tokens and a 64-bit
/// collision of the chained prefix hash.
using BlockHash = uint64_t;

/// FNV-1a over `n` bytes at `data`, continuing from `h` (by default this
/// project's start value, 1469598103934665603, which every stored hash uses).
uint64_t Fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

/// The hash chain's start for one engine: everything besides the tokens that
/// changes the K/V a block holds — the KV dtype name and the calibration
/// fingerprint (the tq key statistics, sink tokens), and, through `extra`,
/// later per-request keys (adapter ids). Equal inputs give equal seeds on
/// every platform (FNV-1a over the bytes, then a 64-bit finalizer).
BlockHash PrefixCacheSeed(std::string_view kv_dtype, std::string_view calibration_fingerprint,
                          uint64_t extra = 0);

/// Hash of the block after `parent` (the seed for the first block) holding
/// `tokens` (block_size ids).
BlockHash HashBlock(BlockHash parent, std::span<const int32_t> tokens);

/// Extends `hashes` (the chain of `tokens`' full blocks so far, from `seed`)
/// to every full block of `tokens`.
void ExtendBlockHashes(BlockHash seed, std::span<const int32_t> tokens, int32_t block_size,
                       std::vector<BlockHash>* hashes);

/// FNV-1a over `floats`' bytes as 16 hex digits: a fingerprint of
/// calibration statistics for PrefixCacheSeed.
std::string_view FingerprintFloats(std::span<const float> floats, char (&hex)[17]);

}  // namespace tq
