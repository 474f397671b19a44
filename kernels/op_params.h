// Plain parameter structs for every backend op (TensorRT-LLM style): raw
// pointers into backend memory plus sizes, no ownership. All activations are
// fp32 row-major; a "row" is one token. The CPU backend is the reference that
// every other backend is checked against.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kv_layout.h"

namespace tq::kernels {

/// Weight element formats a matmul (and, for the dense ones, an embedding) can
/// read. Dense formats store w[out, in] row-major. The integer formats are
/// group-wise weight-only quantization (as GPTQ/AWQ checkpoints, docs/quantization.md):
/// each row is cut into groups of `group_size` consecutive input channels, and
///   w[o, i] = scale[o, g] * (code[o, i] - zero[o, g]),  g = i / group_size,
/// with codes unsigned in [0, 2^bits - 1]. Symmetric weights have no zeros
/// array: zero is the fixed midpoint 2^(bits-1) (128 for int8, 8 for int4).
///   kInt8: one uint8 code per weight, rows of in_features bytes.
///   kInt4: two codes per byte, element 2j in the low nibble and 2j+1 in the
///          high nibble, rows of in_features / 2 bytes.
/// kF32Panels / kF16Panels / kBF16Panels are fp32 / fp16 / bf16 repacked by the
/// CPU backend's PrepareWeight into column panels of kPanelCols output
/// features, k-major inside a panel: w[o, i] is at [o / kPanelCols][i][o %
/// kPanelCols] (the layout of BLIS/GotoBLAS packed B panels); out_features is
/// a multiple of kPanelCols, so the copy has the same bytes. Only that
/// backend reads them.
/// kInt8Tiles / kInt4Tiles are int8 / int4 repacked by the CPU backend's
/// PrepareWeight for its integer-dot-product kernels (kernels/cpu/cpu_int_matmul.cc):
/// the same codes, scales and zeros, reordered so that one 64-byte load holds
/// kIntTileRows output features. out_features is a multiple of kIntTileRows;
/// tile t = rows [16t, 16t + 16), chunk c = inputs [4c, 4c + 4) (int8) or
/// [8c, 8c + 8) (int4); byte 4r + j of the 64 bytes at data + (t * chunks + c) * 64:
///   int8: code[16t + r, 4c + j];
///   int4: low nibble code[16t + r, 8c + j], high nibble code[16t + r, 8c + 4 + j];
/// scales (and zeros, if any) fp16 [tiles, groups, 16]: entry (t, g, r) is
/// that of row 16t + r, group g. Only that backend reads them.
enum class WeightDtype : uint8_t {
  kF32,
  kF16,
  kBF16,
  kInt8,
  kInt4,
  kF32Panels,
  kInt8Tiles,
  kInt4Tiles,
  kF16Panels,
  kBF16Panels
};

/// Output features per tile of a kInt8Tiles / kInt4Tiles weight, and the
/// largest group_size they take (every integer sum of a group stays below
/// 2^24: 512 * 255 * 127, so it converts to fp32 exactly).
constexpr int32_t kIntTileRows = 16;
constexpr int32_t kIntTileMaxGroup = 512;

/// The plain format a repacked layout stores (kF32Panels -> kF32, kF16Panels
/// -> kF16, kBF16Panels -> kBF16, kInt8Tiles -> kInt8, kInt4Tiles -> kInt4;
/// others unchanged).
WeightDtype LogicalWeightDtype(WeightDtype dtype);

/// "fp32", "fp16", "bf16", "int8", "int4", "fp32 panels": for error messages,
/// and (panels counted as fp32) the precision label of weight memory metrics.
std::string WeightDtypeName(WeightDtype dtype);

/// Output features per panel of a kF32Panels / kF16Panels / kBF16Panels weight.
constexpr int32_t kPanelCols = 64;

/// A linear layer's weight, Hugging Face layout: [out_features, in_features]
/// row-major, so y = x · Wᵀ.
struct WeightView {
  const void* data = nullptr;
  WeightDtype dtype = WeightDtype::kF32;
  int32_t out_features = 0;
  int32_t in_features = 0;
  // Integer formats only (kInt8, kInt4); group_size divides in_features and
  // is even for kInt4.
  const uint16_t* scales = nullptr;  // fp16 bits, [out_features, in_features / group_size]
  const uint16_t* zeros =
      nullptr;  // fp16 bits (integral code values), same shape; null = symmetric
  int32_t group_size = 0;
};

/// out[t, :] = table[ids[t], :] widened to fp32; table [vocab, hidden] in a
/// dense format (kF32, kF16 or kBF16), or, where the backend's capabilities
/// say so (BackendCapabilities::int_embedding), an integer one (kInt8/kInt4
/// rows, or the CPU backend's kInt8Tiles/kInt4Tiles when a tied table is
/// shared with lm_head): the row is dequantized as WeightView's contract
/// (scale * (code - zero) per group of group_size columns).
struct EmbeddingParams {
  const int32_t* ids = nullptr;  // [num_tokens], each in [0, vocab)
  const void* table = nullptr;   // [vocab, hidden], table_dtype elements
  float* out = nullptr;          // [num_tokens, hidden]
  int32_t num_tokens = 0;
  int32_t vocab = 0;
  int32_t hidden = 0;
  WeightDtype table_dtype = WeightDtype::kF32;
  // Integer tables only: as WeightView's scales / zeros (null = symmetric) / group_size.
  const uint16_t* scales = nullptr;
  const uint16_t* zeros = nullptr;
  int32_t group_size = 0;
};

/// out = x / sqrt(mean(x²) + eps) * weight, per row (Zhang & Sennrich 2019).
/// out may alias x.
struct RmsNormParams {
  const float* x = nullptr;       // [rows, dim]
  const float* weight = nullptr;  // [dim]
  float* out = nullptr;           // [rows, dim]
  int32_t rows = 0;
  int32_t dim = 0;
  float eps = 1e-5f;
};

/// out[rows, out_features] = x[rows, in_features] · Wᵀ (+ out when accumulate)
/// (+ bias, broadcast over the rows, when bias is set: nn.Linear's bias).
struct MatMulParams {
  const float* x = nullptr;
  WeightView w;
  float* out = nullptr;
  int32_t rows = 0;
  bool accumulate = false;      // out += x·Wᵀ (fuses the residual add)
  const float* bias = nullptr;  // [out_features] fp32, or null: no bias
};

/// Rotary position embedding in place, Hugging Face "rotate_half" layout: for
/// each head, pairs (i, i + head_dim/2) rotate by angle pos · inv_freq[i]
/// (Su et al. 2021, RoFormer; HF LlamaRotaryEmbedding).
struct RopeParams {
  float* x = nullptr;                  // [num_tokens, num_heads, head_dim]
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;     // [head_dim / 2], rope_scaling already applied
  int32_t num_tokens = 0;
  int32_t num_heads = 0;
  int32_t head_dim = 0;
  float attention_scaling = 1.0f;  // cos/sin multiplier (YaRN); 1 for plain RoPE
};

/// out = silu(gate) * up, elementwise (SwiGLU, Shazeer 2020). out may alias gate.
struct SiluMulParams {
  const float* gate = nullptr;  // [rows, dim]
  const float* up = nullptr;    // [rows, dim]
  float* out = nullptr;         // [rows, dim]
  int32_t rows = 0;
  int32_t dim = 0;
};

/// Writes each token's K and V (all KV heads) into its slot of the paged pool,
/// converting to the pool's dtype.
struct KvWriteParams {
  const float* k = nullptr;               // [num_tokens, num_kv_heads, head_dim]
  const float* v = nullptr;               // [num_tokens, num_kv_heads, head_dim]
  const int32_t* slot_mapping = nullptr;  // [num_tokens]; slot < 0 skips the token
  int32_t num_tokens = 0;
  KvLayerView cache;
  const int32_t* positions = nullptr;  // [num_tokens]; needed only for an attention sink
};

/// Causal GQA attention over the paged cache for a varlen batch: token t of
/// sequence s = token_seq[t] attends to positions [0, token_pos[t]] of s, read
/// through s's block table. Query head h uses KV head h / (num_heads / num_kv_heads).
/// The token's own K/V must already be written (KvWrite before attention).
/// token_pos[t] < 0 marks a padding row (CUDA graph batch buckets): it reads
/// no KV and no block table entry, and its output is zeros.
struct PagedAttentionParams {
  const float* q = nullptr;               // [num_tokens, num_heads, head_dim], RoPE applied
  float* out = nullptr;                   // [num_tokens, num_heads, head_dim]
  const int32_t* token_seq = nullptr;     // [num_tokens], index into block_tables rows
  const int32_t* token_pos = nullptr;     // [num_tokens], absolute position; < 0: padding
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq] block ids
  int32_t num_tokens = 0;
  int32_t num_heads = 0;
  int32_t max_blocks_per_seq = 0;
  float scale = 1.0f;  // softmax scale, usually 1/sqrt(head_dim)
  KvLayerView cache;
  // Optional host copy of token_seq (same contents), for backends that plan
  // launches by the batch layout (CUDA: runs of one sequence's tokens go to
  // the query-tiled prefill kernel). Null: layout unknown; results are the same.
  const int32_t* host_token_seq = nullptr;
};

/// Largest k of a LogitsTopK call (the CUDA kernel sorts the candidates of a
/// row in one block's shared memory).
constexpr int32_t kMaxLogitsTopK = 1024;

/// The sampling summary of each logit row, so that a sampler can work from a
/// few candidates instead of copying [rows, vocab] logits to the host
/// (docs/engine.md "Sampling from candidates"). Per row, with NaN read as
/// -inf (the Sampler's rule) and -0.0 equal to +0.0:
///  - ids/values: the k largest logits, descending, ties by lower id (a
///    total order, so every backend returns the same ids);
///  - sum_exp = Σ_v exp(l_v − values[0]) and
///    sum_exp_scaled = Σ_v exp(float(l_v · inv_temperature) − float(values[0] · inv_temperature)),
///    over the whole row, accumulated in double. The CPU backend sums in id
///    order (the Sampler's order, so its sums are bit-identical to the
///    Sampler's own); other backends in any order (rounding differs).
/// With values[0] = ±inf the sums are whatever exp gives (NaN or inf);
/// callers treat a non-finite maximum separately.
struct LogitsTopKParams {
  const float* logits = nullptr;           // [rows, vocab]
  const float* inv_temperature = nullptr;  // [rows], > 0 (1 for greedy rows)
  int32_t* ids = nullptr;                  // [rows, k]
  float* values = nullptr;                 // [rows, k]
  double* sum_exp = nullptr;               // [rows]
  double* sum_exp_scaled = nullptr;        // [rows]
  int32_t rows = 0;
  int32_t vocab = 0;
  int32_t k = 0;  // [1, min(vocab, kMaxLogitsTopK)]
};

}  // namespace tq::kernels
