// Single-sequence generation on a loaded model: the engine behind
// `tqserve generate` and the model-level tests. (The continuous-batching
// engine loop that serves many requests builds on the same pieces.)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/llama_model.h"
#include "engine/model/model_config.h"
#include "engine/runtime/kv_dtype_auto.h"
#include "engine/sampling/sampling_params.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"

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
  // docs/engine.md "Prefix cache"); Generator runs one sequence and ignores it.
  bool enable_prefix_caching = false;
};

/// Why generation stopped (OpenAI finish_reason): "stop" (EOS or a stop
/// token) or "length" (max_tokens or max_model_len).
struct GenerationResult {
  std::vector<int32_t> output_ids;
  std::string finish_reason;
};

struct LoadedModel;

/// A model loaded on the CPU backend with its tokenizer and a paged KV cache,
/// running one sequence at a time (`tqserve generate`, perplexity, tests; the
/// server's continuous-batching engine is Engine). Thread ownership: one
/// thread at a time (not thread-safe).
class Generator {
 public:
  /// Loads config, tokenizer and weights (LoadModel). Throws tq::Error naming
  /// the file and the problem (missing file, corrupt safetensors, bad config).
  explicit Generator(const EngineOptions& options);
  ~Generator();

  /// Generates a continuation of `prompt` (token ids, BOS included when
  /// wanted). on_token is called with each new token as soon as it is sampled.
  /// Throws tq::Error when the prompt is empty, an id is out of range or the
  /// prompt does not fit max_model_len, or params fail Validate().
  GenerationResult Generate(std::span<const int32_t> prompt, const SamplingParams& params,
                            const std::function<void(int32_t)>& on_token = {});

  /// Logits [tokens.size(), vocab] at every position of `tokens`, computed
  /// through the paged cache in chunks of max_num_batched_tokens.
  std::vector<float> PromptLogits(std::span<const int32_t> tokens);

  /// Throws tq::Error when `prompt` is empty, has an id outside the
  /// vocabulary or is longer than max_model_len (what Generate checks first).
  void CheckPrompt(std::span<const int32_t> prompt) const;
  /// CheckPrompt, SamplingParams::Validate, and stop token ids inside the
  /// vocabulary: everything Generate rejects, checked without running.
  void CheckRequest(std::span<const int32_t> prompt, const SamplingParams& params) const;

  const ModelFiles& files() const;
  LlamaModel& model();
  const Tokenizer& tokenizer() const;
  const PagedKvCache& kv_cache() const;
  const BlockPool& block_pool() const { return pool_; }
  /// How the tq key statistics were obtained ("" for other KV dtypes), e.g.
  /// "calibrated on the built-in text (412 tokens)" or "loaded from FILE".
  const std::string& kv_calibration_source() const;
  /// What --kv-cache-dtype auto measured and chose (automatic false otherwise).
  const KvDtypeChoice& kv_dtype_choice() const;
  /// Why --device auto runs on the CPU; empty otherwise (LoadedModel::device_note).
  const std::string& device_note() const;
  int32_t max_model_len() const;

 private:
  EngineOptions options_;
  std::unique_ptr<LoadedModel> loaded_;
  BlockPool pool_{0};
};

/// Throws tq::Error when `prompt` is empty, longer than max_model_len or has
/// an id outside [0, vocab_size).
void CheckPromptIds(std::span<const int32_t> prompt, int32_t max_model_len, int32_t vocab_size);
/// CheckPromptIds, SamplingParams::Validate and stop token ids below
/// vocab_size; throws tq::Error with a message naming the field.
void CheckRequestIds(std::span<const int32_t> prompt, const SamplingParams& params,
                     int32_t max_model_len, int32_t vocab_size);

}  // namespace tq
