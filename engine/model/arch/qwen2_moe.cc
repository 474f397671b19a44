// Qwen2MoeForCausalLM (transformers models/qwen2_moe/modeling_qwen2_moe.py,
// configuration_qwen2_moe.py; Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's
// attention (q/k/v biases while qkv_bias, default true); sparse layers
// (MoeConfig::Sparse) run `mlp.gate` over num_experts experts
// `mlp.experts.E.{gate,up,down}_proj` of moe_intermediate_size plus a shared
// expert `mlp.shared_expert.*` of shared_expert_intermediate_size scaled by
// sigmoid(mlp.shared_expert_gate . x); the other layers a dense MLP of
// intermediate_size.
#include "engine/model/arch/families.h"

namespace tq::arch {
namespace {

void Parse(const ConfigFields& f, ModelConfig& c) {
  c.qkv_bias = f.Bool("qkv_bias", true);
  ParseQwenSlidingWindow(f, c);
  ParseQwenMoe(f, c, 60, 4, 1408);
  c.moe.shared_expert_intermediate_size = f.Int("shared_expert_intermediate_size", 1, 5632);
}

void Write(const ModelConfig& c, nlohmann::ordered_json& j) {
  WriteQwenSlidingWindow(c, j);
  WriteQwenMoe(c, j);
  j["shared_expert_intermediate_size"] = c.moe.shared_expert_intermediate_size;
}

}  // namespace

const ArchitectureSpec& Qwen2Moe() {
  static const ArchitectureSpec spec{"Qwen2MoeForCausalLM", "qwen2_moe", Parse, Write};
  return spec;
}

}  // namespace tq::arch
