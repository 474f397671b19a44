// MistralForCausalLM (transformers models/mistral/modeling_mistral.py):
// Llama's blocks and fields; sliding_window caps the context
// (ModelConfig::MaxContext).
#include "engine/model/arch/families.h"

namespace tq::arch {

const ArchitectureSpec& Mistral() {
  static const ArchitectureSpec spec{"MistralForCausalLM", "mistral", Llama().parse_config,
                                     Llama().write_config};
  return spec;
}

}  // namespace tq::arch
