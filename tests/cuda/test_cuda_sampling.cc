// Sampling from LogitsTopK candidates on the CUDA backend (the runner's
// SamplingPath::kCandidates, which kAuto picks on a GPU at vocab >= 32768)
// against the full-row host path on the same backend: the same tokens; the
// logprobs equal up to the summation order of the device's exp sums. On the
// bundled model (vocab 512) and a random model with a 40,000-token vocabulary.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/model/llama_model.h"
#include "engine/model/llama_weights.h"
#include "engine/model/random_model.h"
#include "engine/runtime/engine_core.h"
#include "engine/runtime/model_loader.h"
#include "engine/runtime/model_runner.h"
#include "tests/cuda/cuda_test_util.h"

namespace tq::cudatest {
namespace {

class CudaSampling : public CudaVsCpu {};

// The model and cache are built directly on CUDA device 0 (no LoadModel: the
// GPU machine's build has no SentencePiece, and these tests feed token ids).
std::map<std::string, EngineOutput> RunAll(const std::string& dir, SamplingPath path) {
  const ModelFiles files = LoadModelFiles(dir);
  const ModelConfig& mc = files.config;
  Worker worker;
  worker.backend = kernels::CreateCudaBackend(0);
  kernels::Backend* backend = worker.backend.get();
  worker.model = std::make_unique<LlamaModel>(mc, LoadLlamaWeights(dir, mc, backend), backend);
  kernels::KvLayout layout;
  layout.dtype = kernels::KvDtype::kF32;
  layout.block_size = 16;
  layout.num_kv_heads = mc.num_key_value_heads;
  layout.head_dim = mc.head_dim;
  layout.num_blocks = 5 * 256 / 16;
  worker.cache = std::make_unique<PagedKvCache>(backend, mc.num_hidden_layers, layout, nullptr);
  std::vector<Worker> workers;
  workers.push_back(std::move(worker));
  ModelExecutor executor(std::move(workers));
  SchedulerConfig c;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 256;
  c.block_size = layout.block_size;
  c.num_blocks = layout.num_blocks;
  c.eos_token_ids = mc.eos_token_ids;
  EngineCore core(c, std::make_unique<LlamaModelRunner>(&executor, path), nullptr);
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  const double temperatures[] = {0.0, 1.0, 0.8, 1.2, 0.9};
  for (int i = 0; i < 5; ++i) {
    EngineRequest r;
    r.request_id = "r" + std::to_string(i);
    r.prompt_ids = {1, 403, 407, 261, 378, 425, 300 + i};
    r.sampling.temperature = temperatures[i];
    r.sampling.top_p = i == 2 ? 0.9 : 1.0;
    r.sampling.top_k = i == 3 ? 20 : 0;
    r.sampling.repetition_penalty = i == 4 ? 1.3 : 1.0;
    r.sampling.seed = 500 + i;
    r.sampling.max_tokens = 24;
    r.sampling.ignore_eos = true;
    r.num_logprobs = 3;
    streams[r.request_id] = std::make_shared<RequestStream>();
    core.AddRequest(r, streams[r.request_id], EngineCore::Clock::now());
  }
  int steps = 0;
  while (core.has_work() && steps++ < 10000) core.Step();
  std::map<std::string, EngineOutput> out;
  for (auto& [id, stream] : streams) {
    while (auto o2 = stream->Next(std::chrono::milliseconds(0))) out[id].Merge(std::move(*o2));
  }
  return out;
}

void ExpectSame(const std::string& dir) {
  const auto host = RunAll(dir, SamplingPath::kHost);
  const auto cand = RunAll(dir, SamplingPath::kCandidates);
  ASSERT_EQ(host.size(), cand.size());
  for (const auto& [id, h] : host) {
    const EngineOutput& c = cand.at(id);
    ASSERT_EQ(h.token_ids, c.token_ids) << id;
    ASSERT_EQ(h.logprobs.size(), c.logprobs.size()) << id;
    for (size_t i = 0; i < h.logprobs.size(); ++i) {
      EXPECT_NEAR(h.logprobs[i].chosen.logprob, c.logprobs[i].chosen.logprob, 1e-5) << id;
      ASSERT_EQ(h.logprobs[i].top.size(), c.logprobs[i].top.size()) << id;
      for (size_t j = 0; j < h.logprobs[i].top.size(); ++j) {
        EXPECT_EQ(h.logprobs[i].top[j].token, c.logprobs[i].top[j].token) << id;
        EXPECT_NEAR(h.logprobs[i].top[j].logprob, c.logprobs[i].top[j].logprob, 1e-5) << id;
      }
    }
  }
}

TEST_F(CudaSampling, BundledModelCandidatesMatchHostPath) {
  ExpectSame(TQ_MODEL_DIR);
}

TEST_F(CudaSampling, LargeVocabularyCandidatesMatchHostPath) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tq_cuda_sampling_" + std::to_string(::getpid()));
  RandomModelSpec spec;
  ModelConfig& c = spec.config;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 40000;
  c.max_position_embeddings = 256;
  c.eos_token_ids = {2};
  spec.dtype = TensorDtype::kF32;
  spec.seed = 3;
  WriteRandomModel(dir.string(), spec, "");
  ExpectSame(dir.string());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tq::cudatest
