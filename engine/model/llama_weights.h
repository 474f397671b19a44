// Weights of a Llama-family model, loaded from a HF checkpoint into backend
// memory: dense (fp32/fp16/bf16) or group-wise quantized (int8/int4, see
// docs/quantization.md), quantized at load time from a config or read from a
// checkpoint that `tqserve quantize` wrote.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/parallel/tp_plan.h"
#include "kernels/backend.h"

namespace tq {

namespace quant {
struct QuantConfig;
}

/// One weight matrix [out_features, in_features] in backend memory, in the
/// storage format of kernels::WeightView: dense elements, or packed integer
/// codes with fp16 scales and (asymmetric only) fp16 zero points per group of
/// group_size input channels. Owned by LlamaWeights; read-only after loading.
struct LinearWeight {
  kernels::BackendBuffer data;    // dense elements or packed codes, row-major
  kernels::BackendBuffer scales;  // int formats: fp16 bits [out, in / group_size]
  kernels::BackendBuffer zeros;   // asymmetric int formats: fp16 bits, same shape
  kernels::WeightDtype dtype = kernels::WeightDtype::kF32;
  int32_t out_features = 0;
  int32_t in_features = 0;
  int32_t group_size = 0;  // int formats only
  // Set when the backend's PrepareWeight moved scales/zeros into `data` (the
  // CPU backend's int tiles); scales/zeros are then empty.
  const uint16_t* scales_in_data = nullptr;
  const uint16_t* zeros_in_data = nullptr;

  /// The kernels' view of this weight (pointers into the buffers above).
  kernels::WeightView View() const;
  /// Backend bytes held: data + scales + zeros.
  size_t bytes() const { return data.bytes() + scales.bytes() + zeros.bytes(); }
  int64_t num_params() const { return int64_t{out_features} * in_features; }
  bool empty() const { return data.data() == nullptr; }
};

/// "fp32", "fp16", "bf16", "int8", "int4": the label of
/// tqserve_memory_weights_bytes{precision} (docs/metrics.md).
std::string WeightPrecisionName(kernels::WeightDtype dtype);

/// A sparse MoE block's weights (MoeConfig; HF names model.layers.N.<block>.*),
/// one layout whichever form the checkpoint holds (2-D tensors per expert,
/// or transformers v5's fused 3-D experts.gate_up_proj / down_proj): each
/// expert's three matrices as their own LinearWeight, so that every expert
/// runs on the same matmul kernels (dense, int8, int4) as a dense MLP and a
/// decode step reads only the experts it selected. Under tensor parallelism
/// each expert holds its intermediate slice (rows of gate/up, columns of
/// down; TpPlan::moe_intermediate), the router and shared_expert_gate are
/// whole on every rank. Under expert parallelism (TpPlan::expert_parallel)
/// a rank loads only its experts, whole; the others' entries stay empty.
struct MoeLayerWeights {
  LinearWeight router;  // fp32 [num_experts, hidden] (<block>.gate), never quantized
  std::vector<LinearWeight> gate_proj, up_proj;  // [E] x [I, hidden]
  std::vector<LinearWeight> down_proj;           // [E] x [hidden, I]
  // Qwen2-MoE's shared expert (empty when the model has none).
  LinearWeight shared_gate_proj, shared_up_proj;  // [S, hidden]
  LinearWeight shared_down_proj;                  // [hidden, S]
  LinearWeight shared_expert_gate;                // fp32 [1, hidden]

  bool empty() const { return router.empty(); }
};

/// One decoder layer's tensors (HF names model.layers.N.*). Norms stay fp32.
/// Under tensor parallelism the rank's slices (TpPlan): heads, KV heads and
/// intermediate channels replace the full counts in the shapes below.
struct LlamaLayerWeights {
  kernels::BackendBuffer input_layernorm;           // fp32 [hidden]
  LinearWeight q_proj, k_proj, v_proj;              // [heads*hd, hidden], [kv*hd, hidden] x2
  LinearWeight o_proj;                              // [hidden, heads*hd]
  kernels::BackendBuffer post_attention_layernorm;  // fp32 [hidden]
  LinearWeight gate_proj, up_proj;                  // [inter, hidden] (dense layers)
  LinearWeight down_proj;                           // [hidden, inter] (dense layers)
  MoeLayerWeights moe;                              // sparse layers (MoeConfig::Sparse)
  // Optional (ModelConfig qkv_bias / qk_norm), fp32, empty when the model
  // has none. Under TP q/k/v biases are the rank's slices (with their weight
  // rows); the q/k norms (per head_dim channel) are whole on every rank.
  kernels::BackendBuffer q_bias, k_bias, v_bias;  // [heads*hd], [kv*hd] x2
  kernels::BackendBuffer q_norm, k_norm;          // [head_dim]

  /// Backend bytes of the fp32 vectors: both layernorms, biases, q/k norms.
  size_t VectorBytes() const;
  /// Every matrix of the layer that is loaded (attention, the dense MLP or
  /// the MoE block's router, experts and shared expert), in a fixed order.
  std::vector<const LinearWeight*> Linears() const;
  std::vector<LinearWeight*> Linears();
};

/// All weights. lm_head aliases embed_tokens when tie_word_embeddings.
/// embed_tokens and lm_head are dense (fp32, or 16-bit in a quantized model)
/// unless the quantization config names them (docs/quantization.md): then
/// int8/int4 like a linear module; a tied quantized table (one rank) is
/// stored once, in the backend's matmul layout, and read by both uses.
struct LlamaWeights {
  LinearWeight embed_tokens;  // [vocab, hidden]
  std::vector<LlamaLayerWeights> layers;
  kernels::BackendBuffer norm;  // fp32 [hidden]
  LinearWeight lm_head;         // [vocab, hidden] (TP: [vocab_shard, hidden]); empty when tied
  size_t total_bytes = 0;       // backend bytes held (all tensors)
  size_t lm_head_offset = 0;    // tied under TP: rows into embed_tokens of the shard

  /// The lm_head matrix of `rows` output rows: lm_head, or embed_tokens from
  /// row lm_head_offset when tied (a nonzero offset only for a dense table).
  kernels::WeightView LmHeadView(int32_t rows) const;
  /// Backend bytes by WeightPrecisionName (norms count as fp32); integer
  /// formats include their scales and zeros.
  std::map<std::string, size_t> BytesByPrecision() const;
  /// The MoE experts' share of BytesByPrecision (routed and shared experts;
  /// not the routers): empty for a dense model.
  std::map<std::string, size_t> ExpertBytesByPrecision() const;
  /// Stored bits per parameter over all tensors (8 * total_bytes / params).
  double AverageBitsPerWeight() const;
  /// One line for the start-up log: total, bytes per precision, bits/weight
  /// (MoE: then the experts' bytes per precision).
  std::string MemorySummary() const;
};

/// Storage of the dense (unquantized) matrices: vLLM's --dtype.
///   kDefault: fp32 for an unquantized model (F16/BF16 widened, as tqserve
///     always did), 16-bit (the checkpoint's F16/BF16, else fp16) for the
///     dense tensors of a quantized one; the library default.
///   kAuto: each tensor's checkpoint dtype (F32, F16 or BF16); in a quantized
///     model as kDefault. The CLI's default (--dtype auto).
///   kFloat32 / kFloat16 / kBFloat16: that format for every dense matrix.
/// Norms stay fp32 in every case.
enum class DenseDtype : uint8_t { kDefault, kAuto, kFloat32, kFloat16, kBFloat16 };

/// How to store the weights.
struct WeightLoadOptions {
  DenseDtype dense_dtype = DenseDtype::kDefault;
  /// Quantize the linear modules at load time by this config (null = no);
  /// embed_tokens/lm_head are then stored 16-bit (the checkpoint's F16/BF16,
  /// else fp16) unless the config names them. Refused for a checkpoint that
  /// is already quantized.
  const quant::QuantConfig* quant = nullptr;
};

/// Loads every tensor the config needs, checking each shape. Dense tensors
/// convert through a bounded host buffer and quantized ones are quantized
/// from the mmapped checkpoint a chunk of rows at a time, so no whole fp32
/// copy of the model is ever held. A checkpoint written by `tqserve quantize`
/// (tensors <module>.qweight/.scales/.qzeros, docs/quantization.md) loads
/// as stored. With a TpPlan of world_size > 1 only the rank's slices are read
/// (embeddings and norms whole; a row-parallel slice must hold whole groups);
/// a tied lm_head shard is a view into embed_tokens when the vocabulary splits
/// evenly and the table is dense, else a zero-padded copy (a quantized one:
/// the same codes). A quantized embed_tokens needs a backend whose
/// Capabilities().int_embedding is set (the CPU's; not CUDA's). Throws tq::Error naming the file
/// and tensor on a missing tensor, wrong shape or a bad quantization config.
LlamaWeights LoadLlamaWeights(const std::string& model_dir, const ModelConfig& config,
                              kernels::Backend* backend, const TpPlan& plan = {},
                              const WeightLoadOptions& options = {});

}  // namespace tq
