// `tqserve make-random-model`: writes a random-weight Llama checkpoint in HF
// layout (engine/model/random_model.h) for speed and memory work without
// downloading real weights.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/random_model.h"
#include "server/cli_commands.h"

namespace tq {
namespace {

struct MakeRandomModelOptions {
  std::string out;
  std::string preset;
  std::optional<int32_t> hidden, inter, layers, heads, kv_heads, head_dim, vocab;
  std::optional<int32_t> experts, experts_per_tok, moe_inter, shared_inter;  // MoE presets
  std::optional<int32_t> sparse_step;
  std::vector<int32_t> mlp_only_layers;
  bool fused_experts = false;
  std::string dtype = "fp16";
  uint64_t seed = 0;
  uint64_t max_shard_bytes = 4ull << 30;
  std::string tokenizer;
  std::string tokenizer_json;
  std::string chat_template;  // a file of Jinja source
};

void Run(const MakeRandomModelOptions& o) {
  ModelConfig c;
  if (!o.preset.empty()) {
    c = RandomModelPreset(o.preset);
  } else {
    const std::pair<const std::optional<int32_t>*, const char*> required[] = {
        {&o.hidden, "--hidden-size"},
        {&o.inter, "--intermediate-size"},
        {&o.layers, "--num-layers"},
        {&o.heads, "--num-heads"},
        {&o.vocab, "--vocab-size"}};
    for (const auto& [v, flag] : required) {
      if (!*v) throw Error(std::string(flag) + ": required when --preset is not given");
    }
    c.architecture = "LlamaForCausalLM";
    c.rms_norm_eps = 1e-5;
    c.eos_token_ids = {2};
  }
  const bool mha = c.num_key_value_heads == c.num_attention_heads;
  if (o.hidden) c.hidden_size = *o.hidden;
  if (o.inter) c.intermediate_size = *o.inter;
  if (o.layers) c.num_hidden_layers = *o.layers;
  if (o.heads) c.num_attention_heads = *o.heads;
  if (o.vocab) c.vocab_size = *o.vocab;
  // Derived sizes follow the flags that changed unless given explicitly.
  if (o.kv_heads) {
    c.num_key_value_heads = *o.kv_heads;
  } else if (mha || o.preset.empty()) {
    c.num_key_value_heads = c.num_attention_heads;
  }
  if (o.head_dim) {
    c.head_dim = *o.head_dim;
  } else if (o.hidden || o.heads || o.preset.empty()) {
    if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0) {
      throw Error("--hidden-size must be a multiple of --num-heads when --head-dim is not given");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }

  if (o.experts || o.experts_per_tok || o.moe_inter || o.shared_inter || o.fused_experts ||
      o.sparse_step || !o.mlp_only_layers.empty()) {
    if (!c.moe.enabled()) {
      throw Error(
          "--num-experts, --num-experts-per-tok, --moe-intermediate-size, "
          "--shared-expert-intermediate-size, --decoder-sparse-step, --mlp-only-layers and "
          "--fused-experts need a mixture-of-experts --preset");
    }
    if ((o.sparse_step || !o.mlp_only_layers.empty()) && c.architecture == "MixtralForCausalLM") {
      throw Error("--decoder-sparse-step and --mlp-only-layers: Mixtral has no dense layers");
    }
    if (o.sparse_step) c.moe.decoder_sparse_step = *o.sparse_step;
    if (!o.mlp_only_layers.empty()) c.moe.mlp_only_layers = o.mlp_only_layers;
    if (o.experts) c.moe.num_experts = *o.experts;
    if (o.experts_per_tok) c.moe.num_experts_per_tok = *o.experts_per_tok;
    if (o.moe_inter) c.moe.moe_intermediate_size = *o.moe_inter;
    if (o.shared_inter) {
      if (c.moe.shared_expert_intermediate_size == 0) {
        throw Error("--shared-expert-intermediate-size: the preset has no shared expert");
      }
      c.moe.shared_expert_intermediate_size = *o.shared_inter;
    }
    // Mixtral's experts are intermediate_size wide (no moe_intermediate_size).
    if (c.architecture == "MixtralForCausalLM") {
      if (o.moe_inter) c.intermediate_size = *o.moe_inter;
      c.moe.moe_intermediate_size = c.intermediate_size;
    }
  } else if (c.architecture == "MixtralForCausalLM") {
    c.moe.moe_intermediate_size = c.intermediate_size;
  }

  RandomModelSpec spec;
  spec.config = c;
  spec.fused_experts = o.fused_experts;
  spec.tokenizer_json = o.tokenizer_json;
  if (!o.chat_template.empty()) {
    std::ifstream in(o.chat_template, std::ios::binary);
    if (!in) throw Error(o.chat_template + ": cannot open (--chat-template)");
    std::stringstream ss;
    ss << in.rdbuf();
    spec.chat_template = ss.str();
  }
  spec.seed = o.seed;
  spec.max_shard_bytes = o.max_shard_bytes;
  if (o.dtype == "f16" || o.dtype == "fp16" || o.dtype == "float16") {
    spec.dtype = TensorDtype::kF16;
  } else if (o.dtype == "bf16" || o.dtype == "bfloat16") {
    spec.dtype = TensorDtype::kBF16;
  } else if (o.dtype == "f32" || o.dtype == "fp32" || o.dtype == "float32") {
    spec.dtype = TensorDtype::kF32;
  } else {
    throw Error("--dtype: unknown dtype '" + o.dtype + "' (expected fp16, bf16 or fp32)");
  }

  WriteRandomModel(o.out, spec, o.tokenizer);
  const uint64_t params = NumParams(c);
  const uint64_t bytes = params * TensorDtypeBytes(spec.dtype);
  std::printf("wrote %s: %llu parameters (%.1fM), %llu bytes of %s weights (%.2f GiB)\n",
              o.out.c_str(), static_cast<unsigned long long>(params), params / 1e6,
              static_cast<unsigned long long>(bytes), TensorDtypeName(spec.dtype),
              bytes / double(1ull << 30));
  if (o.tokenizer.empty() && o.tokenizer_json.empty()) {
    std::printf(
        "note: no tokenizer written; `tqserve generate` needs one: pass --tokenizer-json "
        "FILE (a tokenizer.json) or --tokenizer FILE (a SentencePiece model, e.g. "
        "models/stories260K/tokenizer.model; ids beyond its vocabulary decode to "
        "nothing)\n");
  }
}

}  // namespace

void AddMakeRandomModelCommand(CLI::App& app) {
  auto opts = std::make_shared<MakeRandomModelOptions>();
  auto* cmd = app.add_subcommand("make-random-model", "Write a random-weight HF checkpoint");
  std::string presets;
  for (const auto& n : RandomModelPresetNames()) presets += (presets.empty() ? "" : ", ") + n;
  cmd->add_option("--out", opts->out, "Output directory")->required();
  cmd->add_option("--preset", opts->preset, "Size preset: " + presets);
  cmd->add_option("--hidden-size", opts->hidden, "Hidden size")->check(CLI::PositiveNumber);
  cmd->add_option("--intermediate-size", opts->inter, "MLP size")->check(CLI::PositiveNumber);
  cmd->add_option("--num-layers", opts->layers, "Decoder layers")->check(CLI::PositiveNumber);
  cmd->add_option("--num-heads", opts->heads, "Attention heads")->check(CLI::PositiveNumber);
  cmd->add_option("--num-kv-heads", opts->kv_heads, "KV heads (GQA); default: --num-heads")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", opts->head_dim, "Head dimension; default hidden/heads")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--vocab-size", opts->vocab, "Vocabulary size")->check(CLI::PositiveNumber);
  cmd->add_option("--num-experts", opts->experts, "MoE presets: experts per sparse layer")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-experts-per-tok", opts->experts_per_tok, "MoE presets: top-k")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--moe-intermediate-size", opts->moe_inter,
                  "MoE presets: each expert's MLP size (Mixtral: intermediate_size)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--shared-expert-intermediate-size", opts->shared_inter,
                  "Qwen1.5-MoE preset: the shared expert's MLP size")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--decoder-sparse-step", opts->sparse_step,
                  "Qwen MoE presets: every N-th layer is sparse (the others dense)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--mlp-only-layers", opts->mlp_only_layers,
                  "Qwen MoE presets: layer indices that run a dense MLP")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--fused-experts", opts->fused_experts,
                "MoE presets: write experts as fused 3-D tensors (experts.gate_up_proj "
                "[E, 2I, H], experts.down_proj [E, H, I]) instead of 2-D ones per expert");
  cmd->add_option("--dtype", opts->dtype,
                  "Weight dtype: fp16, bf16 or fp32 (f16/f32 also accepted)")
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "RNG seed")->capture_default_str();
  cmd->add_option("--max-shard-bytes", opts->max_shard_bytes,
                  "Split weights into shards of at most this many bytes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--tokenizer", opts->tokenizer,
                  "SentencePiece tokenizer.model to copy into the checkpoint (default: none)");
  cmd->add_option("--tokenizer-json", opts->tokenizer_json,
                  "Hugging Face tokenizer.json to copy into the checkpoint, with the "
                  "tokenizer_config.json beside it when there is one (default: none)");
  cmd->add_option("--chat-template", opts->chat_template,
                  "File of Jinja source to write as tokenizer_config.json's chat_template");
  cmd->callback([opts] { Run(*opts); });
}

}  // namespace tq
