// Qwen3ForCausalLM (transformers models/qwen3/modeling_qwen3.py): Llama's
// blocks with an RMSNorm over each head's head_dim channels of q and k
// (self_attn.q_norm / k_norm) before RoPE.
#include "engine/model/arch/families.h"

namespace tq::arch {
namespace {

void Parse(const ConfigFields& f, ModelConfig& c) {
  c.qk_norm = true;
  ParseQwenSlidingWindow(f, c);
}

void Write(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["attention_bias"] = false;
  WriteQwenSlidingWindow(c, j);
}

}  // namespace

const ArchitectureSpec& Qwen3() {
  static const ArchitectureSpec spec{"Qwen3ForCausalLM", "qwen3", Parse, Write};
  return spec;
}

}  // namespace tq::arch
