// Long-context retrieval through every KV format on the CPU backend (issue 21
// item 3): the needle test of kv_retrieval_needle.h (its comment derives the
// bound), 4K/16K/32K contexts, head_dim 128, GQA 4:1, trained-hd128's key
// statistics. tests/cuda/test_cuda_kv_retrieval.cc runs the same on CUDA.
// Under a sanitizer (make test-asan) only the 4K and 32K contexts at depth 0.5 run.
#include <gtest/gtest.h>

#include "kernels/backend.h"
#include "tests/unit/kv_retrieval_needle.h"

namespace tq {
namespace {

using kernels::KvDtype;

TEST(KvRetrieval, NeedleStaysTop1AndOutputErrorWithinTheBound) {
  auto backend = kernels::CreateCpuBackend(2);
  const KvDtype dtypes[] = {KvDtype::kF32,  KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8,
                            KvDtype::kInt4, KvDtype::kTq4, KvDtype::kTq3,  KvDtype::kTqK3V2};
  needle::RunNeedleRetrieval(*backend, dtypes);
}

}  // namespace
}  // namespace tq
