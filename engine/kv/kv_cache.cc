#include "engine/kv/kv_cache.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace tq {

PagedKvCache::PagedKvCache(kernels::Backend* backend, int32_t num_layers,
                           const kernels::KvLayout& layout, std::shared_ptr<const TqCodecState> tq,
                           int32_t sink_tokens)
    : layout_(layout), tq_(std::move(tq)), sink_tokens_(sink_tokens) {
  if (kernels::KvStoresPreRopeKeys(layout.dtype) && !tq_) {
    throw std::invalid_argument("PagedKvCache: a tq KV dtype needs its TqCodecState");
  }
  if (sink_tokens < 0 || sink_tokens > 8 || sink_tokens > layout.block_size ||
      (sink_tokens > 0 && !kernels::KvStoresPreRopeKeys(layout.dtype))) {
    throw std::invalid_argument("PagedKvCache: sink_tokens must be 0..8, <= block_size, tq only");
  }
  if (tq_) {
    std::vector<const kernels::TqLayerCodec*> codecs;
    for (int32_t l = 0; l < num_layers; ++l) codecs.push_back(tq_->Layer(l));
    tq_arrays_ = kernels::TqCodecBuffer(backend, codecs, layout);
  }
  const size_t blocks = static_cast<size_t>(layout.num_blocks);
  for (int32_t l = 0; l < num_layers; ++l) {
    k_.emplace_back(backend, layout.BlockBytes() * blocks);
    v_.emplace_back(backend, layout.VBlockBytes() * blocks);
    if (sink_tokens > 0) {
      sink_k_.emplace_back(backend, SinkBlockBytes(layout, sink_tokens) * blocks);
      sink_v_.emplace_back(backend, SinkBlockBytes(layout, sink_tokens) * blocks);
    }
  }
}

int32_t PagedKvCache::BlocksForBudget(size_t budget_bytes, int32_t num_layers,
                                      const kernels::KvLayout& layout, int32_t sink_tokens) {
  const size_t per_block = BytesPerBlock(num_layers, layout, sink_tokens);
  if (per_block == 0) return 0;
  const size_t blocks = budget_bytes / per_block;
  return static_cast<int32_t>(std::min<size_t>(blocks, std::numeric_limits<int32_t>::max()));
}

kernels::KvLayerView PagedKvCache::Layer(int32_t layer) const {
  kernels::KvLayerView view{k_[layer].data(), v_[layer].data(), layout_,
                            tq_ ? tq_->Layer(layer) : nullptr,
                            tq_ ? tq_arrays_.Layer(layer) : nullptr};
  if (sink_tokens_ > 0) {
    view.sink_tokens = sink_tokens_;
    view.sink_k = sink_k_[layer].as<float>();
    view.sink_v = sink_v_[layer].as<float>();
  }
  return view;
}

}  // namespace tq
