// Which slice of each weight a tensor-parallel rank owns (Megatron-LM sharding).
#pragma once

#include <cstdint>

#include "engine/model/model_config.h"

namespace tq {

class Communicator;

/// One rank's share of a Llama model under Megatron-style tensor parallelism
/// (Shoeybi et al., "Megatron-LM", arXiv 1909.08053, section 3):
///   - q_proj rows by attention head, k/v_proj rows by KV head (column-parallel);
///     o_proj columns by attention head (row-parallel, all-reduce after);
///   - gate/up_proj rows by intermediate channel (column-parallel), down_proj
///     columns likewise (row-parallel, all-reduce after);
///   - lm_head rows by vocabulary (padded to world_size equal shards; logits
///     all-gathered); embeddings and norms replicated.
/// With fewer KV heads than ranks (world_size a multiple of the KV head count)
/// each KV head is replicated on the world_size / num_kv_heads ranks whose
/// query heads use it, and every rank holds one KV head.
struct TpPlan {
  int rank = 0;
  int world_size = 1;
  int32_t num_heads = 0, first_head = 0;        // attention (query) heads
  int32_t num_kv_heads = 0, first_kv_head = 0;  // KV heads (replicated when too few)
  int32_t intermediate = 0, first_intermediate = 0;
  // MoE (MoeConfig): every expert split along its intermediate width as a
  // dense MLP is (vLLM's default for experts under tensor parallelism), and
  // the shared expert likewise; routers replicated.
  int32_t moe_intermediate = 0, first_moe_intermediate = 0;
  int32_t shared_intermediate = 0, first_shared_intermediate = 0;
  // Expert parallelism (--enable-expert-parallel, vLLM's flag and placement):
  // this rank holds experts [first_expert, first_expert + num_local_experts)
  // whole (moe_intermediate then the full width) and runs only the pairs
  // routed to them; the shared expert stays split as above. Without it every
  // rank holds every expert (num_local_experts = num_experts).
  bool expert_parallel = false;
  int32_t num_local_experts = 0, first_expert = 0;

  bool HoldsExpert(int32_t e) const {
    return e >= first_expert && e < first_expert + num_local_experts;
  }
  int32_t vocab_shard = 0;  // rows of every rank's lm_head shard (padded)
  int32_t first_vocab = 0;
  int32_t vocab_rows = 0;  // real rows: vocab_shard, or fewer on the last rank
  // Null when world_size == 1, unless a test runs one rank through a
  // communicator (LlamaModel then calls its collectives as for N ranks).
  Communicator* comm = nullptr;

  bool kv_replicated(const ModelConfig& c) const { return c.num_key_value_heads < world_size; }
};

/// The plan of `rank` of `world_size`. Throws tq::Error naming
/// --tensor-parallel-size and the config.json field when the model cannot be
/// split that way (attention heads, intermediate_size or an MoE width not
/// divisible; KV heads neither divisible by nor dividing world_size).
/// With expert_parallel (MoE models only) the experts are placed whole,
/// num_experts / world_size per rank in order, and num_experts must be a
/// multiple of world_size.
TpPlan MakeTpPlan(const ModelConfig& config, int rank, int world_size,
                  bool expert_parallel = false);

}  // namespace tq
