// Random-weight Llama checkpoints at real shapes, for speed and memory work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"

namespace tq {

/// Shape and format of a random checkpoint.
struct RandomModelSpec {
  ModelConfig config;  // sizes; an empty architecture means LlamaForCausalLM
  TensorDtype dtype = TensorDtype::kF16;
  uint64_t seed = 0;
  /// Shard the weights when larger than this (model.safetensors.index.json).
  uint64_t max_shard_bytes = 4ull << 30;
  /// A Hugging Face tokenizer.json to copy beside the weights (empty: none);
  /// the tokenizer_config.json in its directory, when there is one, is
  /// copied too (its chat template, special tokens) instead of the default.
  std::string tokenizer_json;
  /// Jinja source written as tokenizer_config.json's chat_template (empty:
  /// keep the copied one, or none).
  std::string chat_template;
  /// MoE: write each sparse layer's experts as transformers v5's fused 3-D
  /// tensors <block>.experts.gate_up_proj [E, 2I, hidden] and
  /// <block>.experts.down_proj [E, hidden, I] instead of 2-D ones per expert.
  bool fused_experts = false;
};

/// Named presets: "llama2-7b" (32 layers, hidden 4096, 32 heads, head_dim 128,
/// inter 11008, vocab 32000), "llama3-8b" (GQA 8 KV heads, inter 14336, vocab
/// 128256, rope_theta 500000), "tiny-100m" (~100M parameters, head_dim 64,
/// vocab 32000), and the real shapes (config.json) of Llama-3.2-1B
/// "llama3.2-1b" (llama3 rope scaling, tied), Qwen2.5-0.5B "qwen2.5-0.5b"
/// (q/k/v biases, tied), Qwen3-0.6B "qwen3-0.6b" (q/k norms, head_dim 128 !=
/// hidden/heads, tied) and SmolLM2-135M "smollm2-135m" (Llama, tied), with
/// their instruct models' BOS/EOS ids; mixtures of experts at the real
/// shapes of Qwen3-30B-A3B "qwen3-30b-a3b" (128 experts of 768, top 8,
/// renormalised), Mixtral-8x7B "mixtral-8x7b" (8 of 14336, top 2) and
/// Qwen1.5-MoE-A2.7B "qwen1.5-moe-a2.7b" (60 of 1408, top 4, a shared expert
/// of 5632). Throws tq::Error on an unknown name.
ModelConfig RandomModelPreset(const std::string& name);
std::vector<std::string> RandomModelPresetNames();

/// Parameters of a model with this config (MoE: every expert counted).
uint64_t NumParams(const ModelConfig& config);

/// Writes a loadable HF directory: config.json, generation_config.json,
/// tokenizer_config.json, model.safetensors (or shards + index) with weights
/// drawn N(0, 0.02²) (layernorms = 1; biases N(0, 0.1²), q/k norms N(1,
/// 0.2²), MoE routers and shared-expert gates N(0, 0.2²)), tokenizer.model copied from
/// `tokenizer_model_path` when non-empty and spec.tokenizer_json as tokenizer.json (their ids must
/// be below vocab_size). Streams tensors so multi-GB models need little memory. Throws tq::Error on
/// I/O failure or a tokenizer that does not fit.
void WriteRandomModel(const std::string& out_dir, const RandomModelSpec& spec,
                      const std::string& tokenizer_model_path);

}  // namespace tq
