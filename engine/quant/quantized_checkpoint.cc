// Reading the quantization metadata of, and writing, `tqserve quantize`
// checkpoints (layout in quantized_checkpoint.h and docs/quantization.md).
#include "engine/quant/quantized_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/model/safetensors.h"
#include "engine/quant/tensor_stream.h"

namespace tq::quant {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

json ReadJsonFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(p.string() + ": invalid JSON: " + e.what());
  }
}

// Files besides the weights that a model directory carries (tokenizer,
// chat template, generation defaults).
constexpr const char* kSideFiles[] = {"tokenizer.model",
                                      "tokenizer.json",
                                      "tokenizer_config.json",
                                      "special_tokens_map.json",
                                      "added_tokens.json",
                                      "generation_config.json",
                                      "vocab.json",
                                      "merges.txt"};

// A quantized module's scales and zeros, kept from its .qweight pass until
// its .scales/.qzeros tensors are written (they follow it in the file).
struct ModuleCache {
  std::vector<uint16_t> scales, zeros;  // filled by the .qweight pass
};

}  // namespace

std::map<std::string, QuantFormat> ReadCheckpointQuantization(const std::string& model_dir) {
  const fs::path path = fs::path(model_dir) / "config.json";
  std::map<std::string, QuantFormat> out;
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;  // LoadModelFiles reports the missing config
  const json root = ReadJsonFile(path);
  if (!root.is_object() || !root.contains("quantization_config")) return out;
  const std::string where = path.string() + ": quantization_config";
  const json& q = root["quantization_config"];
  if (!q.is_object() || !q.contains("quant_method") || !q["quant_method"].is_string()) {
    throw Error(where + " has no \"quant_method\" string");
  }
  const std::string method = q["quant_method"].get<std::string>();
  if (method != kQuantMethod) {
    throw Error(where + ": quant_method \"" + method + "\" is not supported (only \"" +
                kQuantMethod + "\", written by tqserve quantize)");
  }
  if (!q.contains("modules") || !q["modules"].is_object()) {
    throw Error(where + " has no \"modules\" object");
  }
  for (const auto& [name, m] : q["modules"].items()) {
    QuantFormat f;
    if (!m.is_object() || !m.contains("bits") || !m["bits"].is_number_integer()) {
      throw Error(where + ": module " + name + " has no integer \"bits\"");
    }
    f.bits = m["bits"].get<int32_t>();
    if (f.quantized()) {
      if (!m.contains("group_size") || !m["group_size"].is_number_integer() ||
          !m.contains("symmetric") || !m["symmetric"].is_boolean()) {
        throw Error(where + ": module " + name + " needs \"group_size\" and \"symmetric\"");
      }
      f.group_size = m["group_size"].get<int32_t>();
      f.symmetric = m["symmetric"].get<bool>();
    } else if (f.bits != 16) {
      throw Error(where + ": module " + name + " has bits " + std::to_string(f.bits) +
                  " (4, 8 or 16)");
    }
    out[name] = f;
  }
  return out;
}

QuantizeSummary WriteQuantizedCheckpoint(const std::string& model_dir, const ModelConfig& config,
                                         const std::map<std::string, QuantFormat>& formats,
                                         const std::string& out_dir) {
  std::error_code ec;
  if (fs::exists(out_dir, ec) && fs::equivalent(model_dir, out_dir, ec)) {
    throw Error(out_dir + ": --out must differ from --model");
  }
  if (!ReadCheckpointQuantization(model_dir).empty()) {
    throw Error(model_dir + ": the checkpoint is already quantized");
  }
  const SafetensorsCheckpoint ckpt(model_dir);
  const int64_t hidden = config.hidden_size;
  const int64_t vocab = config.vocab_size;
  std::vector<TensorToWrite> tensors;
  std::vector<std::unique_ptr<ModuleCache>> caches;

  // A dense tensor, 16-bit (as_16bit: the source's F16/BF16, else F16) or as stored.
  auto dense = [&](const std::string& name, std::vector<int64_t> shape, bool as_16bit) {
    const TensorInfo& t = ckpt.Require(name, shape);
    TensorDtype dtype = t.dtype;
    kernels::WeightDtype target = kernels::WeightDtype::kF32;
    if (as_16bit || t.dtype != TensorDtype::kF32) {
      dtype = t.dtype == TensorDtype::kBF16 ? TensorDtype::kBF16 : TensorDtype::kF16;
      target =
          dtype == TensorDtype::kBF16 ? kernels::WeightDtype::kBF16 : kernels::WeightDtype::kF16;
    }
    const size_t esize = TensorDtypeBytes(dtype);
    tensors.push_back({name, dtype, shape, [&t, target, esize](uint8_t* dst, size_t) {
                         ConvertTensor(t, target, [&](int64_t begin, int64_t count, const void* b) {
                           std::memcpy(dst + static_cast<size_t>(begin) * esize, b,
                                       static_cast<size_t>(count) * esize);
                         });
                       }});
  };

  QuantizeSummary summary;
  json module_json = json::object();
  // A module [out, in] stored as `f`: 16-bit <name>.weight, or <name>.qweight
  // (which quantizes, keeping scales/zeros, small) then .scales / .qzeros.
  auto module = [&](const std::string& name, int64_t out, int64_t in, const QuantFormat& f) {
    CheckFormat(f, in, name);
    module_json[name] =
        f.quantized()
            ? json{{"bits", f.bits}, {"group_size", f.group_size}, {"symmetric", f.symmetric}}
            : json{{"bits", 16}};
    if (!f.quantized()) {
      dense(name + ".weight", {out, in}, true);
      return;
    }
    ++summary.quantized_modules;
    const TensorInfo& t = ckpt.Require(name + ".weight", {out, in});
    caches.push_back(std::make_unique<ModuleCache>());
    ModuleCache* cache = caches.back().get();
    const int64_t code_bytes = CodeBytesPerRow(f, static_cast<int32_t>(in));
    const int64_t groups = in / f.group_size;
    tensors.push_back({name + kCodesSuffix,
                       TensorDtype::kU8,
                       {out, code_bytes},
                       [&t, f, cache, code_bytes, groups](uint8_t* dst, size_t) {
                         QuantizeTensor(
                             t, f,
                             [&](int64_t r0, int64_t rows, const uint8_t* codes,
                                 const uint16_t* scales, const uint16_t* zeros) {
                               std::memcpy(dst + r0 * code_bytes, codes,
                                           static_cast<size_t>(rows * code_bytes));
                               const auto n = static_cast<size_t>(rows * groups);
                               cache->scales.insert(cache->scales.end(), scales, scales + n);
                               if (zeros) {
                                 cache->zeros.insert(cache->zeros.end(), zeros, zeros + n);
                               }
                             });
                       }});
    tensors.push_back(
        {name + kScalesSuffix, TensorDtype::kF16, {out, groups}, [cache](uint8_t* dst, size_t n) {
           std::memcpy(dst, cache->scales.data(), n);
           std::vector<uint16_t>().swap(cache->scales);
         }});
    if (!f.symmetric) {
      tensors.push_back(
          {name + kZerosSuffix, TensorDtype::kF16, {out, groups}, [cache](uint8_t* dst, size_t n) {
             std::memcpy(dst, cache->zeros.data(), n);
             std::vector<uint16_t>().swap(cache->zeros);
           }});
    }
  };
  // The vocabulary tables: quantized when `formats` has them, else 16-bit
  // without a quantization_config entry (as before they were configurable).
  auto table = [&](const std::string& name) {
    const auto it = formats.find(name);
    if (it != formats.end() && it->second.quantized()) {
      module(name, vocab, hidden, it->second);
    } else {
      dense(name + ".weight", {vocab, hidden}, true);
    }
  };

  table(kEmbedTokensModule);
  const std::vector<LinearModule> modules = LlamaLinearModules(config);
  for (int32_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    dense(p + "input_layernorm.weight", {hidden}, false);
    dense(p + "post_attention_layernorm.weight", {hidden}, false);
    for (const LayerVectorTensor& v : LayerVectorTensors(config)) {
      dense(p + v.short_name, {v.size}, false);  // biases, q/k norms: as stored
    }
    const MoeConfig& moe = config.moe;
    if (moe.Sparse(layer)) {  // the router and shared-expert gate: as stored (fp32 at load)
      dense(p + moe.block + ".gate.weight", {moe.num_experts, hidden}, false);
      if (moe.shared_expert_intermediate_size > 0) {
        dense(p + moe.block + ".shared_expert_gate.weight", {1, hidden}, false);
      }
    }
  }
  for (const LinearModule& m : modules) {
    const auto it = formats.find(m.name);
    if (it == formats.end()) throw Error("quantize: no format for module " + m.name);
    module(m.name, m.out_features, m.in_features, it->second);
  }
  dense("model.norm.weight", {hidden}, false);
  if (!config.tie_word_embeddings) table(kLmHeadModule);

  fs::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir + ": cannot create directory: " + ec.message());
  const fs::path weights = fs::path(out_dir) / "model.safetensors";
  WriteSafetensors(weights.string(), tensors, {{"format", "pt"}, {"quantization", kQuantMethod}});
  summary.bytes_written = static_cast<size_t>(fs::file_size(weights, ec));
  summary.average_bits = AverageBits(modules, formats);

  json cfg = ReadJsonFile(fs::path(model_dir) / "config.json");
  cfg["quantization_config"] = {
      {"quant_method", kQuantMethod}, {"format_version", 1}, {"modules", module_json}};
  std::ofstream cfg_out(fs::path(out_dir) / "config.json");
  cfg_out << cfg.dump(2) << "\n";
  if (!cfg_out) throw Error(out_dir + "/config.json: write failed");
  for (const char* name : kSideFiles) {
    const fs::path src = fs::path(model_dir) / name;
    if (!fs::exists(src, ec)) continue;
    fs::copy_file(src, fs::path(out_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error((fs::path(out_dir) / name).string() + ": copy failed: " + ec.message());
  }
  // A stale index from an earlier sharded write would shadow model.safetensors.
  fs::remove(fs::path(out_dir) / "model.safetensors.index.json", ec);
  return summary;
}

}  // namespace tq::quant
