// The registry's families (one file each) and the config pieces they share.
// Internal to engine/model: the registry (architectures.cc) lists the
// families; everything else looks architectures up through architectures.h.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/model/architectures.h"

namespace tq::arch {

/// transformers' LlamaForCausalLM (modeling_llama.py).
const ArchitectureSpec& Llama();
/// MistralForCausalLM (modeling_mistral.py): Llama's blocks; sliding_window.
const ArchitectureSpec& Mistral();
/// Qwen2ForCausalLM (modeling_qwen2.py): q/k/v biases.
const ArchitectureSpec& Qwen2();
/// Qwen3ForCausalLM (modeling_qwen3.py): per-head q/k RMSNorm.
const ArchitectureSpec& Qwen3();
/// MixtralForCausalLM (modeling_mixtral.py): every layer a sparse block.
const ArchitectureSpec& Mixtral();
/// Qwen2MoeForCausalLM (modeling_qwen2_moe.py): q/k/v biases, shared expert.
const ArchitectureSpec& Qwen2Moe();
/// Qwen3MoeForCausalLM (modeling_qwen3_moe.py): q/k norms, sparse blocks.
const ArchitectureSpec& Qwen3Moe();

/// Qwen2/Qwen3 families: sliding_window applies only when use_sliding_window
/// is true. The context is capped at the window (ModelConfig::MaxContext):
/// full attention over a context no longer than the window equals sliding
/// attention, whichever layers max_window_layers says slide.
void ParseQwenSlidingWindow(const ConfigFields& f, ModelConfig& c);
void WriteQwenSlidingWindow(const ModelConfig& c, nlohmann::ordered_json& j);
/// Llama/Mistral/Mixtral: sliding_window, when set, always applies.
void ParseSlidingWindow(const ConfigFields& f, ModelConfig& c);
void WriteSlidingWindow(const ModelConfig& c, nlohmann::ordered_json& j);

/// The Qwen MoE block's fields (configuration_qwen2_moe.py /
/// configuration_qwen3_moe.py; absent keys take transformers' defaults,
/// given here): num_experts, num_experts_per_tok, moe_intermediate_size,
/// norm_topk_prob (false), decoder_sparse_step (1), mlp_only_layers ([]).
/// Training-only keys (router_aux_loss_coef, output_router_logits) are
/// ignored. Throws when top-k exceeds the expert count.
void ParseQwenMoe(const ConfigFields& f, ModelConfig& c, int32_t default_experts,
                  int32_t default_top_k, int32_t default_moe_intermediate);
void WriteQwenMoe(const ModelConfig& c, nlohmann::ordered_json& j);
/// Throws "<file>: num_experts_per_tok N exceeds the E experts" etc.
void CheckMoe(const ConfigFields& f, const ModelConfig& c);

}  // namespace tq::arch
