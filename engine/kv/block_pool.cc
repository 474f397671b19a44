#include "engine/kv/block_pool.h"

#include <cstdio>
#include <cstdlib>

namespace tq {

BlockPool::BlockPool(int32_t num_blocks) : ref_counts_(num_blocks, 0) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out 0 first
}

bool BlockPool::Allocate(int32_t n, std::vector<int32_t>* out) {
  if (n < 0 || n > num_free()) return false;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    ref_counts_[b] = 1;
    out->push_back(b);
  }
  return true;
}

void BlockPool::Retain(int32_t block) {
  if (block < 0 || block >= num_blocks() || ref_counts_[block] == 0) {
    std::fprintf(stderr, "BlockPool::Retain: block %d is not allocated\n", block);
    std::abort();
  }
  ++ref_counts_[block];
}

void BlockPool::Release(int32_t block) {
  if (block < 0 || block >= num_blocks() || ref_counts_[block] == 0) {
    std::fprintf(stderr, "BlockPool::Release: block %d is not allocated\n", block);
    std::abort();
  }
  if (--ref_counts_[block] == 0) free_.push_back(block);
}

void BlockPool::ReleaseAll(std::vector<int32_t>* blocks) {
  for (int32_t b : *blocks) Release(b);
  blocks->clear();
}

bool BlockTable::EnsureCapacity(BlockPool& pool, int32_t num_tokens) {
  const int32_t needed = (num_tokens + block_size_ - 1) / block_size_;
  const int32_t missing = needed - static_cast<int32_t>(blocks_.size());
  return missing <= 0 || pool.Allocate(missing, &blocks_);
}

}  // namespace tq
