// The Llama decoder forward pass over a varlen batch and the paged KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/model/llama_weights.h"
#include "engine/model/model_config.h"
#include "kernels/backend.h"

namespace tq {

/// Inputs of one forward step: the new tokens of every scheduled sequence,
/// flattened (varlen), with where each goes in the paged cache. Built by the
/// scheduler / runner; all vectors are host memory.
struct ForwardBatch {
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens] absolute position in its sequence
  std::vector<int32_t> token_seq;     // [num_tokens] row of block_tables
  std::vector<int32_t> slot_mapping;  // [num_tokens] cache slot of the token's K/V
  std::vector<int32_t> block_tables;  // [num_seqs * max_blocks_per_seq], -1 padded
  int32_t num_seqs = 0;
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> logit_indices;  // tokens whose logits are returned (e.g. each
                                       // sequence's last scheduled token)

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
};

/// LlamaForCausalLM (HF transformers modeling_llama): embedding, N x
/// [RMSNorm, GQA attention with RoPE, residual, RMSNorm, SwiGLU MLP,
/// residual], final RMSNorm, lm_head. Thread ownership: the engine thread;
/// Forward is not reentrant (it reuses activation buffers).
class LlamaModel {
 public:
  LlamaModel(const ModelConfig& config, LlamaWeights weights, kernels::Backend* backend);

  /// Runs the batch, writing each token's K/V into `cache`, and returns the
  /// logits of batch.logit_indices in *logits ([logit_indices.size(), vocab],
  /// row-major, host memory). Throws std::invalid_argument on a malformed
  /// batch (token id out of range, sizes that disagree).
  void Forward(const ForwardBatch& batch, PagedKvCache& cache, std::vector<float>* logits);

  /// Called in Forward with each layer's keys before RoPE: (layer, k_pre_rope
  /// [num_tokens, num_kv_heads, head_dim] host fp32, num_tokens). Used to
  /// calibrate the per-channel key normalization of the tq KV formats. The
  /// keys are copied to host memory first (any backend).
  using KeyObserver = std::function<void(int32_t layer, const float* keys, int32_t num_tokens)>;
  void SetKeyObserver(KeyObserver observer) { key_observer_ = std::move(observer); }

  const ModelConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }

 private:
  void EnsureWorkspace(int32_t num_tokens, int32_t num_logits);
  void Attention(int32_t layer, const ForwardBatch& batch, PagedKvCache& cache);
  void Mlp(int32_t layer, int32_t num_tokens);

  ModelConfig config_;
  LlamaWeights weights_;
  kernels::Backend* backend_;
  kernels::BackendBuffer inv_freq_;  // [head_dim / 2]
  KeyObserver key_observer_;
  std::vector<float> observed_keys_;  // host copy of the keys for key_observer_

  // Activation workspace, grown on demand (backend memory).
  int32_t capacity_tokens_ = 0;
  int32_t capacity_logits_ = 0;
  kernels::BackendBuffer ids_, positions_, token_seq_, slots_, block_tables_;
  kernels::BackendBuffer hidden_, normed_, q_, k_, v_, attn_, gate_, up_;
  kernels::BackendBuffer last_hidden_, logits_;
};

/// Wraps weights in a kernels::WeightView.
kernels::WeightView ViewWeight(const kernels::BackendBuffer& buffer, int32_t out_features,
                               int32_t in_features);

}  // namespace tq
