// Encoding and decoding of one KV head vector in each KV cache format (CPU).
// The reference for every backend's KV write and attention.
#pragma once

#include <cstdint>

#include "kernels/kv_layout.h"

namespace tq::kernels::cpu {

/// Which half of the cache a record belongs to: keys and values differ in
/// the tq formats (key normalization, bits).
enum class KvSide : uint8_t { kKey, kValue };

/// Encodes x[head_dim] (keys: before RoPE for tq, after RoPE otherwise) into
/// `code` and `param` of layout.dtype. `head` selects the tq key statistics.
/// `scratch` holds 2·head_dim floats.
void EncodeRecord(const float* x, const KvLayout& layout, const TqLayerCodec* tq, KvSide side,
                  int32_t head, uint8_t* code, uint8_t* param, float* scratch);

/// Decodes a record into out[head_dim]:
/// - uncompressed / int8 / int4: the stored vector (keys after RoPE);
/// - tq keys: the key before RoPE, k = (norm · Rᵀ c[idx]) · scale + mean;
/// - tq values: norm · c[idx] in the ROTATED space (apply Rᵀ after summing,
///   once per output, as attention does).
void DecodeRecord(const uint8_t* code, const uint8_t* param, const KvLayout& layout,
                  const TqLayerCodec* tq, KvSide side, int32_t head, float* out);

}  // namespace tq::kernels::cpu
