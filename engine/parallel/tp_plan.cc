#include "engine/parallel/tp_plan.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "engine/common/error.h"

namespace tq {

TpPlan MakeTpPlan(const ModelConfig& c, int rank, int world_size, bool expert_parallel) {
  const std::string flag = "--tensor-parallel-size " + std::to_string(world_size);
  if (world_size < 1) throw Error(flag + ": must be >= 1");
  if (rank < 0 || rank >= world_size) throw Error(flag + ": rank out of range");
  if (c.num_attention_heads % world_size != 0) {
    throw Error(flag + " does not divide num_attention_heads " +
                std::to_string(c.num_attention_heads) + " (config.json)");
  }
  if (c.intermediate_size % world_size != 0) {
    throw Error(flag + " does not divide intermediate_size " + std::to_string(c.intermediate_size) +
                " (config.json)");
  }
  if (expert_parallel && !c.moe.enabled()) {
    throw Error("--enable-expert-parallel: " + c.architecture +
                " has no experts (config.json has no mixture-of-experts layers)");
  }
  if (expert_parallel && c.moe.num_experts % world_size != 0) {
    throw Error(flag + " does not divide num_experts " + std::to_string(c.moe.num_experts) +
                " (config.json) for --enable-expert-parallel");
  }
  for (const auto& [width, field] :
       {std::pair{c.moe.moe_intermediate_size, "moe_intermediate_size"},
        std::pair{c.moe.shared_expert_intermediate_size, "shared_expert_intermediate_size"}}) {
    const bool split = !expert_parallel || std::string_view(field) != "moe_intermediate_size";
    if (c.moe.enabled() && split && width % world_size != 0) {
      throw Error(flag + " does not divide " + field + " " + std::to_string(width) +
                  " (config.json)");
    }
  }
  const int32_t kv = c.num_key_value_heads;
  if (kv % world_size != 0 && world_size % kv != 0) {
    throw Error(flag + ": num_key_value_heads " + std::to_string(kv) +
                " (config.json) must divide it or be divisible by it");
  }
  TpPlan p;
  p.rank = rank;
  p.world_size = world_size;
  p.num_heads = c.num_attention_heads / world_size;
  p.first_head = p.num_heads * rank;
  if (kv >= world_size) {
    p.num_kv_heads = kv / world_size;
    p.first_kv_head = p.num_kv_heads * rank;
  } else {
    // The KV head of this rank's query heads (all in one GQA group, since
    // world_size / kv ranks share each group).
    p.num_kv_heads = 1;
    p.first_kv_head = p.first_head / (c.num_attention_heads / kv);
  }
  p.intermediate = c.intermediate_size / world_size;
  p.first_intermediate = p.intermediate * rank;
  if (c.moe.enabled()) {
    p.expert_parallel = expert_parallel;
    const int experts_split = expert_parallel ? world_size : 1;
    const int width_split = expert_parallel ? 1 : world_size;
    p.num_local_experts = c.moe.num_experts / experts_split;
    p.first_expert = expert_parallel ? p.num_local_experts * rank : 0;
    p.moe_intermediate = c.moe.moe_intermediate_size / width_split;
    p.first_moe_intermediate = expert_parallel ? 0 : p.moe_intermediate * rank;
    p.shared_intermediate = c.moe.shared_expert_intermediate_size / world_size;
    p.first_shared_intermediate = p.shared_intermediate * rank;
  }
  p.vocab_shard = (c.vocab_size + world_size - 1) / world_size;
  p.first_vocab = p.vocab_shard * rank;
  p.vocab_rows = std::max(0, std::min(p.vocab_shard, c.vocab_size - p.first_vocab));
  return p;
}

}  // namespace tq
