// tq_bench_cuda_graphs: one decode step (LlamaModel::Forward, host copies and
// the logits download included, as the engine runs it) with and without CUDA
// graphs (engine/model/decode_graphs.h), at batch 1 and 32, on
//   - the bundled model (stories260K, fp32 weights, fp32 KV, context 128),
//   - a random "tiny-100m" model (fp16 weights, fp16 KV, context 512).
// Wall-clock median of 50 steps after 5 warm-up steps; the graphs' capture is
// done before timing. Prints one row per (model, batch): eager ms, graph ms
// and eager / graph. Needs a GPU; exits 0 with a note without one.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/model/decode_graphs.h"
#include "engine/model/llama_model.h"
#include "engine/model/llama_weights.h"
#include "engine/model/random_model.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"

namespace {

using tq::ForwardBatch;
using tq::LlamaModel;
using tq::PagedKvCache;

constexpr int32_t kBlockSize = 16;

// A decode batch of `batch` sequences, each at position ctx - 1 with its own
// blocks (the pool content is whatever it is: the timing reads the same bytes).
ForwardBatch DecodeBatch(int32_t batch, int32_t ctx) {
  ForwardBatch b;
  const int32_t per_seq = (ctx + kBlockSize - 1) / kBlockSize;
  b.num_seqs = batch;
  b.max_blocks_per_seq = per_seq;
  for (int32_t s = 0; s < batch; ++s) {
    for (int32_t j = 0; j < per_seq; ++j) b.block_tables.push_back(s * per_seq + j);
    b.token_ids.push_back(1 + s);
    b.positions.push_back(ctx - 1);
    b.token_seq.push_back(s);
    b.slot_mapping.push_back((s * per_seq + (ctx - 1) / kBlockSize) * kBlockSize +
                             (ctx - 1) % kBlockSize);
    b.logit_indices.push_back(s);
  }
  return b;
}

double MedianStepMs(LlamaModel& model, PagedKvCache& cache, const ForwardBatch& b) {
  std::vector<float> logits;
  for (int i = 0; i < 5; ++i) model.Forward(b, cache, &logits);
  std::vector<double> ms;
  for (int i = 0; i < 50; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    model.Forward(b, cache, &logits);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void BenchModel(tq::kernels::Backend* backend, const std::string& name, const std::string& dir,
                tq::kernels::KvDtype kv, int32_t ctx) {
  const tq::ModelFiles files = tq::LoadModelFiles(dir);
  const tq::ModelConfig& c = files.config;
  LlamaModel model(c, tq::LoadLlamaWeights(dir, c, backend), backend);
  const int32_t max_blocks = (c.MaxContext() + kBlockSize - 1) / kBlockSize;
  tq::kernels::KvLayout layout;
  layout.dtype = kv;
  layout.block_size = kBlockSize;
  layout.num_kv_heads = c.num_key_value_heads;
  layout.head_dim = c.head_dim;
  layout.num_blocks = 32 * ((ctx + kBlockSize - 1) / kBlockSize);
  PagedKvCache cache(backend, c.num_hidden_layers, layout, nullptr);
  for (int32_t batch : {1, 32}) {
    const ForwardBatch b = DecodeBatch(batch, ctx);
    model.EnableDecodeGraphs(0, max_blocks);
    const double eager = MedianStepMs(model, cache, b);
    model.EnableDecodeGraphs(32, max_blocks);
    const double graph = MedianStepMs(model, cache, b);
    const auto& steps = model.decode_graphs()->steps_per_bucket();
    const bool replayed = steps.count(batch) && steps.at(batch) > 0;
    std::printf("%-22s batch %2d ctx %4d  eager %8.3f ms  graphs %8.3f ms  eager/graphs %5.2fx%s\n",
                name.c_str(), batch, ctx, eager, graph, eager / graph,
                replayed ? "" : "  (NOT replayed from a graph)");
    if (!model.decode_graphs()->disabled_reason().empty())
      std::printf("  graphs off: %s\n", model.decode_graphs()->disabled_reason().c_str());
  }
}

}  // namespace

int main() {
  std::string why;
  if (tq::kernels::cuda::DeviceCount(&why) == 0) {
    std::printf("tq_bench_cuda_graphs: no CUDA device (%s); skipped\n", why.c_str());
    return 0;
  }
  std::unique_ptr<tq::kernels::Backend> backend = tq::kernels::CreateCudaBackend(0);
  std::printf("decode step, LlamaModel::Forward wall clock, median of 50\n");
  BenchModel(backend.get(), "stories260K fp32", TQ_MODEL_DIR, tq::kernels::KvDtype::kF32, 128);
  const std::string dir =
      (std::filesystem::temp_directory_path() / "tq_bench_cuda_graphs_tiny100m").string();
  tq::RandomModelSpec spec;
  spec.config = tq::RandomModelPreset("tiny-100m");
  spec.dtype = tq::TensorDtype::kF16;
  tq::WriteRandomModel(dir, spec, "");
  BenchModel(backend.get(), "random tiny-100m fp16", dir, tq::kernels::KvDtype::kF16, 512);
  std::filesystem::remove_all(dir);
  return 0;
}
