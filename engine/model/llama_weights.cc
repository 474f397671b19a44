// Loads a Llama checkpoint's tensors (HF names, see transformers
// models/llama/modeling_llama.py) into backend buffers: dense, quantized at
// load time, or as stored by `tqserve quantize` (docs/quantization.md).
#include "engine/model/llama_weights.h"

#include <cstdio>

#include "engine/common/error.h"
#include "engine/model/safetensors.h"
#include "engine/quant/quant_config.h"
#include "engine/quant/quantized_checkpoint.h"
#include "engine/quant/tensor_stream.h"

namespace tq {
namespace {

using kernels::WeightDtype;

// The 16-bit format a tensor keeps when the model is quantized: its own
// F16/BF16, else fp16.
WeightDtype Dense16(TensorDtype src) {
  return src == TensorDtype::kBF16 ? WeightDtype::kBF16 : WeightDtype::kF16;
}

class Loader {
 public:
  Loader(const std::string& dir, kernels::Backend* backend) : ckpt_(dir), backend_(backend) {}

  // An fp32 vector (norms).
  kernels::BackendBuffer Vector(const std::string& name, int64_t n) {
    LinearWeight w = Convert(ckpt_.Require(name, {n}), 1, n, WeightDtype::kF32);
    return std::move(w.data);
  }

  // A dense [out, in] tensor converted to `target` (kF32, kF16 or kBF16).
  LinearWeight Dense(const std::string& name, int64_t out, int64_t in, WeightDtype target) {
    return Convert(ckpt_.Require(name, {out, in}), out, in, target);
  }

  // Quantizes a dense [out, in] tensor a chunk of rows at a time.
  LinearWeight Quantize(const std::string& name, int64_t out, int64_t in,
                        const quant::QuantFormat& f) {
    const TensorInfo& t = ckpt_.Require(name, {out, in});
    LinearWeight w = Quantized(out, in, f);
    const int64_t code_bytes = quant::CodeBytesPerRow(f, static_cast<int32_t>(in));
    const int64_t groups = in / f.group_size;
    quant::QuantizeTensor(
        t, f,
        [&](int64_t r0, int64_t rows, const uint8_t* codes, const uint16_t* scales,
            const uint16_t* zeros) {
          backend_->CopyToDevice(w.data.as<uint8_t>() + r0 * code_bytes, codes,
                                 static_cast<size_t>(rows * code_bytes));
          const auto bytes = static_cast<size_t>(rows * groups * 2);
          backend_->CopyToDevice(w.scales.as<uint16_t>() + r0 * groups, scales, bytes);
          if (zeros) {
            backend_->CopyToDevice(w.zeros.as<uint16_t>() + r0 * groups, zeros, bytes);
          }
        });
    return w;
  }

  // A module stored quantized by `tqserve quantize`: copied as is.
  LinearWeight Stored(const std::string& module, int64_t out, int64_t in,
                      const quant::QuantFormat& f) {
    quant::CheckFormat(f, in, ckpt_.dir() + "/config.json: " + module);
    const int64_t groups = in / f.group_size;
    const TensorInfo& codes =
        Require(module + quant::kCodesSuffix,
                {out, quant::CodeBytesPerRow(f, static_cast<int32_t>(in))}, TensorDtype::kU8);
    const TensorInfo& scales =
        Require(module + quant::kScalesSuffix, {out, groups}, TensorDtype::kF16);
    const TensorInfo* zeros = ckpt_.Find(module + quant::kZerosSuffix);
    if (f.symmetric == (zeros != nullptr)) {
      throw Error(codes.file + ": " + module + " is " + f.ToString() + " in config.json but " +
                  (zeros ? "has" : "lacks") + " tensor " + module + quant::kZerosSuffix);
    }
    if (zeros) Require(module + quant::kZerosSuffix, {out, groups}, TensorDtype::kF16);
    LinearWeight w = Quantized(out, in, f);
    backend_->CopyToDevice(w.data.data(), codes.data, codes.nbytes);
    backend_->CopyToDevice(w.scales.data(), scales.data, scales.nbytes);
    if (zeros) backend_->CopyToDevice(w.zeros.data(), zeros->data, zeros->nbytes);
    return w;
  }

  TensorDtype SourceDtype(const std::string& name) const {
    const TensorInfo* t = ckpt_.Find(name);
    return t ? t->dtype : TensorDtype::kF32;
  }

 private:
  LinearWeight Convert(const TensorInfo& t, int64_t out, int64_t in, WeightDtype target) {
    LinearWeight w = Empty(out, in, target);
    const size_t esize = target == WeightDtype::kF32 ? 4 : 2;
    w.data = kernels::BackendBuffer(backend_, static_cast<size_t>(out * in) * esize);
    quant::ConvertTensor(t, target, [&](int64_t begin, int64_t count, const void* bytes) {
      backend_->CopyToDevice(w.data.as<uint8_t>() + static_cast<size_t>(begin) * esize, bytes,
                             static_cast<size_t>(count) * esize);
    });
    return w;
  }

  static LinearWeight Empty(int64_t out, int64_t in, WeightDtype dtype) {
    LinearWeight w;
    w.dtype = dtype;
    w.out_features = static_cast<int32_t>(out);
    w.in_features = static_cast<int32_t>(in);
    return w;
  }

  LinearWeight Quantized(int64_t out, int64_t in, const quant::QuantFormat& f) {
    LinearWeight w = Empty(out, in, f.bits == 4 ? WeightDtype::kInt4 : WeightDtype::kInt8);
    w.group_size = f.group_size;
    const auto groups = static_cast<size_t>(out * (in / f.group_size));
    w.data = kernels::BackendBuffer(
        backend_, static_cast<size_t>(out * quant::CodeBytesPerRow(f, static_cast<int32_t>(in))));
    w.scales = kernels::BackendBuffer(backend_, groups * 2);
    if (!f.symmetric) w.zeros = kernels::BackendBuffer(backend_, groups * 2);
    return w;
  }

  const TensorInfo& Require(const std::string& name, std::vector<int64_t> shape,
                            TensorDtype dtype) {
    const TensorInfo& t = ckpt_.Require(name, shape);
    if (t.dtype != dtype) {
      throw Error(t.file + ": tensor " + name + " has dtype " + TensorDtypeName(t.dtype) +
                  ", expected " + TensorDtypeName(dtype));
    }
    return t;
  }

  SafetensorsCheckpoint ckpt_;
  kernels::Backend* backend_;
};

LinearWeight& Slot(LlamaLayerWeights& l, const std::string& short_name) {
  if (short_name == "self_attn.q_proj") return l.q_proj;
  if (short_name == "self_attn.k_proj") return l.k_proj;
  if (short_name == "self_attn.v_proj") return l.v_proj;
  if (short_name == "self_attn.o_proj") return l.o_proj;
  if (short_name == "mlp.gate_proj") return l.gate_proj;
  if (short_name == "mlp.up_proj") return l.up_proj;
  return l.down_proj;
}

std::string HumanBytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024.0 && u < 3) {
    b /= 1024.0;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof(s), "%.2f %s", b, unit[u]);
  return s;
}

}  // namespace

const char* WeightPrecisionName(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kF32:
      return "fp32";
    case WeightDtype::kF16:
      return "fp16";
    case WeightDtype::kBF16:
      return "bf16";
    case WeightDtype::kInt8:
      return "int8";
    case WeightDtype::kInt4:
      return "int4";
  }
  return "?";
}

kernels::WeightView LinearWeight::View() const {
  kernels::WeightView v;
  v.data = data.data();
  v.dtype = dtype;
  v.out_features = out_features;
  v.in_features = in_features;
  v.scales = scales.as<const uint16_t>();
  v.zeros = zeros.as<const uint16_t>();
  v.group_size = group_size;
  return v;
}

std::map<std::string, size_t> LlamaWeights::BytesByPrecision() const {
  std::map<std::string, size_t> out;
  auto add = [&](const LinearWeight& w) {
    if (!w.empty()) out[WeightPrecisionName(w.dtype)] += w.bytes();
  };
  add(embed_tokens);
  add(lm_head);
  out["fp32"] += norm.bytes();
  for (const LlamaLayerWeights& l : layers) {
    out["fp32"] += l.input_layernorm.bytes() + l.post_attention_layernorm.bytes();
    for (const LinearWeight* w :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      add(*w);
    }
  }
  return out;
}

double LlamaWeights::AverageBitsPerWeight() const {
  int64_t params =
      embed_tokens.num_params() + lm_head.num_params() + static_cast<int64_t>(norm.bytes() / 4);
  for (const LlamaLayerWeights& l : layers) {
    params +=
        static_cast<int64_t>((l.input_layernorm.bytes() + l.post_attention_layernorm.bytes()) / 4);
    for (const LinearWeight* w :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      params += w->num_params();
    }
  }
  return params > 0 ? 8.0 * static_cast<double>(total_bytes) / static_cast<double>(params) : 0.0;
}

std::string LlamaWeights::MemorySummary() const {
  std::string s = "weights " + HumanBytes(static_cast<double>(total_bytes)) + " (";
  bool first = true;
  for (const auto& [precision, bytes] : BytesByPrecision()) {
    s += (first ? "" : ", ") + precision + " " + std::to_string(bytes) + " B";
    first = false;
  }
  char bits[48];
  std::snprintf(bits, sizeof(bits), "), %.3f bits per weight", AverageBitsPerWeight());
  return s + bits;
}

LlamaWeights LoadLlamaWeights(const std::string& model_dir, const ModelConfig& config,
                              kernels::Backend* backend, const WeightLoadOptions& options) {
  Loader loader(model_dir, backend);
  const std::map<std::string, quant::QuantFormat> stored =
      quant::ReadCheckpointQuantization(model_dir);
  if (!stored.empty() && options.quant != nullptr) {
    throw Error(model_dir +
                ": the checkpoint is already quantized (config.json "
                "quantization_config); load it without --quantization-config");
  }
  const std::map<std::string, quant::QuantFormat> plan =
      options.quant ? quant::PlanFormats(*options.quant, config) : stored;
  const bool quantized_model = !plan.empty();
  auto dense = [&](const std::string& name, int64_t out, int64_t in) {
    const WeightDtype target =
        quantized_model ? Dense16(loader.SourceDtype(name)) : WeightDtype::kF32;
    return loader.Dense(name, out, in, target);
  };

  LlamaWeights w;
  const int64_t hidden = config.hidden_size;
  const int64_t vocab = config.vocab_size;
  w.embed_tokens = dense("model.embed_tokens.weight", vocab, hidden);
  w.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int32_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.input_layernorm = loader.Vector(p + "input_layernorm.weight", hidden);
    l.post_attention_layernorm = loader.Vector(p + "post_attention_layernorm.weight", hidden);
  }
  for (const quant::LinearModule& m : quant::LlamaLinearModules(config)) {
    LinearWeight& slot = Slot(w.layers[static_cast<size_t>(m.layer)], m.short_name);
    const std::string tensor = m.name + ".weight";
    if (!quantized_model) {
      slot = loader.Dense(tensor, m.out_features, m.in_features, WeightDtype::kF32);
      continue;
    }
    const auto it = plan.find(m.name);
    if (it == plan.end()) {
      throw Error(model_dir + "/config.json: quantization_config has no entry for " + m.name);
    }
    const quant::QuantFormat& f = it->second;
    if (!f.quantized()) {
      slot = dense(tensor, m.out_features, m.in_features);
    } else if (!stored.empty()) {
      slot = loader.Stored(m.name, m.out_features, m.in_features, f);
    } else {
      slot = loader.Quantize(tensor, m.out_features, m.in_features, f);
    }
  }
  w.norm = loader.Vector("model.norm.weight", hidden);
  if (!config.tie_word_embeddings) w.lm_head = dense("lm_head.weight", vocab, hidden);

  for (const auto& [precision, bytes] : w.BytesByPrecision()) w.total_bytes += bytes;
  return w;
}

}  // namespace tq
