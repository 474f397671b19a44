// Long-context retrieval through every CUDA KV format (issue 21 item 3): the
// needle test of tests/unit/kv_retrieval_needle.h (its comment derives the
// bound) on the CUDA backend's KvWrite and PagedAttention (split-K decode at
// 4K/16K/32K contexts, head_dim 128, GQA 4:1), the same cases and dtypes as
// the CPU test (tests/unit/test_kv_retrieval.cc) except tqk3v2 (no CUDA kernels).
// Skips without a GPU.
#include <gtest/gtest.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#include "tests/unit/kv_retrieval_needle.h"

namespace tq::cudatest {
namespace {

using kernels::KvDtype;

TEST(CudaKvRetrieval, NeedleStaysTop1AndOutputErrorWithinTheBound) {
  std::string why;
  if (kernels::cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  auto cuda = kernels::CreateCudaBackend(0);
  const KvDtype dtypes[] = {KvDtype::kF32,  KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8,
                            KvDtype::kInt4, KvDtype::kTq4, KvDtype::kTq3};
  for (KvDtype d : dtypes) ASSERT_TRUE(cuda->Capabilities().SupportsKvDtype(d));
  needle::RunNeedleRetrieval(*cuda, dtypes);
}

}  // namespace
}  // namespace tq::cudatest
