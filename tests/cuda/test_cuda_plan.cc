// Host-side parts of the CUDA backend that need no GPU (they run in CI):
// the batch layout (prefill tiles / decode tokens) and split-K plan of paged
// attention, and the error when no device exists.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_info.h"

namespace tq::kernels::cuda {
namespace {

PagedAttentionParams Params(int32_t tokens, int32_t heads, int32_t kv_heads, int32_t max_blocks) {
  PagedAttentionParams p;
  p.num_tokens = tokens;
  p.num_heads = heads;
  p.max_blocks_per_seq = max_blocks;
  p.cache.layout = KvLayout{KvDtype::kTq3, 1, 16, kv_heads, 128};
  return p;
}

TEST(CudaAttentionPlan, SplitsLongDecodeAndCoversTheWholeContext) {
  // Batch 32 decode, 8 KV heads, 16k positions on a 132-SM H200: 256 blocks
  // without splitting leave SMs idle, so the context is split.
  const PagedAttentionParams p = Params(32, 32, 8, 16384 / 16);
  const AttentionPlan plan = PlanAttention(p, 132);
  EXPECT_GT(plan.splits, 1);
  EXPECT_GE(static_cast<int64_t>(plan.splits) * plan.split_len, 16384);
  EXPECT_LT(static_cast<int64_t>(plan.splits - 1) * plan.split_len, 16384);  // no empty split
  EXPECT_GE(plan.split_len, 256);
  EXPECT_EQ(plan.WorkspaceFloats(p), size_t{32} * 32 * plan.splits * (128 + 2));
}

TEST(CudaAttentionPlan, PrefillAndShortContextsDoNotSplit) {
  const PagedAttentionParams prefill = Params(2048, 32, 8, 2048 / 16);  // enough blocks already
  EXPECT_EQ(PlanAttention(prefill, 132).splits, 1);
  EXPECT_EQ(PlanAttention(prefill, 132).WorkspaceFloats(prefill), 0u);
  const PagedAttentionParams short_ctx = Params(1, 32, 8, 256 / 16);  // one split's worth
  const AttentionPlan plan = PlanAttention(short_ctx, 132);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_GE(plan.split_len, 256);  // covers every position
}

TEST(CudaAttentionBatch, RunsOfOneSequenceBecomePrefillTilesTheRestDecodes) {
  // Group 4, head_dim 128: tiles of 64 rows = 16 tokens × 4 query heads.
  // Batch: decode (seq 0), a 40-token chunk (seq 1), a 3-token run (seq 2,
  // shorter than kPrefillMinRun = 4), decode (seq 3), a 4-token chunk (seq 4).
  std::vector<int32_t> seq{0};
  seq.insert(seq.end(), 40, 1);
  seq.insert(seq.end(), 3, 2);
  seq.push_back(3);
  seq.insert(seq.end(), 4, 4);
  PagedAttentionParams p = Params(static_cast<int32_t>(seq.size()), 32, 8, 64);
  p.host_token_seq = seq.data();
  const AttentionBatchLayout layout = PlanAttentionBatch(p);
  EXPECT_EQ(layout.tile_tokens, 16);
  EXPECT_EQ(layout.tiles, (std::vector<int32_t>{1, 16, 17, 16, 33, 8, 45, 4}));
  EXPECT_EQ(layout.decode, (std::vector<int32_t>{0, 41, 42, 43, 44}));

  p.host_token_seq = nullptr;  // layout unknown: everything through the decode kernel
  const AttentionBatchLayout unknown = PlanAttentionBatch(p);
  EXPECT_TRUE(unknown.tiles.empty());
  EXPECT_TRUE(unknown.decode.empty());
}

TEST(CudaAttentionBatch, TileShapeFollowsGroupAndHeadDim) {
  EXPECT_EQ(PlanAttentionBatch(Params(1, 8, 8, 1)).tile_tokens, 64);   // group 1
  EXPECT_EQ(PlanAttentionBatch(Params(1, 64, 8, 1)).tile_tokens, 8);   // group 8
  EXPECT_EQ(PlanAttentionBatch(Params(1, 36, 3, 1)).tile_tokens, 5);   // group 12: 60 rows
  EXPECT_EQ(PlanAttentionBatch(Params(1, 128, 1, 1)).tile_tokens, 1);  // group 128: 2 chunks
  PagedAttentionParams wide = Params(1, 64, 8, 1);
  wide.cache.layout.head_dim = 256;  // 32 rows per tile
  EXPECT_EQ(PlanAttentionBatch(wide).tile_tokens, 4);
}

TEST(CudaAttentionPlan, OneShortChunkOverALongContextSplitsALongChunkDoesNot) {
  // 16 tokens over 8k positions: one tile × 8 KV heads = 8 blocks; split.
  std::vector<int32_t> seq(16, 0);
  PagedAttentionParams chunk = Params(16, 32, 8, 8192 / 16);
  chunk.host_token_seq = seq.data();
  const AttentionPlan plan = PlanAttention(chunk, 132, PlanAttentionBatch(chunk));
  EXPECT_GT(plan.splits, 1);
  EXPECT_GE(static_cast<int64_t>(plan.splits) * plan.split_len, 8192);
  EXPECT_EQ(plan.WorkspaceFloats(chunk), size_t{16} * 32 * plan.splits * (128 + 2));
  // 2048 tokens: 128 tiles × 8 KV heads = 1024 blocks fill 132 SMs.
  std::vector<int32_t> long_seq(2048, 0);
  PagedAttentionParams prefill = Params(2048, 32, 8, 8192 / 16);
  prefill.host_token_seq = long_seq.data();
  EXPECT_EQ(PlanAttention(prefill, 132, PlanAttentionBatch(prefill)).splits, 1);
}

TEST(CudaBackendCreation, FailsWithAClearErrorWithoutADevice) {
  if (DeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  try {
    CreateCudaBackend(0);
    ADD_FAILURE() << "CreateCudaBackend succeeded without a device";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tq::kernels::cuda
