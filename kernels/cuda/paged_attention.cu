// Paged causal GQA attention for every KvDtype (the CPU reference is
// kernels/cpu/cpu_attention.cc). One thread block per (query token, KV head,
// chunk of up to 8 query heads of its group, context split). Each of the
// block's 4 warps walks every 4th position of the split: it decodes the key
// once into registers (tq: 3/4-bit indices read straight from the bit-planes,
// × norm, inverse randomized Hadamard by warp shuffles, × σ + μ, RoPE at the
// key's position), scores it against all query heads of the chunk, and keeps
// an online softmax (Milakov & Gimelshein 2018) with the value accumulated in
// registers (tq: in the rotated space). Warps merge in shared memory; with
// more than one split (decode with few tokens, long contexts: split-K as
// FlashDecoding) the partial results are merged by a second kernel, and Rᵀ is
// applied once per output head vector.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/warp_ops.cuh"

namespace tq::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxGroupChunk = 8;

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
  int32_t group_chunks;
  int32_t splits;
  int32_t split_len;
  float* partial;  // [num_tokens][num_heads][splits][head_dim + 2]: m, l, acc
};

__device__ __forceinline__ bool IsTq(KvDtype d) {
  return d == KvDtype::kTq3 || d == KvDtype::kTq4;
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

template <int VPL>
__global__ void __launch_bounds__(kWarps * 32) PagedAttentionKernel(AttnArgs a) {
  __shared__ float q_s[kMaxGroupChunk][32 * VPL];
  __shared__ float m_s[kWarps][kMaxGroupChunk];
  __shared__ float l_s[kWarps][kMaxGroupChunk];
  __shared__ float acc_s[kWarps][kMaxGroupChunk][32 * VPL];
  __shared__ float kc_s[16];
  __shared__ float vc_s[16];

  const int d = a.pool.head_dim;
  const int t = blockIdx.x;
  const int kv_head = blockIdx.y / a.group_chunks;
  const int g0 = (blockIdx.y % a.group_chunks) * kMaxGroupChunk;
  const int ng = min(kMaxGroupChunk, a.group - g0);
  const int head0 = kv_head * a.group + g0;
  const int split = blockIdx.z;
  const int warp = threadIdx.x >> 5;
  const int lane = LaneId();
  const bool tq = IsTq(a.pool.dtype);

  for (int e = threadIdx.x; e < kMaxGroupChunk * 32 * VPL; e += blockDim.x) {
    const int g = e / (32 * VPL);
    const int i = e % (32 * VPL);
    q_s[g][i] =
        (g < ng && i < d) ? a.q[(static_cast<int64_t>(t) * a.num_heads + head0 + g) * d + i] : 0.0f;
  }
  if (tq && threadIdx.x < 16) {
    kc_s[threadIdx.x] =
        threadIdx.x < (1 << a.pool.key_bits) ? a.pool.tq.k_centroids[threadIdx.x] : 0.0f;
    vc_s[threadIdx.x] =
        threadIdx.x < (1 << a.pool.value_bits) ? a.pool.tq.v_centroids[threadIdx.x] : 0.0f;
  }
  __syncthreads();

  // Per-lane constants of the key reconstruction: signs/√d, σ, μ.
  const float inv_sqrt_d = static_cast<float>(1.0 / sqrt(static_cast<double>(d)));
  float rot[VPL], sigma[VPL], mu[VPL];
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    const int i = lane + 32 * r;
    const int64_t c = static_cast<int64_t>(kv_head) * d + i;
    rot[r] = (tq && i < d) ? inv_sqrt_d * a.pool.tq.signs[i] : 0.0f;
    sigma[r] = (tq && i < d && a.pool.tq.k_scale) ? a.pool.tq.k_scale[c] : 1.0f;
    mu[r] = (tq && i < d && a.pool.tq.k_mean) ? a.pool.tq.k_mean[c] : 0.0f;
  }

  const int max_ctx = a.max_blocks_per_seq * a.pool.kshape.block_size;
  const int ctx = min(a.token_pos[t] + 1, max_ctx);
  const int j_begin = split * a.split_len;
  const int j_end = min(ctx, j_begin + a.split_len);
  const int32_t* table =
      a.block_tables + static_cast<int64_t>(a.token_seq[t]) * a.max_blocks_per_seq;
  const int sink_count = a.pool.sink_k ? min(a.pool.sink_tokens, ctx) : 0;
  const int bs = a.pool.kshape.block_size;
  const int half = d / 2;

  float m[kMaxGroupChunk], l[kMaxGroupChunk], acc[kMaxGroupChunk][VPL];
#pragma unroll
  for (int g = 0; g < kMaxGroupChunk; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int r = 0; r < VPL; ++r) acc[g][r] = 0.0f;
  }

  for (int j = j_begin + warp; j < j_end; j += kWarps) {
    const int64_t slot = static_cast<int64_t>(table[j / bs]) * bs + j % bs;
    float k[VPL], v[VPL];
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
      for (int r = 0; r < VPL; ++r) v[r] *= inv_sqrt_d;
    } else if (tq) {
      const uint8_t* kcode = a.kpool + CodeOffset(a.pool.kshape, slot, kv_head);
      DecodeTqRotated<VPL>(kcode, a.kpool + ParamOffset(a.pool.kshape, slot, kv_head), d,
                           a.pool.key_bits, kc_s, k);
      WarpWalshHadamard<VPL>(k, d);
#pragma unroll
      for (int r = 0; r < VPL; ++r) k[r] = k[r] * rot[r] * sigma[r] + mu[r];
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
      const int pos = min(j, a.pool.tq.rope_positions - 1);
      WarpRope<VPL>(k, d, a.pool.tq.rope_cos + static_cast<int64_t>(pos) * half,
                    a.pool.tq.rope_sin + static_cast<int64_t>(pos) * half);
    }
#pragma unroll
    for (int g = 0; g < kMaxGroupChunk; ++g) {
      if (g >= ng) break;
      float dot = 0.0f;
#pragma unroll
      for (int r = 0; r < VPL; ++r) dot += q_s[g][lane + 32 * r] * k[r];
      const float s = WarpSum(dot) * a.scale;
      const float m_new = fmaxf(m[g], s);
      const float corr = expf(m[g] - m_new);
      const float p = expf(s - m_new);
      l[g] = l[g] * corr + p;
#pragma unroll
      for (int r = 0; r < VPL; ++r) acc[g][r] = acc[g][r] * corr + p * v[r];
      m[g] = m_new;
    }
  }

  // Merge the warps' partial softmax states.
#pragma unroll
  for (int g = 0; g < kMaxGroupChunk; ++g) {
    if (lane == 0) {
      m_s[warp][g] = m[g];
      l_s[warp][g] = l[g];
    }
#pragma unroll
    for (int r = 0; r < VPL; ++r) acc_s[warp][g][lane + 32 * r] = acc[g][r];
  }
  __syncthreads();
  for (int g = warp; g < ng; g += kWarps) {
    float big = -INFINITY;
    for (int w = 0; w < kWarps; ++w) big = fmaxf(big, m_s[w][g]);
    float sum = 0.0f;
    float o[VPL];
#pragma unroll
    for (int r = 0; r < VPL; ++r) o[r] = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = m_s[w][g] == -INFINITY ? 0.0f : expf(m_s[w][g] - big);
      sum += l_s[w][g] * f;
#pragma unroll
      for (int r = 0; r < VPL; ++r) o[r] += acc_s[w][g][lane + 32 * r] * f;
    }
    const int64_t head_row = static_cast<int64_t>(t) * a.num_heads + head0 + g;
    if (a.splits > 1) {
      float* part = a.partial + (head_row * a.splits + split) * (d + 2);
      if (lane == 0) {
        part[0] = big;
        part[1] = sum;
      }
#pragma unroll
      for (int r = 0; r < VPL; ++r) {
        if (lane + 32 * r < d) part[2 + lane + 32 * r] = o[r];
      }
      continue;
    }
    // A padding row (token_pos < 0) attended to nothing: zeros, not 0/0.
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int r = 0; r < VPL; ++r) o[r] *= inv;
    if (tq) {  // Rᵀ once per output: H then signs/√d
      WarpWalshHadamard<VPL>(o, d);
#pragma unroll
      for (int r = 0; r < VPL; ++r) o[r] *= rot[r];
    }
    float* out = a.out + head_row * d;
#pragma unroll
    for (int r = 0; r < VPL; ++r) {
      if (lane + 32 * r < d) out[lane + 32 * r] = o[r];
    }
  }
}

// Split-K merge: one warp per (token, query head).
template <int VPL>
__global__ void MergeSplitsKernel(AttnArgs a) {
  const int d = a.pool.head_dim;
  const int lane = LaneId();
  const int64_t head_row = static_cast<int64_t>(blockIdx.x) * a.num_heads + blockIdx.y;
  const float* part = a.partial + head_row * a.splits * (d + 2);
  float big = -INFINITY;
  for (int s = 0; s < a.splits; ++s) big = fmaxf(big, part[s * (d + 2)]);
  float sum = 0.0f;
  float o[VPL];
#pragma unroll
  for (int r = 0; r < VPL; ++r) o[r] = 0.0f;
  for (int s = 0; s < a.splits; ++s) {
    const float* p = part + s * (d + 2);
    const float f = p[0] == -INFINITY ? 0.0f : expf(p[0] - big);
    sum += p[1] * f;
#pragma unroll
    for (int r = 0; r < VPL; ++r) {
      if (lane + 32 * r < d) o[r] += p[2 + lane + 32 * r] * f;
    }
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // 0: a padding row
#pragma unroll
  for (int r = 0; r < VPL; ++r) o[r] *= inv;
  if (IsTq(a.pool.dtype)) {
    WarpWalshHadamard<VPL>(o, d);
    const float inv_sqrt_d = static_cast<float>(1.0 / sqrt(static_cast<double>(d)));
#pragma unroll
    for (int r = 0; r < VPL; ++r) {
      const int i = lane + 32 * r;
      o[r] *= i < d ? inv_sqrt_d * a.pool.tq.signs[i] : 0.0f;
    }
  }
  float* out = a.out + head_row * d;
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    if (lane + 32 * r < d) out[lane + 32 * r] = o[r];
  }
}

template <int VPL>
void Launch(const AttnArgs& a, int32_t num_tokens, int32_t num_kv_heads, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(num_tokens),
                  static_cast<unsigned>(num_kv_heads * a.group_chunks),
                  static_cast<unsigned>(a.splits));
  PagedAttentionKernel<VPL><<<grid, kWarps * 32, 0, stream>>>(a);
  TQ_CUDA_CHECK_LAUNCH();
  if (a.splits > 1) {
    const dim3 merge_grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(a.num_heads));
    MergeSplitsKernel<VPL><<<merge_grid, 32, 0, stream>>>(a);
    TQ_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

AttentionPlan PlanAttention(const PagedAttentionParams& p, int32_t num_sms) {
  const KvLayout& l = p.cache.layout;
  const int32_t group = p.num_heads / l.num_kv_heads;
  const int64_t chunks = (group + kMaxGroupChunk - 1) / kMaxGroupChunk;
  const int64_t tasks = static_cast<int64_t>(p.num_tokens) * l.num_kv_heads * chunks;
  const int64_t max_ctx = static_cast<int64_t>(p.max_blocks_per_seq) * l.block_size;
  AttentionPlan plan;
  plan.split_len = static_cast<int32_t>(std::max<int64_t>(max_ctx, 1));
  constexpr int64_t kMinSplitLen = 256;  // positions; fewer do not pay for the merge
  const int64_t target_blocks = 4 * static_cast<int64_t>(std::max(num_sms, 1));
  if (tasks >= target_blocks || max_ctx <= kMinSplitLen || tasks == 0) return plan;
  const int64_t by_len = (max_ctx + kMinSplitLen - 1) / kMinSplitLen;
  const int64_t by_sms = (target_blocks + tasks - 1) / tasks;
  const int64_t splits = std::min({by_len, by_sms, int64_t{1024}});
  if (splits <= 1) return plan;
  plan.split_len = static_cast<int32_t>((max_ctx + splits - 1) / splits);
  plan.splits = static_cast<int32_t>((max_ctx + plan.split_len - 1) / plan.split_len);
  return plan;
}

void LaunchPagedAttention(const PagedAttentionParams& p, const DeviceTqCodec* tq,
                          const AttentionPlan& plan, float* workspace, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const KvLayout& l = p.cache.layout;
  AttnArgs a{};
  a.q = p.q;
  a.out = p.out;
  a.token_seq = p.token_seq;
  a.token_pos = p.token_pos;
  a.block_tables = p.block_tables;
  a.num_heads = p.num_heads;
  a.max_blocks_per_seq = p.max_blocks_per_seq;
  a.scale = p.scale;
  a.kpool = static_cast<const uint8_t*>(p.cache.k);
  a.vpool = static_cast<const uint8_t*>(p.cache.v);
  a.pool = MakeKvPoolArgs(p.cache, tq);
  a.group = p.num_heads / l.num_kv_heads;
  a.group_chunks = (a.group + kMaxGroupChunk - 1) / kMaxGroupChunk;
  a.splits = plan.splits;
  a.split_len = plan.split_len;
  a.partial = workspace;
  DispatchValuesPerLane(l.head_dim, [&](auto vpl) {
    Launch<decltype(vpl)::value>(a, p.num_tokens, l.num_kv_heads, stream);
  });
}

}  // namespace tq::kernels::cuda
