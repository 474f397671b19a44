#include "engine/kv/block_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace tq {
namespace {

[[noreturn]] void Die(const char* what, int32_t block) {
  std::fprintf(stderr, "BlockPool::%s: block %d is not allocated\n", what, block);
  std::abort();
}

}  // namespace

BlockPool::BlockPool(int32_t num_blocks)
    : ref_counts_(num_blocks, 0),
      registered_(num_blocks, 0),
      hashes_(num_blocks, 0),
      lru_prev_(num_blocks, kNone),
      lru_next_(num_blocks, kNone) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out 0 first
}

void BlockPool::LruRemove(int32_t b) {
  const int32_t p = lru_prev_[b], n = lru_next_[b];
  (p == kNone ? lru_head_ : lru_next_[p]) = n;
  (n == kNone ? lru_tail_ : lru_prev_[n]) = p;
  lru_prev_[b] = lru_next_[b] = kNone;
  --num_cached_;
}

void BlockPool::LruPushBack(int32_t b) {
  lru_prev_[b] = lru_tail_;
  lru_next_[b] = kNone;
  (lru_tail_ == kNone ? lru_head_ : lru_next_[lru_tail_]) = b;
  lru_tail_ = b;
  ++num_cached_;
}

void BlockPool::Unregister(int32_t b) {
  table_.erase(hashes_[b]);
  registered_[b] = 0;
  hashes_[b] = 0;
}

bool BlockPool::Allocate(int32_t n, std::vector<int32_t>* out) {
  if (n < 0 || n > num_free()) return false;
  for (int32_t i = 0; i < n; ++i) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {  // evict the least recently released cached block
      b = lru_head_;
      LruRemove(b);
      Unregister(b);
      ++num_evictions_;
    }
    ref_counts_[b] = 1;
    out->push_back(b);
  }
  return true;
}

void BlockPool::Retain(int32_t block) {
  if (block < 0 || block >= num_blocks()) Die("Retain", block);
  if (ref_counts_[block] == 0) {
    if (!registered_[block]) Die("Retain", block);
    LruRemove(block);  // a prefix hit revives a cached block
  }
  ++ref_counts_[block];
}

void BlockPool::Release(int32_t block) {
  if (block < 0 || block >= num_blocks() || ref_counts_[block] == 0) Die("Release", block);
  if (--ref_counts_[block] > 0) return;
  if (registered_[block]) {
    LruPushBack(block);
  } else {
    free_.push_back(block);
  }
}

void BlockPool::ReleaseAll(std::vector<int32_t>* blocks) {
  for (auto it = blocks->rbegin(); it != blocks->rend(); ++it) Release(*it);
  blocks->clear();
}

int32_t BlockPool::Lookup(BlockHash hash, std::span<const int32_t> tokens) const {
  const auto it = table_.find(hash);
  if (it == table_.end() || static_cast<int32_t>(tokens.size()) != tokens_per_block_) return -1;
  const int32_t b = it->second;
  const auto stored = tokens_.begin() + static_cast<ptrdiff_t>(b) * tokens_per_block_;
  return std::equal(tokens.begin(), tokens.end(), stored) ? b : -1;
}

bool BlockPool::Register(int32_t block, BlockHash hash, std::span<const int32_t> tokens) {
  if (block < 0 || block >= num_blocks() || ref_counts_[block] == 0) Die("Register", block);
  if (registered_[block] || table_.count(hash) > 0) return false;
  if (tokens_per_block_ == 0) {
    tokens_per_block_ = static_cast<int32_t>(tokens.size());
    tokens_.assign(static_cast<size_t>(num_blocks()) * tokens_per_block_, 0);
  }
  if (static_cast<int32_t>(tokens.size()) != tokens_per_block_) return false;
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(block) * tokens_per_block_);
  registered_[block] = 1;
  hashes_[block] = hash;
  table_.emplace(hash, block);
  return true;
}

std::vector<int32_t> BlockPool::CachedInEvictionOrder() const {
  std::vector<int32_t> order;
  for (int32_t b = lru_head_; b != kNone; b = lru_next_[b]) order.push_back(b);
  return order;
}

std::string BlockPool::CheckInvariants() const {
  const int32_t total = num_blocks();
  std::vector<int> lists(total, 0);  // how many of {used, cached, free} hold each block
  std::string err;
  auto fail = [&err](const std::string& what) {
    if (err.empty()) err = what;
  };
  int32_t used = 0;
  for (int32_t b = 0; b < total; ++b) {
    if (ref_counts_[b] < 0) fail("block " + std::to_string(b) + " has refcount < 0");
    if (ref_counts_[b] > 0) {
      ++lists[b];
      ++used;
    }
  }
  int32_t cached = 0;
  int32_t prev = kNone;
  for (int32_t b = lru_head_; b != kNone && cached <= total; b = lru_next_[b]) {
    if (lru_prev_[b] != prev) fail("LRU list links broken at block " + std::to_string(b));
    if (ref_counts_[b] != 0) fail("cached block " + std::to_string(b) + " is in use");
    if (!registered_[b]) fail("cached block " + std::to_string(b) + " has no hash");
    ++lists[b];
    ++cached;
    prev = b;
  }
  if (prev != lru_tail_) fail("LRU tail is not the last cached block");
  for (int32_t b : free_) {
    if (ref_counts_[b] != 0) fail("free block " + std::to_string(b) + " is in use");
    if (registered_[b]) fail("free block " + std::to_string(b) + " has a hash");
    ++lists[b];
  }
  for (int32_t b = 0; b < total; ++b) {
    if (lists[b] != 1) {
      fail("block " + std::to_string(b) + " is in " + std::to_string(lists[b]) + " lists");
    }
    if (registered_[b]) {
      const auto it = table_.find(hashes_[b]);
      if (it == table_.end() || it->second != b) {
        fail("registered block " + std::to_string(b) + " is not in the hash table");
      }
    }
  }
  if (cached != num_cached_) fail("cached count is off");
  if (used + cached + num_uncached_free() != total) fail("used + cached + free != total");
  size_t registered = 0;
  for (uint8_t r : registered_) registered += r;
  if (registered != table_.size()) fail("hash table size != registered blocks");
  return err;
}

bool BlockTable::EnsureCapacity(BlockPool& pool, int32_t num_tokens) {
  const int32_t needed = (num_tokens + block_size_ - 1) / block_size_;
  const int32_t missing = needed - static_cast<int32_t>(blocks_.size());
  return missing <= 0 || pool.Allocate(missing, &blocks_);
}

}  // namespace tq
