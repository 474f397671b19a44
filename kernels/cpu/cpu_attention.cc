// Paged KV write and causal GQA attention on the CPU (reference backend).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/half.h"

namespace tq::kernels::cpu {
namespace {

// Reads one head vector of `dim` elements of `dtype` as fp32.
inline const float* LoadHead(const void* src, KvDtype dtype, int32_t dim, float* scratch) {
  switch (dtype) {
    case KvDtype::kF32:
      return static_cast<const float*>(src);
    case KvDtype::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int32_t i = 0; i < dim; ++i) scratch[i] = HalfToFloat(h[i]);
      return scratch;
    }
    case KvDtype::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int32_t i = 0; i < dim; ++i) scratch[i] = Bf16ToFloat(h[i]);
      return scratch;
    }
  }
  return scratch;
}

inline void StoreRow(const float* src, KvDtype dtype, int64_t n, void* dst) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, sizeof(float) * n);
      return;
    case KvDtype::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = FloatToHalf(src[i]);
      return;
    }
    case KvDtype::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = FloatToBf16(src[i]);
      return;
    }
  }
}

// Address of the head vector of (slot, kv_head) in a K or V pool.
inline const void* HeadAddress(const void* pool, const KvLayout& l, int64_t slot, int32_t head) {
  const size_t elem = KvDtypeElementBytes(l.dtype);
  return static_cast<const uint8_t*>(pool) +
         (static_cast<size_t>(slot) * l.num_kv_heads + head) * l.head_dim * elem;
}

// Slot of position j of a sequence whose block table is `table`.
inline int64_t SlotOf(const int32_t* table, int32_t j, int32_t block_size) {
  return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
}

}  // namespace

void KvWrite(const KvWriteParams& p) {
  const KvLayout& l = p.cache.layout;
  const int64_t row = static_cast<int64_t>(l.num_kv_heads) * l.head_dim;
  const size_t token_bytes = l.TokenBytes();
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    StoreRow(p.k + t * row, l.dtype, row, static_cast<uint8_t*>(p.cache.k) + slot * token_bytes);
    StoreRow(p.v + t * row, l.dtype, row, static_cast<uint8_t*>(p.cache.v) + slot * token_bytes);
  }
}

void PagedAttention(const PagedAttentionParams& p, ThreadPool& pool) {
  const KvLayout& l = p.cache.layout;
  const int32_t hd = l.head_dim;
  const int32_t group = p.num_heads / l.num_kv_heads;
  const int64_t work = static_cast<int64_t>(p.num_tokens) * l.num_kv_heads;

  pool.ParallelFor(work, 1, [&](int64_t begin, int64_t end) {
    // Per-thread scratch: scores for the group's query heads over the context,
    // and one converted K/V head vector.
    std::vector<float> scores;
    std::vector<float> head_scratch(hd);
    for (int64_t item = begin; item < end; ++item) {
      const int32_t t = static_cast<int32_t>(item / l.num_kv_heads);
      const int32_t kv_head = static_cast<int32_t>(item % l.num_kv_heads);
      const int32_t ctx = p.token_pos[t] + 1;
      const int32_t* table =
          p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks_per_seq;
      scores.assign(static_cast<size_t>(group) * ctx, 0.0f);
      const float* q0 = p.q + (static_cast<int64_t>(t) * p.num_heads + kv_head * group) * hd;

      // Scores: each key is loaded once and shared by the group's query heads.
      for (int32_t j = 0; j < ctx; ++j) {
        const int64_t slot = SlotOf(table, j, l.block_size);
        const float* key =
            LoadHead(HeadAddress(p.cache.k, l, slot, kv_head), l.dtype, hd, head_scratch.data());
        for (int32_t g = 0; g < group; ++g) {
          scores[static_cast<size_t>(g) * ctx + j] = Dot(q0 + g * hd, key, hd) * p.scale;
        }
      }
      // Softmax per query head.
      for (int32_t g = 0; g < group; ++g) {
        float* s = scores.data() + static_cast<size_t>(g) * ctx;
        const float max_score = *std::max_element(s, s + ctx);
        float sum = 0.0f;
        for (int32_t j = 0; j < ctx; ++j) {
          s[j] = std::exp(s[j] - max_score);
          sum += s[j];
        }
        const float inv = 1.0f / sum;
        for (int32_t j = 0; j < ctx; ++j) s[j] *= inv;
      }
      // Weighted sum of values.
      float* out0 = p.out + (static_cast<int64_t>(t) * p.num_heads + kv_head * group) * hd;
      std::fill(out0, out0 + static_cast<int64_t>(group) * hd, 0.0f);
      for (int32_t j = 0; j < ctx; ++j) {
        const int64_t slot = SlotOf(table, j, l.block_size);
        const float* value =
            LoadHead(HeadAddress(p.cache.v, l, slot, kv_head), l.dtype, hd, head_scratch.data());
        for (int32_t g = 0; g < group; ++g) {
          const float w = scores[static_cast<size_t>(g) * ctx + j];
          float* out = out0 + g * hd;
          for (int32_t i = 0; i < hd; ++i) out[i] += w * value[i];
        }
      }
    }
  });
}

}  // namespace tq::kernels::cpu
