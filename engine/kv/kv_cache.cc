#include "engine/kv/kv_cache.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace tq {

PagedKvCache::PagedKvCache(kernels::Backend* backend, int32_t num_layers,
                           const kernels::KvLayout& layout, std::shared_ptr<const TqCodecState> tq)
    : layout_(layout), tq_(std::move(tq)) {
  if (kernels::KvStoresPreRopeKeys(layout.dtype) && !tq_) {
    throw std::invalid_argument("PagedKvCache: a tq KV dtype needs its TqCodecState");
  }
  const size_t blocks = static_cast<size_t>(layout.num_blocks);
  for (int32_t l = 0; l < num_layers; ++l) {
    k_.emplace_back(backend, layout.BlockBytes() * blocks);
    v_.emplace_back(backend, layout.VBlockBytes() * blocks);
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
  return kernels::KvLayerView{k_[layer].data(), v_[layer].data(), layout_,
                              tq_ ? tq_->Layer(layer) : nullptr};
}

}  // namespace tq
