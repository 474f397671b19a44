// The sparse mixture-of-experts block of one decoder layer on a host-memory
// backend (the CPU): route, group the (token, expert) pairs by expert, run
// each selected expert's rows through the backend's matmul kernels, combine.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/llama_weights.h"
#include "engine/model/model_config.h"
#include "kernels/backend.h"

namespace tq {

/// One token's routing: its top-k experts and their weights, in descending
/// probability order (ties: the lower expert index first).
struct TokenRoute {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

/// transformers' router (MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock /
/// Qwen3MoeSparseMoeBlock): softmax over all experts in fp32, the
/// num_experts_per_tok largest probabilities, divided by their sum when
/// norm_topk_prob. logits [num_experts]. Pure function of its inputs.
TokenRoute RouteToken(const float* logits, const MoeConfig& config);

/// Runs MoeLayerWeights on a batch. Owns its scratch buffers (backend
/// memory, grown on demand); one instance per model, driven by the thread
/// that runs the model's forward pass. The backend's memory must be the
/// host's (Capabilities().device_memory false): routing, grouping and the
/// weighted combine read it directly.
///
/// Every expert runs only the rows routed to it (vLLM's align/permute step,
/// here a counting sort by expert, tokens in batch order within an expert),
/// so a decode step reads only the selected experts' weights; each token's
/// output sums its experts' rows in its own top-k order, so it does not
/// depend on its batch neighbours or the thread count (the CPU matmul
/// kernels give a row alone and the same row in a batch the same bits).
class MoeBlock {
 public:
  explicit MoeBlock(kernels::Backend* backend) : backend_(backend) {}

  /// out [n, hidden] = the block's output for x [n, hidden] (routed experts
  /// weighted by the router, plus the gated shared expert when the weights
  /// have one). Under tensor parallelism the experts hold their
  /// intermediate slices, or (expert parallelism) only this rank's experts
  /// are loaded and the others' pairs are skipped; either way out is this
  /// rank's partial sum (the caller all-reduces).
  void Forward(const MoeConfig& config, const MoeLayerWeights& w, const float* x, int32_t n,
               int32_t hidden, float* out);

 private:
  float* Scratch(kernels::BackendBuffer& buf, size_t floats);

  kernels::Backend* backend_;
  kernels::BackendBuffer logits_, xperm_, gate_, up_, yperm_, shared_logit_;
  std::vector<TokenRoute> routes_;
  std::vector<int32_t> count_, offset_, pair_row_;  // pair (t, j) -> row of xperm_/yperm_
};

}  // namespace tq
