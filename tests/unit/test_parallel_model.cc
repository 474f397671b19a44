// Tensor parallelism end to end on the CPU backend: TP=2 and TP=4 must give the
// greedy tokens of TP=1 for 128 tokens, with logits within 1e-4 (fp32 KV), on
// the bundled stories260K and on random checkpoints written by the test
// (one whose heads divide by 4, one with 2 KV heads under TP=4). TP=1 is the
// reference: it is the unsharded forward pass that tq_test_llama checks
// against an independent float64 numpy forward pass.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/kv/block_pool.h"
#include "engine/model/random_model.h"
#include "engine/runtime/model_loader.h"
#include "tests/unit/temp_dir_test.h"

namespace tq {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 128;

struct GreedyRun {
  std::vector<int32_t> tokens;             // generated
  std::vector<std::vector<float>> logits;  // [step][vocab]
};

// Prefills `prompt` in one step, then decodes kSteps tokens greedily one step
// at a time (each step's logits kept).
GreedyRun Greedy(const EngineOptions& options, const std::vector<int32_t>& prompt) {
  LoadedModel m = LoadModel(options);
  BlockPool pool(m.cache->layout().num_blocks);
  BlockTable table(m.cache->layout().block_size);
  std::vector<int32_t> seq = prompt;
  EXPECT_TRUE(table.EnsureCapacity(pool, static_cast<int32_t>(prompt.size()) + kSteps));
  GreedyRun run;
  int32_t done = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> logits;
    PrefillSequence(*m.model, *m.cache, table, seq, done, 512, false, &logits);
    done = static_cast<int32_t>(seq.size());
    const auto best =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    run.tokens.push_back(best);
    run.logits.push_back(std::move(logits));
    seq.push_back(best);
  }
  table.Release(pool);
  return run;
}

EngineOptions Options(const std::string& dir, kernels::KvDtype dtype, int tp) {
  EngineOptions o;
  o.model_dir = dir;
  o.num_threads = 2;
  o.kv_cache_dtype = dtype;
  o.max_model_len = 256;
  o.tensor_parallel_size = tp;
  return o;
}

// Checks TP=2 and TP=4 (or `worlds`) against TP=1.
void ExpectSameAsOneRank(const std::string& dir, kernels::KvDtype dtype, double tolerance,
                         std::vector<int> worlds = {2, 4}) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 425};
  const GreedyRun want = Greedy(Options(dir, dtype, 1), prompt);
  for (int world : worlds) {
    SCOPED_TRACE("tensor-parallel-size " + std::to_string(world));
    const GreedyRun got = Greedy(Options(dir, dtype, world), prompt);
    ASSERT_EQ(got.tokens, want.tokens);
    double worst = 0;
    for (int step = 0; step < kSteps; ++step) {
      ASSERT_EQ(got.logits[step].size(), want.logits[step].size());
      for (size_t i = 0; i < want.logits[step].size(); ++i) {
        worst = std::max(worst,
                         std::abs(static_cast<double>(got.logits[step][i]) - want.logits[step][i]));
      }
    }
    EXPECT_LE(worst, tolerance);
    std::printf("%s %s TP=%d: %d greedy tokens equal, max |logit - TP1 logit| = %.3g\n",
                std::filesystem::path(dir).filename().c_str(),
                std::string(kernels::KvDtypeName(dtype)).c_str(), world, kSteps, worst);
  }
}

TEST(TensorParallel, Stories260KFp32KvMatchesOneRank) {
  ExpectSameAsOneRank(TQ_MODEL_DIR, kernels::KvDtype::kF32, 1e-4);
}

TEST(TensorParallel, Stories260KTq3KvMatchesOneRank) {
  ExpectSameAsOneRank(TQ_MODEL_DIR, kernels::KvDtype::kTq3, 1e-4);
}

class RandomTensorParallel : public testing::TempDirTest {
 protected:
  // A random Llama with head_dim 16 and the bundled tokenizer (vocab 512).
  std::string Write(int32_t heads, int32_t kv_heads) {
    RandomModelSpec spec;
    ModelConfig& c = spec.config;
    c.hidden_size = heads * 16;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv_heads;
    c.head_dim = 16;
    c.intermediate_size = 352;
    c.num_hidden_layers = 3;
    c.vocab_size = 512;
    c.max_position_embeddings = 512;
    c.rms_norm_eps = 1e-5;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    spec.dtype = TensorDtype::kF32;
    spec.seed = 8;
    const std::string dir = Path("h" + std::to_string(heads) + "kv" + std::to_string(kv_heads));
    WriteRandomModel(dir, spec, std::string(TQ_MODEL_DIR) + "/tokenizer.model");
    return dir;
  }
};

TEST_F(RandomTensorParallel, HeadsDivisibleByFourMatchOneRank) {
  const std::string dir = Write(8, 4);
  ExpectSameAsOneRank(dir, kernels::KvDtype::kF32, 1e-4);
  ExpectSameAsOneRank(dir, kernels::KvDtype::kTq3, 1e-4);
}

TEST_F(RandomTensorParallel, TwoKvHeadsOnFourRanksAreReplicated) {
  const std::string dir = Write(8, 2);
  ExpectSameAsOneRank(dir, kernels::KvDtype::kF32, 1e-4, {4});
  ExpectSameAsOneRank(dir, kernels::KvDtype::kTq3, 1e-4, {4});
  // Each rank holds one KV head: half the pool of TP=1 (2 heads).
  const LoadedModel one = LoadModel(Options(dir, kernels::KvDtype::kF32, 1));
  const LoadedModel four = LoadModel(Options(dir, kernels::KvDtype::kF32, 4));
  for (const RankMemory& r : DescribeRanks(four)) {
    EXPECT_EQ(r.kv_cache_bytes * 2, one.cache->total_bytes()) << "rank " << r.rank;
  }
}

// Weight bytes per rank, counted from the config: embeddings and norms whole,
// attention by head, MLP by channel, lm_head (tied) a view.
TEST(TensorParallel, EachRankHoldsItsSlices) {
  const LoadedModel m = LoadModel(Options(TQ_MODEL_DIR, kernels::KvDtype::kF32, 2));
  // stories260K: hidden 64, 8 heads and 4 KV heads of 8, intermediate 172, vocab 512, 5 layers.
  const size_t hidden = 64, layers = 5, vocab = 512;
  const size_t per_layer =
      2 * hidden + (4 * 8) * hidden + 2 * (2 * 8) * hidden + hidden * (4 * 8) + 3 * 86 * hidden;
  const size_t want = 4 * (vocab * hidden + layers * per_layer + hidden);
  const LoadedModel one = LoadModel(Options(TQ_MODEL_DIR, kernels::KvDtype::kF32, 1));
  for (const RankMemory& r : DescribeRanks(m)) {
    EXPECT_EQ(r.weight_bytes.at("fp32"), want) << "rank " << r.rank;
    EXPECT_EQ(r.kv_cache_bytes * 2, one.cache->total_bytes());
    EXPECT_EQ(r.kv_capacity_tokens, 256);
  }
}

TEST(TensorParallel, ClearErrorWhenTheModelDoesNotSplit) {
  try {
    LoadModel(Options(TQ_MODEL_DIR, kernels::KvDtype::kF32, 3));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--tensor-parallel-size 3 does not divide "
                                    "num_attention_heads 8"));
  }
  EXPECT_THROW(LoadModel(Options(TQ_MODEL_DIR, kernels::KvDtype::kF32, 0)), Error);
}

}  // namespace
}  // namespace tq
