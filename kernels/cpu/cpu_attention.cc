// Paged KV write and causal GQA attention on the CPU (reference backend),
// for every KV format: records are encoded once when written and decoded one
// head vector at a time inside attention (no block is ever dequantized into a
// temporary buffer).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/cpu/simd.h"
#include "kernels/tq/rotation.h"

namespace tq::kernels::cpu {
namespace {

// Slot of position j of a sequence whose block table is `table`.
inline int64_t SlotOf(const int32_t* table, int32_t j, int32_t block_size) {
  return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
}

void CheckTq(const KvLayerView& cache) {
  const bool tq = cache.layout.dtype == KvDtype::kTq3 || cache.layout.dtype == KvDtype::kTq4;
  if (tq && (cache.tq == nullptr || cache.tq->rotation == nullptr)) {
    throw std::invalid_argument("tq KV cache without its codec");
  }
  if (cache.layout.head_dim > 512) throw std::invalid_argument("head_dim > 512");
}

// In-place RoPE (rotate_half) of one key from the precomputed table.
inline void RopeKey(float* k, int32_t pos, const TqLayerCodec& tq, int32_t head_dim) {
  const int32_t half = head_dim / 2;
  const float* c = tq.rope_cos + static_cast<size_t>(pos) * half;
  const float* s = tq.rope_sin + static_cast<size_t>(pos) * half;
  for (int32_t i = 0; i < half; ++i) {
    const float x1 = k[i];
    const float x2 = k[i + half];
    k[i] = x1 * c[i] - x2 * s[i];
    k[i + half] = x2 * c[i] + x1 * s[i];
  }
}

}  // namespace

void KvWrite(const KvWriteParams& p) {
  CheckTq(p.cache);
  const KvLayout& l = p.cache.layout;
  const KvRecord krec = l.KRecord();
  const KvRecord vrec = l.VRecord();
  const int64_t row = static_cast<int64_t>(l.num_kv_heads) * l.head_dim;
  std::vector<float> scratch(2 * static_cast<size_t>(l.head_dim));
  auto* kpool = static_cast<uint8_t*>(p.cache.k);
  auto* vpool = static_cast<uint8_t*>(p.cache.v);
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    for (int32_t h = 0; h < l.num_kv_heads; ++h) {
      const KvRecordAddress ka = RecordAddress(l, krec, slot, h);
      const KvRecordAddress va = RecordAddress(l, vrec, slot, h);
      EncodeRecord(p.k + t * row + h * l.head_dim, l, p.cache.tq, KvSide::kKey, h,
                   kpool + ka.code_offset, kpool + ka.param_offset, scratch.data());
      EncodeRecord(p.v + t * row + h * l.head_dim, l, p.cache.tq, KvSide::kValue, h,
                   vpool + va.code_offset, vpool + va.param_offset, scratch.data());
    }
  }
}

void PagedAttention(const PagedAttentionParams& p, ThreadPool& pool) {
  CheckTq(p.cache);
  const KvLayout& l = p.cache.layout;
  const KvRecord krec = l.KRecord();
  const KvRecord vrec = l.VRecord();
  const int32_t hd = l.head_dim;
  const int32_t group = p.num_heads / l.num_kv_heads;
  const int64_t work = static_cast<int64_t>(p.num_tokens) * l.num_kv_heads;
  const bool pre_rope_keys = KvStoresPreRopeKeys(l.dtype);
  const bool rotated_values = pre_rope_keys;  // tq formats accumulate V rotated
  const auto* kpool = static_cast<const uint8_t*>(p.cache.k);
  const auto* vpool = static_cast<const uint8_t*>(p.cache.v);

  pool.ParallelFor(work, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    std::vector<float> head(hd);
    for (int64_t item = begin; item < end; ++item) {
      const int32_t t = static_cast<int32_t>(item / l.num_kv_heads);
      const int32_t kv_head = static_cast<int32_t>(item % l.num_kv_heads);
      const int32_t ctx = p.token_pos[t] + 1;
      const int32_t* table =
          p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks_per_seq;
      scores.assign(static_cast<size_t>(group) * ctx, 0.0f);
      const float* q0 = p.q + (static_cast<int64_t>(t) * p.num_heads + kv_head * group) * hd;

      // Scores: each key is decoded once (in registers/L1, not into a block
      // buffer) and shared by the group's query heads.
      for (int32_t j = 0; j < ctx; ++j) {
        const KvRecordAddress a = RecordAddress(l, krec, SlotOf(table, j, l.block_size), kv_head);
        DecodeRecord(kpool + a.code_offset, kpool + a.param_offset, l, p.cache.tq, KvSide::kKey,
                     kv_head, head.data());
        if (pre_rope_keys) RopeKey(head.data(), j, *p.cache.tq, hd);
        for (int32_t g = 0; g < group; ++g) {
          scores[static_cast<size_t>(g) * ctx + j] = Dot(q0 + g * hd, head.data(), hd) * p.scale;
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
      // Weighted sum of values (tq: in the rotated space, un-rotated once below).
      float* out0 = p.out + (static_cast<int64_t>(t) * p.num_heads + kv_head * group) * hd;
      std::fill(out0, out0 + static_cast<int64_t>(group) * hd, 0.0f);
      for (int32_t j = 0; j < ctx; ++j) {
        const KvRecordAddress a = RecordAddress(l, vrec, SlotOf(table, j, l.block_size), kv_head);
        DecodeRecord(vpool + a.code_offset, vpool + a.param_offset, l, p.cache.tq, KvSide::kValue,
                     kv_head, head.data());
        for (int32_t g = 0; g < group; ++g) {
          const float w = scores[static_cast<size_t>(g) * ctx + j];
          float* out = out0 + g * hd;
          for (int32_t i = 0; i < hd; ++i) out[i] += w * head[i];
        }
      }
      if (rotated_values) {
        for (int32_t g = 0; g < group; ++g)
          p.cache.tq->rotation->Inverse(out0 + g * hd, out0 + g * hd);
      }
    }
  });
}

}  // namespace tq::kernels::cpu
