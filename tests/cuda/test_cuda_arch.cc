// The Qwen2 (q/k/v biases: MatMulParams::bias, the bias kernel) and Qwen3
// (per-head q/k RMSNorm: RmsNorm over [tokens * heads, head_dim] rows, head_dim
// 128 != hidden / heads) paths of the model on the CUDA backend against the CPU
// backend (which tests/unit/test_arch_reference.cc checks against the float64
// reference): random fp32 checkpoints written here, 32 greedy tokens
// identical and every step's logits within 1e-3, fp32 KV; with a tq3 cache
// (keys stored after k_norm) the first difference is reported.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/tq_codec_state.h"
#include "engine/model/llama_model.h"
#include "engine/model/llama_weights.h"
#include "engine/model/random_model.h"
#include "engine/runtime/model_loader.h"
#include "tests/cuda/cuda_test_util.h"

namespace tq::cudatest {
namespace {

constexpr int32_t kNewTokens = 32;

struct GreedyTokens {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

// A 2-layer random checkpoint of `architecture` (Qwen2: biases; Qwen3: q/k
// norms, head_dim 128 over hidden 256 with 4 heads).
std::string WriteModel(const std::string& architecture) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("tq_cuda_arch_" + architecture + "_" + std::to_string(getpid())))
                              .string();
  RandomModelSpec spec;
  ModelConfig& c = spec.config;
  c.architecture = architecture;
  c.qkv_bias = architecture == "Qwen2ForCausalLM";
  c.qk_norm = architecture == "Qwen3ForCausalLM";
  c.hidden_size = 256;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = c.qk_norm ? 128 : 64;
  c.intermediate_size = 512;
  c.num_hidden_layers = 2;
  c.vocab_size = 1000;
  c.max_position_embeddings = 512;
  c.rope_theta = 1000000.0;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {2};
  spec.dtype = TensorDtype::kF32;
  spec.seed = 15;
  WriteRandomModel(dir, spec, "");
  return dir;
}

GreedyTokens Greedy(const std::string& dir, kernels::Backend* backend, kernels::KvDtype dtype) {
  const ModelConfig c = LoadModelFiles(dir).config;
  LlamaModel model(c, LoadLlamaWeights(dir, c, backend), backend);
  kernels::KvLayout layout;
  layout.dtype = dtype;
  layout.block_size = 16;
  layout.num_kv_heads = c.num_key_value_heads;
  layout.head_dim = c.head_dim;
  layout.num_blocks = 8;
  std::shared_ptr<const TqCodecState> tq;
  if (kernels::KvStoresPreRopeKeys(dtype)) {
    tq = std::make_shared<TqCodecState>(c, dtype, 128, std::vector<float>{}, std::vector<float>{});
  }
  PagedKvCache cache(backend, c.num_hidden_layers, layout, tq);
  BlockPool pool(layout.num_blocks);
  BlockTable table(layout.block_size);
  GreedyTokens run;
  run.tokens = {1, 403, 407, 261, 378, 432, 383, 286};
  int32_t done = 0;
  for (int32_t step = 0; step < kNewTokens; ++step) {
    EXPECT_TRUE(table.EnsureCapacity(pool, static_cast<int32_t>(run.tokens.size())));
    std::vector<float> logits;
    PrefillSequence(
        [&](const ForwardBatch& b, std::vector<float>* l) { model.Forward(b, cache, l); }, table,
        run.tokens, done, 512, false, &logits);
    done = static_cast<int32_t>(run.tokens.size());
    run.tokens.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    run.logits.push_back(std::move(logits));
  }
  table.Release(pool);
  return run;
}

class CudaArch : public CudaVsCpu, public ::testing::WithParamInterface<std::string> {};

TEST_P(CudaArch, GreedyMatchesCpu) {
  const std::string dir = WriteModel(GetParam());
  const GreedyTokens cpu = Greedy(dir, cpu_.get(), kernels::KvDtype::kF32);
  const GreedyTokens gpu = Greedy(dir, cuda_.get(), kernels::KvDtype::kF32);
  EXPECT_EQ(gpu.tokens, cpu.tokens);
  double worst = 0;
  for (size_t s = 0; s < cpu.logits.size() && s < gpu.logits.size(); ++s) {
    for (size_t i = 0; i < cpu.logits[s].size(); ++i) {
      worst = std::max(worst, std::abs(double{gpu.logits[s][i]} - cpu.logits[s][i]));
    }
  }
  std::printf("[ %s ] CUDA vs CPU: max |logit difference| over %d steps %.3g\n", GetParam().c_str(),
              kNewTokens, worst);
  EXPECT_LT(worst, 1e-3);
  const GreedyTokens cpu_tq = Greedy(dir, cpu_.get(), kernels::KvDtype::kTq3);
  const GreedyTokens gpu_tq = Greedy(dir, cuda_.get(), kernels::KvDtype::kTq3);
  size_t first = 0;
  while (first < cpu_tq.tokens.size() && first < gpu_tq.tokens.size() &&
         cpu_tq.tokens[first] == gpu_tq.tokens[first]) {
    ++first;
  }
  std::printf(
      "[ %s, tq3 KV ] CUDA vs CPU greedy: %zu of %zu tokens identical before the first "
      "difference\n",
      GetParam().c_str(), first, cpu_tq.tokens.size());
  EXPECT_GE(first, 8u + 4u) << "tq3 differs within the first generated tokens";
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Architectures, CudaArch,
                         ::testing::Values("Qwen2ForCausalLM", "Qwen3ForCausalLM"));

}  // namespace
}  // namespace tq::cudatest
