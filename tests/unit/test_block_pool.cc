// BlockPool, BlockTable and PagedKvCache sizing: values worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "kernels/backend.h"
#include "kernels/kv_layout.h"

namespace tq {
namespace {

using Blocks = std::vector<int32_t>;

TEST(BlockPoolTest, FreshPoolHandsOutDistinctBlocks) {
  BlockPool pool(8);
  EXPECT_EQ(pool.num_blocks(), 8);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(pool.num_used(), 0);
  for (int32_t b = 0; b < 8; ++b) EXPECT_EQ(pool.ref_count(b), 0);

  Blocks a;
  ASSERT_TRUE(pool.Allocate(3, &a));
  EXPECT_EQ(a, (Blocks{0, 1, 2}));  // a fresh pool hands out 0 first
  Blocks b{42};                     // Allocate appends, it does not overwrite
  ASSERT_TRUE(pool.Allocate(5, &b));
  ASSERT_EQ(b.size(), 6u);
  EXPECT_EQ(b[0], 42);
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.num_used(), 8);

  std::set<int32_t> all(a.begin(), a.end());
  all.insert(b.begin() + 1, b.end());
  EXPECT_EQ(all.size(), 8u);
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), 7);
  for (int32_t blk : all) EXPECT_EQ(pool.ref_count(blk), 1);
}

TEST(BlockPoolTest, AllocateBeyondFreeFailsAndChangesNothing) {
  BlockPool pool(4);
  Blocks a;
  ASSERT_TRUE(pool.Allocate(3, &a));
  Blocks b{7, 9};
  EXPECT_FALSE(pool.Allocate(2, &b));
  EXPECT_EQ(b, (Blocks{7, 9}));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.ref_count(3), 0);
  EXPECT_FALSE(pool.Allocate(-1, &b));
  EXPECT_EQ(b, (Blocks{7, 9}));
  EXPECT_EQ(pool.num_free(), 1);

  // Allocating zero, or exactly what is free, succeeds.
  EXPECT_TRUE(pool.Allocate(0, &b));
  EXPECT_EQ(b, (Blocks{7, 9}));
  EXPECT_TRUE(pool.Allocate(1, &b));
  EXPECT_EQ(b, (Blocks{7, 9, 3}));
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_FALSE(pool.Allocate(1, &b));
  EXPECT_EQ(b.size(), 3u);

  BlockPool empty(0);
  Blocks c;
  EXPECT_TRUE(empty.Allocate(0, &c));
  EXPECT_FALSE(empty.Allocate(1, &c));
  EXPECT_TRUE(c.empty());
}

TEST(BlockPoolTest, RetainAndReleaseCountReferences) {
  BlockPool pool(3);
  Blocks a;
  ASSERT_TRUE(pool.Allocate(2, &a));
  const int32_t shared = a[0];
  pool.Retain(shared);
  pool.Retain(shared);
  EXPECT_EQ(pool.ref_count(shared), 3);
  EXPECT_EQ(pool.num_free(), 1);

  pool.Release(shared);
  pool.Release(shared);
  EXPECT_EQ(pool.ref_count(shared), 1);
  EXPECT_EQ(pool.num_free(), 1);  // still referenced: not free
  pool.Release(shared);
  EXPECT_EQ(pool.ref_count(shared), 0);
  EXPECT_EQ(pool.num_free(), 2);

  // The freed block is handed out again (recently freed first), refcount 1.
  Blocks b;
  ASSERT_TRUE(pool.Allocate(1, &b));
  EXPECT_EQ(b[0], shared);
  EXPECT_EQ(pool.ref_count(shared), 1);

  pool.Release(a[1]);
  pool.Release(b[0]);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(BlockPoolTest, ReleaseAllReturnsEveryBlockAndClears) {
  BlockPool pool(10);
  Blocks a, b;
  ASSERT_TRUE(pool.Allocate(4, &a));
  ASSERT_TRUE(pool.Allocate(5, &b));
  pool.Retain(a[1]);  // a shared prefix block, referenced by both
  b.push_back(a[1]);
  EXPECT_EQ(pool.num_free(), 1);

  pool.ReleaseAll(&a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.num_free(), 4);  // a[1] is still held by b
  EXPECT_EQ(pool.ref_count(b.back()), 1);

  pool.ReleaseAll(&b);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.num_free(), 10);
  for (int32_t blk = 0; blk < 10; ++blk) EXPECT_EQ(pool.ref_count(blk), 0);

  // Everything is allocatable again and distinct.
  Blocks c;
  ASSERT_TRUE(pool.Allocate(10, &c));
  std::sort(c.begin(), c.end());
  for (int32_t i = 0; i < 10; ++i) EXPECT_EQ(c[i], i);
}

TEST(BlockPoolTest, ManyAllocateReleaseCyclesKeepAccounting) {
  BlockPool pool(32);
  std::vector<Blocks> owners(5);
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  for (int step = 0; step < 2000; ++step) {
    Blocks& o = owners[next() % owners.size()];
    if (next() % 3 == 0) {
      pool.ReleaseAll(&o);
    } else {
      const int32_t n = static_cast<int32_t>(next() % 6);
      const int32_t free_before = pool.num_free();
      const size_t size_before = o.size();
      const bool ok = pool.Allocate(n, &o);
      EXPECT_EQ(ok, n <= free_before);
      EXPECT_EQ(o.size(), size_before + (ok ? n : 0));
      EXPECT_EQ(pool.num_free(), free_before - (ok ? n : 0));
    }
    std::set<int32_t> held;
    size_t total = 0;
    for (const Blocks& b : owners) {
      held.insert(b.begin(), b.end());
      total += b.size();
    }
    ASSERT_EQ(held.size(), total) << "a block was handed out twice";
    ASSERT_EQ(pool.num_used(), static_cast<int32_t>(total));
  }
  for (Blocks& b : owners) pool.ReleaseAll(&b);
  EXPECT_EQ(pool.num_free(), 32);
}

TEST(BlockPoolDeathTest, ReleasingUnallocatedBlockAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockPool pool(4);
  EXPECT_DEATH(pool.Release(0), "not allocated");
  EXPECT_DEATH(pool.Release(-1), "not allocated");
  EXPECT_DEATH(pool.Release(4), "not allocated");
  EXPECT_DEATH(pool.Retain(1), "not allocated");
  Blocks a;
  ASSERT_TRUE(pool.Allocate(1, &a));
  pool.Release(a[0]);
  EXPECT_DEATH(pool.Release(a[0]), "not allocated");  // double release
  EXPECT_DEATH(pool.Retain(a[0]), "not allocated");   // retain after free
}

TEST(BlockTableTest, EnsureCapacityBlockMath) {
  BlockPool pool(10);
  struct Case {
    int32_t tokens;
    size_t blocks;
  };
  for (const Case c : {Case{0, 0}, Case{1, 1}, Case{16, 1}, Case{17, 2}, Case{32, 2}, Case{33, 3},
                       Case{160, 10}}) {
    BlockTable table(16);
    ASSERT_TRUE(table.EnsureCapacity(pool, c.tokens)) << c.tokens;
    EXPECT_EQ(table.blocks().size(), c.blocks) << c.tokens;
    EXPECT_EQ(table.capacity(), static_cast<int32_t>(c.blocks) * 16) << c.tokens;
    EXPECT_EQ(pool.num_used(), static_cast<int32_t>(c.blocks));
    table.Release(pool);
    EXPECT_TRUE(table.blocks().empty());
    EXPECT_EQ(table.capacity(), 0);
    EXPECT_EQ(pool.num_free(), 10);
  }
}

TEST(BlockTableTest, GrowsIncrementallyAndNeverShrinks) {
  BlockPool pool(10);
  BlockTable table(16);
  ASSERT_TRUE(table.EnsureCapacity(pool, 1));
  EXPECT_EQ(table.blocks().size(), 1u);
  for (int32_t n = 2; n <= 16; ++n) ASSERT_TRUE(table.EnsureCapacity(pool, n));
  EXPECT_EQ(table.blocks().size(), 1u);
  ASSERT_TRUE(table.EnsureCapacity(pool, 17));
  EXPECT_EQ(table.blocks().size(), 2u);
  const Blocks before = table.blocks();
  ASSERT_TRUE(table.EnsureCapacity(pool, 5));  // smaller: no change
  EXPECT_EQ(table.blocks(), before);
  ASSERT_TRUE(table.EnsureCapacity(pool, 0));
  EXPECT_EQ(table.blocks(), before);
  EXPECT_EQ(pool.num_used(), 2);
  ASSERT_TRUE(table.EnsureCapacity(pool, 40));
  EXPECT_EQ(table.blocks().size(), 3u);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), table.blocks().begin()));
  table.Release(pool);
  EXPECT_EQ(pool.num_free(), 10);
}

TEST(BlockTableTest, SlotValuesFollowBlockIds) {
  BlockPool pool(8);
  // Interleave two sequences and free some blocks so ids are not in order.
  BlockTable a(16), b(16), c(16);
  ASSERT_TRUE(a.EnsureCapacity(pool, 16));  // block 0
  ASSERT_TRUE(b.EnsureCapacity(pool, 32));  // blocks 1, 2
  ASSERT_TRUE(a.EnsureCapacity(pool, 17));  // block 3
  ASSERT_TRUE(c.EnsureCapacity(pool, 1));   // block 4
  ASSERT_EQ(a.blocks(), (Blocks{0, 3}));
  ASSERT_EQ(b.blocks(), (Blocks{1, 2}));
  b.Release(pool);                          // last block first: frees 2 then 1
  ASSERT_TRUE(a.EnsureCapacity(pool, 40));  // block 1 (most recently freed)
  ASSERT_EQ(a.blocks(), (Blocks{0, 3, 1}));

  EXPECT_EQ(a.Slot(0), 0);
  EXPECT_EQ(a.Slot(15), 15);
  EXPECT_EQ(a.Slot(16), 3 * 16 + 0);
  EXPECT_EQ(a.Slot(17), 3 * 16 + 1);
  EXPECT_EQ(a.Slot(31), 3 * 16 + 15);
  EXPECT_EQ(a.Slot(32), 1 * 16 + 0);
  EXPECT_EQ(a.Slot(39), 1 * 16 + 7);
  EXPECT_EQ(a.Slot(47), 1 * 16 + 15);
  EXPECT_EQ(c.Slot(0), 4 * 16);

  // Every position of a table maps to a distinct slot inside its own block.
  std::set<int64_t> slots;
  for (int32_t pos = 0; pos < a.capacity(); ++pos) {
    const int64_t s = a.Slot(pos);
    EXPECT_EQ(s / 16, a.blocks()[pos / 16]);
    EXPECT_EQ(s % 16, pos % 16);
    slots.insert(s);
  }
  EXPECT_EQ(slots.size(), 48u);

  // Odd block size.
  BlockPool pool5(6);
  BlockTable t5(5);
  ASSERT_TRUE(t5.EnsureCapacity(pool5, 11));  // 3 blocks: 0, 1, 2
  EXPECT_EQ(t5.capacity(), 15);
  EXPECT_EQ(t5.Slot(4), 4);
  EXPECT_EQ(t5.Slot(5), 5);
  EXPECT_EQ(t5.Slot(14), 14);
  a.Release(pool);
  c.Release(pool);
  t5.Release(pool5);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(pool5.num_free(), 6);
}

TEST(BlockTableTest, FailureLeavesTableAndPoolUnchanged) {
  BlockPool pool(3);
  BlockTable table(16);
  ASSERT_TRUE(table.EnsureCapacity(pool, 10));
  const Blocks before = table.blocks();
  EXPECT_FALSE(table.EnsureCapacity(pool, 4 * 16));  // needs 3 more, 2 free
  EXPECT_EQ(table.blocks(), before);
  EXPECT_EQ(table.capacity(), 16);
  EXPECT_EQ(pool.num_free(), 2);

  BlockTable other(16);
  EXPECT_FALSE(other.EnsureCapacity(pool, 33));  // needs 3, 2 free
  EXPECT_TRUE(other.blocks().empty());
  EXPECT_EQ(pool.num_free(), 2);

  EXPECT_TRUE(table.EnsureCapacity(pool, 3 * 16));  // exactly what is free
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_FALSE(other.EnsureCapacity(pool, 1));
  EXPECT_TRUE(other.EnsureCapacity(pool, 0));
  table.Release(pool);
  EXPECT_EQ(pool.num_free(), 3);
}

kernels::KvLayout Layout(kernels::KvDtype dtype, int32_t block_size, int32_t heads, int32_t hd,
                         int32_t num_blocks = 0) {
  kernels::KvLayout l;
  l.dtype = dtype;
  l.block_size = block_size;
  l.num_kv_heads = heads;
  l.head_dim = hd;
  l.num_blocks = num_blocks;
  return l;
}

TEST(KvCacheSizingTest, BytesPerBlockByHand) {
  using kernels::KvDtype;
  // 5 layers, 4 KV heads, head_dim 8, fp32, block 16: K and V per layer.
  const auto f32 = Layout(KvDtype::kF32, 16, 4, 8);
  EXPECT_EQ(f32.TokenBytes(), 4u * 8 * 4);
  EXPECT_EQ(f32.BlockBytes(), 16u * 4 * 8 * 4);
  EXPECT_EQ(PagedKvCache::BytesPerBlock(5, f32), 2u * 5 * 16 * 4 * 8 * 4);
  EXPECT_EQ(PagedKvCache::BytesPerBlock(5, f32), 20480u);
  EXPECT_EQ(PagedKvCache::BytesPerBlock(5, Layout(KvDtype::kF16, 16, 4, 8)), 10240u);
  EXPECT_EQ(PagedKvCache::BytesPerBlock(5, Layout(KvDtype::kBF16, 16, 4, 8)), 10240u);
  // Llama-3-8B-like: 32 layers, 8 KV heads, head_dim 128, fp16, block 16 = 2 MiB.
  EXPECT_EQ(PagedKvCache::BytesPerBlock(32, Layout(KvDtype::kF16, 16, 8, 128)), 2u << 20);
  // Odd block size.
  EXPECT_EQ(PagedKvCache::BytesPerBlock(3, Layout(KvDtype::kF32, 5, 2, 6)), 2u * 3 * 5 * 2 * 6 * 4);
  EXPECT_EQ(PagedKvCache::BytesPerBlock(0, f32), 0u);
}

TEST(KvCacheSizingTest, BlocksForBudgetByHand) {
  using kernels::KvDtype;
  const auto f32 = Layout(KvDtype::kF32, 16, 4, 8);  // 20480 bytes per block at 5 layers
  EXPECT_EQ(PagedKvCache::BlocksForBudget(0, 5, f32), 0);
  EXPECT_EQ(PagedKvCache::BlocksForBudget(20479, 5, f32), 0);
  EXPECT_EQ(PagedKvCache::BlocksForBudget(20480, 5, f32), 1);
  EXPECT_EQ(PagedKvCache::BlocksForBudget(10 * 20480 + 20479, 5, f32), 10);
  EXPECT_EQ(PagedKvCache::BlocksForBudget(size_t{1} << 30, 5, f32), 52428);  // 2^30 / 20480
  EXPECT_EQ(PagedKvCache::BlocksForBudget(size_t{1} << 30, 5, Layout(KvDtype::kF16, 16, 4, 8)),
            104857);
  // A huge budget clamps to int32 max instead of wrapping.
  EXPECT_EQ(PagedKvCache::BlocksForBudget(std::numeric_limits<size_t>::max(), 1,
                                          Layout(KvDtype::kF16, 1, 1, 1)),
            std::numeric_limits<int32_t>::max());
  // Zero bytes per block: no division by zero.
  EXPECT_EQ(PagedKvCache::BlocksForBudget(1 << 20, 0, f32), 0);
}

TEST(KvCacheSizingTest, CacheAllocatesZeroedPerLayerPools) {
  auto backend = kernels::CreateCpuBackend(1);
  const auto layout = Layout(kernels::KvDtype::kF16, 5, 2, 8, 7);
  PagedKvCache cache(backend.get(), 3, layout);
  EXPECT_EQ(cache.num_layers(), 3);
  EXPECT_EQ(cache.layout().num_blocks, 7);
  EXPECT_EQ(cache.total_bytes(), 2u * 3 * 7 * 5 * 2 * 8 * 2);
  std::set<const void*> pointers;
  const size_t pool_bytes = layout.BlockBytes() * 7;
  for (int32_t l = 0; l < 3; ++l) {
    const kernels::KvLayerView view = cache.Layer(l);
    ASSERT_NE(view.k, nullptr);
    ASSERT_NE(view.v, nullptr);
    EXPECT_EQ(view.layout.num_blocks, 7);
    EXPECT_EQ(view.layout.block_size, 5);
    EXPECT_EQ(view.layout.dtype, kernels::KvDtype::kF16);
    pointers.insert(view.k);
    pointers.insert(view.v);
    std::vector<uint8_t> host(pool_bytes, 0xff);
    backend->CopyToHost(host.data(), view.k, pool_bytes);
    EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](uint8_t x) { return x == 0; }));
    // The whole pool is writable (ASan checks the bounds).
    std::vector<uint8_t> ones(pool_bytes, 1);
    backend->CopyToDevice(view.v, ones.data(), pool_bytes);
  }
  EXPECT_EQ(pointers.size(), 6u);
}

}  // namespace
}  // namespace tq
