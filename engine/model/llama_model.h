// The Llama decoder forward pass over a varlen batch and the paged KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/model/forward_observer.h"
#include "engine/model/llama_weights.h"
#include "engine/model/model_config.h"
#include "engine/model/moe_block.h"
#include "engine/parallel/tp_plan.h"
#include "kernels/backend.h"

namespace tq {

class DecodeGraphRunner;

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

/// The decoder of every registered architecture (engine/model/architectures.h),
/// LlamaForCausalLM's structure (HF transformers modeling_llama): embedding,
/// N x [RMSNorm, GQA attention with RoPE, residual, RMSNorm, feed-forward
/// block, residual], final RMSNorm, lm_head. The blocks are chosen by data,
/// not by architecture name: attention with the q/k/v biases (Qwen2) and
/// per-head q/k RMSNorm before RoPE (Qwen3) that ModelConfig asks for; the
/// feed-forward block of each layer a dense SwiGLU MLP, or the sparse MoE
/// block (MoeBlock: Mixtral, Qwen2-MoE, Qwen3-MoE) where the layer's
/// weights hold one (MoeConfig::Sparse). MoE layers need a host-memory
/// backend (the CPU); the constructor refuses a device backend. Thread
/// ownership: the engine thread; Forward is not reentrant (it reuses
/// activation buffers).
///
/// Tensor parallelism (docs/parallelism.md): a LlamaModel is one rank's shard,
/// with its TpPlan, weight slices (LoadLlamaWeights with the plan), backend and
/// KV cache of its KV heads; o_proj and down_proj outputs are all-reduced over
/// plan.comm and the lm_head shards' logits all-gathered. The shard does not
/// drive the others: ModelExecutor (engine/runtime/model_executor.h) runs the
/// same batch through every rank's Forward on that rank's thread.
class LlamaModel {
 public:
  LlamaModel(const ModelConfig& config, LlamaWeights weights, kernels::Backend* backend,
             const TpPlan& plan = {});
  ~LlamaModel();

  /// Runs the batch, writing each token's K/V into `cache` (this rank's KV
  /// heads), and returns the logits of batch.logit_indices in *logits
  /// ([logit_indices.size(), vocab], row-major, host memory; under tensor
  /// parallelism gathered from every rank, which must run the same batch
  /// concurrently). Throws std::invalid_argument on a malformed batch (token
  /// id out of range, sizes that disagree) or a cache of other KV heads.
  /// logits == nullptr leaves them in backend memory only (device_logits()).
  void Forward(const ForwardBatch& batch, PagedKvCache& cache, std::vector<float>* logits);

  /// The last Forward's logits in backend memory, [logit_indices.size(),
  /// vocab] row-major, valid until the next Forward; nullptr under tensor
  /// parallelism (rank 0 holds the gathered shards as [rank][row][shard]).
  const float* device_logits() const {
    return plan_.world_size == 1 ? logits_.as<float>() : nullptr;
  }
  kernels::Backend* backend() const { return backend_; }

  /// Shows this model's forward passes to `observer` (calibration and the
  /// quantization search: forward_observer.h); nullptr removes it. Not
  /// owned: it must outlive the Forward calls it sees. Under tensor
  /// parallelism each rank's model takes its own. Prefer
  /// ScopedForwardObserver, which removes it on every exit path.
  void SetObserver(ForwardObserver* observer) { observer_ = observer; }

  /// Decode steps from CUDA graphs (docs/cuda.md "CUDA graphs"): batches
  /// where every sequence has one token, at most max_batch sequences and
  /// block tables at most max_blocks_per_seq wide run padded to a bucket size
  /// from a graph captured per bucket; every other batch, every batch under
  /// tensor parallelism and every batch while an observer is set runs
  /// eagerly. A backend without graphs (the CPU) runs everything eagerly,
  /// unless eager_fallback (tests: the padded bucket steps run eagerly).
  /// max_batch <= 0 turns graphs off. Throws std::invalid_argument when
  /// max_blocks_per_seq < 1.
  void EnableDecodeGraphs(int32_t max_batch, int32_t max_blocks_per_seq,
                          bool eager_fallback = false);
  /// The graph runner (null while graphs are off), for statistics.
  const DecodeGraphRunner* decode_graphs() const { return graphs_.get(); }

  const ModelConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }
  const TpPlan& tp_plan() const { return plan_; }

 private:
  friend class DecodeGraphRunner;

  // Backend-memory inputs of one step (ForwardBatch's vectors, uploaded).
  struct StepInputs {
    const int32_t* ids = nullptr;
    const int32_t* positions = nullptr;
    const int32_t* token_seq = nullptr;
    const int32_t* host_token_seq = nullptr;  // host copy (eager steps): CUDA tiles prefill
    const int32_t* slots = nullptr;
    const int32_t* block_tables = nullptr;
    int32_t num_tokens = 0;
    int32_t max_blocks_per_seq = 0;
  };

  // Forward's steps: the batch's vectors into backend memory; the ops; the
  // logits to the host (all-gathered from every rank under TP).
  StepInputs UploadInputs(const ForwardBatch& batch);
  void ReturnLogits(int32_t num_logits, std::vector<float>* logits);
  // The forward pass's backend ops: embedding, layers, final norm and
  // lm_head into logits_ ([logit_indices.size(), vocab_shard]). Backend ops
  // only, so a graph can capture it when no observer is set and there is one
  // rank.
  void ForwardOps(const StepInputs& in, const std::vector<int32_t>& logit_indices,
                  PagedKvCache& cache);
  // TP: sums the row-parallel partial outputs in hidden_ across ranks.
  void AllReduceHidden(int32_t num_tokens);
  void EnsureWorkspace(int32_t num_tokens, int32_t num_logits);
  void Attention(int32_t layer, const StepInputs& in, PagedKvCache& cache);
  void Mlp(int32_t layer, int32_t num_tokens);
  void SparseMoe(int32_t layer, int32_t num_tokens);

  ModelConfig config_;
  LlamaWeights weights_;
  kernels::Backend* backend_;
  TpPlan plan_;
  kernels::BackendBuffer inv_freq_;      // [head_dim / 2]
  ForwardObserver* observer_ = nullptr;  // calibration only; null while serving
  // Host copy of what the observer sees (backend memory may be a device's).
  std::vector<float> observed_;
  const float* ObservedCopy(const float* x, size_t n);
  void ObserveLinearInput(int32_t layer, LinearInput input, const float* x, int32_t rows,
                          int32_t cols);
  void ObserveKeys(int32_t layer, int32_t num_tokens);

  // Activation workspace, grown on demand (backend memory); the epoch counts
  // the growths (captured graphs point at these buffers).
  uint64_t workspace_epoch_ = 0;
  std::unique_ptr<DecodeGraphRunner> graphs_;
  int32_t capacity_tokens_ = 0;
  int32_t capacity_logits_ = 0;
  kernels::BackendBuffer ids_, positions_, token_seq_, slots_, block_tables_;
  kernels::BackendBuffer hidden_, normed_, q_, k_, v_, attn_, gate_, up_;
  kernels::BackendBuffer last_hidden_, logits_, gathered_logits_;
  kernels::BackendBuffer moe_out_;  // [tokens, hidden]: a sparse block's output
  MoeBlock moe_;
  std::vector<float> gathered_host_;  // TP rank 0: the all-gathered logit shards
};

/// Sets `observer` on `model` for the scope and removes it on every exit
/// path, so that a throwing forward pass never leaves the model pointing at a
/// dead observer.
class ScopedForwardObserver {
 public:
  ScopedForwardObserver(LlamaModel& model, ForwardObserver* observer) : model_(model) {
    model_.SetObserver(observer);
  }
  ~ScopedForwardObserver() { model_.SetObserver(nullptr); }
  ScopedForwardObserver(const ScopedForwardObserver&) = delete;
  ScopedForwardObserver& operator=(const ScopedForwardObserver&) = delete;

 private:
  LlamaModel& model_;
};

/// The weights' MemorySummary() for the log; under tensor parallelism it is
/// rank 0's shard and says so ("rank 0 of 2: weights ...").
std::string WeightsSummary(const LlamaModel& model);

}  // namespace tq
