// Tensor parallelism on CUDA through NCCL (issue 8): greedy decoding of 64
// tokens on GPUs must pick the tokens of the CPU backend at TP=1 (fp32
// weights, fp32 KV). TP=1 runs one rank through a world-of-1 NCCL
// communicator on GPU 0 (the collectives' code path with nothing to sum);
// TP=2 and TP=4 load through the loader (--device cuda) on GPUs 0..N-1 and
// skip, naming the device count, where the machine has fewer. The GPU machine
// builds without sentencepiece, so models load without their tokenizer
// (LoadModelWithoutTokenizer; the tests use token ids only). The CPU TP=1 forward
// pass is the reference checked against a float64 numpy forward pass by
// tq_test_llama. Every test skips without a GPU (CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/model/llama_model.h"
#include "engine/model/llama_weights.h"
#include "engine/parallel/nccl_communicator.h"
#include "engine/runtime/model_loader.h"
#include "kernels/backend_factory.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/unit/temp_dir_test.h"
#include "tests/unit/tp_test_util.h"

namespace tq {
namespace {

constexpr int32_t kNewTokens = 64;
const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};  // <s> "Once upon a time"

using testing::GreedyRun;

// kNewTokens greedy tokens after kPrompt, one decode step at a time.
GreedyRun Greedy(LlamaModel& model, PagedKvCache& cache) {
  return testing::GreedyDecode(model, cache, kPrompt, kNewTokens);
}
GreedyRun Greedy(ModelExecutor& executor) {
  return testing::GreedyDecode(executor, kPrompt, kNewTokens);
}

EngineOptions Options(const std::string& dir, kernels::DeviceKind device, int tp) {
  EngineOptions o;
  o.model_dir = dir;
  o.device = device;
  o.num_threads = 2;
  o.kv_cache_dtype = kernels::KvDtype::kF32;
  o.weight_dtype = DenseDtype::kFloat32;
  o.max_model_len = 256;
  o.kv_cache_memory = 8 << 20;  // per rank
  o.tensor_parallel_size = tp;
  return o;
}

GreedyRun GreedyLoaded(const EngineOptions& options) {
  LoadedModel m = LoadModelWithoutTokenizer(options);
  return Greedy(*m.executor);
}

// Equal tokens, and every step's logits within `tolerance` of the reference
// (the sums run in another order and on other kernels; a wrong shard or a
// collective reading unfinished data moves them by far more).
void ExpectSame(const GreedyRun& got, const GreedyRun& want, double tolerance,
                const std::string& what) {
  ASSERT_EQ(got.tokens, want.tokens) << what;
  double worst = 0;
  for (size_t step = 0; step < want.logits.size(); ++step) {
    ASSERT_EQ(got.logits[step].size(), want.logits[step].size());
    for (size_t i = 0; i < want.logits[step].size(); ++i) {
      worst = std::max(worst, std::abs(double{got.logits[step][i]} - want.logits[step][i]));
    }
  }
  EXPECT_LE(worst, tolerance) << what;
  std::printf("%s: %d greedy tokens equal to CPU TP=1, max |logit - CPU logit| = %.3g\n",
              what.c_str(), kNewTokens, worst);
}

class CudaTensorParallel : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    std::string why;
    devices_ = kernels::CudaDeviceCount(&why);
    if (devices_ == 0) GTEST_SKIP() << "no CUDA device: " << why;
  }
  void NeedDevices(int n) {
    if (devices_ < n) {
      GTEST_SKIP() << "TP=" << n << " needs " << n << " CUDA devices; this machine has "
                   << devices_;
    }
  }
  // A random Llama whose 8 heads and 4 KV heads divide by 4 (hidden 128).
  std::string WriteRandom() {
    const std::string dir = Path("random_h8kv4");
    testing::WriteRandomTpModel(dir, "", 8, 4);  // no tokenizer.model
    return dir;
  }
  int devices_ = 0;
};

TEST_F(CudaTensorParallel, OneRankThroughNcclMatchesCpuFor64Tokens) {
  const GreedyRun cpu = GreedyLoaded(Options(TQ_MODEL_DIR, kernels::DeviceKind::kCpu, 1));
  ASSERT_EQ(cpu.tokens.size(), static_cast<size_t>(kNewTokens));

  // One rank on GPU 0 whose all-reduces and logits all-gather go through a
  // world-of-1 NCCL communicator on the backend's stream.
  const ModelFiles files = LoadModelFiles(TQ_MODEL_DIR);
  const ModelConfig& c = files.config;
  std::unique_ptr<kernels::Backend> backend = kernels::CreateCudaBackend(0);
  const auto comms = CreateNcclCommunicators({0}, {kernels::CudaBackendStream(*backend)});
  TpPlan plan = MakeTpPlan(c, 0, 1);
  plan.comm = comms[0].get();
  WeightLoadOptions load;
  load.dense_dtype = DenseDtype::kFloat32;
  LlamaModel model(c, LoadLlamaWeights(TQ_MODEL_DIR, c, backend.get(), plan, load), backend.get(),
                   plan);
  ASSERT_EQ(model.tp_plan().comm, comms[0].get());
  kernels::KvLayout layout;
  layout.dtype = kernels::KvDtype::kF32;
  layout.block_size = 16;
  layout.num_kv_heads = c.num_key_value_heads;
  layout.head_dim = c.head_dim;
  layout.num_blocks = (c.MaxContext() + 15) / 16;
  PagedKvCache cache(backend.get(), c.num_hidden_layers, layout, nullptr);
  ExpectSame(Greedy(model, cache), cpu, 1e-3, "stories260K CUDA TP=1 via NCCL");
}

TEST_F(CudaTensorParallel, TwoAndFourRanksMatchCpuFor64Tokens) {
  NeedDevices(2);
  const GreedyRun cpu = GreedyLoaded(Options(TQ_MODEL_DIR, kernels::DeviceKind::kCpu, 1));
  for (int world : {2, 4}) {
    if (world > devices_) {
      std::printf("stories260K CUDA TP=%d: skipped, %d CUDA devices\n", world, devices_);
      continue;
    }
    const EngineOptions o = Options(TQ_MODEL_DIR, kernels::DeviceKind::kCuda, world);
    LoadedModel m = LoadModelWithoutTokenizer(o);
    // Rank r computes on CUDA device r and holds its own pool.
    const std::vector<RankMemory> ranks = DescribeRanks(m);
    ASSERT_EQ(ranks.size(), static_cast<size_t>(world));
    for (const RankMemory& r : ranks) EXPECT_EQ(r.cuda_device, r.rank);
    ExpectSame(Greedy(*m.executor), cpu, 1e-3, "stories260K CUDA TP=" + std::to_string(world));
  }
}

TEST_F(CudaTensorParallel, RandomModelFourRanksMatchesCpu) {
  NeedDevices(4);
  const std::string dir = WriteRandom();
  const GreedyRun cpu = GreedyLoaded(Options(dir, kernels::DeviceKind::kCpu, 1));
  ExpectSame(GreedyLoaded(Options(dir, kernels::DeviceKind::kCuda, 4)), cpu, 1e-4,
             "random h8 kv4 CUDA TP=4");
}

// --gpu-memory-utilization applies to each rank's device, and the pool (the
// same block count on every rank, block tables being shared) is sized by the
// tightest one: it can be no larger than what the fraction allows on any GPU.
TEST_F(CudaTensorParallel, DeviceBudgetIsPerRankDevice) {
  NeedDevices(2);
  EngineOptions o = Options(TQ_MODEL_DIR, kernels::DeviceKind::kCuda, 2);
  o.kv_cache_memory = 0;
  o.gpu_memory_utilization = 0.05;
  LoadedModel m = LoadModelWithoutTokenizer(o);
  for (const RankMemory& r : DescribeRanks(m)) {
    kernels::DeviceMemoryInfo mem;
    ASSERT_TRUE(kernels::QueryCudaDeviceMemory(r.cuda_device, &mem));
    EXPECT_GT(r.kv_cache_bytes, 0u);
    EXPECT_LE(static_cast<double>(r.kv_cache_bytes), 0.05 * static_cast<double>(mem.total_bytes))
        << "rank " << r.rank;
    std::printf("rank %d on cuda:%d: KV pool %zu bytes, %lld tokens (device total %zu)\n", r.rank,
                r.cuda_device, r.kv_cache_bytes, static_cast<long long>(r.kv_capacity_tokens),
                mem.total_bytes);
  }
}

}  // namespace
}  // namespace tq
