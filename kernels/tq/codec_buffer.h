// The tq codec's arrays uploaded into a KV cache's backend memory.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "kernels/kv_layout.h"

namespace tq::kernels {

/// Holds the TqCodecArrays of a cache's layers, made once at cache creation
/// (issue 16: device kernels used to compare and re-upload the host codec on
/// every KvWrite and PagedAttention). On a device backend
/// (BackendCapabilities::device_memory) every distinct host array — the
/// rotation signs, the codebooks and the RoPE table shared by all layers, each
/// layer's key statistics — is copied once into one BackendBuffer with one
/// CopyToDevice; on a host backend the arrays are TqLayerCodec's own. The host
/// codecs must outlive this object only on a host backend. Thread ownership:
/// made and destroyed by the cache's owner; read-only afterwards.
class TqCodecBuffer {
 public:
  TqCodecBuffer() = default;
  /// `layers[l]` is layer l's codec for `layout` (head_dim, num_kv_heads and
  /// the tq dtype's bit widths size the arrays). Throws std::invalid_argument
  /// on a non-tq dtype or a null codec, std::bad_alloc when the backend is out
  /// of memory.
  TqCodecBuffer(Backend* backend, std::span<const TqLayerCodec* const> layers,
                const KvLayout& layout);

  /// Layer l's arrays (pointers into the buffer, or into the host codec).
  const TqCodecArrays* Layer(int32_t layer) const { return &layers_[static_cast<size_t>(layer)]; }
  /// Bytes of backend memory the upload holds (0 on a host backend).
  size_t bytes() const { return buffer_.bytes(); }

 private:
  BackendBuffer buffer_;
  std::vector<TqCodecArrays> layers_;
};

}  // namespace tq::kernels
