// Decode graphs (engine/model/decode_graphs.h), host logic: bucket sizes,
// padding of a decode batch, and on the CPU backend (whose graphs run the
// padded bucket steps eagerly) the same greedy tokens and the same KV pool
// bytes as without graphs. The CUDA replay itself is tests/cuda/test_cuda_graphs.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/decode_graphs.h"
#include "engine/model/llama_model.h"
#include "engine/model/llama_weights.h"
#include "engine/runtime/model_loader.h"
#include "kernels/backend.h"
#include "tests/unit/decode_graph_driver.h"
#include "tests/unit/forwarding_backend.h"

namespace tq {
namespace {

TEST(DecodeGraphBucketsTest, VllmCaptureSizes) {
  EXPECT_EQ(DecodeGraphBuckets(32), (std::vector<int32_t>{1, 2, 4, 8, 16, 24, 32}));
  EXPECT_EQ(DecodeGraphBuckets(30), (std::vector<int32_t>{1, 2, 4, 8, 16, 24, 30}));
  EXPECT_EQ(DecodeGraphBuckets(3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(DecodeGraphBuckets(1), (std::vector<int32_t>{1}));
  EXPECT_TRUE(DecodeGraphBuckets(0).empty());
  EXPECT_EQ(DecodeGraphBuckets(256).size(), 3u + 32u);
}

TEST(DecodeGraphBucketsTest, PicksSmallestBucketThatFits) {
  const std::vector<int32_t> b = DecodeGraphBuckets(32);
  const std::map<int32_t, int32_t> want = {{1, 1},   {2, 2},   {3, 4},   {4, 4},   {5, 8},
                                           {9, 16},  {17, 24}, {24, 24}, {25, 32}, {32, 32},
                                           {33, -1}, {0, -1},  {-1, -1}};
  for (const auto& [n, bucket] : want) EXPECT_EQ(PickDecodeBucket(b, n), bucket) << n;
}

// Two decode sequences (one token each) with block tables 2 wide.
ForwardBatch TwoDecodeSequences() {
  ForwardBatch b;
  b.token_ids = {11, 12};
  b.positions = {17, 3};
  b.token_seq = {0, 1};
  b.slot_mapping = {5 * 16 + 1, 2 * 16 + 3};
  b.num_seqs = 2;
  b.max_blocks_per_seq = 2;
  b.block_tables = {7, 5, 2, -1};
  b.logit_indices = {0, 1};
  return b;
}

TEST(DecodeGraphBatchTest, OnlyDecodeBatchesInOrderQualify) {
  EXPECT_TRUE(IsGraphDecodeBatch(TwoDecodeSequences(), 2));
  EXPECT_FALSE(IsGraphDecodeBatch(TwoDecodeSequences(), 1));  // tables too wide
  ForwardBatch prefill = TwoDecodeSequences();                // a second token of sequence 1
  prefill.token_ids.push_back(13);
  prefill.positions.push_back(4);
  prefill.token_seq.push_back(1);
  prefill.slot_mapping.push_back(2 * 16 + 4);
  prefill.logit_indices = {0, 2};
  EXPECT_FALSE(IsGraphDecodeBatch(prefill, 2));
  ForwardBatch one_logit = TwoDecodeSequences();
  one_logit.logit_indices = {1};
  EXPECT_FALSE(IsGraphDecodeBatch(one_logit, 2));
  ForwardBatch swapped = TwoDecodeSequences();
  swapped.token_seq = {1, 0};
  EXPECT_FALSE(IsGraphDecodeBatch(swapped, 2));
  EXPECT_FALSE(IsGraphDecodeBatch(ForwardBatch{}, 2));
}

TEST(DecodeGraphBatchTest, PadsToBucketWithHarmlessRows) {
  const DecodeGraphLayout layout{4, 3};
  std::vector<int32_t> packed;
  PadDecodeBatch(TwoDecodeSequences(), layout, &packed);
  const std::vector<int32_t> want = {11, 12, 0,  0,   // ids: padding reads token 0
                                     17, 3,  -1, -1,  // positions: -1 = attend to nothing
                                     0,  1,  2,  3,   // token_seq: each row its own table row
                                     81, 35, -1, -1,  // slots: -1 = KvWrite skips
                                     7,  5,  -1, 2,  -1, -1,   // block tables, 3 wide
                                     -1, -1, -1, -1, -1, -1};  // padding rows: no blocks
  EXPECT_EQ(packed, want);
  EXPECT_EQ(layout.size(), want.size());
  EXPECT_THROW(PadDecodeBatch(TwoDecodeSequences(), {1, 3}, &packed), std::invalid_argument);
  EXPECT_THROW(PadDecodeBatch(TwoDecodeSequences(), {4, 1}, &packed), std::invalid_argument);
}

// The bundled model on the CPU backend, with its own KV cache.
struct CpuModel {
  std::unique_ptr<kernels::Backend> backend = kernels::CreateCpuBackend(2);
  ModelFiles files = LoadModelFiles(TQ_MODEL_DIR);
  LlamaModel model{files.config, LoadLlamaWeights(TQ_MODEL_DIR, files.config, backend.get()),
                   backend.get()};
  std::unique_ptr<PagedKvCache> cache;

  CpuModel() {
    kernels::KvLayout layout;
    layout.dtype = kernels::KvDtype::kF32;
    layout.block_size = 16;
    layout.num_kv_heads = files.config.num_key_value_heads;
    layout.head_dim = files.config.head_dim;
    layout.num_blocks = 40;  // the 5 sequences use 5; the rest must stay zero
    cache = std::make_unique<PagedKvCache>(backend.get(), files.config.num_hidden_layers, layout,
                                           nullptr);
  }
};

TEST(DecodeGraphRunnerTest, PaddedBucketsMatchEagerTokensAndKvBytes) {
  // Decode step k runs the sequences with new_tokens > k: 5 sequences for 3
  // steps (bucket 8), 4 for 4 and 3 for 4 (bucket 4), 2 for 4 (bucket 2) and
  // 1 for 8 (bucket 1).
  const std::vector<int32_t> new_tokens = {24, 16, 12, 8, 4};
  CpuModel eager;
  const auto want =
      testing::GreedyTogether(eager.model, *eager.cache, testing::DecodeGraphPrompts(), new_tokens);
  CpuModel graphs;
  graphs.model.EnableDecodeGraphs(32, 512 / 16, /*eager_fallback=*/true);
  std::vector<int32_t> used;
  const auto got = testing::GreedyTogether(graphs.model, *graphs.cache,
                                           testing::DecodeGraphPrompts(), new_tokens, &used);
  EXPECT_EQ(got, want);
  ASSERT_NE(graphs.model.decode_graphs(), nullptr);
  const std::map<int32_t, int64_t> steps = {{8, 3}, {4, 8}, {2, 4}, {1, 8}};
  EXPECT_EQ(graphs.model.decode_graphs()->steps_per_bucket(), steps);
  EXPECT_EQ(graphs.model.decode_graphs()->num_prepares(), 1);

  // Padding rows (slot -1) wrote nothing: the pools equal the eager run's,
  // and every block no sequence owned is still zero.
  const auto pools = testing::PoolBytes(*graphs.backend, *graphs.cache);
  EXPECT_TRUE(pools == testing::PoolBytes(*eager.backend, *eager.cache));
  const kernels::KvLayout& l = graphs.cache->layout();
  for (size_t i = 0; i < pools.size(); ++i) {
    const size_t block_bytes = i % 2 == 0 ? l.BlockBytes() : l.VBlockBytes();
    for (int32_t block = 0; block < l.num_blocks; ++block) {
      if (std::find(used.begin(), used.end(), block) != used.end()) continue;
      const auto begin = pools[i].begin() + static_cast<ptrdiff_t>(block * block_bytes);
      ASSERT_TRUE(std::all_of(begin, begin + static_cast<ptrdiff_t>(block_bytes),
                              [](uint8_t x) { return x == 0; }))
          << "pool " << i << " block " << block;
    }
  }
}

// The CPU backend behind a graph API that fails the way a GPU can: every
// graph of the first capture reports itself stale on Launch, and every later
// capture throws. All other ops are the CPU backend's.
class StaleThenFailingGraphs : public ForwardingBackend {
 public:
  StaleThenFailingGraphs() : ForwardingBackend(2) {}
  std::string_view Name() const override { return "stale-graphs"; }
  kernels::BackendCapabilities Capabilities() const override {
    kernels::BackendCapabilities caps;
    caps.graphs = true;
    return caps;
  }
  std::unique_ptr<kernels::BackendGraph> CaptureGraph(const std::function<void()>&) override {
    struct Stale : kernels::BackendGraph {
      explicit Stale(StaleThenFailingGraphs* b) : backend(b) {}
      bool Launch() override {
        backend->stale_seen = true;
        return false;
      }
      StaleThenFailingGraphs* backend;
    };
    if (stale_seen) throw std::runtime_error("capture failed");
    return std::make_unique<Stale>(this);
  }
  bool stale_seen = false;
};

// A stale graph whose re-capture fails turns graphs off and runs that step
// eagerly (it used to throw std::out_of_range out of the decode step).
TEST(DecodeGraphRunnerTest, FailedRecaptureRunsTheStepEagerly) {
  const std::vector<int32_t> new_tokens = {6, 6, 4, 3, 3};
  CpuModel eager;
  const auto want =
      testing::GreedyTogether(eager.model, *eager.cache, testing::DecodeGraphPrompts(), new_tokens);

  StaleThenFailingGraphs backend;
  const ModelFiles files = LoadModelFiles(TQ_MODEL_DIR);
  LlamaModel model(files.config, LoadLlamaWeights(TQ_MODEL_DIR, files.config, &backend), &backend);
  kernels::KvLayout layout = eager.cache->layout();
  PagedKvCache cache(&backend, files.config.num_hidden_layers, layout, nullptr);
  model.EnableDecodeGraphs(8, 512 / 16);
  EXPECT_EQ(testing::GreedyTogether(model, cache, testing::DecodeGraphPrompts(), new_tokens), want);
  EXPECT_TRUE(backend.stale_seen);
  EXPECT_NE(model.decode_graphs()->disabled_reason().find("capture failed"), std::string::npos);
}

TEST(DecodeGraphRunnerTest, CpuWithoutFallbackRunsEagerly) {
  CpuModel m;
  m.model.EnableDecodeGraphs(8, 32);
  testing::GreedyTogether(m.model, *m.cache, testing::DecodeGraphPrompts(), {3, 3, 3, 3, 3});
  EXPECT_TRUE(m.model.decode_graphs()->steps_per_bucket().empty());
  EXPECT_THROW(m.model.EnableDecodeGraphs(8, 0), std::invalid_argument);
}

}  // namespace
}  // namespace tq
