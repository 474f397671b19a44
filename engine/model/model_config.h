// Model hyper-parameters read from a Hugging Face checkpoint directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tq {

/// RoPE frequency scaling as HF config.json "rope_scaling" describes it.
/// Supported types: "default" (none), "linear", "llama3" (Llama 3.1 rule).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

/// The sparse mixture-of-experts block of an MoE architecture: transformers'
/// MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock (with a shared expert) and
/// Qwen3MoeSparseMoeBlock. The router (`<block>.gate`, [num_experts, hidden])
/// scores every expert; softmax over them in fp32, the top num_experts_per_tok
/// experts (each a SwiGLU MLP of moe_intermediate_size), their probabilities
/// renormalised to sum 1 when norm_topk_prob; output = sum of weight x expert
/// output (+ sigmoid(shared_expert_gate . x) x shared_expert(x) for Qwen2-MoE).
struct MoeConfig {
  int32_t num_experts = 0;  // 0: a dense model
  int32_t num_experts_per_tok = 0;
  int32_t moe_intermediate_size = 0;
  int32_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  bool norm_topk_prob = false;                  // Mixtral: always true
  // Layer L is sparse when L is not in mlp_only_layers and (L + 1) is a
  // multiple of decoder_sparse_step (modeling_qwen2_moe's Qwen2MoeDecoderLayer);
  // the others run a dense MLP of intermediate_size.
  int32_t decoder_sparse_step = 1;
  std::vector<int32_t> mlp_only_layers;
  // Checkpoint names below model.layers.N.: the block ("mlp", Mixtral's
  // "block_sparse_moe") and each expert's projections below
  // <block>.experts.E. (Mixtral: w1, w3, w2).
  std::string block = "mlp";
  std::string gate_proj = "gate_proj", up_proj = "up_proj", down_proj = "down_proj";

  bool enabled() const { return num_experts > 0; }
  /// Whether decoder layer `layer` runs the sparse block.
  bool Sparse(int32_t layer) const;
};

/// config.json of a checkpoint of a registered architecture
/// (engine/model/architectures.h: transformers' LlamaConfig, MistralConfig,
/// Qwen2Config, Qwen3Config, MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig),
/// plus the token ids of generation_config.json / tokenizer_config.json.
struct ModelConfig {
  std::string architecture;  // config.json "architectures"[0], e.g. "LlamaForCausalLM"
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_hidden_layers = 0;
  int32_t num_attention_heads = 0;
  int32_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int32_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  int32_t vocab_size = 0;
  int32_t max_position_embeddings = 2048;
  int32_t sliding_window = 0;  // Mistral, Qwen2/3 use_sliding_window; 0 = none. Contexts are
                               // capped at it (attention over the whole context is then exact).
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  // q_proj/k_proj/v_proj have biases (Qwen2; modeling_qwen2 hard-codes them;
  // attention_bias true, biases on all four projections, is refused).
  bool qkv_bias = false;
  // Qwen3: RMSNorm over each head's head_dim channels of q and k
  // (self_attn.q_norm/k_norm, weight [head_dim]) before RoPE.
  bool qk_norm = false;
  MoeConfig moe;            // mixture-of-experts layers (num_experts 0: none)
  std::string torch_dtype;  // informational
  int32_t bos_token_id = 1;
  std::vector<int32_t> eos_token_ids;  // generation_config.json overrides config.json

  /// RoPE inverse frequencies [head_dim / 2] with rope_scaling applied
  /// (HF modeling_rope_utils: default, linear, llama3).
  std::vector<float> RopeInvFreq() const;
  /// Longest context this engine runs the model at: max_position_embeddings,
  /// or sliding_window when smaller (sliding attention is not implemented).
  int32_t MaxContext() const {
    return sliding_window > 0 && sliding_window < max_position_embeddings ? sliding_window
                                                                          : max_position_embeddings;
  }
};

/// A per-layer fp32 vector tensor besides the two layernorms: an attention
/// bias or a q/k norm weight, as the config asks for.
struct LayerVectorTensor {
  std::string short_name;  // "self_attn.q_proj.bias", "self_attn.k_norm.weight", ...
  int64_t size = 0;        // elements
};
/// The layer's bias and q/k norm tensors (HF names below model.layers.N.),
/// in checkpoint order; empty for a plain Llama.
std::vector<LayerVectorTensor> LayerVectorTensors(const ModelConfig& config);

/// Generation defaults from generation_config.json (all optional).
struct GenerationDefaults {
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = 0;  // 0 = disabled
  double repetition_penalty = 1.0;
  bool present = false;  // generation_config.json was found
};

/// Tokenizer settings from tokenizer_config.json.
struct TokenizerSettings {
  bool add_bos_token = true;
  bool add_eos_token = false;
  // transformers' tokenizer class ("LlamaTokenizerFast", "Qwen2Tokenizer");
  // empty when absent. The Llama classes take add_bos/eos_token over the
  // tokenizer.json post-processor (engine/tokenizer/hf_tokenizer.h).
  std::string tokenizer_class;
  std::string chat_template;  // Jinja source, empty when absent
  // Special-token strings ("<s>", "<|begin_of_text|>"), the chat template's
  // bos_token/eos_token; empty when absent.
  std::string bos_token;
  std::string eos_token;
};

/// Everything read from the small JSON files of a model directory.
struct ModelFiles {
  std::string dir;
  ModelConfig config;
  GenerationDefaults generation;
  TokenizerSettings tokenizer;
};

/// Reads config.json (required), generation_config.json and
/// tokenizer_config.json (optional) from `dir` and validates them.
/// Throws tq::Error naming the file and the problem: missing directory or
/// config.json, invalid JSON, an architecture the registry lacks
/// (SupportedArchitectures()), a config feature the forward pass does not
/// implement (mlp_bias, another hidden_act, rope_scaling other than
/// linear/llama3, attention_bias), missing or
/// non-positive sizes, heads that do not divide.
ModelFiles LoadModelFiles(const std::string& dir);

}  // namespace tq
