// Device code shared by the paged attention kernels (paged_attention.cu: the
// per-token decode kernel with split-K; paged_prefill.cu: the query-tiled
// prefill kernel): the launch arguments, the per-key decode of every KvDtype
// (tq keys rebuilt in registers: indices from the bit-planes × norm, inverse
// randomized Hadamard by warp shuffles, × σ + μ, RoPE at the key's position;
// tq values kept in the rotated space) and the store of one output head
// vector (split-K partial, or normalized with Rᵀ applied once). Both kernels
// call these, so a key is rebuilt by exactly the same operations in both.
// Layout: a head vector lives in one warp, lane l holds coordinates
// l + 32·r, r < VPL (warp_ops.cuh).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/warp_ops.cuh"

namespace tq::kernels::cuda {

/// Arguments of the attention kernels (passed by value). The decode kernel
/// runs one block row per entry of token_index (null: every token), the
/// prefill kernel one per tile of `tiles`.
struct AttnArgs {
  const float* q;
  float* out;
  const int32_t* token_seq;
  const int32_t* token_pos;
  const int32_t* block_tables;
  int32_t num_heads;
  int32_t max_blocks_per_seq;
  float scale;
  const uint8_t* kpool;
  const uint8_t* vpool;
  KvPoolArgs pool;
  int32_t group;
  int32_t group_chunks;  // decode kernel: blocks per KV head along the group
  int32_t splits;
  int32_t split_len;
  float* partial;              // [num_tokens][num_heads][splits][head_dim + 2]: m, l, acc
  const int32_t* token_index;  // decode kernel: [grid.x] token of each block row, or null
  const int32_t* tiles;        // prefill kernel: [grid.x][2] first token, token count
  int32_t tile_tokens;         // prefill kernel: query tokens per tile
  int32_t tile_heads;          // prefill kernel: query heads per tile (≤ group)
  int32_t tile_chunks;         // prefill kernel: blocks per KV head along the group
};

/// Rows (query token × query head pairs) of one prefill tile: 64 up to
/// head_dim 128, 32 above, so that each thread's share of the output
/// accumulators (rows × head_dim / 128 threads) stays at ≤ 64 registers.
constexpr int32_t PrefillRowsForHeadDim(int32_t head_dim) {
  return head_dim > 128 ? 32 : 64;
}

/// How a GQA group is laid out in prefill tiles: `heads` query heads of the
/// group × `tokens` query tokens per tile, `chunks` tiles along the group.
struct PrefillTileShape {
  int32_t heads;
  int32_t tokens;
  int32_t chunks;
};
inline PrefillTileShape PrefillTiles(int32_t group, int32_t head_dim) {
  const int32_t rows = PrefillRowsForHeadDim(head_dim);
  const int32_t heads = group < rows ? (group > 0 ? group : 1) : rows;
  return {heads, rows / heads, (group + heads - 1) / heads};
}

/// Launches the query-tiled prefill kernel (paged_prefill.cu) over the
/// a.tiles tiles: grid (num_tiles, KV heads × a.tile_chunks, a.splits).
template <int VPL>
void LaunchPrefill(const AttnArgs& a, int32_t num_tiles, int32_t num_kv_heads, cudaStream_t stream);

__device__ __forceinline__ bool IsTq(KvDtype d) {
  return d == KvDtype::kTq3 || d == KvDtype::kTq4 || d == KvDtype::kTqK3V2;
}

// A record of the uncompressed and integer formats (as stored; keys after RoPE).
template <int VPL>
__device__ __forceinline__ void DecodePlain(KvDtype dtype, const uint8_t* code,
                                            const uint8_t* param, int d, float (&x)[VPL]) {
  const int lane = LaneId();
  float scale = 0.0f, zero = 0.0f;
  if (dtype == KvDtype::kInt8 || dtype == KvDtype::kInt4) {
    scale = LoadHalfBytes(param);
    zero = LoadHalfBytes(param + 2);
  }
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    const int i = lane + 32 * r;
    float v = 0.0f;
    if (i < d) {
      switch (dtype) {
        case KvDtype::kF32:
          v = reinterpret_cast<const float*>(code)[i];
          break;
        case KvDtype::kF16:
          v = __half2float(__ushort_as_half(reinterpret_cast<const uint16_t*>(code)[i]));
          break;
        case KvDtype::kBF16:
          v = Bf16BitsToFloat(reinterpret_cast<const uint16_t*>(code)[i]);
          break;
        case KvDtype::kInt8:
          v = scale * static_cast<float>(code[i]) + zero;
          break;
        default:  // kInt4
          v = scale * static_cast<float>((code[i / 2] >> (4 * (i & 1))) & 0xfu) + zero;
      }
    }
    x[r] = v;
  }
}

// norm · c[idx_i] for the lane's coordinates (the rotated reconstruction).
template <int VPL>
__device__ __forceinline__ void DecodeTqRotated(const uint8_t* code, const uint8_t* param, int d,
                                                int bits, const float* centroids, float (&x)[VPL]) {
  const int lane = LaneId();
  const float norm = LoadHalfBytes(param);
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    const int i = lane + 32 * r;
    x[r] = i < d ? norm * centroids[PlaneIndex(code, d, bits, i)] : 0.0f;
  }
}

/// Per-lane constants of one KV head's key reconstruction: signs/√d (the
/// inverse rotation's diagonal), σ and μ of the per-channel normalization.
template <int VPL>
struct KeyRebuild {
  float rot[VPL];
  float sigma[VPL];
  float mu[VPL];
  float inv_sqrt_d;

  __device__ __forceinline__ void Load(const KvPoolArgs& pool, int kv_head) {
    const int d = pool.head_dim;
    const int lane = LaneId();
    const bool tq = IsTq(pool.dtype);
    inv_sqrt_d = static_cast<float>(1.0 / sqrt(static_cast<double>(d)));
#pragma unroll
    for (int r = 0; r < VPL; ++r) {
      const int i = lane + 32 * r;
      const int64_t c = static_cast<int64_t>(kv_head) * d + i;
      rot[r] = (tq && i < d) ? inv_sqrt_d * pool.tq.signs[i] : 0.0f;
      sigma[r] = (tq && i < d && pool.tq.k_scale) ? pool.tq.k_scale[c] : 1.0f;
      mu[r] = (tq && i < d && pool.tq.k_mean) ? pool.tq.k_mean[c] : 0.0f;
    }
  }
};

/// The warp's key (after RoPE) and value of position j of the sequence whose
/// block table is `table`, for every KvDtype: tq values stay in the rotated
/// space (R v), the others as stored. kc_s / vc_s: the tq centroids (shared
/// memory). j must be warp-uniform (the warp decodes one key together).
template <int VPL>
__device__ __forceinline__ void LoadKeyValue(const AttnArgs& a, const KeyRebuild<VPL>& kr,
                                             const float* kc_s, const float* vc_s,
                                             const int32_t* table, int kv_head, int j,
                                             int sink_count, float (&k)[VPL], float (&v)[VPL]) {
  const int d = a.pool.head_dim;
  const int lane = LaneId();
  const bool tq = IsTq(a.pool.dtype);
  const int bs = a.pool.kshape.block_size;
  const int64_t slot = static_cast<int64_t>(table[j / bs]) * bs + j % bs;
  if (j < sink_count) {  // exact pre-RoPE key and value (tq only)
    const int64_t row =
        ((static_cast<int64_t>(table[0]) * a.pool.sink_tokens + j) * a.pool.kshape.num_kv_heads +
         kv_head) *
        d;
#pragma unroll
    for (int r = 0; r < VPL; ++r) {
      const int i = lane + 32 * r;
      k[r] = i < d ? a.pool.sink_k[row + i] : 0.0f;
      v[r] = i < d ? a.pool.sink_v[row + i] * a.pool.tq.signs[i] : 0.0f;
    }
    // The value joins the others in the rotated space: R v = H(s ⊙ v)/√d.
    WarpWalshHadamard<VPL>(v, d);
#pragma unroll
    for (int r = 0; r < VPL; ++r) v[r] *= kr.inv_sqrt_d;
  } else if (tq) {
    const uint8_t* kcode = a.kpool + CodeOffset(a.pool.kshape, slot, kv_head);
    DecodeTqRotated<VPL>(kcode, a.kpool + ParamOffset(a.pool.kshape, slot, kv_head), d,
                         a.pool.key_bits, kc_s, k);
    WarpWalshHadamard<VPL>(k, d);
#pragma unroll
    for (int r = 0; r < VPL; ++r) k[r] = k[r] * kr.rot[r] * kr.sigma[r] + kr.mu[r];
    const uint8_t* vcode = a.vpool + CodeOffset(a.pool.vshape, slot, kv_head);
    DecodeTqRotated<VPL>(vcode, a.vpool + ParamOffset(a.pool.vshape, slot, kv_head), d,
                         a.pool.value_bits, vc_s, v);
  } else {
    DecodePlain<VPL>(a.pool.dtype, a.kpool + CodeOffset(a.pool.kshape, slot, kv_head),
                     a.kpool + ParamOffset(a.pool.kshape, slot, kv_head), d, k);
    DecodePlain<VPL>(a.pool.dtype, a.vpool + CodeOffset(a.pool.vshape, slot, kv_head),
                     a.vpool + ParamOffset(a.pool.vshape, slot, kv_head), d, v);
  }
  if (tq) {  // keys are stored before RoPE
    const int half = d / 2;
    const int pos = min(j, a.pool.tq.rope_positions - 1);
    WarpRope<VPL>(k, d, a.pool.tq.rope_cos + static_cast<int64_t>(pos) * half,
                  a.pool.tq.rope_sin + static_cast<int64_t>(pos) * half);
  }
}

/// Loads the tq centroids into shared memory (threads 0..15; the caller syncs).
__device__ __forceinline__ void LoadCentroids(const KvPoolArgs& pool, float* kc_s, float* vc_s) {
  if (IsTq(pool.dtype) && threadIdx.x < 16) {
    kc_s[threadIdx.x] =
        threadIdx.x < (1u << pool.key_bits) ? pool.tq.k_centroids[threadIdx.x] : 0.0f;
    vc_s[threadIdx.x] =
        threadIdx.x < (1u << pool.value_bits) ? pool.tq.v_centroids[threadIdx.x] : 0.0f;
  }
}

/// Stores the warp's softmax state of one (token, query head) row: with
/// split-K the partial (m, l, unnormalized acc) of split `split`, else
/// o = acc / l with Rᵀ applied for tq (H, then signs/√d).
template <int VPL>
__device__ __forceinline__ void StoreHeadRow(const AttnArgs& a, const KeyRebuild<VPL>& kr,
                                             int64_t head_row, int split, float m, float l,
                                             float (&o)[VPL]) {
  const int d = a.pool.head_dim;
  const int lane = LaneId();
  if (a.splits > 1) {
    float* part = a.partial + (head_row * a.splits + split) * (d + 2);
    if (lane == 0) {
      part[0] = m;
      part[1] = l;
    }
#pragma unroll
    for (int r = 0; r < VPL; ++r) {
      if (lane + 32 * r < d) part[2 + lane + 32 * r] = o[r];
    }
    return;
  }
  // A padding row (token_pos < 0, CUDA-graph decode buckets) attended to
  // nothing: zeros, not 0/0.
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int r = 0; r < VPL; ++r) o[r] *= inv;
  if (IsTq(a.pool.dtype)) {
    WarpWalshHadamard<VPL>(o, d);
#pragma unroll
    for (int r = 0; r < VPL; ++r) o[r] *= kr.rot[r];
  }
  float* out = a.out + head_row * d;
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    if (lane + 32 * r < d) out[lane + 32 * r] = o[r];
  }
}

}  // namespace tq::kernels::cuda
