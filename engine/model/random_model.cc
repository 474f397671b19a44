// Random-weight Llama checkpoints in HF layout. Weights are deterministic in
// (seed, tensor name, position) and independent of the thread count: each
// tensor is cut into fixed chunks with their own splitmix64 stream, drawn by
// all hardware threads, so writing a 7B model is bound by the disk.
#include "engine/model/random_model.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/common/error.h"
#include "engine/kv/block_hash.h"
#include "engine/model/architectures.h"
#include "kernels/half.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr float kWeightStd = 0.02f;  // HF LlamaConfig.initializer_range
constexpr size_t kChunkElems = size_t{1} << 20;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Approximately N(0, 1): Irwin-Hall sum of four 16-bit uniforms from one
// 64-bit draw, centred and scaled to unit variance (tails cut at 3.46 sigma).
inline float Gaussian(uint64_t r) {
  const uint32_t sum =
      static_cast<uint32_t>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
  return (static_cast<float>(sum) - 131070.0f) * kScale;
}

void StoreFloat(float v, TensorDtype dtype, uint8_t* dst) {
  switch (dtype) {
    case TensorDtype::kF32:
      std::memcpy(dst, &v, 4);
      break;
    case TensorDtype::kF16: {
      const uint16_t h = kernels::FloatToHalf(v);
      std::memcpy(dst, &h, 2);
      break;
    }
    case TensorDtype::kBF16: {
      const uint16_t h = kernels::FloatToBf16(v);
      std::memcpy(dst, &h, 2);
      break;
    }
    case TensorDtype::kU8:
    case TensorDtype::kI8:
      throw Error("random weights are floating point (F32, F16 or BF16)");
  }
}

// Fills dst with N(mean, std²) (the constant mean when std is 0).
void FillTensor(uint8_t* dst, size_t nbytes, TensorDtype dtype, float mean, float std,
                uint64_t tensor_seed) {
  const size_t esize = TensorDtypeBytes(dtype);
  const size_t n = nbytes / esize;
  const size_t chunks = (n + kChunkElems - 1) / kChunkElems;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks;) {
      uint64_t state = tensor_seed ^ (c * 0xd1b54a32d192ed03ull);
      SplitMix64(state);
      const size_t end = std::min(n, (c + 1) * kChunkElems);
      for (size_t i = c * kChunkElems; i < end; ++i) {
        const float v = std != 0.0f ? mean + std * Gaussian(SplitMix64(state)) : mean;
        StoreFloat(v, dtype, dst + i * esize);
      }
    }
  };
  const size_t threads =
      std::min<size_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

void CheckSpec(const std::string& out_dir, const ModelConfig& c) {
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0)
      throw Error(out_dir + ": " + name + " must be positive (got " + std::to_string(v) + ")");
  };
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.num_key_value_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.vocab_size, "vocab_size");
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw Error(out_dir + ": num_attention_heads (" + std::to_string(c.num_attention_heads) +
                ") is not a multiple of num_key_value_heads (" +
                std::to_string(c.num_key_value_heads) + ")");
  }
  if (c.head_dim % 2 != 0) throw Error(out_dir + ": head_dim must be even for RoPE");
  if (c.moe.enabled()) {
    positive(c.moe.num_experts_per_tok, "num_experts_per_tok");
    positive(c.moe.moe_intermediate_size, "moe_intermediate_size");
    if (c.moe.num_experts_per_tok > c.moe.num_experts) {
      throw Error(out_dir + ": num_experts_per_tok (" + std::to_string(c.moe.num_experts_per_tok) +
                  ") exceeds num_experts (" + std::to_string(c.moe.num_experts) + ")");
    }
  }
}

void WriteJson(const fs::path& p, const ojson& j) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) throw Error(p.string() + ": write failed");
}

const char* TorchDtype(TensorDtype d) {
  switch (d) {
    case TensorDtype::kF32:
      return "float32";
    case TensorDtype::kF16:
      return "float16";
    case TensorDtype::kBF16:
      return "bfloat16";
    case TensorDtype::kU8:
    case TensorDtype::kI8:
      break;
  }
  return "float32";
}

ojson ConfigJson(const ModelConfig& c, TensorDtype dtype) {
  ojson j;
  const ArchitectureSpec* spec = FindArchitecture(c.architecture);
  if (spec == nullptr) {
    throw Error("unsupported architecture '" + c.architecture +
                "' (supported: " + SupportedArchitectures() + ")");
  }
  j["architectures"] = {c.architecture};
  j["model_type"] = std::string(spec->model_type);
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type == "default") {
    j["rope_scaling"] = nullptr;
  } else {
    j["rope_scaling"] = {{"rope_type", c.rope_scaling.type}, {"factor", c.rope_scaling.factor}};
    if (c.rope_scaling.type == "llama3") {
      j["rope_scaling"]["low_freq_factor"] = c.rope_scaling.low_freq_factor;
      j["rope_scaling"]["high_freq_factor"] = c.rope_scaling.high_freq_factor;
      j["rope_scaling"]["original_max_position_embeddings"] =
          c.rope_scaling.original_max_position_embeddings;
    }
  }
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = TorchDtype(dtype);
  j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else {
    j["eos_token_id"] = c.eos_token_ids;
  }
  j["mlp_bias"] = false;
  spec->write_config(c, j);  // the family's own fields (engine/model/arch/)
  j["initializer_range"] = 0.02;
  return j;
}

// Tensor list in HF file order: embeddings, layers, final norm, lm_head.
std::vector<TensorToWrite> TensorList(const RandomModelSpec& spec) {
  const ModelConfig& c = spec.config;
  const int64_t h = c.hidden_size, inter = c.intermediate_size, vocab = c.vocab_size;
  const int64_t q = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_key_value_heads} * c.head_dim;
  std::vector<TensorToWrite> out;
  // Weights N(0, 0.02²); layernorms 1 as HF initializes them. Biases and
  // q/k norms (not in a plain Llama) are drawn wider, N(0, 0.1²) and
  // N(1, 0.2²), so that a test against a reference sees them.
  auto add_dist = [&](const std::string& name, std::vector<int64_t> shape, float mean, float std) {
    const TensorDtype dtype = spec.dtype;
    uint64_t seed_state = spec.seed ^ Fnv1a(name.data(), name.size(), 0xcbf29ce484222325ull);
    const uint64_t tensor_seed = SplitMix64(seed_state);
    out.push_back({name, dtype, std::move(shape), [=](uint8_t* dst, size_t nbytes) {
                     FillTensor(dst, nbytes, dtype, mean, std, tensor_seed);
                   }});
  };
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool random) {
    add_dist(name, std::move(shape), random ? 0.0f : 1.0f, random ? kWeightStd : 0.0f);
  };
  // A sparse block (MoeConfig) in place of the MLP: the router drawn
  // N(0, 0.2²), so that its top-k choice has clear margins (a near tie would
  // make the expert choice depend on rounding), experts as 2-D tensors per
  // expert or (fused_experts) transformers v5's 3-D gate_up_proj / down_proj.
  auto add_moe = [&](const std::string& p) {
    const MoeConfig& m = c.moe;
    const std::string b = p + m.block + ".";
    const int64_t e = m.num_experts, mi = m.moe_intermediate_size;
    add_dist(b + "gate.weight", {e, h}, 0.0f, 0.2f);
    if (spec.fused_experts) {
      add(b + "experts.gate_up_proj", {e, 2 * mi, h}, true);
      add(b + "experts.down_proj", {e, h, mi}, true);
    } else {
      for (int64_t x = 0; x < e; ++x) {
        const std::string ep = b + "experts." + std::to_string(x) + ".";
        add(ep + m.gate_proj + ".weight", {mi, h}, true);
        add(ep + m.up_proj + ".weight", {mi, h}, true);
        add(ep + m.down_proj + ".weight", {h, mi}, true);
      }
    }
    if (m.shared_expert_intermediate_size > 0) {
      const int64_t si = m.shared_expert_intermediate_size;
      add(b + "shared_expert.gate_proj.weight", {si, h}, true);
      add(b + "shared_expert.up_proj.weight", {si, h}, true);
      add(b + "shared_expert.down_proj.weight", {h, si}, true);
      add_dist(b + "shared_expert_gate.weight", {1, h}, 0.0f, 0.2f);
    }
  };
  add("model.embed_tokens.weight", {vocab, h}, true);
  for (int32_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h}, false);
    add(p + "self_attn.q_proj.weight", {q, h}, true);
    add(p + "self_attn.k_proj.weight", {kv, h}, true);
    add(p + "self_attn.v_proj.weight", {kv, h}, true);
    add(p + "self_attn.o_proj.weight", {h, q}, true);
    add(p + "post_attention_layernorm.weight", {h}, false);
    if (c.moe.Sparse(i)) {
      add_moe(p);
    } else {
      add(p + "mlp.gate_proj.weight", {inter, h}, true);
      add(p + "mlp.up_proj.weight", {inter, h}, true);
      add(p + "mlp.down_proj.weight", {h, inter}, true);
    }
    for (const LayerVectorTensor& v : LayerVectorTensors(c)) {
      const bool norm = v.short_name.ends_with("_norm.weight");
      add_dist(p + v.short_name, {v.size}, norm ? 1.0f : 0.0f, norm ? 0.2f : 0.1f);
    }
  }
  add("model.norm.weight", {h}, false);
  if (!c.tie_word_embeddings) add("lm_head.weight", {vocab, h}, true);
  return out;
}

uint64_t TensorBytes(const TensorToWrite& t) {
  uint64_t n = TensorDtypeBytes(t.dtype);
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string ShardName(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

ojson ReadJson(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open");
  try {
    return ojson::parse(in);
  } catch (const ojson::exception& e) {
    throw Error(p.string() + ": invalid JSON: " + e.what());
  }
}

// Copies a tokenizer.json whose ids fit the vocabulary into dir and returns
// the tokenizer_config.json to write: the one beside it, else a default.
ojson CopyTokenizerJson(const std::string& path, const ModelConfig& c, const fs::path& dir) {
  const ojson t = ReadJson(path);
  int64_t max_id = -1;
  if (t.contains("model") && t["model"].contains("vocab") && t["model"]["vocab"].is_object()) {
    for (const auto& [piece, id] : t["model"]["vocab"].items()) {
      if (id.is_number_integer()) max_id = std::max<int64_t>(max_id, id.get<int64_t>());
    }
  }
  if (t.contains("added_tokens") && t["added_tokens"].is_array()) {
    for (const ojson& a : t["added_tokens"]) {
      if (a.contains("id") && a["id"].is_number_integer()) {
        max_id = std::max<int64_t>(max_id, a["id"].get<int64_t>());
      }
    }
  }
  if (max_id < 0) throw Error(path + ": no model.vocab ids (not a tokenizer.json?)");
  if (max_id >= c.vocab_size) {
    throw Error(path + ": token id " + std::to_string(max_id) + " does not fit vocab_size " +
                std::to_string(c.vocab_size));
  }
  std::error_code ec;
  fs::copy_file(path, dir / "tokenizer.json", fs::copy_options::overwrite_existing, ec);
  if (ec) throw Error((dir / "tokenizer.json").string() + ": copy failed: " + ec.message());
  const fs::path config = fs::path(path).parent_path() / "tokenizer_config.json";
  if (fs::exists(config, ec)) return ReadJson(config);
  ojson tok;
  tok["tokenizer_class"] = "PreTrainedTokenizerFast";
  tok["model_max_length"] = c.max_position_embeddings;
  return tok;
}

}  // namespace

// The presets' shapes, in the order RandomModelPresetNames lists them; what
// else a preset sets (RoPE, tied embeddings, biases, BOS/EOS ids) is in
// RandomModelPreset.
struct PresetShape {
  const char* name;
  int32_t hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, max_positions;
};
// Sources: the config.json of the model named in each row's comment (the
// instruct model's, for its BOS/EOS ids).
constexpr PresetShape kPresetShapes[] = {
    // name, hidden, intermediate, layers, heads, KV heads, head_dim, vocab, max positions
    {"llama2-7b", 4096, 11008, 32, 32, 32, 128, 32000, 4096},  // meta-llama/Llama-2-7b-hf
    {"llama3-8b", 4096, 14336, 32, 32, 8, 128, 128256, 8192},  // meta-llama/Meta-Llama-3-8B
    // 105.8M parameters: 2 x 24.6M embeddings (untied) + 8 x 7.08M layers.
    {"tiny-100m", 768, 2048, 8, 12, 12, 64, 32000, 2048},
    // meta-llama/Llama-3.2-1B-Instruct
    {"llama3.2-1b", 2048, 8192, 16, 32, 8, 64, 128256, 131072},
    {"qwen2.5-0.5b", 896, 4864, 24, 14, 2, 64, 151936, 32768},  // Qwen/Qwen2.5-0.5B-Instruct
    // Qwen/Qwen3-0.6B: head_dim 128, not hidden / heads (64)
    {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 128, 151936, 40960},
    // HuggingFaceTB/SmolLM2-135M-Instruct
    {"smollm2-135m", 576, 1536, 30, 9, 3, 64, 49152, 8192},
    // Mixture of experts (the expert counts and sizes in RandomModelPreset):
    // Qwen/Qwen3-30B-A3B (intermediate: the dense MLP of mlp_only_layers)
    {"qwen3-30b-a3b", 2048, 6144, 48, 32, 4, 128, 151936, 40960},
    {"mixtral-8x7b", 4096, 14336, 32, 32, 8, 128, 32000, 32768},  // mistralai/Mixtral-8x7B-v0.1
    {"qwen1.5-moe-a2.7b", 2048, 5632, 24, 16, 16, 128, 151936, 8192},  // Qwen/Qwen1.5-MoE-A2.7B
};

namespace {

// The Qwen instruct models' special tokens (<|endoftext|>, <|im_end|>).
void QwenTokens(ModelConfig& c) {
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645, 151643};
}

MoeConfig Moe(int32_t experts, int32_t top_k, int32_t width, int32_t shared_width, bool norm_topk) {
  MoeConfig m;
  m.num_experts = experts;
  m.num_experts_per_tok = top_k;
  m.moe_intermediate_size = width;
  m.shared_expert_intermediate_size = shared_width;
  m.norm_topk_prob = norm_topk;
  return m;
}

}  // namespace

ModelConfig RandomModelPreset(const std::string& name) {
  const auto shape = std::ranges::find(kPresetShapes, name, &PresetShape::name);
  if (shape == std::end(kPresetShapes)) {
    std::string names;
    for (const auto& n : RandomModelPresetNames()) names += (names.empty() ? "" : ", ") + n;
    throw Error("unknown random model preset '" + name + "' (known: " + names + ")");
  }
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.rms_norm_eps = 1e-5;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.hidden_size = shape->hidden;
  c.intermediate_size = shape->intermediate;
  c.num_hidden_layers = shape->layers;
  c.num_attention_heads = shape->heads;
  c.num_key_value_heads = shape->kv_heads;
  c.head_dim = shape->head_dim;
  c.vocab_size = shape->vocab;
  c.max_position_embeddings = shape->max_positions;
  if (name == "llama3-8b") {
    c.rope_theta = 500000.0;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001};
  } else if (name == "llama3.2-1b") {
    c.rope_theta = 500000.0;
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 32.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8192;
    c.tie_word_embeddings = true;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001, 128008, 128009};
  } else if (name == "qwen2.5-0.5b" || name == "qwen3-0.6b") {
    c.architecture = name == "qwen3-0.6b" ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM";
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1000000.0;
    c.tie_word_embeddings = true;
    c.qkv_bias = name == "qwen2.5-0.5b";
    c.qk_norm = name == "qwen3-0.6b";
    QwenTokens(c);
  } else if (name == "smollm2-135m") {
    c.rope_theta = 100000.0;
    c.tie_word_embeddings = true;
  } else if (name == "qwen3-30b-a3b") {
    c.architecture = "Qwen3MoeForCausalLM";
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1000000.0;
    c.qk_norm = true;
    c.moe = Moe(128, 8, 768, 0, true);
    QwenTokens(c);
  } else if (name == "mixtral-8x7b") {
    c.architecture = "MixtralForCausalLM";
    c.rope_theta = 1000000.0;
    c.moe = Moe(8, 2, shape->intermediate, 0, true);
    c.moe.block = "block_sparse_moe";
    c.moe.gate_proj = "w1";
    c.moe.up_proj = "w3";
    c.moe.down_proj = "w2";
  } else if (name == "qwen1.5-moe-a2.7b") {
    c.architecture = "Qwen2MoeForCausalLM";
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1000000.0;
    c.qkv_bias = true;
    c.moe = Moe(60, 4, 1408, 5632, false);
    QwenTokens(c);
  }
  return c;
}

uint64_t NumParams(const ModelConfig& c) {
  const uint64_t h = c.hidden_size, q = uint64_t(c.num_attention_heads) * c.head_dim;
  const uint64_t kv = uint64_t(c.num_key_value_heads) * c.head_dim;
  const uint64_t attention = 2 * h + h * q + 2 * kv * h + q * h;
  uint64_t vectors = 0;  // biases, q/k norms
  for (const LayerVectorTensor& v : LayerVectorTensors(c)) vectors += static_cast<uint64_t>(v.size);
  const MoeConfig& m = c.moe;
  const uint64_t shared = m.shared_expert_intermediate_size > 0
                              ? 3 * uint64_t(m.shared_expert_intermediate_size) * h + h
                              : 0;
  const uint64_t sparse_mlp =
      uint64_t(m.num_experts) * (h + 3 * uint64_t(m.moe_intermediate_size) * h) + shared;
  uint64_t layers = 0;
  for (int32_t l = 0; l < c.num_hidden_layers; ++l) {
    layers +=
        attention + vectors + (m.Sparse(l) ? sparse_mlp : 3 * uint64_t(c.intermediate_size) * h);
  }
  const uint64_t embed = uint64_t(c.vocab_size) * h;
  return embed * (c.tie_word_embeddings ? 1 : 2) + layers + h;
}

std::vector<std::string> RandomModelPresetNames() {
  std::vector<std::string> names;
  for (const PresetShape& p : kPresetShapes) names.emplace_back(p.name);
  return names;
}

void WriteRandomModel(const std::string& out_dir, const RandomModelSpec& spec,
                      const std::string& tokenizer_model_path) {
  RandomModelSpec s = spec;
  if (s.config.architecture.empty()) s.config.architecture = "LlamaForCausalLM";
  CheckSpec(out_dir, s.config);
  if (s.max_shard_bytes == 0) throw Error(out_dir + ": max_shard_bytes must be positive");
  const fs::path dir(out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    throw Error(out_dir + ": cannot create directory: " + ec.message());
  }

  if (!tokenizer_model_path.empty()) {
    sentencepiece::SentencePieceProcessor sp;
    const auto status = sp.Load(tokenizer_model_path);
    if (!status.ok()) {
      throw Error(tokenizer_model_path + ": not a SentencePiece model: " + status.ToString());
    }
    if (sp.GetPieceSize() > s.config.vocab_size) {
      throw Error(tokenizer_model_path + ": tokenizer has " + std::to_string(sp.GetPieceSize()) +
                  " tokens, more than vocab_size " + std::to_string(s.config.vocab_size));
    }
    if (sp.bos_id() >= 0) s.config.bos_token_id = sp.bos_id();
    if (sp.eos_id() >= 0) s.config.eos_token_ids = {sp.eos_id()};
    fs::copy_file(tokenizer_model_path, dir / "tokenizer.model",
                  fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error((dir / "tokenizer.model").string() + ": copy failed: " + ec.message());
  }

  ojson tok;
  tok["tokenizer_class"] = "LlamaTokenizer";
  tok["add_bos_token"] = true;
  tok["add_eos_token"] = false;
  tok["model_max_length"] = s.config.max_position_embeddings;
  if (!s.tokenizer_json.empty()) tok = CopyTokenizerJson(s.tokenizer_json, s.config, dir);
  if (!s.chat_template.empty()) tok["chat_template"] = s.chat_template;

  // Stale weights from an earlier run would shadow (index) or mix with the new ones.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string fname = entry.path().filename().string();
    if (fname == "model.safetensors" || fname == "model.safetensors.index.json" ||
        (fname.starts_with("model-") && fname.ends_with(".safetensors"))) {
      fs::remove(entry.path(), ec);
    }
  }

  WriteJson(dir / "config.json", ConfigJson(s.config, s.dtype));
  ojson gen;
  gen["bos_token_id"] = s.config.bos_token_id;
  gen["eos_token_id"] = s.config.eos_token_ids.size() == 1 ? ojson(s.config.eos_token_ids[0])
                                                           : ojson(s.config.eos_token_ids);
  WriteJson(dir / "generation_config.json", gen);
  WriteJson(dir / "tokenizer_config.json", tok);

  // Greedy sharding in file order, as transformers' save_pretrained does.
  std::vector<TensorToWrite> tensors = TensorList(s);
  std::vector<std::vector<TensorToWrite>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (TensorToWrite& t : tensors) {
    const uint64_t b = TensorBytes(t);
    if (!shards.back().empty() && shard_bytes + b > s.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shard_bytes += b;
    total += b;
    shards.back().push_back(std::move(t));
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (shards.size() == 1) {
    WriteSafetensors((dir / "model.safetensors").string(), shards[0], meta);
    return;
  }
  ojson index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = ojson::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = ShardName(i, shards.size());
    WriteSafetensors((dir / name).string(), shards[i], meta);
    for (const TensorToWrite& t : shards[i]) index["weight_map"][t.name] = name;
  }
  WriteJson(dir / "model.safetensors.index.json", index);
}

}  // namespace tq
