#include "engine/kv/kv_cache.h"

#include <algorithm>
#include <limits>

namespace tq {

PagedKvCache::PagedKvCache(kernels::Backend* backend, int32_t num_layers,
                           const kernels::KvLayout& layout)
    : layout_(layout) {
  const size_t bytes = layout.BlockBytes() * static_cast<size_t>(layout.num_blocks);
  for (int32_t l = 0; l < num_layers; ++l) {
    k_.emplace_back(backend, bytes);
    v_.emplace_back(backend, bytes);
  }
}

int32_t PagedKvCache::BlocksForBudget(size_t budget_bytes, int32_t num_layers,
                                      const kernels::KvLayout& layout) {
  const size_t per_block = BytesPerBlock(num_layers, layout);
  if (per_block == 0) return 0;
  const size_t blocks = budget_bytes / per_block;
  return static_cast<int32_t>(std::min<size_t>(blocks, std::numeric_limits<int32_t>::max()));
}

kernels::KvLayerView PagedKvCache::Layer(int32_t layer) const {
  return kernels::KvLayerView{k_[layer].data(), v_[layer].data(), layout_};
}

}  // namespace tq
