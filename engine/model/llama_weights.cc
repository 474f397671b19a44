// Loads a Llama checkpoint's tensors (HF names, see transformers
// models/llama/modeling_llama.py) into backend buffers: dense, quantized at
// load time, or as stored by `tqserve quantize` (docs/quantization.md).
#include "engine/model/llama_weights.h"

#include <cstdio>
#include <utility>

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

WeightDtype DenseTarget(DenseDtype d, TensorDtype src, bool quantized_model) {
  switch (d) {
    case DenseDtype::kFloat32:
      return WeightDtype::kF32;
    case DenseDtype::kFloat16:
      return WeightDtype::kF16;
    case DenseDtype::kBFloat16:
      return WeightDtype::kBF16;
    case DenseDtype::kAuto:
      if (!quantized_model) return src == TensorDtype::kF32 ? WeightDtype::kF32 : Dense16(src);
      break;
    case DenseDtype::kDefault:
      break;
  }
  return quantized_model ? Dense16(src) : WeightDtype::kF32;
}

// A rectangle of a 2-D tensor [rows, cols] (a 1-D tensor is one row): one
// tensor-parallel rank's slice.
struct Slice {
  int64_t row0 = 0, rows = -1;  // -1: all
  int64_t col0 = 0, cols = -1;
  int64_t out_rows = -1;  // rows of the buffer (>= rows; the rest zero); -1: rows
};

class Loader {
 public:
  Loader(const std::string& dir, kernels::Backend* backend) : ckpt_(dir), backend_(backend) {}

  // An fp32 vector of n elements (norms, biases), or its elements
  // [first, first + count) (a column-parallel bias slice; count -1: all).
  kernels::BackendBuffer Vector(const std::string& name, int64_t n, int64_t first = 0,
                                int64_t count = -1) {
    LinearWeight w = Dense(name, {n}, {0, -1, first, count}, WeightDtype::kF32);
    return std::move(w.data);
  }

  // The slice s of a dense tensor of `shape`, converted to `target` (kF32,
  // kF16 or kBF16) a contiguous run (whole rows, or one row's columns) at a time.
  LinearWeight Dense(const std::string& name, const std::vector<int64_t>& shape, const Slice& s,
                     WeightDtype target) {
    return DenseOf(ckpt_.Require(name, shape), s, target);
  }

  // The slice s of a 1-D or 2-D tensor view (a checkpoint tensor, or one
  // expert's matrix inside a fused 3-D tensor: Matrix()).
  LinearWeight DenseOf(const TensorInfo& t, const Slice& s, WeightDtype target) {
    const std::vector<int64_t>& shape = t.shape;
    const int64_t full_cols = shape.size() == 2 ? shape[1] : shape[0];
    const int64_t full_rows = shape.size() == 2 ? shape[0] : 1;
    const int64_t rows = s.rows < 0 ? full_rows : s.rows;
    const int64_t cols = s.cols < 0 ? full_cols : s.cols;
    LinearWeight w = Empty(std::max(rows, s.out_rows), cols, target);
    const size_t esize = target == WeightDtype::kF32 ? 4 : 2;
    w.data = kernels::BackendBuffer(backend_, static_cast<size_t>(w.num_params()) * esize);
    const bool whole_rows = cols == full_cols;
    const int64_t run = whole_rows ? rows * cols : cols;
    for (int64_t r = 0; r < (whole_rows ? 1 : rows); ++r) {
      const int64_t first = (s.row0 + r) * full_cols + s.col0;
      uint8_t* dst = w.data.as<uint8_t>() + static_cast<size_t>(r * cols) * esize;
      quant::ConvertTensor(t.Elements(first, run), target,
                           [&](int64_t begin, int64_t count, const void* bytes) {
                             backend_->CopyToDevice(dst + static_cast<size_t>(begin) * esize, bytes,
                                                    static_cast<size_t>(count) * esize);
                           });
    }
    return w;
  }

  // Quantizes the slice s of a dense [out, in] tensor a chunk of rows at a time.
  LinearWeight Quantize(const std::string& name, int64_t out, int64_t in, const Slice& s,
                        const quant::QuantFormat& f) {
    return QuantizeOf(ckpt_.Require(name, {out, in}), s, f);
  }

  // Quantizes the slice s of a 2-D tensor view [out, in].
  LinearWeight QuantizeOf(const TensorInfo& t, const Slice& s, const quant::QuantFormat& f) {
    const std::string& name = t.name;
    const int64_t out = t.shape[0], in = t.shape[1];
    const int64_t rows = s.rows < 0 ? out : s.rows;
    const int64_t cols = s.cols < 0 ? in : s.cols;
    CheckSliceGroups(name, s, cols, f);
    LinearWeight w = Quantized(std::max(rows, s.out_rows), cols, f);  // padding: zero scales
    const int64_t code_bytes = quant::CodeBytesPerRow(f, static_cast<int32_t>(cols));
    const int64_t groups = cols / f.group_size;
    auto store = [&](int64_t r0, int64_t n, const uint8_t* codes, const uint16_t* scales,
                     const uint16_t* zeros) {
      backend_->CopyToDevice(w.data.as<uint8_t>() + r0 * code_bytes, codes,
                             static_cast<size_t>(n * code_bytes));
      const auto bytes = static_cast<size_t>(n * groups * 2);
      backend_->CopyToDevice(w.scales.as<uint16_t>() + r0 * groups, scales, bytes);
      if (zeros) backend_->CopyToDevice(w.zeros.as<uint16_t>() + r0 * groups, zeros, bytes);
    };
    if (cols == in) {  // whole rows: one contiguous [rows, in] matrix
      TensorInfo part = t.Elements(s.row0 * in, rows * in);
      part.shape = {rows, in};
      quant::QuantizeTensor(part, f, store);
      return w;
    }
    // A column slice: gather each row's segment, then quantize it as a row.
    std::vector<float> row;
    std::vector<uint8_t> codes(static_cast<size_t>(code_bytes));
    std::vector<uint16_t> scales(static_cast<size_t>(groups)), zeros(scales.size());
    for (int64_t r = 0; r < rows; ++r) {
      quant::ReadFloatRange(t, (s.row0 + r) * in + s.col0, cols, &row);
      try {
        quant::QuantizeRows(row.data(), 1, static_cast<int32_t>(cols), f, codes.data(),
                            scales.data(), zeros.data());
      } catch (const Error& e) {
        throw Error(t.file + ": tensor " + name + ": " + e.what());
      }
      store(r, 1, codes.data(), scales.data(), f.symmetric ? nullptr : zeros.data());
    }
    return w;
  }

  // The slice s of a module stored quantized by `tqserve quantize`.
  LinearWeight Stored(const std::string& module, int64_t out, int64_t in, const Slice& s,
                      const quant::QuantFormat& f) {
    quant::CheckFormat(f, in, ckpt_.dir() + "/config.json: " + module);
    const int64_t rows = s.rows < 0 ? out : s.rows;
    const int64_t cols = s.cols < 0 ? in : s.cols;
    CheckSliceGroups(module, s, cols, f);
    const int64_t groups = in / f.group_size;
    const int64_t code_bytes = quant::CodeBytesPerRow(f, static_cast<int32_t>(in));
    const TensorInfo& codes =
        Require(module + quant::kCodesSuffix, {out, code_bytes}, TensorDtype::kU8);
    const TensorInfo& scales =
        Require(module + quant::kScalesSuffix, {out, groups}, TensorDtype::kF16);
    const TensorInfo* zeros = ckpt_.Find(module + quant::kZerosSuffix);
    if (f.symmetric == (zeros != nullptr)) {
      throw Error(codes.file + ": " + module + " is " + f.ToString() + " in config.json but " +
                  (zeros ? "has" : "lacks") + " tensor " + module + quant::kZerosSuffix);
    }
    if (zeros) Require(module + quant::kZerosSuffix, {out, groups}, TensorDtype::kF16);
    LinearWeight w = Quantized(std::max(rows, s.out_rows), cols, f);  // padding: zero scales
    // Row r of the slice: bytes [col0 * bits / 8, cols * bits / 8) of the
    // codes and groups [col0 / g, cols / g) of scales and zeros.
    const int64_t slice_code_bytes = quant::CodeBytesPerRow(f, static_cast<int32_t>(cols));
    const int64_t code0 = quant::CodeBytesPerRow(f, static_cast<int32_t>(s.col0));
    const int64_t slice_groups = cols / f.group_size, group0 = s.col0 / f.group_size;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t src = s.row0 + r;
      backend_->CopyToDevice(w.data.as<uint8_t>() + r * slice_code_bytes,
                             codes.data + src * code_bytes + code0,
                             static_cast<size_t>(slice_code_bytes));
      const size_t group_bytes = static_cast<size_t>(slice_groups) * 2;
      const size_t from = static_cast<size_t>(src * groups + group0) * 2;
      backend_->CopyToDevice(w.scales.as<uint16_t>() + r * slice_groups, scales.data + from,
                             group_bytes);
      if (zeros) {
        backend_->CopyToDevice(w.zeros.as<uint16_t>() + r * slice_groups, zeros->data + from,
                               group_bytes);
      }
    }
    return w;
  }

  // A [rows, cols] matrix: the 2-D tensor `name`, or, when absent and
  // `fused` names a 3-D tensor [n, fused_rows, cols], rows
  // [row0, row0 + rows) of its entry `index` (transformers v5's fused
  // experts). Throws tq::Error naming both when neither exists or a shape
  // differs.
  TensorInfo Matrix(const std::string& name, int64_t rows, int64_t cols, const std::string& fused,
                    int64_t n, int64_t fused_rows, int64_t index, int64_t row0) const {
    if (fused.empty() || ckpt_.Find(name) != nullptr || ckpt_.Find(fused) == nullptr) {
      return ckpt_.Require(name, {rows, cols});
    }
    const TensorInfo& t = ckpt_.Require(fused, {n, fused_rows, cols});
    TensorInfo part = t.Elements((index * fused_rows + row0) * cols, rows * cols);
    part.shape = {rows, cols};
    part.name = fused + "[" + std::to_string(index) + "]";
    return part;
  }

  TensorDtype SourceDtype(const std::string& name) const {
    const TensorInfo* t = ckpt_.Find(name);
    return t ? t->dtype : TensorDtype::kF32;
  }

 private:
  // A row-parallel slice must cut between groups, so that every rank's
  // codes are the unsplit model's (and int4 bytes are not split).
  void CheckSliceGroups(const std::string& name, const Slice& s, int64_t cols,
                        const quant::QuantFormat& f) const {
    if (s.col0 % f.group_size != 0 || cols % f.group_size != 0) {
      throw Error(ckpt_.dir() + ": " + name + ": group_size " + std::to_string(f.group_size) +
                  " does not divide the tensor-parallel slice of " + std::to_string(cols) +
                  " input channels (columns " + std::to_string(s.col0) + ".." +
                  std::to_string(s.col0 + cols - 1) +
                  " on one rank); quantize with a group_size"
                  " that divides " +
                  std::to_string(cols) + " or use a smaller --tensor-parallel-size");
    }
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

LinearWeight& Slot(LlamaLayerWeights& l, const quant::LinearModule& m) {
  using quant::ModuleRole;
  const auto e = static_cast<size_t>(m.expert);
  switch (m.role) {
    case ModuleRole::kQ:
      return l.q_proj;
    case ModuleRole::kK:
      return l.k_proj;
    case ModuleRole::kV:
      return l.v_proj;
    case ModuleRole::kO:
      return l.o_proj;
    case ModuleRole::kGate:
      return l.gate_proj;
    case ModuleRole::kUp:
      return l.up_proj;
    case ModuleRole::kDown:
      return l.down_proj;
    case ModuleRole::kExpertGate:
      return l.moe.gate_proj.at(e);
    case ModuleRole::kExpertUp:
      return l.moe.up_proj.at(e);
    case ModuleRole::kExpertDown:
      return l.moe.down_proj.at(e);
    case ModuleRole::kSharedGate:
      return l.moe.shared_gate_proj;
    case ModuleRole::kSharedUp:
      return l.moe.shared_up_proj;
    case ModuleRole::kSharedDown:
    case ModuleRole::kTable:
      break;
  }
  return l.moe.shared_down_proj;
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

// Puts a loaded linear weight into the backend's preferred layout (the CPU
// backend's fp32 column panels); the original buffer is freed once the copy
// exists, so peak memory grows by one matrix at most.
void PrepareForBackend(LinearWeight& w, kernels::Backend* backend) {
  if (w.empty()) return;
  kernels::BackendBuffer prepared;
  const kernels::WeightView view = backend->PrepareWeight(w.View(), &prepared);
  if (prepared.data() == nullptr) return;
  const auto* begin = static_cast<const uint8_t*>(prepared.data());
  const auto inside = [&](const void* p) { return p >= begin && p < begin + prepared.bytes(); };
  if (view.scales && inside(view.scales)) {  // scales/zeros travel with the data
    w.scales_in_data = view.scales;
    w.zeros_in_data = view.zeros;
    w.scales.Reset();
    w.zeros.Reset();
  }
  w.data = std::move(prepared);
  w.dtype = view.dtype;
}

}  // namespace

std::string WeightPrecisionName(WeightDtype dtype) {
  // Panels and tiles are the CPU backend's layouts of fp32 / int8 / int4.
  return kernels::WeightDtypeName(kernels::LogicalWeightDtype(dtype));
}

kernels::WeightView LinearWeight::View() const {
  kernels::WeightView v;
  v.data = data.data();
  v.dtype = dtype;
  v.out_features = out_features;
  v.in_features = in_features;
  v.scales = scales_in_data ? scales_in_data : scales.as<const uint16_t>();
  v.zeros = scales_in_data ? zeros_in_data : zeros.as<const uint16_t>();
  v.group_size = group_size;
  return v;
}

std::vector<const LinearWeight*> LlamaLayerWeights::Linears() const {
  std::vector<const LinearWeight*> out = {&q_proj,    &k_proj,  &v_proj,   &o_proj,
                                          &gate_proj, &up_proj, &down_proj};
  if (!moe.empty()) {
    out.push_back(&moe.router);
    for (size_t e = 0; e < moe.gate_proj.size(); ++e) {
      out.insert(out.end(), {&moe.gate_proj[e], &moe.up_proj[e], &moe.down_proj[e]});
    }
    out.insert(out.end(), {&moe.shared_gate_proj, &moe.shared_up_proj, &moe.shared_down_proj,
                           &moe.shared_expert_gate});
  }
  return out;
}

std::vector<LinearWeight*> LlamaLayerWeights::Linears() {
  std::vector<LinearWeight*> out;
  for (const LinearWeight* w : std::as_const(*this).Linears()) {
    out.push_back(const_cast<LinearWeight*>(w));
  }
  return out;
}

size_t LlamaLayerWeights::VectorBytes() const {
  size_t n = 0;
  for (const kernels::BackendBuffer* b :
       {&input_layernorm, &post_attention_layernorm, &q_bias, &k_bias, &v_bias, &q_norm, &k_norm}) {
    n += b->bytes();
  }
  return n;
}

kernels::WeightView LlamaWeights::LmHeadView(int32_t rows) const {
  if (!lm_head.empty()) return lm_head.View();
  kernels::WeightView v = embed_tokens.View();
  if (lm_head_offset == 0) {  // the whole table (an int8/int4 one is only shared so)
    v.out_features = rows;
    return v;
  }
  const size_t esize = embed_tokens.dtype == kernels::WeightDtype::kF32 ? 4 : 2;
  v.data =
      embed_tokens.data.as<const uint8_t>() + lm_head_offset * embed_tokens.in_features * esize;
  v.out_features = rows;
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
    out["fp32"] += l.VectorBytes();
    for (const LinearWeight* w : l.Linears()) add(*w);
  }
  return out;
}

std::map<std::string, size_t> LlamaWeights::ExpertBytesByPrecision() const {
  std::map<std::string, size_t> out;
  auto add = [&](const LinearWeight& w) {
    if (!w.empty()) out[WeightPrecisionName(w.dtype)] += w.bytes();
  };
  for (const LlamaLayerWeights& l : layers) {
    const MoeLayerWeights& m = l.moe;
    for (size_t e = 0; e < m.gate_proj.size(); ++e) {
      for (const LinearWeight* w : {&m.gate_proj[e], &m.up_proj[e], &m.down_proj[e]}) add(*w);
    }
    for (const LinearWeight* w : {&m.shared_gate_proj, &m.shared_up_proj, &m.shared_down_proj}) {
      add(*w);
    }
  }
  return out;
}

double LlamaWeights::AverageBitsPerWeight() const {
  int64_t params =
      embed_tokens.num_params() + lm_head.num_params() + static_cast<int64_t>(norm.bytes() / 4);
  for (const LlamaLayerWeights& l : layers) {
    params += static_cast<int64_t>(l.VectorBytes() / 4);
    for (const LinearWeight* w : l.Linears()) params += w->num_params();
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
  s += bits;
  const std::map<std::string, size_t> experts = ExpertBytesByPrecision();
  first = true;
  for (const auto& [precision, bytes] : experts) {
    s += (first ? "; of which experts: " : ", ") + precision + " " + std::to_string(bytes) + " B";
    first = false;
  }
  return s;
}

LlamaWeights LoadLlamaWeights(const std::string& model_dir, const ModelConfig& config,
                              kernels::Backend* backend, const TpPlan& tp,
                              const WeightLoadOptions& options) {
  Loader loader(model_dir, backend);
  const TpPlan plan = tp.world_size > 1 ? tp : MakeTpPlan(config, 0, 1);
  const std::map<std::string, quant::QuantFormat> stored =
      quant::ReadCheckpointQuantization(model_dir);
  if (!stored.empty() && options.quant != nullptr) {
    throw Error(model_dir +
                ": the checkpoint is already quantized (config.json "
                "quantization_config); load it without --quantization-config");
  }
  const std::map<std::string, quant::QuantFormat> formats =
      options.quant ? quant::PlanFormats(*options.quant, config) : stored;
  const bool quantized_model = !formats.empty();
  // Every dense matrix (embed_tokens, lm_head, unquantized or 16-bit linears).
  auto dense = [&](const std::string& name, int64_t rows, int64_t cols, const Slice& s) {
    return loader.Dense(
        name, {rows, cols}, s,
        DenseTarget(options.dense_dtype, loader.SourceDtype(name), quantized_model));
  };

  const int64_t hidden = config.hidden_size;
  const int64_t hd = config.head_dim;
  const int64_t vocab = config.vocab_size;
  // Column-parallel: rows of the rank's heads / channels; row-parallel: columns.
  const Slice q_rows{plan.first_head * hd, plan.num_heads * hd};
  const Slice kv_rows{plan.first_kv_head * hd, plan.num_kv_heads * hd};
  const Slice o_cols{0, -1, plan.first_head * hd, plan.num_heads * hd};
  const Slice inter_rows{plan.first_intermediate, plan.intermediate};
  const Slice down_cols{0, -1, plan.first_intermediate, plan.intermediate};
  const Slice expert_rows{plan.first_moe_intermediate, plan.moe_intermediate};
  const Slice expert_cols{0, -1, plan.first_moe_intermediate, plan.moe_intermediate};
  const Slice shared_rows{plan.first_shared_intermediate, plan.shared_intermediate};
  const Slice shared_cols{0, -1, plan.first_shared_intermediate, plan.shared_intermediate};
  auto slice_of = [&](quant::ModuleRole role) {
    using quant::ModuleRole;
    switch (role) {
      case ModuleRole::kQ:
        return q_rows;
      case ModuleRole::kK:
      case ModuleRole::kV:
        return kv_rows;
      case ModuleRole::kO:
        return o_cols;
      case ModuleRole::kDown:
        return down_cols;
      case ModuleRole::kExpertGate:
      case ModuleRole::kExpertUp:
        return expert_rows;
      case ModuleRole::kExpertDown:
        return expert_cols;
      case ModuleRole::kSharedGate:
      case ModuleRole::kSharedUp:
        return shared_rows;
      case ModuleRole::kSharedDown:
        return shared_cols;
      case ModuleRole::kGate:
      case ModuleRole::kUp:
      case ModuleRole::kTable:
        break;
    }
    return inter_rows;
  };
  // A module's [out, in] matrix in the checkpoint: its 2-D tensor, or an
  // expert's rows of the layer's fused 3-D tensors (transformers v5:
  // <block>.experts.gate_up_proj [E, 2I, hidden] with gate rows first,
  // <block>.experts.down_proj [E, hidden, I]).
  const MoeConfig& moe = config.moe;
  auto matrix = [&](const quant::LinearModule& m) {
    const std::string tensor = m.name + ".weight";
    if (m.expert < 0) return loader.Matrix(tensor, m.out_features, m.in_features, "", 0, 0, 0, 0);
    const std::string fused =
        "model.layers." + std::to_string(m.layer) + "." + moe.block + ".experts." +
        (m.role == quant::ModuleRole::kExpertDown ? "down_proj" : "gate_up_proj");
    const int64_t mi = moe.moe_intermediate_size;
    if (m.role == quant::ModuleRole::kExpertDown) {
      return loader.Matrix(tensor, m.out_features, m.in_features, fused, moe.num_experts,
                           m.out_features, m.expert, 0);
    }
    return loader.Matrix(tensor, m.out_features, m.in_features, fused, moe.num_experts, 2 * mi,
                         m.expert, m.role == quant::ModuleRole::kExpertUp ? mi : 0);
  };

  // A vocabulary table's rows s ([vocab, hidden]; the TP lm_head shard):
  // int8/int4 when the plan has it (rows are independent and groups run
  // along hidden, so any row slice holds whole groups), else dense.
  auto table = [&](const std::string& module, const Slice& s) {
    const auto it = formats.find(module);
    const std::string tensor = module + ".weight";
    if (it == formats.end() || !it->second.quantized()) return dense(tensor, vocab, hidden, s);
    if (!stored.empty()) return loader.Stored(module, vocab, hidden, s, it->second);
    return loader.Quantize(tensor, vocab, hidden, s, it->second);
  };
  const auto embed_format = formats.find(quant::kEmbedTokensModule);
  const bool embed_quantized = embed_format != formats.end() && embed_format->second.quantized();
  if (embed_quantized && !backend->Capabilities().int_embedding) {
    throw Error(model_dir + ": " + quant::kEmbedTokensModule + " is " +
                embed_format->second.ToString() + " but the " + std::string(backend->Name()) +
                " backend's Embedding reads fp32/fp16/bf16 tables only; keep embed_tokens "
                "16-bit (drop its override; lm_head may stay quantized)");
  }

  LlamaWeights w;
  w.embed_tokens = table(quant::kEmbedTokensModule, {});
  w.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int32_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.input_layernorm = loader.Vector(p + "input_layernorm.weight", hidden);
    l.post_attention_layernorm = loader.Vector(p + "post_attention_layernorm.weight", hidden);
    if (moe.Sparse(i)) {
      // The router and the shared expert's gate stay fp32 (routing in fp32,
      // as transformers' softmax(router_logits, dtype=float)).
      const std::string b = p + moe.block + ".";
      l.moe.router =
          loader.Dense(b + "gate.weight", {moe.num_experts, hidden}, {}, WeightDtype::kF32);
      const auto experts = static_cast<size_t>(moe.num_experts);
      l.moe.gate_proj.resize(experts);
      l.moe.up_proj.resize(experts);
      l.moe.down_proj.resize(experts);
      if (moe.shared_expert_intermediate_size > 0) {
        l.moe.shared_expert_gate =
            loader.Dense(b + "shared_expert_gate.weight", {1, hidden}, {}, WeightDtype::kF32);
      }
    }
    for (const LayerVectorTensor& v : LayerVectorTensors(config)) {
      const std::string name = p + v.short_name;
      if (v.short_name == "self_attn.q_proj.bias") {
        l.q_bias = loader.Vector(name, v.size, plan.first_head * hd, plan.num_heads * hd);
      } else if (v.short_name == "self_attn.k_proj.bias") {
        l.k_bias = loader.Vector(name, v.size, plan.first_kv_head * hd, plan.num_kv_heads * hd);
      } else if (v.short_name == "self_attn.v_proj.bias") {
        l.v_bias = loader.Vector(name, v.size, plan.first_kv_head * hd, plan.num_kv_heads * hd);
      } else if (v.short_name == "self_attn.q_norm.weight") {
        l.q_norm = loader.Vector(name, v.size);
      } else {
        l.k_norm = loader.Vector(name, v.size);
      }
    }
  }
  // Every dense matrix of a layer (unquantized or 16-bit linears).
  auto dense_of = [&](const TensorInfo& t, const Slice& s) {
    return loader.DenseOf(t, s, DenseTarget(options.dense_dtype, t.dtype, quantized_model));
  };
  for (const quant::LinearModule& m : quant::LlamaLinearModules(config)) {
    if (m.expert >= 0 && !plan.HoldsExpert(m.expert)) continue;  // another rank's expert
    LinearWeight& slot = Slot(w.layers[static_cast<size_t>(m.layer)], m);
    const Slice s = slice_of(m.role);
    if (!quantized_model) {
      slot = dense_of(matrix(m), s);
      continue;
    }
    const auto it = formats.find(m.name);
    if (it == formats.end()) {
      throw Error(model_dir + "/config.json: quantization_config has no entry for " + m.name);
    }
    const quant::QuantFormat& f = it->second;
    if (!stored.empty() && f.quantized()) {
      slot = loader.Stored(m.name, m.out_features, m.in_features, s, f);
    } else if (!f.quantized()) {
      slot = dense_of(matrix(m), s);
    } else {
      slot = loader.QuantizeOf(matrix(m), s, f);
    }
  }
  w.norm = loader.Vector("model.norm.weight", hidden);
  // lm_head by vocabulary: [vocab_shard, hidden], zero rows past the vocabulary.
  const Slice vocab_rows{plan.first_vocab, plan.vocab_rows, 0, -1, plan.vocab_shard};
  // A tied int8/int4 table is shared whole (one copy of the codes, in the
  // layout lm_head's matmul reads; Embedding gathers rows from it too). Under
  // TP each rank's shard is its own copy of its rows (the same codes: rows
  // quantize independently), as a dense shard that does not split evenly.
  if (!config.tie_word_embeddings) {
    w.lm_head = table(quant::kLmHeadModule, vocab_rows);
  } else if (plan.vocab_rows < plan.vocab_shard || (embed_quantized && plan.world_size > 1)) {
    w.lm_head = table(quant::kEmbedTokensModule, vocab_rows);
  } else {
    w.lm_head_offset = static_cast<size_t>(plan.first_vocab);
  }
  for (LlamaLayerWeights& l : w.layers) {
    for (LinearWeight* m : l.Linears()) PrepareForBackend(*m, backend);
  }
  PrepareForBackend(w.lm_head, backend);
  // embed_tokens stays rows (Embedding reads them), unless lm_head shares the
  // whole table (tied): then it takes the matmul's layout (the CPU's panels
  // or int tiles, which its Embedding reads in place), or lm_head, the
  // largest matrix of a decode step, would run the slower row kernel. Under
  // tensor parallelism lm_head is a row range of it (or, quantized, its own
  // copy), so the table stays rows there (a panel or tile holds 64 or 16 rows).
  if (w.lm_head.empty() && plan.world_size == 1) PrepareForBackend(w.embed_tokens, backend);
  for (const auto& [precision, bytes] : w.BytesByPrecision()) w.total_bytes += bytes;
  return w;
}

}  // namespace tq
