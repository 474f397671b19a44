// CUDA graphs for decode steps (engine/model/decode_graphs.h) on the bundled
// model: greedy tokens with graphs equal those without and those of the CPU;
// several sequences decode together so that the batch shrinks through
// buckets 8, 4, 2 and 1 with padding rows; padding writes no KV byte.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/model/decode_graphs.h"
#include "engine/model/llama_model.h"
#include "engine/model/llama_weights.h"
#include "engine/runtime/model_loader.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/decode_graph_driver.h"

namespace tq::cudatest {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kNumBlocks = 80;  // the sequences use far fewer: the rest must stay zero

struct GenerationRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<uint8_t>> pools;
  std::vector<int32_t> used_blocks;
  std::map<int32_t, int64_t> steps;
  int32_t prepares = 0;
  std::string disabled;  // why graphs turned themselves off, if they did
};

GenerationRun Generate(kernels::Backend* backend, bool graphs,
                       const std::vector<int32_t>& new_tokens) {
  const ModelFiles files = LoadModelFiles(TQ_MODEL_DIR);
  const ModelConfig& c = files.config;
  LlamaModel model(c, LoadLlamaWeights(TQ_MODEL_DIR, c, backend), backend);
  kernels::KvLayout layout;
  layout.dtype = kernels::KvDtype::kF32;
  layout.block_size = kBlockSize;
  layout.num_kv_heads = c.num_key_value_heads;
  layout.head_dim = c.head_dim;
  layout.num_blocks = kNumBlocks;
  PagedKvCache cache(backend, c.num_hidden_layers, layout, nullptr);
  if (graphs) model.EnableDecodeGraphs(32, (c.MaxContext() + kBlockSize - 1) / kBlockSize);
  std::vector<std::vector<int32_t>> prompts = testing::DecodeGraphPrompts();
  prompts.resize(new_tokens.size());
  GenerationRun r;
  r.tokens = testing::GreedyTogether(model, cache, prompts, new_tokens, &r.used_blocks);
  r.pools = testing::PoolBytes(*backend, cache);
  if (model.decode_graphs()) {
    r.steps = model.decode_graphs()->steps_per_bucket();
    r.prepares = model.decode_graphs()->num_prepares();
    r.disabled = model.decode_graphs()->disabled_reason();
  }
  return r;
}

class CudaGraphs : public CudaVsCpu {};

TEST_F(CudaGraphs, OneSequenceGreedy64MatchesEagerAndCpu) {
  const GenerationRun cpu = Generate(cpu_.get(), false, {64});
  const GenerationRun eager = Generate(cuda_.get(), false, {64});
  const GenerationRun graphs = Generate(cuda_.get(), true, {64});
  ASSERT_EQ(graphs.disabled, "");
  EXPECT_EQ(eager.tokens, cpu.tokens);
  EXPECT_EQ(graphs.tokens, cpu.tokens);
  EXPECT_EQ(graphs.steps, (std::map<int32_t, int64_t>{{1, 63}}));
  EXPECT_EQ(graphs.prepares, 1);
}

TEST_F(CudaGraphs, ConcurrentSequencesThroughPaddedBucketsMatchEagerAndCpu) {
  // Decode step k runs the sequences with new_tokens > k: 5 for 7 steps
  // (bucket 8, 3 padding rows), 4 for 12 and 3 for 20 (bucket 4), 2 for 16
  // (bucket 2), 1 for 8 (bucket 1).
  const std::vector<int32_t> new_tokens = {64, 56, 40, 20, 8};
  const GenerationRun cpu = Generate(cpu_.get(), false, new_tokens);
  const GenerationRun eager = Generate(cuda_.get(), false, new_tokens);
  const GenerationRun graphs = Generate(cuda_.get(), true, new_tokens);
  ASSERT_EQ(graphs.disabled, "");
  EXPECT_EQ(eager.tokens, cpu.tokens);
  EXPECT_EQ(graphs.tokens, cpu.tokens);
  EXPECT_EQ(graphs.steps, (std::map<int32_t, int64_t>{{8, 7}, {4, 32}, {2, 16}, {1, 8}}));
  EXPECT_EQ(graphs.prepares, 1);

  // fp32 KV: the graph run's pools hold the eager run's values (GEMMs of
  // other row counts may round differently, so up to 1e-4 relative), and the
  // blocks no sequence owned are still zero: padding rows wrote nothing.
  ASSERT_EQ(graphs.pools.size(), eager.pools.size());
  for (size_t i = 0; i < graphs.pools.size(); ++i) {
    const std::vector<uint8_t>& g = graphs.pools[i];
    const std::vector<uint8_t>& e = eager.pools[i];
    ASSERT_EQ(g.size(), e.size());
    const size_t block_bytes = g.size() / kNumBlocks;
    for (int32_t block = 0; block < kNumBlocks; ++block) {
      const bool used = std::find(graphs.used_blocks.begin(), graphs.used_blocks.end(), block) !=
                        graphs.used_blocks.end();
      for (size_t at = block * block_bytes; at < (block + 1) * block_bytes; at += 4) {
        float gv, ev;
        std::memcpy(&gv, g.data() + at, 4);
        std::memcpy(&ev, e.data() + at, 4);
        if (!used) {
          ASSERT_EQ(gv, 0.0f) << "pool " << i << " unused block " << block << " byte " << at;
        } else {
          ASSERT_LE(std::fabs(gv - ev), 1e-4f * std::max(1.0f, std::fabs(ev)))
              << "pool " << i << " block " << block << " byte " << at;
        }
      }
    }
  }
}

// The backend half on its own: a capture records without running, replays
// run, and what a capture may not do is a clear error.
TEST_F(CudaGraphs, CaptureRecordsReplaysAndRefusesHostWork) {
  const std::vector<float> x = RandomFloats(4 * 64, 3);
  const std::vector<float> w(64, 1.0f);
  kernels::BackendBuffer in = Upload(x);
  kernels::BackendBuffer weight = Upload(w);
  kernels::BackendBuffer out = Poisoned(x.size());
  const kernels::RmsNormParams p{in.as<float>(), weight.as<float>(), out.as<float>(), 4, 64, 1e-5f};
  cuda_->RmsNorm(p);  // eager first: nothing left to set up inside the capture
  const std::vector<float> eager = Download<float>(out, x.size());
  kernels::BackendBuffer out2 = Poisoned(x.size());
  kernels::RmsNormParams p2 = p;
  p2.out = out2.as<float>();
  std::unique_ptr<kernels::BackendGraph> graph = cuda_->CaptureGraph([&] { cuda_->RmsNorm(p2); });
  ASSERT_NE(graph, nullptr);
  const std::vector<float> before = Download<float>(out2, x.size());
  EXPECT_TRUE(std::isnan(before[0])) << "the capture ran the op";
  ASSERT_TRUE(graph->Launch());
  const std::vector<float> after = Download<float>(out2, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(after[i], eager[i]) << i;
  // Float64 reference of row 0, element 0.
  double ss = 0.0;
  for (int i = 0; i < 64; ++i) ss += double{x[i]} * x[i];
  EXPECT_NEAR(after[0], x[0] / std::sqrt(ss / 64 + 1e-5), 1e-5);

  std::vector<float> host(4);
  EXPECT_THROW(cuda_->CaptureGraph([&] { cuda_->CopyToHost(host.data(), in.data(), 16); }),
               std::logic_error);
  EXPECT_THROW(cuda_->CaptureGraph([&] { cuda_->Allocate(16); }), std::logic_error);
  // After a failed capture the backend works eagerly again.
  cuda_->RmsNorm(p2);
  EXPECT_EQ(Download<float>(out2, x.size()), eager);
}

}  // namespace
}  // namespace tq::cudatest
