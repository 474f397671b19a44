// Prefix caching in the scheduler and the block pool: tables of expected
// state per step worked out by hand (hits, partial hits, an entirely cached
// prompt, n choices admitted together, eviction order, preemption of a
// sequence that shares blocks). The fake runner reads every context back
// through the block table (scheduler_harness.h), so a wrong block attached
// changes the output against the uninterrupted oracle; the block accounting
// is checked after every plan and update.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/kv/block_pool.h"
#include "tests/unit/scheduler_harness.h"

namespace tq {
namespace {

using namespace testing_harness;

std::vector<int32_t> Range(int32_t first, int32_t n) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

EngineRequest WithPrompt(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_ids = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  return r;
}

SchedulerConfig Cached(SchedulerConfig c) {
  c.enable_prefix_caching = true;
  c.prefix_cache_seed = PrefixCacheSeed("fp32", "test");
  return c;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(BlockHash, ChainedOverParentTokensAndSeed) {
  const BlockHash seed = PrefixCacheSeed("tq3", "abc");
  const std::vector<int32_t> t = {1, 2, 3, 4};
  EXPECT_EQ(HashBlock(seed, t), HashBlock(seed, std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_NE(HashBlock(seed, t), HashBlock(seed, std::vector<int32_t>{1, 2, 3, 5}));
  EXPECT_NE(HashBlock(seed, t), HashBlock(HashBlock(seed, t), t));  // the parent counts
  // The extra keys: KV dtype, calibration fingerprint, later adapters.
  EXPECT_NE(seed, PrefixCacheSeed("fp16", "abc"));
  EXPECT_NE(seed, PrefixCacheSeed("tq3", "abd"));
  EXPECT_NE(seed, PrefixCacheSeed("tq3", "abc", 7));
  std::vector<BlockHash> chain;
  ExtendBlockHashes(seed, std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4, &chain);
  ASSERT_EQ(chain.size(), 2u);  // the partial third block has no hash
  EXPECT_EQ(chain[0], HashBlock(seed, t));
  EXPECT_EQ(chain[1], HashBlock(chain[0], std::vector<int32_t>{5, 6, 7, 8}));
}

TEST(BlockPoolPrefixCache, CachedBlocksStayFindableUntilEvictedLru) {
  BlockPool pool(4);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.Allocate(2, &a));  // blocks 0, 1
  ASSERT_TRUE(pool.Register(a[0], 11, std::vector<int32_t>{1, 2}));
  ASSERT_TRUE(pool.Register(a[1], 22, std::vector<int32_t>{3, 4}));
  EXPECT_FALSE(pool.Register(a[1], 33, std::vector<int32_t>{3, 4}));  // has a hash
  EXPECT_EQ(pool.Lookup(22, std::vector<int32_t>{3, 4}), a[1]);
  EXPECT_EQ(pool.Lookup(22, std::vector<int32_t>{3, 5}), -1);  // tokens are checked too
  EXPECT_EQ(pool.Lookup(44, std::vector<int32_t>{3, 4}), -1);
  pool.ReleaseAll(&a);  // last block first: block 1 is evicted first
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.num_uncached_free(), 2);
  EXPECT_EQ(pool.CachedInEvictionOrder(), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(pool.Lookup(11, std::vector<int32_t>{1, 2}), 0);
  EXPECT_EQ(pool.CheckInvariants(), "");

  // A hit revives a cached block; a fresh allocation takes free blocks first.
  pool.Retain(0);
  EXPECT_EQ(pool.num_cached(), 1);
  EXPECT_EQ(pool.ref_count(0), 1);
  ASSERT_TRUE(pool.Allocate(2, &b));
  EXPECT_EQ(b, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(pool.num_evictions(), 0);
  // Now only the cached block 1 is left: allocating evicts it.
  ASSERT_TRUE(pool.Allocate(1, &b));
  EXPECT_EQ(b.back(), 1);
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_EQ(pool.Lookup(22, std::vector<int32_t>{3, 4}), -1);
  EXPECT_FALSE(pool.Allocate(1, &b));
  EXPECT_EQ(pool.CheckInvariants(), "");
  pool.ReleaseAll(&b);
  pool.Release(0);
  EXPECT_EQ(pool.num_cached(), 1);  // block 0 still holds hash 11
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.CheckInvariants(), "");
}

TEST(BlockPoolPrefixCacheDeathTest, RetainingAFreeUnhashedBlockAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockPool pool(2);
  EXPECT_DEATH(pool.Retain(0), "not allocated");
  EXPECT_DEATH(pool.Register(0, 1, std::vector<int32_t>{1}), "not allocated");
}

TEST(PrefixCache, HitsPartialHitsAndAnEntirelyCachedPrompt) {
  SchedulerHarness h(Cached(Config(64, 8, 16)));
  const std::vector<int32_t> p = Range(100, 10);
  h.Add(WithPrompt("A", p, 2));
  h.Run({
      // 10 tokens: 3 blocks, the 2 full ones registered.
      {{"A10s"}, 1, 0, 3, {}, 0},
      // A finishes: its partial block is free, the 2 full ones cached.
      {{"A1s"}, 0, 0, 0, {}, 2},
  });
  // Same prompt: 2 blocks (8 tokens) attached, positions 8 and 9 computed.
  h.Add(WithPrompt("B", p, 2));
  h.Run({{{"B2s"}, 1, 0, 3, {}, 0}, {{"B1s"}, 0, 0, 0, {}, 2}});
  // First block only: 100..103 then other tokens.
  h.Add(WithPrompt("C", Concat(Range(100, 6), {999, 998, 997}), 1));
  h.Run({{{"C5s"}, 0, 0, 0, {}, 3}});
  // A prompt that is its cached blocks exactly (8 tokens = 2 full blocks):
  // the last block is recomputed so that the last token has logits.
  h.Add(WithPrompt("D", Range(100, 8), 1));
  h.Run({{{"D4s"}, 0, 0, 0, {}, 3}});
  EXPECT_EQ(h.outputs_["A"], ExpectFrom(p, 2));
  EXPECT_EQ(h.outputs_["B"], ExpectFrom(p, 2));
  EXPECT_EQ(h.outputs_["C"], ExpectFrom(Concat(Range(100, 6), {999, 998, 997}), 1));
  EXPECT_EQ(h.outputs_["D"], ExpectFrom(Range(100, 8), 1));
  EXPECT_EQ(h.cached_tokens_["A"], 0);
  EXPECT_EQ(h.cached_tokens_["B"], 8);
  EXPECT_EQ(h.cached_tokens_["C"], 4);
  EXPECT_EQ(h.cached_tokens_["D"], 4);
  EXPECT_EQ(h.queries_, 10 + 10 + 9 + 8);
  EXPECT_EQ(h.hits_, 0 + 8 + 4 + 4);
}

TEST(PrefixCache, OffMeansNoHits) {
  SchedulerHarness h(Config(64, 8, 16));
  h.Add(WithPrompt("A", Range(100, 10), 1));
  h.Run({{{"A10s"}, 0, 0, 0, {}, 0}});
  h.Add(WithPrompt("B", Range(100, 10), 1));
  h.Run({{{"B10s"}, 0, 0, 0, {}, 0}});
  EXPECT_EQ(h.cached_tokens_["B"], 0);
  EXPECT_EQ(h.queries_, 0);
}

TEST(PrefixCache, NChoicesAdmittedTogetherComputeThePromptOnce) {
  // Four choices of one 10-token prompt arrive together (n = 4): the first
  // computes it and registers its 2 full blocks while planned; the other
  // three attach them in the same step and recompute only the partial block.
  SchedulerHarness h(Cached(Config(64, 8, 16)));
  const std::vector<int32_t> p = Range(500, 10);
  for (const char* id : {"c0", "c1", "c2", "c3"}) h.Add(WithPrompt(id, p, 3));
  h.Run({
      {{"c010s", "c12s", "c22s", "c32s"}, 4, 0, 2 + 4, {}, 0},
      {{"c01s", "c11s", "c21s", "c31s"}, 4, 0, 6, {}, 0},
      // Third tokens: position 11 fills each choice's 3rd block (registered
      // for c0; the others hold the same tokens, so theirs stay unhashed).
      {{"c01s", "c11s", "c21s", "c31s"}, 0, 0, 0, {}, 3},
  });
  for (const char* id : {"c0", "c1", "c2", "c3"}) {
    EXPECT_EQ(h.outputs_[id], ExpectFrom(p, 3)) << id;
  }
  EXPECT_EQ(h.cached_tokens_["c0"], 0);
  EXPECT_EQ(h.cached_tokens_["c3"], 8);
  EXPECT_EQ(h.hits_, 24);
}

TEST(PrefixCache, PrefixesOfEachOtherInOneStepAndChunked) {
  // Budget 7 chunks the 12-token prompt; the 5-token prompt (a prefix of it)
  // is admitted after the first chunk registered block 0.
  SchedulerHarness h(Cached(Config(7, 8, 16)));
  const std::vector<int32_t> longp = Range(700, 12);
  h.Add(WithPrompt("L", longp, 1));
  h.Add(WithPrompt("S", Range(700, 5), 1));
  h.Run({
      {{"L7"}, 1, 1, 2, {}, 0},
      // L's second chunk (positions 7..11) registers blocks 1, 2; S attaches
      // block 0 and computes position 4 in the budget left.
      {{"L5s", "S1s"}, 0, 0, 0, {}, 3},
  });
  EXPECT_EQ(h.outputs_["L"], ExpectFrom(longp, 1));
  EXPECT_EQ(h.outputs_["S"], ExpectFrom(Range(700, 5), 1));
  EXPECT_EQ(h.cached_tokens_["S"], 4);
}

TEST(PrefixCache, EvictionIsLeastRecentlyReleasedTailFirst) {
  // 6 blocks of 4. Each 9-token prompt (max_tokens 1) uses 3 blocks and
  // leaves its 2 full ones cached, released last block first.
  SchedulerHarness h(Cached(Config(64, 8, 6)));
  const BlockPool& pool = h.sched_.block_pool();
  h.Add(WithPrompt("A", Range(200, 9), 1));  // blocks 0, 1, 2
  h.Run({{{"A9s"}, 0, 0, 0, {}, 2}});
  EXPECT_EQ(pool.CachedInEvictionOrder(), (std::vector<int32_t>{1, 0}));
  h.Add(WithPrompt("B", Range(300, 9), 1));  // blocks 2, 3, 4
  h.Run({{{"B9s"}, 0, 0, 0, {}, 4}});
  EXPECT_EQ(pool.CachedInEvictionOrder(), (std::vector<int32_t>{1, 0, 3, 2}));
  // 13 tokens need 4 blocks: the free 4 and 5, then A's 1 and A's 0 evicted.
  h.Add(WithPrompt("C", Range(400, 13), 1));  // blocks 4, 5, 1, 0
  h.Run({{{"C13s"}, 0, 0, 0, {}, 5}});
  EXPECT_EQ(pool.num_evictions(), 2);
  EXPECT_EQ(pool.CachedInEvictionOrder(), (std::vector<int32_t>{3, 2, 1, 5, 4}));
  // B's blocks survived: its prompt again attaches both (1 token computed,
  // in the free block 0).
  h.Add(WithPrompt("B2", Range(300, 9), 1));
  h.Run({{{"B21s"}, 0, 0, 0, {}, 5}});
  EXPECT_EQ(pool.CachedInEvictionOrder(), (std::vector<int32_t>{1, 5, 4, 3, 2}));
  // A's were evicted: computed in full (block 0 free, then 1 and 5 evicted).
  h.Add(WithPrompt("A2", Range(200, 9), 1));
  h.Run({{{"A29s"}, 0, 0, 0, {}, 5}});
  EXPECT_EQ(pool.num_evictions(), 4);
  EXPECT_EQ(pool.CachedInEvictionOrder(), (std::vector<int32_t>{4, 3, 2, 1, 0}));
  EXPECT_EQ(h.cached_tokens_["B2"], 8);
  EXPECT_EQ(h.cached_tokens_["A2"], 0);
  for (const char* id : {"A", "A2"}) EXPECT_EQ(h.outputs_[id], ExpectFrom(Range(200, 9), 1));
  for (const char* id : {"B", "B2"}) EXPECT_EQ(h.outputs_[id], ExpectFrom(Range(300, 9), 1));
}

TEST(PrefixCache, PreemptingASequenceThatSharesBlocks) {
  // 5 blocks of 4. A and B share their first block (prompt S + 2 own tokens).
  SchedulerHarness h(Cached(Config(64, 8, 5)));
  const std::vector<int32_t> a = Concat(Range(600, 4), {1, 3});
  const std::vector<int32_t> b = Concat(Range(600, 4), {5, 7});
  h.Add(WithPrompt("A", a, 8));
  h.Add(WithPrompt("B", b, 8));
  h.Run({
      // A: 2 blocks, block 0 registered; B attaches block 0 + 1 new block.
      {{"A6s", "B2s"}, 2, 0, 3, {}, 0},
      {{"A1s", "B1s"}, 2, 0, 3, {}, 0},
      // Position 7: each one's second block is full (registered).
      {{"A1s", "B1s"}, 2, 0, 3, {}, 0},
      // Position 8: a third block each (5 used).
      {{"A1s", "B1s"}, 2, 0, 5, {}, 0},
      {{"A1s", "B1s"}, 2, 0, 5, {}, 0},
      {{"A1s", "B1s"}, 2, 0, 5, {}, 0},
      // Position 11 fills the third blocks (registered).
      {{"A1s", "B1s"}, 2, 0, 5, {}, 0},
      // A finishes (8 outputs) at position 12: it needs a 4th block, none is
      // free, so B (newest) is preempted: B's shared block 0 stays (A holds
      // it), its blocks 2 and 1 become cached; A's 4th block evicts B's
      // tail (released first).
      {{"A1s"}, 0, 1, 0, {"B"}, 4},
      // B again: its 6 + 7 tokens; blocks 0 (A's, cached now) and B's
      // second block hit, the third was evicted: positions 8..12 computed,
      // and B's 8th token ends it.
      {{"B5s"}, 0, 0, 0, {}, 4},
  });
  EXPECT_EQ(h.outputs_["A"], ExpectFrom(a, 8));
  EXPECT_EQ(h.outputs_["B"], ExpectFrom(b, 8));
  EXPECT_EQ(h.cached_tokens_["B"], 4);  // usage: the first admission's hit
}

}  // namespace
}  // namespace tq
