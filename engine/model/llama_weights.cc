// Loads a Llama checkpoint's tensors (HF names, see transformers
// models/llama/modeling_llama.py) into fp32 backend buffers, whole or as one
// tensor-parallel rank's slices (engine/parallel/tp_plan.h).
#include "engine/model/llama_weights.h"

#include <algorithm>

#include "engine/common/error.h"
#include "engine/model/safetensors.h"

namespace tq {
namespace {
constexpr size_t kChunkElems = size_t{16} << 20;  // 64 MB of fp32 per host round trip

// A rectangle of a 2-D tensor [rows, cols] (a 1-D tensor is one row).
struct Slice {
  int64_t row0 = 0, rows = -1;  // -1: all
  int64_t col0 = 0, cols = -1;
  int64_t out_rows = -1;  // rows of the buffer (>= rows; the rest zero); -1: rows
};

}  // namespace

LlamaWeights LoadLlamaWeights(const std::string& model_dir, const ModelConfig& config,
                              kernels::Backend* backend, const TpPlan& tp) {
  const SafetensorsCheckpoint ckpt(model_dir);
  const TpPlan plan = tp.world_size > 1 ? tp : MakeTpPlan(config, 0, 1);
  LlamaWeights w;
  std::vector<float> host;
  auto load = [&](const std::string& name, std::vector<int64_t> shape, Slice s = {}) {
    const TensorInfo& t = ckpt.Require(name, shape);
    const int64_t full_cols = shape.size() == 2 ? shape[1] : shape[0];
    const int64_t full_rows = shape.size() == 2 ? shape[0] : 1;
    const int64_t rows = s.rows < 0 ? full_rows : s.rows;
    const int64_t cols = s.cols < 0 ? full_cols : s.cols;
    const int64_t out_rows = std::max(rows, s.out_rows);
    kernels::BackendBuffer buf(backend, static_cast<size_t>(out_rows * cols) * sizeof(float));
    // Converts row segments through a bounded host buffer (a 128k-vocab
    // embedding is 2 GB in fp32); whole rows are one run of elements.
    const size_t esize = TensorDtypeBytes(t.dtype);
    const bool whole_rows = cols == full_cols;
    const int64_t run = whole_rows ? rows * cols : cols;  // elements per contiguous run
    const int64_t runs = whole_rows ? 1 : rows;
    size_t done = 0;  // elements copied to the backend
    for (int64_t r = 0; r < runs; ++r) {
      const int64_t first = (s.row0 + r) * full_cols + s.col0;
      for (int64_t begin = 0; begin < run;) {
        const int64_t count = std::min<int64_t>(static_cast<int64_t>(kChunkElems), run - begin);
        TensorInfo part = t;
        part.shape = {count};
        part.data = t.data + static_cast<size_t>(first + begin) * esize;
        part.nbytes = static_cast<size_t>(count) * esize;
        host.resize(static_cast<size_t>(count));
        part.ToFloat(host.data());
        backend->CopyToDevice(buf.as<float>() + done, host.data(),
                              static_cast<size_t>(count) * sizeof(float));
        done += static_cast<size_t>(count);
        begin += count;
      }
    }
    w.total_bytes += buf.bytes();
    return buf;
  };
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.intermediate_size;
  const int64_t hd = config.head_dim;
  const int64_t q_dim = int64_t{config.num_attention_heads} * hd;
  const int64_t kv_dim = int64_t{config.num_key_value_heads} * hd;
  const int64_t vocab = config.vocab_size;
  // Column-parallel: rows of the rank's heads / channels; row-parallel: columns.
  const Slice q_rows{plan.first_head * hd, plan.num_heads * hd};
  const Slice kv_rows{plan.first_kv_head * hd, plan.num_kv_heads * hd};
  const Slice o_cols{0, -1, plan.first_head * hd, plan.num_heads * hd};
  const Slice inter_rows{plan.first_intermediate, plan.intermediate};
  const Slice down_cols{0, -1, plan.first_intermediate, plan.intermediate};

  w.embed_tokens = load("model.embed_tokens.weight", {vocab, hidden});
  w.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int32_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.input_layernorm = load(p + "input_layernorm.weight", {hidden});
    l.q_proj = load(p + "self_attn.q_proj.weight", {q_dim, hidden}, q_rows);
    l.k_proj = load(p + "self_attn.k_proj.weight", {kv_dim, hidden}, kv_rows);
    l.v_proj = load(p + "self_attn.v_proj.weight", {kv_dim, hidden}, kv_rows);
    l.o_proj = load(p + "self_attn.o_proj.weight", {hidden, q_dim}, o_cols);
    l.post_attention_layernorm = load(p + "post_attention_layernorm.weight", {hidden});
    l.gate_proj = load(p + "mlp.gate_proj.weight", {inter, hidden}, inter_rows);
    l.up_proj = load(p + "mlp.up_proj.weight", {inter, hidden}, inter_rows);
    l.down_proj = load(p + "mlp.down_proj.weight", {hidden, inter}, down_cols);
  }
  w.norm = load("model.norm.weight", {hidden});
  // lm_head by vocabulary: [vocab_shard, hidden], zero rows past the vocabulary.
  const Slice vocab_rows{plan.first_vocab, plan.vocab_rows, 0, -1, plan.vocab_shard};
  if (!config.tie_word_embeddings) {
    w.lm_head = load("lm_head.weight", {vocab, hidden}, vocab_rows);
  } else if (plan.vocab_rows < plan.vocab_shard) {
    w.lm_head = load("model.embed_tokens.weight", {vocab, hidden}, vocab_rows);
  } else {
    w.lm_head_offset = static_cast<size_t>(plan.first_vocab) * config.hidden_size;
  }
  return w;
}

}  // namespace tq
