// Allocator of fixed-size KV cache blocks.
#pragma once

#include <cstdint>
#include <vector>

namespace tq {

/// Hands out and reclaims block ids in [0, num_blocks). Blocks are
/// reference-counted so that sequences can share a prefix later. Running out
/// is a normal outcome (Allocate returns false), never an exception.
/// Thread ownership: the engine thread only.
class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  /// Appends n fresh blocks (refcount 1) to *out; returns false and changes
  /// nothing when fewer than n are free.
  bool Allocate(int32_t n, std::vector<int32_t>* out);
  /// Adds a reference to an allocated block.
  void Retain(int32_t block);
  /// Drops one reference; the block is free again at zero. Releasing a free
  /// or out-of-range block is a bug and aborts (checked always, it is cheap).
  void Release(int32_t block);
  /// Releases every block of `blocks` and clears it.
  void ReleaseAll(std::vector<int32_t>* blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }
  int32_t ref_count(int32_t block) const { return ref_counts_.at(block); }

 private:
  std::vector<int32_t> free_;  // LIFO: recently freed (cache-warm) blocks first
  std::vector<int32_t> ref_counts_;
};

/// The block table of one sequence: which pool block holds each run of
/// block_size positions. Thread ownership: the engine thread only.
class BlockTable {
 public:
  explicit BlockTable(int32_t block_size) : block_size_(block_size) {}

  /// Makes room for positions [0, num_tokens); returns false (and allocates
  /// nothing) when the pool has too few free blocks.
  bool EnsureCapacity(BlockPool& pool, int32_t num_tokens);
  /// Returns every block to the pool.
  void Release(BlockPool& pool) { pool.ReleaseAll(&blocks_); }

  /// Slot (block_id * block_size + offset) of a position within capacity.
  int64_t Slot(int32_t position) const {
    return static_cast<int64_t>(blocks_[position / block_size_]) * block_size_ +
           position % block_size_;
  }
  int32_t capacity() const { return static_cast<int32_t>(blocks_.size()) * block_size_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }

 private:
  int32_t block_size_;
  std::vector<int32_t> blocks_;
};

}  // namespace tq
