// Paged KV cache layout shared by the engine and every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tq::kernels {

/// Element format of the paged KV cache (--kv-cache-dtype). The uncompressed
/// formats store post-RoPE keys; compressed formats (tq3, issue 3) add entries here.
enum class KvDtype : uint8_t { kF32, kF16, kBF16 };

/// Bytes of one stored element; 0 for formats that are not element-addressable.
size_t KvDtypeElementBytes(KvDtype dtype);
/// "fp32", "fp16", "bf16".
std::string_view KvDtypeName(KvDtype dtype);
/// Parses a --kv-cache-dtype value; returns false when unknown.
bool ParseKvDtype(std::string_view name, KvDtype* out);

/// Shape of one layer's paged KV pool. Each of K and V is laid out as
/// [num_blocks][block_size][num_kv_heads][head_dim] elements of `dtype`, so one
/// token's heads are contiguous. A slot is block_id * block_size + offset.
struct KvLayout {
  KvDtype dtype = KvDtype::kF32;
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;

  /// Bytes of one token's K (or V) for all KV heads.
  size_t TokenBytes() const {
    return KvDtypeElementBytes(dtype) * static_cast<size_t>(num_kv_heads) * head_dim;
  }
  /// Bytes of one block of K (or V).
  size_t BlockBytes() const { return TokenBytes() * block_size; }
};

/// One layer's K and V pools (device or host memory, owned by the KV cache).
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  KvLayout layout;
};

}  // namespace tq::kernels
