// The paged KV cache memory: one K and one V pool per layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/kv/tq_codec_state.h"
#include "kernels/backend.h"

namespace tq {

/// Owns the per-layer pools, all with the same KvLayout (see
/// kernels/kv_layout.h for the byte layout). Block ids index every layer alike,
/// so one block table serves all layers. Thread ownership: the engine thread.
class PagedKvCache {
 public:
  /// Allocates layout.num_blocks blocks for each of num_layers layers.
  /// `tq` is required for the tq dtypes (throws std::invalid_argument without
  /// it). Throws std::bad_alloc when the backend is out of memory.
  PagedKvCache(kernels::Backend* backend, int32_t num_layers, const kernels::KvLayout& layout,
               std::shared_ptr<const TqCodecState> tq = nullptr);

  const TqCodecState* tq() const { return tq_.get(); }

  /// Bytes one block costs across all layers, K and V.
  static size_t BytesPerBlock(int32_t num_layers, const kernels::KvLayout& layout) {
    return static_cast<size_t>(num_layers) * (layout.BlockBytes() + layout.VBlockBytes());
  }
  /// Largest block count whose pools fit in `budget_bytes`.
  static int32_t BlocksForBudget(size_t budget_bytes, int32_t num_layers,
                                 const kernels::KvLayout& layout);

  kernels::KvLayerView Layer(int32_t layer) const;
  const kernels::KvLayout& layout() const { return layout_; }
  int32_t num_layers() const { return static_cast<int32_t>(k_.size()); }
  size_t total_bytes() const { return BytesPerBlock(num_layers(), layout_) * layout_.num_blocks; }

 private:
  kernels::KvLayout layout_;
  std::shared_ptr<const TqCodecState> tq_;
  std::vector<kernels::BackendBuffer> k_;
  std::vector<kernels::BackendBuffer> v_;
};

}  // namespace tq
