// How to load and run a model: the options every engine front end (serve,
// generate, eval, quantize, the tests) passes to LoadModel and the engine core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/model/llama_weights.h"
#include "kernels/backend_factory.h"
#include "kernels/kv_layout.h"

namespace tq {

/// How to load and run a model.
struct EngineOptions {
  std::string model_dir;
  int32_t num_threads = 0;  // CPU compute threads; 0 = all cores, capped at the core count
  kernels::KvDtype kv_cache_dtype = kernels::KvDtype::kF32;
  // --kv-cache-dtype auto: kv_cache_dtype is ignored; the loader measures the
  // candidates on held-out calibration text and picks the smallest whose
  // perplexity ratio to fp32 is <= kv_quality_budget (kv_dtype_auto.h).
  bool kv_cache_dtype_auto = false;
  double kv_quality_budget = 1.01;
  int32_t block_size = 16;
  int32_t max_model_len = 0;             // 0 = config.max_position_embeddings
  int32_t max_num_batched_tokens = 512;  // token budget of one step (prefill chunk size)
  int32_t max_num_seqs = 256;            // sequences running at once (engine loop)
  size_t kv_cache_memory = 0;            // bytes; 0 = enough for one max_model_len sequence
  // tq KV formats: pre-RoPE key statistics (DESIGN.md "KV cache").
  std::string kv_calibration_text;   // text file to calibrate on; "" = built-in text
  std::string kv_calibration_stats;  // JSON: loaded when it exists, else written after calibrating
  int32_t kv_sink_tokens = 0;        // tq: first N positions also kept exact (attention sink)
  // Ranks of one tensor-parallel group in this process (docs/parallelism.md);
  // num_threads is split between them.
  int32_t tensor_parallel_size = 1;
  // MoE: place whole experts on the tensor-parallel ranks (E / N each)
  // instead of splitting every expert's width (--enable-expert-parallel).
  bool enable_expert_parallel = false;
  // Weight quantization config (JSON, docs/quantization.md); "" = weights as stored.
  std::string quantization_config;
  DenseDtype weight_dtype = DenseDtype::kDefault;  // --dtype (llama_weights.h)
  // Compute device (--device); the CLI defaults to auto, library users to the CPU.
  kernels::DeviceKind device = kernels::DeviceKind::kCpu;
  // GPU backends: fraction of the device's total memory the server may hold
  // (weights + activations + KV pool) when kv_cache_memory is 0 (vLLM's flag).
  double gpu_memory_utilization = 0.9;
  // CUDA: decode steps from per-batch-size CUDA graphs (--cuda-graphs,
  // docs/cuda.md "CUDA graphs"); ignored on the CPU and under tensor parallelism.
  bool cuda_graphs = false;
  // Most top logprobs a request may ask for per token (vLLM's --max-logprobs).
  int32_t max_logprobs = 20;
  // Automatic prefix caching in the engine loop (--enable-prefix-caching,
  // docs/engine.md "Prefix cache").
  bool enable_prefix_caching = false;
};

}  // namespace tq
