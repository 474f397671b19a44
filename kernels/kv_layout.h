// Paged KV cache layout shared by the engine and every backend
// (docs/kv-cache.md has the byte diagrams).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tq::kernels {

class Rotation;

/// Element format of the paged KV cache (--kv-cache-dtype).
/// - kF32/kF16/kBF16: uncompressed; keys stored after RoPE.
/// - kInt8/kInt4: per token and head, asymmetric: x ≈ scale·q + zero with an
///   fp16 scale and zero (LMDeploy's format); keys stored after RoPE.
/// - kTq3/kTq4: TurboQuant-style (DESIGN.md "KV cache"): fp16 norm + 3-bit
///   Lloyd–Max codes of the rotated unit vector (tq4: keys at 4 bits); keys
///   stored before RoPE after per-channel normalization (KVQuant).
/// - kTqK3V2: as kTq3 with 2-bit values (4 Lloyd–Max levels): 2.625 bits per
///   element at head_dim 128 (docs/kv-cache.md). CPU only.
enum class KvDtype : uint8_t { kF32, kF16, kBF16, kInt8, kInt4, kTq3, kTq4, kTqK3V2 };

/// Bytes of one stored element for the uncompressed formats; 0 otherwise.
size_t KvDtypeElementBytes(KvDtype dtype);
/// "fp32", "fp16", "bf16", "int8", "int4", "tq3", "tq4", "tqk3v2".
std::string_view KvDtypeName(KvDtype dtype);
/// Parses a --kv-cache-dtype value; returns false when unknown.
bool ParseKvDtype(std::string_view name, KvDtype* out);
/// True for the formats that store keys before RoPE (RoPE applied in attention).
inline bool KvStoresPreRopeKeys(KvDtype dtype) {
  return dtype == KvDtype::kTq3 || dtype == KvDtype::kTq4 || dtype == KvDtype::kTqK3V2;
}
/// Whether the CUDA backend implements `dtype` (every format but kTqK3V2).
inline bool KvDtypeSupportedOnCuda(KvDtype dtype) {
  return dtype != KvDtype::kTqK3V2;
}
/// KvDtypeSupportedOnCuda as a BackendCapabilities::kv_dtypes mask.
inline uint32_t CudaKvDtypes() {
  uint32_t mask = 0;
  for (unsigned d = 0; d <= static_cast<unsigned>(KvDtype::kTqK3V2); ++d) {
    if (KvDtypeSupportedOnCuda(static_cast<KvDtype>(d))) mask |= 1u << d;
  }
  return mask;
}
/// Index bits of the tq formats' keys and values (0 for other formats).
int32_t TqKeyBits(KvDtype dtype);
int32_t TqValueBits(KvDtype dtype);

/// How one head vector (head_dim elements) of K or V is stored: `code_bytes`
/// of elements or codes, then `param_bytes` of per-vector parameters
/// (int8/int4: fp16 scale, fp16 zero; tq: fp16 norm).
struct KvRecord {
  uint32_t code_bytes = 0;
  uint32_t param_bytes = 0;
  uint32_t bytes() const { return code_bytes + param_bytes; }
};
KvRecord KeyRecord(KvDtype dtype, int32_t head_dim);
KvRecord ValueRecord(KvDtype dtype, int32_t head_dim);
/// Average stored bits per K and V element, parameters included.
double KvBitsPerElement(KvDtype dtype, int32_t head_dim);

/// Shape of one layer's paged K (or V) pool. A pool is num_blocks blocks; a
/// block is num_kv_heads tiles, one per KV head; a tile holds the block's
/// block_size tokens for that head: all codes first ([block_size][code_bytes]),
/// then all parameters ([block_size][param_bytes]). Head-major tiles keep one
/// head's tokens contiguous (what a GPU warp decoding one head reads) and keep
/// the 32-bit code words of tq formats aligned. A slot is
/// block_id * block_size + offset.
struct KvLayout {
  KvDtype dtype = KvDtype::kF32;
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;

  KvRecord KRecord() const { return KeyRecord(dtype, head_dim); }
  KvRecord VRecord() const { return ValueRecord(dtype, head_dim); }
  /// Bytes of one token's K for all KV heads.
  size_t TokenBytes() const { return static_cast<size_t>(num_kv_heads) * KRecord().bytes(); }
  /// Bytes of one block of the K pool (BlockBytes) and of the V pool.
  size_t BlockBytes() const { return TokenBytes() * block_size; }
  size_t VBlockBytes() const {
    return static_cast<size_t>(num_kv_heads) * VRecord().bytes() * block_size;
  }
};

/// Where the record of (slot, head) lives in a pool with records `rec`.
struct KvRecordAddress {
  size_t code_offset;   // byte offset of the codes
  size_t param_offset;  // byte offset of the parameters
};
inline KvRecordAddress RecordAddress(const KvLayout& l, KvRecord rec, int64_t slot, int32_t head) {
  const int64_t block = slot / l.block_size;
  const int64_t offset = slot % l.block_size;
  const size_t tile = (static_cast<size_t>(block) * l.num_kv_heads + head) *
                      static_cast<size_t>(l.block_size) * rec.bytes();
  return {tile + static_cast<size_t>(offset) * rec.code_bytes,
          tile + static_cast<size_t>(l.block_size) * rec.code_bytes +
              static_cast<size_t>(offset) * rec.param_bytes};
}

/// What the tq formats need besides the codes, for one layer. Host memory on
/// the CPU backend. Keys: x = (k_pre_rope − mean) / scale per channel, then
/// norm + rotation + codes; attention rebuilds k = x̂·scale + mean and applies
/// RoPE at the key's position.
struct TqLayerCodec {
  const Rotation* rotation = nullptr;   // head_dim
  const float* k_centroids = nullptr;   // [2^TqKeyBits], sorted
  const float* k_boundaries = nullptr;  // [2^TqKeyBits - 1]
  const float* v_centroids = nullptr;   // [2^TqValueBits]
  const float* v_boundaries = nullptr;  // [2^TqValueBits - 1]
  const float* k_mean = nullptr;        // [num_kv_heads * head_dim]; nullptr = 0
  const float* k_scale = nullptr;       // [num_kv_heads * head_dim]; nullptr = 1
  // RoPE of the reconstructed keys (HF rotate_half): cos/sin of pos·inv_freq[i]
  // for pos < rope_positions, precomputed once (attention_scaling applied).
  const float* rope_cos = nullptr;  // [rope_positions][head_dim / 2]
  const float* rope_sin = nullptr;  // [rope_positions][head_dim / 2]
  int32_t rope_positions = 0;
};

/// A TqLayerCodec's arrays in the KV cache's backend memory, the form device
/// kernels read (same shapes as TqLayerCodec, plus the rotation's ±1 signs;
/// signs null for a dense rotation, which only the CPU implements).
/// kernels::TqCodecBuffer fills it: uploaded once when the cache is created
/// on a device backend, TqLayerCodec's own host arrays on a host backend.
struct TqCodecArrays {
  const float* signs = nullptr;         // [head_dim]
  const float* k_centroids = nullptr;   // [2^TqKeyBits]
  const float* k_boundaries = nullptr;  // [2^TqKeyBits - 1]
  const float* v_centroids = nullptr;   // [2^TqValueBits]
  const float* v_boundaries = nullptr;  // [2^TqValueBits - 1]
  const float* k_mean = nullptr;        // [num_kv_heads * head_dim] or null (0)
  const float* k_scale = nullptr;       // [num_kv_heads * head_dim] or null (1)
  const float* rope_cos = nullptr;      // [rope_positions][head_dim / 2]
  const float* rope_sin = nullptr;
  int32_t rope_positions = 0;
};

/// One layer's K and V pools (device or host memory, owned by the KV cache).
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  KvLayout layout;
  const TqLayerCodec* tq = nullptr;  // required for the tq formats, else unused
  // The same codec in the pools' backend memory (device backends read this;
  // the CPU reads `tq`). Required for the tq formats on a device backend.
  const TqCodecArrays* tq_arrays = nullptr;
  // Attention sink (tq formats, optional): the first sink_tokens positions of
  // every sequence are also kept exact, fp32, keys before RoPE, indexed by the
  // block that holds them (a sequence's first block):
  // sink_k/sink_v [num_blocks][sink_tokens][num_kv_heads][head_dim].
  int32_t sink_tokens = 0;
  float* sink_k = nullptr;
  float* sink_v = nullptr;
};

}  // namespace tq::kernels
