// LlamaForCausalLM (transformers models/llama/modeling_llama.py): the base
// decoder, [RMSNorm, GQA attention with RoPE, RMSNorm, SwiGLU MLP] per
// layer; its blocks need no family-specific fields.
#include "engine/model/arch/families.h"

namespace tq::arch {
namespace {

void Parse(const ConfigFields& f, ModelConfig& c) {
  ParseSlidingWindow(f, c);
}

void Write(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["attention_bias"] = false;
  WriteSlidingWindow(c, j);
}

}  // namespace

const ArchitectureSpec& Llama() {
  static const ArchitectureSpec spec{"LlamaForCausalLM", "llama", Parse, Write};
  return spec;
}

}  // namespace tq::arch
