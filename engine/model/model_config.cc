// config.json / generation_config.json / tokenizer_config.json of a HF model
// directory. Field names and defaults follow HF transformers LlamaConfig
// (models/llama/configuration_llama.py); RoPE scaling follows
// modeling_rope_utils.py (_compute_default/linear/llama3_parameters).
#include "engine/model/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <sstream>

#include "engine/common/error.h"
#include "engine/model/architectures.h"
#include "engine/model/config_fields.h"

namespace tq {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

[[noreturn]] void Fail(const std::string& file, const std::string& problem) {
  ConfigFail(file, problem);
}
using Fields = ConfigFields;

// Reads and parses a JSON file that must hold an object.
json ReadJsonObject(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) Fail(p.string(), "cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    Fail(p.string(), std::string("invalid JSON: ") + e.what());
  }
  if (!j.is_object()) Fail(p.string(), "invalid JSON: top level is not an object");
  return j;
}

RopeScaling ParseRopeScaling(const Fields& cfg) {
  RopeScaling rs;
  if (!cfg.Has("rope_scaling")) return rs;
  const json& v = cfg.At("rope_scaling");
  if (!v.is_object()) Fail(cfg.file(), "field 'rope_scaling' must be an object or null");
  const Fields f(v, cfg.file());
  const char* type_key = f.Has("rope_type") ? "rope_type" : "type";
  if (f.Has(type_key)) {
    if (!f.At(type_key).is_string()) Fail(cfg.file(), "rope_scaling.type must be a string");
    rs.type = f.At(type_key).get<std::string>();
  }
  if (rs.type == "default") return rs;
  if (rs.type != "linear" && rs.type != "llama3") {
    Fail(cfg.file(),
         "unsupported rope_scaling type '" + rs.type + "' (supported: default, linear, llama3)");
  }
  if (!f.Has("factor")) Fail(cfg.file(), "rope_scaling.factor is missing");
  rs.factor = f.Positive("factor", 1.0);
  if (rs.type == "llama3") {
    rs.low_freq_factor = f.Positive("low_freq_factor", rs.low_freq_factor);
    rs.high_freq_factor = f.Positive("high_freq_factor", rs.high_freq_factor);
    rs.original_max_position_embeddings =
        f.Int("original_max_position_embeddings", 1,
              static_cast<int32_t>(rs.original_max_position_embeddings));
    if (!(rs.high_freq_factor > rs.low_freq_factor)) {
      Fail(cfg.file(), "rope_scaling.high_freq_factor must exceed low_freq_factor");
    }
  }
  return rs;
}

ModelConfig ParseConfig(const json& j, const std::string& file) {
  const Fields f(j, file);
  ModelConfig c;
  const ArchitectureSpec* spec = nullptr;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    c.architecture = j["architectures"][0].get<std::string>();
    spec = FindArchitecture(c.architecture);
  } else if (j.contains("model_type") && j["model_type"].is_string()) {
    spec = FindArchitectureByModelType(j["model_type"].get<std::string>());
    if (spec == nullptr) {
      Fail(file, "unsupported model_type " + j["model_type"].dump() +
                     " and no 'architectures' (supported: " + SupportedArchitectures() + ")");
    }
    c.architecture = std::string(spec->architecture);
  } else {
    Fail(file, "field 'architectures' is missing");
  }
  if (spec == nullptr) {
    Fail(file, "unsupported architecture '" + c.architecture +
                   "' (supported: " + SupportedArchitectures() + ")");
  }
  c.hidden_size = f.Int("hidden_size", 1);
  c.intermediate_size = f.Int("intermediate_size", 1);
  c.num_hidden_layers = f.Int("num_hidden_layers", 1);
  c.num_attention_heads = f.Int("num_attention_heads", 1);
  c.num_key_value_heads = f.Int("num_key_value_heads", 1, c.num_attention_heads);
  c.vocab_size = f.Int("vocab_size", 1);
  if (f.Has("head_dim")) {
    c.head_dim = f.Int("head_dim", 1);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      Fail(file, "hidden_size (" + std::to_string(c.hidden_size) +
                     ") is not a multiple of num_attention_heads (" +
                     std::to_string(c.num_attention_heads) + ") and head_dim is not set");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) {
    Fail(file, "head_dim (" + std::to_string(c.head_dim) + ") must be even for RoPE");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    Fail(file, "num_attention_heads (" + std::to_string(c.num_attention_heads) +
                   ") is not a multiple of num_key_value_heads (" +
                   std::to_string(c.num_key_value_heads) + ")");
  }
  c.max_position_embeddings = f.Int("max_position_embeddings", 1, c.max_position_embeddings);
  c.rms_norm_eps = f.Positive("rms_norm_eps", c.rms_norm_eps);
  c.rope_theta = f.Positive("rope_theta", c.rope_theta);
  c.rope_scaling = ParseRopeScaling(f);
  c.tie_word_embeddings = f.Bool("tie_word_embeddings", false);
  if (f.Has("torch_dtype") && f.At("torch_dtype").is_string()) {
    c.torch_dtype = f.At("torch_dtype").get<std::string>();
  }
  c.bos_token_id = f.Int("bos_token_id", 0, c.bos_token_id);
  c.eos_token_ids = f.IntList("eos_token_id");

  // Features the forward pass does not implement are refused, not ignored:
  // a silently different model would produce plausible but wrong text.
  if (f.Has("hidden_act") && f.At("hidden_act") != "silu") {
    Fail(file, "unsupported hidden_act " + f.At("hidden_act").dump() + " (supported: \"silu\")");
  }
  if (f.Bool("mlp_bias", false)) Fail(file, "unsupported mlp_bias: true");
  // No registered family puts a bias on all four attention projections
  // (Llama and Qwen3 would with attention_bias; no released checkpoint
  // does): refused. Qwen2's q/k/v biases are the family's (arch/qwen2.cc).
  if (f.Bool("attention_bias", false)) Fail(file, "unsupported attention_bias: true");
  if (f.Has("use_mrope") && f.Bool("use_mrope", false)) Fail(file, "unsupported use_mrope: true");
  spec->parse_config(f, c);
  return c;
}

std::string ParseChatTemplate(const json& v, const std::string& file) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    for (const json& e : v) {
      if (e.is_object() && e.value("name", json()) == "default" && e.contains("template") &&
          e["template"].is_string()) {
        return e["template"].get<std::string>();
      }
    }
    return "";
  }
  Fail(file, "field 'chat_template' must be a string or a list of {name, template}");
}

// "bos_token"/"eos_token": a string, or an AddedToken object {"content": ...}.
std::string ParseSpecialToken(const Fields& f, const std::string& key) {
  if (!f.Has(key)) return "";
  const json& v = f.At(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  Fail(f.file(), "field '" + key + "' must be a string or an object with a string 'content'");
}

}  // namespace

bool MoeConfig::Sparse(int32_t layer) const {
  if (num_experts <= 0) return false;
  for (int32_t l : mlp_only_layers) {
    if (l == layer) return false;
  }
  return (layer + 1) % decoder_sparse_step == 0;
}

std::vector<LayerVectorTensor> LayerVectorTensors(const ModelConfig& c) {
  const int64_t q = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_key_value_heads} * c.head_dim;
  std::vector<LayerVectorTensor> out;
  if (c.qkv_bias) {
    out.push_back({"self_attn.q_proj.bias", q});
    out.push_back({"self_attn.k_proj.bias", kv});
    out.push_back({"self_attn.v_proj.bias", kv});
  }
  if (c.qk_norm) {
    out.push_back({"self_attn.q_norm.weight", c.head_dim});
    out.push_back({"self_attn.k_norm.weight", c.head_dim});
  }
  return out;
}

std::vector<float> ModelConfig::RopeInvFreq() const {
  const int half = head_dim / 2;
  std::vector<float> out(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    double inv = 1.0 / std::pow(rope_theta, (2.0 * i) / head_dim);
    if (rope_scaling.type == "linear") {
      inv /= rope_scaling.factor;
    } else if (rope_scaling.type == "llama3") {
      const RopeScaling& s = rope_scaling;
      const double old_len = static_cast<double>(s.original_max_position_embeddings);
      const double low_freq_wavelen = old_len / s.low_freq_factor;
      const double high_freq_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / inv;
      if (wavelen > low_freq_wavelen) {
        inv /= s.factor;                          // low frequency: fully scaled
      } else if (wavelen >= high_freq_wavelen) {  // medium: interpolate
        const double smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        inv = (1.0 - smooth) * inv / s.factor + smooth * inv;
      }  // high frequency: unchanged
    }
    out[static_cast<size_t>(i)] = static_cast<float>(inv);
  }
  return out;
}

ModelFiles LoadModelFiles(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::exists(d, ec)) Fail(dir, "model directory not found");
  if (!fs::is_directory(d, ec)) Fail(dir, "not a directory (--model takes the model's directory)");
  ModelFiles mf;
  mf.dir = dir;

  const fs::path config_path = d / "config.json";
  if (!fs::exists(config_path, ec)) Fail(config_path.string(), "not found");
  mf.config = ParseConfig(ReadJsonObject(config_path), config_path.string());

  const fs::path gen_path = d / "generation_config.json";
  if (fs::exists(gen_path, ec)) {
    const json j = ReadJsonObject(gen_path);
    const Fields f(j, gen_path.string());
    GenerationDefaults& g = mf.generation;
    g.present = true;
    if (f.Has("temperature")) {
      if (!f.At("temperature").is_number() || f.At("temperature").get<double>() < 0) {
        Fail(f.file(), "field 'temperature' must be a number >= 0");
      }
      g.temperature = f.At("temperature").get<double>();
    }
    g.top_p = f.Positive("top_p", g.top_p);
    g.top_k = f.Int("top_k", 0, g.top_k);
    g.repetition_penalty = f.Positive("repetition_penalty", g.repetition_penalty);
    mf.config.bos_token_id = f.Int("bos_token_id", 0, mf.config.bos_token_id);
    std::vector<int32_t> eos = f.IntList("eos_token_id");
    if (!eos.empty()) mf.config.eos_token_ids = std::move(eos);
  }

  const fs::path tok_path = d / "tokenizer_config.json";
  if (fs::exists(tok_path, ec)) {
    const json j = ReadJsonObject(tok_path);
    const Fields f(j, tok_path.string());
    mf.tokenizer.add_bos_token = f.Bool("add_bos_token", true);
    mf.tokenizer.add_eos_token = f.Bool("add_eos_token", false);
    mf.tokenizer.bos_token = ParseSpecialToken(f, "bos_token");
    mf.tokenizer.eos_token = ParseSpecialToken(f, "eos_token");
    if (j.contains("tokenizer_class") && j["tokenizer_class"].is_string()) {
      mf.tokenizer.tokenizer_class = j["tokenizer_class"].get<std::string>();
    }
    if (j.contains("chat_template")) {
      mf.tokenizer.chat_template = ParseChatTemplate(j["chat_template"], f.file());
    }
  }
  // Newer transformers save the template beside tokenizer_config.json.
  const fs::path jinja_path = d / "chat_template.jinja";
  if (mf.tokenizer.chat_template.empty() && fs::exists(jinja_path, ec)) {
    std::ifstream in(jinja_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    mf.tokenizer.chat_template = ss.str();
  }
  return mf;
}

}  // namespace tq
