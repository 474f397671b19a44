// Qwen3MoeForCausalLM (transformers models/qwen3_moe/modeling_qwen3_moe.py,
// configuration_qwen3_moe.py; Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's
// attention (per-head q/k RMSNorm); sparse layers run `mlp.gate` over
// num_experts experts `mlp.experts.E.{gate,up,down}_proj` of
// moe_intermediate_size, no shared expert; the other layers (mlp_only_layers,
// decoder_sparse_step) a dense MLP of intermediate_size.
#include "engine/model/arch/families.h"

namespace tq::arch {
namespace {

void Parse(const ConfigFields& f, ModelConfig& c) {
  c.qk_norm = true;
  ParseQwenSlidingWindow(f, c);
  ParseQwenMoe(f, c, 128, 8, 768);
}

void Write(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["attention_bias"] = false;
  WriteQwenSlidingWindow(c, j);
  WriteQwenMoe(c, j);
}

}  // namespace

const ArchitectureSpec& Qwen3Moe() {
  static const ArchitectureSpec spec{"Qwen3MoeForCausalLM", "qwen3_moe", Parse, Write};
  return spec;
}

}  // namespace tq::arch
