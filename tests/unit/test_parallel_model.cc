// Tensor parallelism end to end on the CPU backend: TP=2 and TP=4 must give the
// greedy tokens of TP=1 for 128 tokens, with logits within 1e-4 (fp32 KV; tq3
// KV see kTq3Tolerance), plain and with mix4b8b weights (on the CPU's integer
// matmul kernels see kIntMatMulTolerance), on
// the bundled stories260K and on random checkpoints written by the test
// (one whose heads divide by 4, one with 2 KV heads under TP=4). TP=1 is the
// reference: it is the unsharded forward pass that tq_test_llama checks
// against an independent float64 numpy forward pass.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/common/error.h"
#include "engine/kv/kv_calibration.h"
#include "engine/runtime/model_loader.h"
#include "tests/unit/temp_dir_test.h"
#include "tests/unit/tp_test_util.h"

namespace tq {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 128;
// fp32 KV: logits within 1e-4 of TP=1 (the all-reduces only reorder fp32
// sums). tq3 KV quantizes each key and value to one of 8 centroids, a step
// function: a key within ~1e-6 of a decision boundary can take the other code
// when the sums are reordered, which moves that step's logits by up to the
// quantization error. Greedy tokens must still be equal; the logits bound is
// 1e-3 (measured worst: 1.4e-4, stories260K with mix4b8b weights at TP=2).
constexpr double kFp32Tolerance = 1e-4;
constexpr double kTq3Tolerance = 1e-3;

using testing::GreedyRun;

// Prefills `prompt` in one step, then decodes kSteps tokens greedily one step
// at a time (each step's logits kept).
GreedyRun Greedy(const EngineOptions& options, const std::vector<int32_t>& prompt) {
  LoadedModel m = LoadModel(options);
  return testing::GreedyDecode(*m.executor, prompt, kSteps);
}

EngineOptions Options(const std::string& dir, kernels::KvDtype dtype, int tp,
                      const std::string& quantization_config = "") {
  EngineOptions o;
  o.quantization_config = quantization_config;
  o.model_dir = dir;
  o.num_threads = 2;
  o.kv_cache_dtype = dtype;
  o.max_model_len = 256;
  o.tensor_parallel_size = tp;
  return o;
}

// Quantized weights run on the CPU's float kernels (TQ_CPU_INT_MATMUL=off)
// within the bounds above, and with fp32 KV on its integer kernels too (the
// default, docs/quantization.md "Integer matmul"). Those give every TP size
// the same activation codes for the same input (a row-parallel shard starts
// and ends on group boundaries; each group is quantized from its own values),
// so TP=1 and TP=N compute the same integer sums. Their results still differ:
// the all-reduce reorders the fp32 sum of the shards' partials (by ~1 ulp, as
// on the float kernels), and an activation of the next layer within that of a
// rounding boundary of its int8 quantization takes the neighbouring code,
// which moves its products by one step, d * |w|; from there the two runs
// differ by the size of the int8-activation rounding itself. Greedy tokens
// must still be equal; the logits bound is 1e-2 (measured worst 2.5e-3,
// h8kv4d256 TP=2, already 2.0e-3 at the prefill step). Not checked with
// tq3 KV, whose step function compounds with this one (measured 0.14 on
// stories260K, and a different greedy token at TP=4 on h8kv4d256).
// Bit-identity would need the all-reduce to reproduce TP=1's fp32 sums: open
// (issue 22).
constexpr double kIntMatMulTolerance = 1e-2;

// Checks TP=2 and TP=4 (or `worlds`) against TP=1, with the CPU matmul choice
// `int_matmul` (a TQ_CPU_INT_MATMUL value; empty: the default).
void ExpectSameAsOneRankWith(const std::string& dir, kernels::KvDtype dtype, double tolerance,
                             const std::vector<int>& worlds, const std::string& quant,
                             const std::string& int_matmul) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 425};
  if (!int_matmul.empty()) setenv("TQ_CPU_INT_MATMUL", int_matmul.c_str(), 1);
  struct Unset {
    ~Unset() { unsetenv("TQ_CPU_INT_MATMUL"); }
  } unset;
  const GreedyRun want = Greedy(Options(dir, dtype, 1, quant), prompt);
  for (int world : worlds) {
    SCOPED_TRACE("tensor-parallel-size " + std::to_string(world) +
                 " TQ_CPU_INT_MATMUL=" + int_matmul);
    const GreedyRun got = Greedy(Options(dir, dtype, world, quant), prompt);
    ASSERT_EQ(got.tokens, want.tokens);
    double worst = 0, largest = 0, prefill = 0;
    for (int step = 0; step < kSteps; ++step) {
      for (float l : want.logits[step]) largest = std::max(largest, std::abs(double{l}));
      ASSERT_EQ(got.logits[step].size(), want.logits[step].size());
      for (size_t i = 0; i < want.logits[step].size(); ++i) {
        worst = std::max(worst,
                         std::abs(static_cast<double>(got.logits[step][i]) - want.logits[step][i]));
      }
      if (step == 0) prefill = worst;
    }
    EXPECT_LE(worst, tolerance);
    std::printf(
        "%s %s%s%s TP=%d: %d greedy tokens equal, max |logit - TP1 logit| = %.3g "
        "(prefill step %.3g; max |logit| %.3g)\n",
        std::filesystem::path(dir).filename().c_str(),
        std::string(kernels::KvDtypeName(dtype)).c_str(),
        quant.empty() ? "" : (" " + std::filesystem::path(quant).stem().string()).c_str(),
        int_matmul.empty() ? "" : (" int-matmul " + int_matmul).c_str(), world, kSteps, worst,
        prefill, largest);
  }
}

// Checks TP=2 and TP=4 (or `worlds`) against TP=1; quantized weights on both
// CPU matmul paths (float kernels within `tolerance`; with fp32 KV also the
// integer kernels, within kIntMatMulTolerance).
void ExpectSameAsOneRank(const std::string& dir, kernels::KvDtype dtype, double tolerance,
                         std::vector<int> worlds = {2, 4}, const std::string& quant = "") {
  if (quant.empty()) return ExpectSameAsOneRankWith(dir, dtype, tolerance, worlds, quant, "");
  ExpectSameAsOneRankWith(dir, dtype, tolerance, worlds, quant, "off");
  if (dtype == kernels::KvDtype::kF32) {
    ExpectSameAsOneRankWith(dir, dtype, kIntMatMulTolerance, worlds, quant, "on");
  }
}

TEST(TensorParallel, Stories260KFp32KvMatchesOneRank) {
  ExpectSameAsOneRank(TQ_MODEL_DIR, kernels::KvDtype::kF32, kFp32Tolerance);
}

TEST(TensorParallel, Stories260KTq3KvMatchesOneRank) {
  ExpectSameAsOneRank(TQ_MODEL_DIR, kernels::KvDtype::kTq3, kTq3Tolerance);
}

class RandomTensorParallel : public testing::TempDirTest {
 protected:
  // A random Llama (3 layers) with the bundled tokenizer (vocab 512).
  std::string Write(int32_t heads, int32_t kv_heads, int32_t head_dim = 16, int32_t hidden = 0,
                    int32_t intermediate = 352) {
    const std::string dir = Path("h" + std::to_string(heads) + "kv" + std::to_string(kv_heads) +
                                 "d" + std::to_string(hidden > 0 ? hidden : heads * head_dim));
    testing::WriteRandomTpModel(dir, std::string(TQ_MODEL_DIR) + "/tokenizer.model", heads,
                                kv_heads, head_dim, hidden, intermediate);
    return dir;
  }
};

TEST_F(RandomTensorParallel, HeadsDivisibleByFourMatchOneRank) {
  const std::string dir = Write(8, 4);
  ExpectSameAsOneRank(dir, kernels::KvDtype::kF32, kFp32Tolerance);
  ExpectSameAsOneRank(dir, kernels::KvDtype::kTq3, kTq3Tolerance);
}

TEST_F(RandomTensorParallel, TwoKvHeadsOnFourRanksAreReplicated) {
  const std::string dir = Write(8, 2);
  ExpectSameAsOneRank(dir, kernels::KvDtype::kF32, kFp32Tolerance, {4});
  ExpectSameAsOneRank(dir, kernels::KvDtype::kTq3, kTq3Tolerance, {4});
  // Each rank holds one KV head: half the pool of TP=1 (2 heads).
  const LoadedModel one = LoadModel(Options(dir, kernels::KvDtype::kF32, 1));
  const LoadedModel four = LoadModel(Options(dir, kernels::KvDtype::kF32, 4));
  for (const RankMemory& r : DescribeRanks(four)) {
    EXPECT_EQ(r.kv_cache_bytes * 2, one.executor->cache().total_bytes()) << "rank " << r.rank;
  }
}

// configs/llama_mix4b8b.json (attention int4, MLP int8, groups of 128): the
// shards of every row-parallel weight start and end on group boundaries at
// TP=2 and TP=4 (o_proj 512 / 4 = 128 inputs, down_proj 512 / 4 = 128).
const std::string kMix4b8b = std::string(TQ_SOURCE_DIR) + "/configs/llama_mix4b8b.json";

// The same mix at stories260K's sizes (tests/data/quant_stories_mix4b8b.json:
// groups of 32, down_proj 86): TP=2 splits on group boundaries.
TEST(TensorParallel, Stories260KMix4b8bMatchesOneRank) {
  const std::string mix = std::string(TQ_TEST_DATA_DIR) + "/quant_stories_mix4b8b.json";
  ExpectSameAsOneRank(TQ_MODEL_DIR, kernels::KvDtype::kF32, kFp32Tolerance, {2}, mix);
  ExpectSameAsOneRank(TQ_MODEL_DIR, kernels::KvDtype::kTq3, kTq3Tolerance, {2}, mix);
}

TEST_F(RandomTensorParallel, Mix4b8bWeightsMatchOneRank) {
  const std::string dir = Write(8, 4, 64, 256, 512);
  ExpectSameAsOneRank(dir, kernels::KvDtype::kF32, kFp32Tolerance, {2, 4}, kMix4b8b);
  ExpectSameAsOneRank(dir, kernels::KvDtype::kTq3, kTq3Tolerance, {2, 4}, kMix4b8b);
  // At TP=8 each rank's o_proj has 64 input channels: half a group.
  try {
    LoadModel(Options(dir, kernels::KvDtype::kF32, 8, kMix4b8b));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("group_size 128 does not divide the tensor-parallel slice"));
  }
}

// tq key statistics saved by one TP size load under another: the merged
// per-rank statistics equal the unsharded ones and the model fingerprint
// (of the whole k_proj) does not depend on the split.
TEST_F(RandomTensorParallel, SavedKeyStatsAreTheSameForEveryTpSize) {
  const std::string dir = Write(8, 2);
  EngineOptions one = Options(dir, kernels::KvDtype::kTq3, 1);
  one.kv_calibration_stats = Path("one.json");
  EngineOptions four = Options(dir, kernels::KvDtype::kTq3, 4);
  four.kv_calibration_stats = Path("four.json");
  LoadModel(one);   // calibrates and saves
  LoadModel(four);  // calibrates on 4 ranks and saves
  const KeyChannelStats a = LoadKeyStats(one.kv_calibration_stats, 3, 2, 16);
  const KeyChannelStats b = LoadKeyStats(four.kv_calibration_stats, 3, 2, 16);
  EXPECT_EQ(a.model_fingerprint, b.model_fingerprint);
  ASSERT_EQ(a.mean.size(), b.mean.size());
  for (size_t i = 0; i < a.mean.size(); ++i) {
    EXPECT_NEAR(a.mean[i], b.mean[i], 1e-5 * (1 + std::abs(a.mean[i]))) << i;
    EXPECT_NEAR(a.scale[i], b.scale[i], 1e-5 * a.scale[i]) << i;
  }
  // TP=1's file loads at TP=4 (the fingerprint check passes).
  four.kv_calibration_stats = one.kv_calibration_stats;
  const LoadedModel m = LoadModel(four);
  EXPECT_THAT(m.kv_calibration_source, HasSubstr("loaded from"));
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
    EXPECT_EQ(r.kv_cache_bytes * 2, one.executor->cache().total_bytes());
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

// The executor (engine/runtime/model_executor.h): every rank checks the batch,
// so a malformed one throws on all of them instead of leaving a rank waiting
// in a collective; the next step runs, and gives TP=1's greedy tokens (which
// tq_test_llama checks against the float64 numpy forward pass).
TEST(TensorParallel, ExecutorRejectsABadBatchOnEveryRankAndRunsTheNext) {
  LoadedModel m = LoadModel(Options(TQ_MODEL_DIR, kernels::KvDtype::kF32, 2));
  ASSERT_EQ(m.executor->world_size(), 2);
  ForwardBatch bad;
  bad.token_ids = {1, 512};  // vocab 512: the second id is out of range
  bad.positions = {0, 1};
  bad.token_seq = {0, 0};
  bad.slot_mapping = {0, 1};
  bad.block_tables = {0};
  bad.num_seqs = 1;
  bad.max_blocks_per_seq = 1;
  bad.logit_indices = {1};
  std::vector<float> logits;
  EXPECT_THROW(m.executor->Forward(bad, &logits), std::invalid_argument);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  const GreedyRun got = testing::GreedyDecode(*m.executor, prompt, 16);
  LoadedModel one = LoadModel(Options(TQ_MODEL_DIR, kernels::KvDtype::kF32, 1));
  EXPECT_EQ(got.tokens, testing::GreedyDecode(*one.executor, prompt, 16).tokens);
}

TEST(TensorParallel, ExecutorNeedsOneCachePerRankOfOneLayout) {
  LoadedModel m = LoadModel(Options(TQ_MODEL_DIR, kernels::KvDtype::kF32, 2));
  kernels::KvLayout layout = m.executor->cache().layout();
  RankCaches one_rank;
  one_rank.push_back(std::move(m.executor->MakeCaches(layout, {}, 0).front()));
  EXPECT_THROW(m.executor->SetCaches(std::move(one_rank)), std::invalid_argument);
  RankCaches mixed = m.executor->MakeCaches(layout, {}, 0);
  layout.num_blocks += 1;
  mixed[1] = std::move(m.executor->MakeCaches(layout, {}, 0)[1]);
  EXPECT_THROW(m.executor->SetCaches(std::move(mixed)), std::invalid_argument);
  EXPECT_TRUE(m.executor->has_cache());  // the failed calls kept the old caches
}

}  // namespace
}  // namespace tq
