// Qwen2ForCausalLM (transformers models/qwen2/modeling_qwen2.py): Llama's
// blocks with biases on q/k/v (hard-coded there; never on o_proj).
#include "engine/model/arch/families.h"

namespace tq::arch {
namespace {

void Parse(const ConfigFields& f, ModelConfig& c) {
  c.qkv_bias = true;
  ParseQwenSlidingWindow(f, c);
}

void Write(const ModelConfig& c, nlohmann::ordered_json& j) {
  WriteQwenSlidingWindow(c, j);
}

}  // namespace

const ArchitectureSpec& Qwen2() {
  static const ArchitectureSpec spec{"Qwen2ForCausalLM", "qwen2", Parse, Write};
  return spec;
}

}  // namespace tq::arch
