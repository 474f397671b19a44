// Prefix caching on the bundled model: the engine's outputs with caching on
// equal its outputs with caching off, token for token, greedy and seeded
// sampling (the reference is the same engine with the cache off, whose
// batched outputs test_engine_core.cc checks against one-at-a-time
// generation): a shared 300-token system prompt with 32 questions, a
// multi-turn chat replayed turn by turn, n = 4 choices, prompts that are
// prefixes of each other, an entirely cached prompt, and a pool so small
// that cached blocks are evicted and sequences preempted; with every KV
// dtype, chunked prefill and two tensor-parallel ranks. The block accounting
// is checked after every step. Also: tq3 codes are a deterministic function
// of the tokens and positions (the same bytes however the prefill is split).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/engine_core.h"
#include "engine/runtime/model_loader.h"

namespace tq {
namespace {

EngineOptions Options(kernels::KvDtype dtype = kernels::KvDtype::kF32, int tp = 1) {
  EngineOptions o;
  o.model_dir = TQ_MODEL_DIR;
  o.num_threads = tp;
  o.kv_cache_dtype = dtype;
  o.tensor_parallel_size = tp;
  o.kv_cache_memory = size_t{48} << 20;  // ~2,400 fp32 blocks of 16: no pressure unless asked
  return o;
}

// Token ids of the test text (TinyStories sample), BOS first.
const std::vector<int32_t>& TextTokens(const Tokenizer& tok) {
  static const std::vector<int32_t> ids = [&tok] {
    std::ifstream in(std::string(TQ_TEST_DATA_DIR) + "/tinystories_valid_sample.txt");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<int32_t> v = {1};
    const std::vector<int32_t> body = tok.Encode(text.substr(0, 20000));
    v.insert(v.end(), body.begin(), body.end());
    return v;
  }();
  return ids;
}

std::vector<int32_t> Slice(const std::vector<int32_t>& v, size_t from, size_t n) {
  return {v.begin() + static_cast<ptrdiff_t>(from), v.begin() + static_cast<ptrdiff_t>(from + n)};
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

EngineRequest Req(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens,
                  double temperature, uint64_t seed) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_ids = std::move(prompt);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;  // fixed lengths: more positions compared
  return r;
}

class Counter : public EngineObserver {
 public:
  void OnPreemption() override { ++preemptions; }
  void OnPrefixCache(int32_t q, int32_t h) override {
    queries += q;
    hits += h;
  }
  int preemptions = 0;
  int64_t queries = 0, hits = 0;
};

// One EngineCore over a loaded model; waves of requests run to completion
// one after another in it (the cache persists between waves).
class CachingEngine {
 public:
  CachingEngine(LoadedModel& m, bool caching, int32_t num_blocks = 0, int32_t budget = 512) {
    SchedulerConfig c;
    c.max_num_seqs = 64;
    c.max_num_batched_tokens = budget;
    c.max_model_len = m.max_model_len;
    c.block_size = m.executor->cache().layout().block_size;
    c.num_blocks = num_blocks > 0 ? num_blocks : m.executor->cache().layout().num_blocks;
    c.eos_token_ids = m.files.config.eos_token_ids;
    c.enable_prefix_caching = caching;
    c.prefix_cache_seed =
        PrefixCacheSeed(kernels::KvDtypeName(m.executor->cache().layout().dtype), "test");
    core_ = std::make_unique<EngineCore>(c, std::make_unique<LlamaModelRunner>(m.executor.get()),
                                         &counter_);
  }

  std::map<std::string, EngineOutput> Run(const std::vector<EngineRequest>& requests) {
    std::map<std::string, std::shared_ptr<RequestStream>> streams;
    for (const EngineRequest& r : requests) {
      streams[r.request_id] = std::make_shared<RequestStream>();
      core_->AddRequest(r, streams[r.request_id], EngineCore::Clock::now());
    }
    for (int steps = 0; core_->has_work() && steps < 100000; ++steps) {
      core_->Step();
      const std::string err = core_->scheduler().CheckBlockAccounting();
      EXPECT_EQ(err, "") << "after step " << steps;
      if (!err.empty()) break;
    }
    EXPECT_EQ(core_->Stats().kv_blocks_used, 0) << "KV blocks leaked";
    std::map<std::string, EngineOutput> outputs;
    for (auto& [id, stream] : streams) {
      EngineOutput all;
      while (auto out = stream->Next(std::chrono::milliseconds(0))) all.Merge(std::move(*out));
      EXPECT_TRUE(all.finished()) << id;
      outputs[id] = std::move(all);
    }
    return outputs;
  }
  const Counter& counter() const { return counter_; }
  const BlockPool& pool() const { return core_->scheduler().block_pool(); }

 private:
  Counter counter_;
  std::unique_ptr<EngineCore> core_;
};

void ExpectSameTokens(const std::map<std::string, EngineOutput>& off,
                      const std::map<std::string, EngineOutput>& on) {
  ASSERT_EQ(off.size(), on.size());
  for (const auto& [id, want] : off) {
    const EngineOutput& got = on.at(id);
    EXPECT_EQ(got.token_ids, want.token_ids) << id;
    EXPECT_EQ(got.finish, want.finish) << id;
    EXPECT_EQ(want.num_cached_tokens, 0) << id;
  }
}

// Runs `waves` one after another in one engine; all engines of a test share
// the model's KV memory, so each runs all its waves before the next starts.
std::map<std::string, EngineOutput> RunWaves(CachingEngine& e,
                                             const std::vector<std::vector<EngineRequest>>& waves) {
  std::map<std::string, EngineOutput> all;
  for (const auto& wave : waves) all.merge(e.Run(wave));
  return all;
}

// The first request alone, then the rest together.
std::vector<std::vector<EngineRequest>> FirstThenRest(const std::vector<EngineRequest>& rs) {
  return {{rs.front()}, {rs.begin() + 1, rs.end()}};
}

// The shared-system-prompt workload: a 300-token prefix, `n` questions of
// 5..12 tokens each.
std::vector<EngineRequest> SystemPromptRequests(const Tokenizer& tok, int n, int32_t max_tokens,
                                                double temperature) {
  const std::vector<int32_t>& text = TextTokens(tok);
  const std::vector<int32_t> system = Slice(text, 0, 300);
  std::vector<EngineRequest> rs;
  for (int i = 0; i < n; ++i) {
    const std::vector<int32_t> q = Slice(text, 400 + 37 * i, 5 + i % 8);
    rs.push_back(Req("q" + std::to_string(i), Concat(system, q), max_tokens, temperature, 77 + i));
  }
  return rs;
}

class PrefixCacheModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = std::make_unique<LoadedModel>(LoadModel(Options())); }
  static void TearDownTestSuite() { model_.reset(); }
  static std::unique_ptr<LoadedModel> model_;
};
std::unique_ptr<LoadedModel> PrefixCacheModel::model_;

TEST_F(PrefixCacheModel, SharedSystemPromptWith32Questions) {
  for (double temperature : {0.0, 1.0}) {
    SCOPED_TRACE(temperature);
    // The first question alone fills the cache; the other 31 arrive together.
    const auto waves = FirstThenRest(SystemPromptRequests(*model_->tokenizer, 32, 4, temperature));
    CachingEngine off(*model_, false), on(*model_, true);
    const auto want = RunWaves(off, waves);
    auto got = RunWaves(on, waves);
    ExpectSameTokens(want, got);
    // 300 tokens = 18 full blocks of 16 (288 tokens) for each later question.
    for (int i = 1; i < 32; ++i) EXPECT_EQ(got["q" + std::to_string(i)].num_cached_tokens, 288);
    EXPECT_EQ(got["q0"].num_cached_tokens, 0);
    EXPECT_EQ(on.counter().hits, 31 * 288);
    EXPECT_EQ(off.counter().queries, 0);
  }
}

TEST_F(PrefixCacheModel, MultiTurnChatReplayedTurnByTurn) {
  // Turn k's prompt: turn k-1's prompt + its answer + the next user message.
  const std::vector<int32_t>& text = TextTokens(*model_->tokenizer);
  for (double temperature : {0.0, 1.0}) {
    SCOPED_TRACE(temperature);
    // Turn by turn in one engine; the reference engine's turns first.
    auto chat = [&](CachingEngine& e) {
      std::vector<int32_t> history = Slice(text, 0, 40);
      std::map<std::string, EngineOutput> outputs;
      for (int turn = 0; turn < 5; ++turn) {
        const std::string id = "turn" + std::to_string(turn);
        auto out = e.Run({Req(id, history, 12, temperature, 5 + turn)});
        history =
            Concat(Concat(history, out[id].token_ids), Slice(text, 600 + 20 * turn, 9 + turn));
        outputs.merge(out);
      }
      return outputs;
    };
    CachingEngine off(*model_, false);
    const auto want = chat(off);
    CachingEngine on(*model_, true);
    auto got = chat(on);
    ExpectSameTokens(want, got);
    for (int turn = 1; turn < 5; ++turn) {
      // At least the previous turn's prompt blocks are found again.
      EXPECT_GE(got["turn" + std::to_string(turn)].num_cached_tokens, 32) << turn;
    }
  }
}

TEST_F(PrefixCacheModel, FourChoicesOfOnePromptComputeItOnce) {
  // n = 4 as the front end submits it: 4 requests, seeds seed + i.
  const std::vector<int32_t> prompt = Slice(TextTokens(*model_->tokenizer), 0, 70);
  for (double temperature : {0.0, 1.0}) {
    SCOPED_TRACE(temperature);
    std::vector<EngineRequest> rs;
    for (int i = 0; i < 4; ++i) {
      rs.push_back(Req("c" + std::to_string(i), prompt, 10, temperature, 1234 + i));
    }
    CachingEngine off(*model_, false), on(*model_, true);
    const auto want = off.Run(rs);
    auto got = on.Run(rs);
    ExpectSameTokens(want, got);
    // 70 tokens: 4 full blocks; choices 1..3 attach them in the same step.
    for (int i = 1; i < 4; ++i) EXPECT_EQ(got["c" + std::to_string(i)].num_cached_tokens, 64);
  }
}

TEST_F(PrefixCacheModel, PrefixesOfEachOtherAndAnEntirelyCachedPrompt) {
  const std::vector<int32_t>& text = TextTokens(*model_->tokenizer);
  std::vector<EngineRequest> rs;
  for (int len : {96, 20, 64, 33, 96, 48}) {  // 96 twice: entirely cached the second time
    rs.push_back(Req("p" + std::to_string(rs.size()), Slice(text, 0, len), 8, 0.0, 0));
  }
  std::vector<std::vector<EngineRequest>> waves;  // one after another: each finds the earlier
  for (const EngineRequest& r : rs) waves.push_back({r});
  CachingEngine off(*model_, false), on(*model_, true);
  const auto want = RunWaves(off, waves);
  auto got = RunWaves(on, waves);
  ExpectSameTokens(want, got);
  // The 96-token prompt again: 5 of its 6 blocks (the last one is recomputed
  // so that its last token has logits).
  EXPECT_EQ(got["p4"].num_cached_tokens, 80);
  EXPECT_EQ(got["p1"].num_cached_tokens, 16);
  EXPECT_EQ(got["p2"].num_cached_tokens, 48);
}

TEST_F(PrefixCacheModel, TinyPoolEvictsCachedBlocksAndPreempts) {
  // 30 blocks of 16 for 6 sequences of ~310 + 30 tokens that share 18 blocks
  // and 3 that share 18 others.
  for (double temperature : {0.0, 1.0}) {
    SCOPED_TRACE(temperature);
    auto rs = SystemPromptRequests(*model_->tokenizer, 6, 30, temperature);
    // Two different system prompts, so cached blocks compete for the pool.
    const std::vector<int32_t>& text = TextTokens(*model_->tokenizer);
    for (int i = 0; i < 3; ++i) {
      rs.push_back(Req("o" + std::to_string(i), Concat(Slice(text, 1000, 300), Slice(text, 30, 5)),
                       30, temperature, 9 + i));
    }
    CachingEngine big(*model_, false), off(*model_, false, 30), on(*model_, true, 30);
    const auto want = big.Run(rs);
    ExpectSameTokens(want, off.Run(rs));
    ExpectSameTokens(want, on.Run(rs));
    EXPECT_GT(on.counter().preemptions, 0);
    EXPECT_GT(on.pool().num_evictions(), 0);
    EXPECT_GT(on.counter().hits, 0);
  }
}

TEST_F(PrefixCacheModel, ChunkedPrefillWithASmallBudget) {
  const auto waves = FirstThenRest(SystemPromptRequests(*model_->tokenizer, 6, 6, 0.0));
  CachingEngine off(*model_, false, 0, 50), on(*model_, true, 0, 50);
  const auto want = RunWaves(off, waves);
  auto got = RunWaves(on, waves);
  ExpectSameTokens(want, got);
  EXPECT_EQ(got["q5"].num_cached_tokens, 288);
}

// Every KV dtype (tq3 included) and two tensor-parallel ranks sharing one
// block table: the system-prompt workload, caching on == off.
TEST(PrefixCacheModelDtypes, EveryKvDtypeAndTwoRanks) {
  struct Case {
    kernels::KvDtype dtype;
    int tp;
  };
  for (const Case& c : {Case{kernels::KvDtype::kF16, 1}, Case{kernels::KvDtype::kBF16, 1},
                        Case{kernels::KvDtype::kInt8, 1}, Case{kernels::KvDtype::kInt4, 1},
                        Case{kernels::KvDtype::kTq3, 1}, Case{kernels::KvDtype::kTq4, 1},
                        Case{kernels::KvDtype::kTq3, 2}, Case{kernels::KvDtype::kF32, 2}}) {
    SCOPED_TRACE(std::string(kernels::KvDtypeName(c.dtype)) + " tp " + std::to_string(c.tp));
    LoadedModel m = LoadModel(Options(c.dtype, c.tp));
    const auto waves = FirstThenRest(SystemPromptRequests(*m.tokenizer, 5, 6, 1.0));
    CachingEngine off(m, false), on(m, true);
    const auto want = RunWaves(off, waves);
    auto got = RunWaves(on, waves);
    ExpectSameTokens(want, got);
    EXPECT_EQ(on.counter().hits, 4 * 288);
  }
}

// The bytes of block `b` in every layer's K and V pool (every rank).
std::vector<uint8_t> BlockBytes(ModelExecutor& executor, int32_t b) {
  std::vector<uint8_t> out;
  for (int r = 0; r < executor.world_size(); ++r) {
    PagedKvCache& rank = *executor.worker(r).cache;
    const kernels::KvLayout& l = rank.layout();
    for (int32_t layer = 0; layer < rank.num_layers(); ++layer) {
      const kernels::KvLayerView v = rank.Layer(layer);
      const auto* k = static_cast<const uint8_t*>(v.k) + static_cast<size_t>(b) * l.BlockBytes();
      const auto* vv = static_cast<const uint8_t*>(v.v) + static_cast<size_t>(b) * l.VBlockBytes();
      out.insert(out.end(), k, k + l.BlockBytes());
      out.insert(out.end(), vv, vv + l.VBlockBytes());
    }
  }
  return out;
}

TEST(PrefixCacheModelDtypes, Tq3CodesAreDeterministicForTheSameTokensAndPositions) {
  // The same 100 tokens prefilled in one pass and in chunks of 7 into other
  // blocks: every full block's codes and norms are the same bytes.
  LoadedModel m = LoadModel(Options(kernels::KvDtype::kTq3));
  const std::vector<int32_t> tokens = Slice(TextTokens(*m.tokenizer), 0, 100);
  BlockPool pool(m.executor->cache().layout().num_blocks);
  BlockTable one(16), chunked(16);
  ASSERT_TRUE(one.EnsureCapacity(pool, 100));
  ASSERT_TRUE(chunked.EnsureCapacity(pool, 100));
  std::vector<float> logits;
  PrefillSequence(*m.executor, one, tokens, 0, 512, false, &logits);
  PrefillSequence(*m.executor, chunked, tokens, 0, 7, false, &logits);
  for (int32_t i = 0; i < 100 / 16; ++i) {
    ASSERT_NE(one.blocks()[i], chunked.blocks()[i]);
    EXPECT_EQ(BlockBytes(*m.executor, one.blocks()[i]),
              BlockBytes(*m.executor, chunked.blocks()[i]))
        << "block " << i;
  }
  // And a different token changes the codes (the comparison can fail).
  BlockTable other(16);
  ASSERT_TRUE(other.EnsureCapacity(pool, 100));
  std::vector<int32_t> changed = tokens;
  changed[3] = changed[3] == 5 ? 6 : 5;
  PrefillSequence(*m.executor, other, changed, 0, 512, false, &logits);
  EXPECT_NE(BlockBytes(*m.executor, one.blocks()[0]), BlockBytes(*m.executor, other.blocks()[0]));
  one.Release(pool);
  chunked.Release(pool);
  other.Release(pool);
}

}  // namespace
}  // namespace tq
