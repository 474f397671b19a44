// The paged KV cache memory: one K and one V pool per layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/kv/tq_codec_state.h"
#include "kernels/backend.h"
#include "kernels/tq/codec_buffer.h"

namespace tq {

/// Owns the per-layer pools, all with the same KvLayout (see
/// kernels/kv_layout.h for the byte layout). Block ids index every layer alike,
/// so one block table serves all layers. Under tensor parallelism each rank
/// has its own cache of its KV heads (ModelExecutor's workers). Thread
/// ownership: the engine thread (a rank's cache: that rank's thread).
class PagedKvCache {
 public:
  /// Allocates layout.num_blocks blocks for each of num_layers layers.
  /// `tq` is required for the tq dtypes (throws std::invalid_argument without
  /// it); its arrays are uploaded once into `backend`'s memory here
  /// (kernels::TqCodecBuffer) for device kernels. Throws std::bad_alloc when
  /// the backend is out of memory.
  /// sink_tokens > 0 (tq only, <= 8 and <= block_size) also keeps the first
  /// sink_tokens positions of every sequence exact (kernels::KvLayerView).
  PagedKvCache(kernels::Backend* backend, int32_t num_layers, const kernels::KvLayout& layout,
               std::shared_ptr<const TqCodecState> tq = nullptr, int32_t sink_tokens = 0);

  const TqCodecState* tq() const { return tq_.get(); }

  /// Bytes one block costs across all layers, K and V.
  static size_t BytesPerBlock(int32_t num_layers, const kernels::KvLayout& layout,
                              int32_t sink_tokens = 0) {
    return static_cast<size_t>(num_layers) *
           (layout.BlockBytes() + layout.VBlockBytes() + 2 * SinkBlockBytes(layout, sink_tokens));
  }
  /// Bytes of one block's exact sink copies of K (or V) in one layer.
  static size_t SinkBlockBytes(const kernels::KvLayout& layout, int32_t sink_tokens) {
    return sizeof(float) * static_cast<size_t>(sink_tokens) * layout.num_kv_heads * layout.head_dim;
  }
  /// Largest block count whose pools fit in `budget_bytes`.
  static int32_t BlocksForBudget(size_t budget_bytes, int32_t num_layers,
                                 const kernels::KvLayout& layout, int32_t sink_tokens = 0);

  kernels::KvLayerView Layer(int32_t layer) const;
  const kernels::KvLayout& layout() const { return layout_; }
  int32_t num_layers() const { return static_cast<int32_t>(k_.size()); }
  size_t total_bytes() const {
    return BytesPerBlock(num_layers(), layout_, sink_tokens_) * layout_.num_blocks;
  }
  int32_t sink_tokens() const { return sink_tokens_; }

 private:
  kernels::KvLayout layout_;
  std::shared_ptr<const TqCodecState> tq_;
  kernels::TqCodecBuffer tq_arrays_;  // tq_'s arrays in the pools' backend memory
  int32_t sink_tokens_ = 0;
  std::vector<kernels::BackendBuffer> sink_k_, sink_v_;
  std::vector<kernels::BackendBuffer> k_;
  std::vector<kernels::BackendBuffer> v_;
};

}  // namespace tq
