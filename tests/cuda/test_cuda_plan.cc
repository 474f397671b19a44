// Host-side parts of the CUDA backend that need no GPU (they run in CI):
// the split-K plan of paged attention and the error when no device exists.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

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
