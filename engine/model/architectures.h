// The model registry: architecture name -> config parser, checkpoint names
// and the decoder's blocks, one file per family in engine/model/arch/ (as
// vLLM's model_executor/models/). The decoder (llama_model.h) is built from
// blocks that ModelConfig describes as data (attention: q/k/v biases, q/k
// norms; feed-forward: a dense SwiGLU MLP or the sparse MoE block of
// MoeConfig), so a family adds a registry entry, not a branch in the forward
// pass. docs/architecture.md "Model registry".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/config_fields.h"
#include "engine/model/model_config.h"

namespace tq {

/// One registered architecture. Both hooks are plain functions of the
/// family's file; neither may be null.
struct ArchitectureSpec {
  std::string_view architecture;  // config.json "architectures"[0]: "MixtralForCausalLM"
  std::string_view model_type;    // config.json "model_type": "mixtral"
  /// Reads the family's own fields into `c` after the common ones
  /// (ParseConfig: sizes, RoPE, token ids, hidden_act, mlp_bias): attention
  /// variant, sliding window, MoE block. Throws tq::Error (ConfigFail) naming
  /// a feature the forward pass does not implement; training-only keys are
  /// ignored.
  void (*parse_config)(const ConfigFields& f, ModelConfig& c);
  /// Writes the family's own fields for `tqserve make-random-model`, the
  /// inverse of parse_config (same key names as transformers' config class).
  void (*write_config)(const ModelConfig& c, nlohmann::ordered_json& j);
};

/// The entry for config.json's "architectures"[0]; nullptr when unknown.
const ArchitectureSpec* FindArchitecture(std::string_view architecture);
/// The entry for config.json's "model_type" (configs without
/// "architectures"); nullptr when unknown.
const ArchitectureSpec* FindArchitectureByModelType(std::string_view model_type);
/// "LlamaForCausalLM, MistralForCausalLM, ...": for error messages.
std::string SupportedArchitectures();

}  // namespace tq
