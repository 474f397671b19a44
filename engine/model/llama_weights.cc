// Loads a Llama checkpoint's tensors (HF names, see transformers
// models/llama/modeling_llama.py) into fp32 backend buffers.
#include "engine/model/llama_weights.h"

#include <algorithm>

#include "engine/common/error.h"
#include "engine/model/safetensors.h"

namespace tq {
namespace {
constexpr size_t kChunkElems = size_t{16} << 20;  // 64 MB of fp32 per host round trip
}  // namespace

LlamaWeights LoadLlamaWeights(const std::string& model_dir, const ModelConfig& config,
                              kernels::Backend* backend) {
  const SafetensorsCheckpoint ckpt(model_dir);
  LlamaWeights w;
  std::vector<float> host;
  auto load = [&](const std::string& name, std::vector<int64_t> shape) {
    const TensorInfo& t = ckpt.Require(name, shape);
    const auto n = static_cast<size_t>(t.NumElements());
    kernels::BackendBuffer buf(backend, n * sizeof(float));
    // Convert through a bounded host buffer (a 128k-vocab embedding is 2 GB in fp32).
    const size_t esize = TensorDtypeBytes(t.dtype);
    for (size_t begin = 0; begin < n; begin += kChunkElems) {
      const size_t count = std::min(kChunkElems, n - begin);
      TensorInfo part = t;
      part.shape = {static_cast<int64_t>(count)};
      part.data = t.data + begin * esize;
      part.nbytes = count * esize;
      host.resize(count);
      part.ToFloat(host.data());
      backend->CopyToDevice(buf.as<float>() + begin, host.data(), count * sizeof(float));
    }
    w.total_bytes += buf.bytes();
    return buf;
  };
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.intermediate_size;
  const int64_t q_dim = int64_t{config.num_attention_heads} * config.head_dim;
  const int64_t kv_dim = int64_t{config.num_key_value_heads} * config.head_dim;
  const int64_t vocab = config.vocab_size;

  w.embed_tokens = load("model.embed_tokens.weight", {vocab, hidden});
  w.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int32_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.input_layernorm = load(p + "input_layernorm.weight", {hidden});
    l.q_proj = load(p + "self_attn.q_proj.weight", {q_dim, hidden});
    l.k_proj = load(p + "self_attn.k_proj.weight", {kv_dim, hidden});
    l.v_proj = load(p + "self_attn.v_proj.weight", {kv_dim, hidden});
    l.o_proj = load(p + "self_attn.o_proj.weight", {hidden, q_dim});
    l.post_attention_layernorm = load(p + "post_attention_layernorm.weight", {hidden});
    l.gate_proj = load(p + "mlp.gate_proj.weight", {inter, hidden});
    l.up_proj = load(p + "mlp.up_proj.weight", {inter, hidden});
    l.down_proj = load(p + "mlp.down_proj.weight", {hidden, inter});
  }
  w.norm = load("model.norm.weight", {hidden});
  if (!config.tie_word_embeddings) w.lm_head = load("lm_head.weight", {vocab, hidden});
  return w;
}

}  // namespace tq
