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
  ModelConfig config;  // sizes; architecture is set to LlamaForCausalLM
  TensorDtype dtype = TensorDtype::kF16;
  uint64_t seed = 0;
  /// Shard the weights when larger than this (model.safetensors.index.json).
  uint64_t max_shard_bytes = 4ull << 30;
};

/// Named presets: "llama2-7b" (32 layers, hidden 4096, 32 heads, head_dim 128,
/// inter 11008, vocab 32000), "llama3-8b" (GQA 8 KV heads, inter 14336, vocab
/// 128256, rope_theta 500000), "tiny-100m" (~100M parameters, head_dim 64,
/// vocab 32000). Throws tq::Error on an unknown name.
ModelConfig RandomModelPreset(const std::string& name);
std::vector<std::string> RandomModelPresetNames();

/// Writes a loadable HF directory: config.json, generation_config.json,
/// tokenizer_config.json, model.safetensors (or shards + index) with weights
/// drawn N(0, 0.02²) (norms = 1), and tokenizer.model copied from
/// `tokenizer_model_path` when non-empty (its vocab must not exceed
/// vocab_size). Streams tensors so multi-GB models need little memory.
/// Throws tq::Error on I/O failure.
void WriteRandomModel(const std::string& out_dir, const RandomModelSpec& spec,
                      const std::string& tokenizer_model_path);

}  // namespace tq
