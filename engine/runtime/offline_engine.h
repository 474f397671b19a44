// The engine core driven on the caller's thread: `tqserve generate`, `eval`,
// `quantize`'s calibration and the model-level tests submit their requests to
// the same EngineCore (scheduler, model runner, sampler, stop rules) that
// `serve` runs on its engine thread, so the llama2.c and float64 reference
// tests vouch for the serving path. vLLM's offline `LLM` class plays this role.
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
#include "engine/runtime/engine_options.h"
#include "engine/runtime/kv_dtype_auto.h"
#include "engine/sampling/sampling_params.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq {

/// What one OfflineEngine::Generate produced. finish_reason is OpenAI's:
/// "stop" (EOS or a stop token) or "length" (max_tokens or max_model_len).
struct GenerationResult {
  std::vector<int32_t> output_ids;
  std::string finish_reason;
};

class EngineCore;
struct LoadedModel;

/// A loaded model with its tokenizer, KV cache and an engine core that this
/// object steps itself, synchronously, until the requests of the call in
/// progress finish (Engine is the threaded, thread-safe server form).
/// Thread ownership: one thread at a time (not thread-safe). Every call
/// returns with no request live and every KV block back in the pool.
class OfflineEngine {
 public:
  /// Loads config, tokenizer and weights (LoadModel). Throws tq::Error naming
  /// the file and the problem (missing file, corrupt safetensors, bad config).
  explicit OfflineEngine(const EngineOptions& options);
  ~OfflineEngine();

  /// Generates a continuation of `prompt` (token ids, BOS included when
  /// wanted) as one engine request. on_token is called with each new token
  /// after the step that sampled it. Throws tq::Error when CheckRequestIds
  /// rejects the request (before it runs) or the engine step fails.
  GenerationResult Generate(std::span<const int32_t> prompt, const SamplingParams& params,
                            const std::function<void(int32_t)>& on_token = {});

  /// Prompt scoring as a request mode (prompt logprobs, max_tokens 0): for
  /// each prompt, ln p(prompt[t] | prompt[0..t)) for t = 1 .. n-1, in double
  /// (PositionLogprobs::chosen_logprob). All prompts are submitted at once
  /// and batched by the scheduler. Throws tq::Error when a prompt is rejected
  /// (CheckPromptIds: empty, an id outside the vocabulary, longer than
  /// max_model_len) or a step fails.
  std::vector<std::vector<double>> ScorePrompts(std::span<const std::vector<int32_t>> prompts);

  /// Logits [tokens.size(), vocab] at every position of `tokens`: one forward
  /// over the paged cache in chunks of max_num_batched_tokens, outside the
  /// scheduler (blocks borrowed from its pool while no request is live). For
  /// tests and calibration that need whole rows; serving never calls it.
  std::vector<float> PromptLogits(std::span<const int32_t> tokens);

  const ModelFiles& files() const;
  LlamaModel& model();
  const Tokenizer& tokenizer() const;
  const PagedKvCache& kv_cache() const;
  /// The engine core's KV block pool (every block free between calls).
  const BlockPool& block_pool() const;
  /// What LoadModel made: also how the KV format and the device were chosen
  /// (kv_calibration_source, kv_dtype_choice, device_note).
  const LoadedModel& loaded() const { return *loaded_; }
  int32_t max_model_len() const;

 private:
  EngineOptions options_;
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<EngineCore> core_;
  int64_t next_request_ = 0;
};

}  // namespace tq
