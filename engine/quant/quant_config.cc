// Quantization config parsing and per-module resolution.
#include "engine/quant/quant_config.h"

#include <fnmatch.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"

namespace tq::quant {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void Fail(const std::string& source, const std::string& problem) {
  throw Error(source + ": " + problem);
}

// An integer that fits int32: json's get<int32_t>() would wrap 4294967328 to
// 32 and silently load another format.
int32_t GetInt(const json& v, const std::string& key, const std::string& where,
               const std::string& source) {
  if (!v.is_number_integer()) Fail(source, where + "\"" + key + "\" must be an integer");
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= uint64_t{INT32_MAX}
                        : v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
  if (!fits) Fail(source, where + "\"" + key + "\" is out of range: " + v.dump());
  return v.get<int32_t>();
}

// Reads bits / group_size / symmetric from `obj` when present.
void ReadFormatFields(const json& obj, const std::string& where, const std::string& source,
                      std::optional<int32_t>* bits, std::optional<int32_t>* group_size,
                      std::optional<bool>* symmetric) {
  if (obj.contains("bits")) {
    *bits = GetInt(obj["bits"], "bits", where, source);
    if (**bits != 4 && **bits != 8 && **bits != 16) {
      Fail(source, where + "bits " + std::to_string(**bits) + " is not supported (4, 8 or 16)");
    }
  }
  if (obj.contains("group_size")) {
    *group_size = GetInt(obj["group_size"], "group_size", where, source);
    if (**group_size == 0 || **group_size < -1) {
      Fail(source, where + "group_size must be positive or -1 (one group per row), got " +
                       std::to_string(**group_size));
    }
  }
  if (obj.contains("symmetric")) {
    if (!obj["symmetric"].is_boolean()) Fail(source, where + "\"symmetric\" must be true/false");
    *symmetric = obj["symmetric"].get<bool>();
  }
}

void CheckKeys(const json& obj, std::initializer_list<const char*> allowed,
               const std::string& where, const std::string& source) {
  for (const auto& [key, value] : obj.items()) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || key == a;
    if (!ok) Fail(source, where + "unknown key \"" + key + "\"");
  }
}

std::pair<int32_t, int32_t> ParseLayerItem(const json& item, const std::string& where,
                                           const std::string& source) {
  if (item.is_number_integer()) {
    const int32_t layer = GetInt(item, "layers", where, source);
    return {layer, layer};
  }
  if (item.is_array() && item.size() == 2 && item[0].is_number_integer() &&
      item[1].is_number_integer()) {
    return {GetInt(item[0], "layers", where, source), GetInt(item[1], "layers", where, source)};
  }
  Fail(source, where +
                   "\"layers\" items must be a layer index or an inclusive [first, last] "
                   "pair (negative = from the end), got " +
                   item.dump());
}

int32_t LayerIndex(int32_t i, int32_t num_layers) {
  return i < 0 ? num_layers + i : i;
}

bool Matches(const QuantOverride& o, const std::string& short_name, const std::string& full_name,
             int32_t layer, int32_t num_layers) {
  bool name_ok = false;
  for (const std::string& p : o.modules) {
    name_ok = name_ok || fnmatch(p.c_str(), short_name.c_str(), 0) == 0 ||
              fnmatch(p.c_str(), full_name.c_str(), 0) == 0;
  }
  if (!name_ok) return false;
  if (o.layers.empty()) return true;
  for (const auto& [a, b] : o.layers) {
    if (layer >= LayerIndex(a, num_layers) && layer <= LayerIndex(b, num_layers)) return true;
  }
  return false;
}

// A range that is reversed or outside the model would otherwise surface as
// "matches no module", which hides the actual mistake.
void CheckLayerRanges(const QuantConfig& config, int32_t num_layers) {
  for (size_t i = 0; i < config.overrides.size(); ++i) {
    for (const auto& [a, b] : config.overrides[i].layers) {
      const int32_t first = LayerIndex(a, num_layers);
      const int32_t last = LayerIndex(b, num_layers);
      const std::string range = "override " + std::to_string(i) + ": \"layers\" [" +
                                std::to_string(a) + ", " + std::to_string(b) + "]";
      if (first < 0 || first >= num_layers || last < 0 || last >= num_layers) {
        Fail(config.source, range + " is outside this model's layers 0.." +
                                std::to_string(num_layers - 1) + " (negative = from the end)");
      }
      if (first > last) {
        Fail(config.source, range + " is reversed: layer " + std::to_string(first) +
                                " comes after layer " + std::to_string(last));
      }
    }
  }
}

// A vocabulary table matches only its exact name (short or full; the tied
// embeddings also "lm_head"), so that globs written for the linear modules
// keep their meaning; an override limited to layers never selects it.
bool MatchesTable(const QuantOverride& o, const LinearModule& table, bool tied) {
  if (!o.layers.empty()) return false;
  for (const std::string& p : o.modules) {
    if (p == table.name || p == table.short_name) return true;
    if (tied && table.name == kEmbedTokensModule && p == kLmHeadModule) return true;
  }
  return false;
}

std::string FullName(int32_t layer, const std::string& short_name) {
  return "model.layers." + std::to_string(layer) + "." + short_name;
}

}  // namespace

QuantConfig QuantConfig::Parse(const std::string& text, const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    Fail(source, std::string("invalid JSON: ") + e.what());
  }
  if (!root.is_object()) Fail(source, "a quantization config is a JSON object");
  CheckKeys(root, {"description", "bits", "group_size", "symmetric", "clip_search", "overrides"},
            "", source);
  QuantConfig c;
  c.source = source;
  std::optional<int32_t> bits, group;
  std::optional<bool> sym;
  ReadFormatFields(root, "", source, &bits, &group, &sym);
  if (!bits) Fail(source, "missing \"bits\" (the default: 4, 8 or 16)");
  c.defaults.bits = *bits;
  c.defaults.group_size = group.value_or(128);
  c.defaults.symmetric = sym.value_or(false);
  if (root.contains("clip_search")) {
    if (!root["clip_search"].is_boolean()) Fail(source, "\"clip_search\" must be true/false");
    c.defaults.clip_search = root["clip_search"].get<bool>();
  }
  if (root.contains("overrides")) {
    const json& list = root["overrides"];
    if (!list.is_array()) Fail(source, "\"overrides\" must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const json& o = list[i];
      const std::string where = "override " + std::to_string(i) + ": ";
      if (!o.is_object()) Fail(source, where + "must be an object");
      CheckKeys(o, {"modules", "layers", "bits", "group_size", "symmetric"}, where, source);
      QuantOverride ov;
      if (!o.contains("modules")) Fail(source, where + "missing \"modules\" (a glob or a list)");
      const json& m = o["modules"];
      if (m.is_string()) {
        ov.modules.push_back(m.get<std::string>());
      } else if (m.is_array() && !m.empty()) {
        for (const json& p : m) {
          if (!p.is_string()) Fail(source, where + "\"modules\" entries must be strings");
          ov.modules.push_back(p.get<std::string>());
        }
      } else {
        Fail(source, where + "\"modules\" must be a glob string or a non-empty list of them");
      }
      if (o.contains("layers")) {
        const json& l = o["layers"];
        if (!l.is_array() || l.empty()) Fail(source, where + "\"layers\" must be a non-empty list");
        for (const json& item : l) ov.layers.push_back(ParseLayerItem(item, where, source));
      }
      ReadFormatFields(o, where, source, &ov.bits, &ov.group_size, &ov.symmetric);
      c.overrides.push_back(std::move(ov));
    }
  }
  return c;
}

QuantConfig QuantConfig::Load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(path +
                ": is a directory; --quantization-config takes a JSON file (configs/*.json)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the quantization config");
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

QuantFormat QuantConfig::Resolve(const std::string& short_name, int32_t layer, int32_t num_layers,
                                 int64_t in_features) const {
  QuantFormat f = defaults;
  const std::string full = FullName(layer, short_name);
  for (const QuantOverride& o : overrides) {
    if (!Matches(o, short_name, full, layer, num_layers)) continue;
    if (o.bits) f.bits = *o.bits;
    if (o.group_size) f.group_size = *o.group_size;
    if (o.symmetric) f.symmetric = *o.symmetric;
  }
  if (f.group_size == -1) f.group_size = static_cast<int32_t>(in_features);
  return f;
}

std::vector<LinearModule> LlamaLinearModules(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  const int64_t q_dim = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_key_value_heads} * c.head_dim;
  const MoeConfig& m = c.moe;
  std::vector<LinearModule> out;
  auto add = [&](int32_t l, const std::string& name, int64_t rows, int64_t cols, ModuleRole role,
                 int32_t expert) {
    out.push_back({FullName(l, name), name, l, rows, cols, role, expert});
  };
  for (int32_t l = 0; l < c.num_hidden_layers; ++l) {
    add(l, "self_attn.q_proj", q_dim, hidden, ModuleRole::kQ, -1);
    add(l, "self_attn.k_proj", kv_dim, hidden, ModuleRole::kK, -1);
    add(l, "self_attn.v_proj", kv_dim, hidden, ModuleRole::kV, -1);
    add(l, "self_attn.o_proj", hidden, q_dim, ModuleRole::kO, -1);
    if (!m.Sparse(l)) {
      add(l, "mlp.gate_proj", inter, hidden, ModuleRole::kGate, -1);
      add(l, "mlp.up_proj", inter, hidden, ModuleRole::kUp, -1);
      add(l, "mlp.down_proj", hidden, inter, ModuleRole::kDown, -1);
      continue;
    }
    const int64_t mi = m.moe_intermediate_size;
    for (int32_t e = 0; e < m.num_experts; ++e) {
      const std::string p = m.block + ".experts." + std::to_string(e) + ".";
      add(l, p + m.gate_proj, mi, hidden, ModuleRole::kExpertGate, e);
      add(l, p + m.up_proj, mi, hidden, ModuleRole::kExpertUp, e);
      add(l, p + m.down_proj, hidden, mi, ModuleRole::kExpertDown, e);
    }
    if (m.shared_expert_intermediate_size > 0) {
      const int64_t si = m.shared_expert_intermediate_size;
      const std::string p = m.block + ".shared_expert.";
      add(l, p + "gate_proj", si, hidden, ModuleRole::kSharedGate, -1);
      add(l, p + "up_proj", si, hidden, ModuleRole::kSharedUp, -1);
      add(l, p + "down_proj", hidden, si, ModuleRole::kSharedDown, -1);
    }
  }
  return out;
}

std::vector<LinearModule> LlamaTableModules(const ModelConfig& c) {
  std::vector<LinearModule> out;
  out.push_back({kEmbedTokensModule, "embed_tokens", -1, c.vocab_size, c.hidden_size,
                 ModuleRole::kTable, -1});
  if (!c.tie_word_embeddings) {
    out.push_back(
        {kLmHeadModule, kLmHeadModule, -1, c.vocab_size, c.hidden_size, ModuleRole::kTable, -1});
  }
  return out;
}

std::map<std::string, QuantFormat> PlanFormats(const QuantConfig& config,
                                               const ModelConfig& model) {
  std::map<std::string, QuantFormat> plan;
  CheckLayerRanges(config, model.num_hidden_layers);
  std::vector<bool> used(config.overrides.size(), false);
  for (const LinearModule& m : LlamaLinearModules(model)) {
    for (size_t i = 0; i < config.overrides.size(); ++i) {
      used[i] = used[i] || Matches(config.overrides[i], m.short_name, m.name, m.layer,
                                   model.num_hidden_layers);
    }
    const QuantFormat f =
        config.Resolve(m.short_name, m.layer, model.num_hidden_layers, m.in_features);
    CheckFormat(f, m.in_features, config.source + ": " + m.name);
    plan[m.name] = f;
  }
  for (const LinearModule& t : LlamaTableModules(model)) {
    QuantFormat f = config.defaults;
    f.bits = 16;
    for (size_t i = 0; i < config.overrides.size(); ++i) {
      const QuantOverride& o = config.overrides[i];
      if (!MatchesTable(o, t, model.tie_word_embeddings)) continue;
      used[i] = true;
      if (o.bits) f.bits = *o.bits;
      if (o.group_size) f.group_size = *o.group_size;
      if (o.symmetric) f.symmetric = *o.symmetric;
    }
    if (!f.quantized()) continue;
    if (f.group_size == -1) f.group_size = static_cast<int32_t>(t.in_features);
    CheckFormat(f, t.in_features, config.source + ": " + t.name);
    plan[t.name] = f;
  }
  for (size_t i = 0; i < used.size(); ++i) {
    if (used[i]) continue;
    std::string patterns;
    for (const std::string& p : config.overrides[i].modules) {
      patterns += (patterns.empty() ? "" : ", ") + p;
    }
    Fail(config.source,
         "override " + std::to_string(i) + " (" + patterns + ") matches no module of this model");
  }
  return plan;
}

std::string PerModuleConfigJson(const std::map<std::string, QuantFormat>& formats,
                                const std::string& comment) {
  json root;
  root["description"] = comment;
  root["bits"] = 16;
  json list = json::array();
  for (const auto& [name, f] : formats) {
    json o;
    o["modules"] = name;
    o["bits"] = f.bits;
    if (f.quantized()) {
      o["group_size"] = f.group_size;
      o["symmetric"] = f.symmetric;
    }
    list.push_back(std::move(o));
  }
  root["overrides"] = std::move(list);
  return root.dump(2) + "\n";
}

double AverageBits(const std::vector<LinearModule>& modules,
                   const std::map<std::string, QuantFormat>& formats) {
  double bits = 0.0, params = 0.0;
  for (const LinearModule& m : modules) {
    const double n = static_cast<double>(m.out_features * m.in_features);
    bits += n * BitsPerWeight(formats.at(m.name));
    params += n;
  }
  return params > 0 ? bits / params : 0.0;
}

}  // namespace tq::quant
