// Allocator of fixed-size KV cache blocks, with the prefix cache's
// hash -> block table (docs/engine.md "Prefix cache").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_hash.h"

namespace tq {

/// Hands out and reclaims block ids in [0, num_blocks). Blocks are
/// reference-counted so that sequences share prefix blocks. Running out is a
/// normal outcome (Allocate returns false), never an exception.
///
/// Every block is in exactly one state:
/// - used: refcount > 0 (in one or more block tables);
/// - cached: refcount 0 but registered in the hash table (a full block whose
///   K/V are kept for a later prefix hit), on an LRU list;
/// - free: refcount 0, no hash.
/// Allocate takes free blocks first and evicts the least recently released
/// cached block only when none is free, so free capacity (num_free) is free +
/// cached. Thread ownership: the engine thread only.
class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  /// Appends n fresh blocks (refcount 1, no hash) to *out; returns false and
  /// changes nothing when fewer than n are free or cached.
  bool Allocate(int32_t n, std::vector<int32_t>* out);
  /// Adds a reference to a used block, or revives a cached one (refcount 0 ->
  /// 1, off the LRU list). Retaining a free or out-of-range block aborts.
  void Retain(int32_t block);
  /// Drops one reference; at zero the block becomes cached (it has a hash) or
  /// free. Releasing a block at refcount 0 or out of range aborts (checked
  /// always, it is cheap).
  void Release(int32_t block);
  /// Releases every block of `blocks`, last first (so that a sequence's tail
  /// is evicted before its head, as vLLM v1), and clears it.
  void ReleaseAll(std::vector<int32_t>* blocks);

  /// The block registered under `hash` whose stored token ids equal
  /// `tokens` (used or cached), or -1.
  int32_t Lookup(BlockHash hash, std::span<const int32_t> tokens) const;
  /// Registers a used block whose positions are all computed (or being
  /// computed in this step) under `hash`. Returns false and changes nothing
  /// when another block holds `hash` already (that one stays the cached copy)
  /// or the block has a hash. All registered blocks hold the same number of
  /// tokens (the block size).
  bool Register(int32_t block, BlockHash hash, std::span<const int32_t> tokens);
  /// Whether `block` is registered in the hash table (used or cached).
  bool is_registered(int32_t block) const { return registered_.at(block) != 0; }

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  /// Blocks Allocate can hand out: free + cached.
  int32_t num_free() const { return static_cast<int32_t>(free_.size()) + num_cached_; }
  /// Cached blocks (refcount 0, registered).
  int32_t num_cached() const { return num_cached_; }
  /// Free blocks without a hash.
  int32_t num_uncached_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }
  int32_t ref_count(int32_t block) const { return ref_counts_.at(block); }
  /// Cached blocks evicted so far (for tests and benchmarks).
  int64_t num_evictions() const { return num_evictions_; }
  /// Cached blocks from least to most recently released (eviction order).
  std::vector<int32_t> CachedInEvictionOrder() const;

  /// Walks every list: used + cached + free = total, no refcount below zero,
  /// no block in two lists, the hash table and the LRU list agree. Returns ""
  /// when all hold, else what is wrong (for tests after each step).
  std::string CheckInvariants() const;

 private:
  static constexpr int32_t kNone = -1;
  void LruRemove(int32_t block);
  void LruPushBack(int32_t block);
  void Unregister(int32_t block);

  std::vector<int32_t> free_;  // LIFO: recently freed (cache-warm) blocks first
  std::vector<int32_t> ref_counts_;
  // The prefix cache: hash per registered block and the hash -> block table.
  std::vector<uint8_t> registered_;
  std::vector<BlockHash> hashes_;
  std::vector<int32_t> tokens_;  // [num_blocks][tokens_per_block_] of registered blocks
  int32_t tokens_per_block_ = 0;
  std::unordered_map<BlockHash, int32_t> table_;
  // Cached blocks, a doubly linked list in release order (head: evicted next).
  std::vector<int32_t> lru_prev_, lru_next_;
  int32_t lru_head_ = kNone, lru_tail_ = kNone;
  int32_t num_cached_ = 0;
  int64_t num_evictions_ = 0;
};

/// The block table of one sequence: which pool block holds each run of
/// block_size positions. Thread ownership: the engine thread only.
class BlockTable {
 public:
  explicit BlockTable(int32_t block_size) : block_size_(block_size) {}

  /// Makes room for positions [0, num_tokens); returns false (and allocates
  /// nothing) when the pool has too few free blocks.
  bool EnsureCapacity(BlockPool& pool, int32_t num_tokens);
  /// Appends a block already retained for this table (a prefix cache hit).
  void AppendShared(int32_t block) { blocks_.push_back(block); }
  /// Returns every block to the pool.
  void Release(BlockPool& pool) { pool.ReleaseAll(&blocks_); }

  /// Slot (block_id * block_size + offset) of a position within capacity.
  int64_t Slot(int32_t position) const {
    return static_cast<int64_t>(blocks_[position / block_size_]) * block_size_ +
           position % block_size_;
  }
  int32_t capacity() const { return static_cast<int32_t>(blocks_.size()) * block_size_; }
  int32_t block_size() const { return block_size_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }

 private:
  int32_t block_size_;
  std::vector<int32_t> blocks_;
};

}  // namespace tq
