// MixtralForCausalLM (transformers models/mixtral/modeling_mixtral.py and
// configuration_mixtral.py): Mistral's attention; every layer's MLP is a
// sparse block `block_sparse_moe` with router `gate` and experts
// `experts.E.w1` (gate), `w3` (up), `w2` (down), each of intermediate_size.
// Routing: softmax over num_local_experts in fp32, top num_experts_per_tok,
// always renormalised. router_jitter_noise, router_aux_loss_coef and
// output_router_logits act only in training and are ignored.
#include "engine/model/arch/families.h"

namespace tq::arch {
namespace {

void Parse(const ConfigFields& f, ModelConfig& c) {
  ParseSlidingWindow(f, c);
  MoeConfig& m = c.moe;
  m.num_experts = f.Int("num_local_experts", 1, 8);
  m.num_experts_per_tok = f.Int("num_experts_per_tok", 1, 2);
  m.moe_intermediate_size = c.intermediate_size;
  m.norm_topk_prob = true;
  m.block = "block_sparse_moe";
  m.gate_proj = "w1";
  m.up_proj = "w3";
  m.down_proj = "w2";
  CheckMoe(f, c);
}

void Write(const ModelConfig& c, nlohmann::ordered_json& j) {
  WriteSlidingWindow(c, j);
  j["num_local_experts"] = c.moe.num_experts;
  j["num_experts_per_tok"] = c.moe.num_experts_per_tok;
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = 0.02;
  j["router_jitter_noise"] = 0.0;
}

}  // namespace

const ArchitectureSpec& Mixtral() {
  static const ArchitectureSpec spec{"MixtralForCausalLM", "mixtral", Parse, Write};
  return spec;
}

}  // namespace tq::arch
