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
/// split that way (attention heads or intermediate_size not divisible; KV
/// heads neither divisible by nor dividing world_size).
TpPlan MakeTpPlan(const ModelConfig& config, int rank, int world_size);

}  // namespace tq
