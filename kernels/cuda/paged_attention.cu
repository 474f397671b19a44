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

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace tq::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxGroupChunk = 8;

template <int VPL>
__global__ void __launch_bounds__(kWarps * 32) PagedAttentionKernel(AttnArgs a) {
  __shared__ float q_s[kMaxGroupChunk][32 * VPL];
  __shared__ float m_s[kWarps][kMaxGroupChunk];
  __shared__ float l_s[kWarps][kMaxGroupChunk];
  __shared__ float acc_s[kWarps][kMaxGroupChunk][32 * VPL];
  __shared__ float kc_s[16];
  __shared__ float vc_s[16];

  const int d = a.pool.head_dim;
  const int t = a.token_index ? a.token_index[blockIdx.x] : static_cast<int>(blockIdx.x);
  const int kv_head = blockIdx.y / a.group_chunks;
  const int g0 = (blockIdx.y % a.group_chunks) * kMaxGroupChunk;
  const int ng = min(kMaxGroupChunk, a.group - g0);
  const int head0 = kv_head * a.group + g0;
  const int split = blockIdx.z;
  const int warp = threadIdx.x >> 5;
  const int lane = LaneId();

  for (int e = threadIdx.x; e < kMaxGroupChunk * 32 * VPL; e += blockDim.x) {
    const int g = e / (32 * VPL);
    const int i = e % (32 * VPL);
    q_s[g][i] =
        (g < ng && i < d) ? a.q[(static_cast<int64_t>(t) * a.num_heads + head0 + g) * d + i] : 0.0f;
  }
  LoadCentroids(a.pool, kc_s, vc_s);
  __syncthreads();

  KeyRebuild<VPL> kr;
  kr.Load(a.pool, kv_head);

  const int max_ctx = a.max_blocks_per_seq * a.pool.kshape.block_size;
  const int ctx = min(a.token_pos[t] + 1, max_ctx);
  const int j_begin = split * a.split_len;
  const int j_end = min(ctx, j_begin + a.split_len);
  const int32_t* table =
      a.block_tables + static_cast<int64_t>(a.token_seq[t]) * a.max_blocks_per_seq;
  const int sink_count = a.pool.sink_k ? min(a.pool.sink_tokens, ctx) : 0;

  float m[kMaxGroupChunk], l[kMaxGroupChunk], acc[kMaxGroupChunk][VPL];
#pragma unroll
  for (int g = 0; g < kMaxGroupChunk; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int r = 0; r < VPL; ++r) acc[g][r] = 0.0f;
  }

  for (int j = j_begin + warp; j < j_end; j += kWarps) {
    float k[VPL], v[VPL];
    LoadKeyValue<VPL>(a, kr, kc_s, vc_s, table, kv_head, j, sink_count, k, v);
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
    StoreHeadRow<VPL>(a, kr, static_cast<int64_t>(t) * a.num_heads + head0 + g, split, big, sum, o);
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
void LaunchDecode(const AttnArgs& a, int32_t num_rows, int32_t num_kv_heads, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(num_rows),
                  static_cast<unsigned>(num_kv_heads * a.group_chunks),
                  static_cast<unsigned>(a.splits));
  PagedAttentionKernel<VPL><<<grid, kWarps * 32, 0, stream>>>(a);
  TQ_CUDA_CHECK_LAUNCH();
}

template <int VPL>
void LaunchMerge(const AttnArgs& a, int32_t num_tokens, cudaStream_t stream) {
  const dim3 merge_grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(a.num_heads));
  MergeSplitsKernel<VPL><<<merge_grid, 32, 0, stream>>>(a);
  TQ_CUDA_CHECK_LAUNCH();
}

// Blocks of one split: decode rows × KV heads × group chunks, plus the
// prefill tiles × KV heads × their group chunks.
int64_t BlocksPerSplit(const PagedAttentionParams& p, const AttentionBatchLayout& layout) {
  const KvLayout& l = p.cache.layout;
  const int32_t group = p.num_heads / l.num_kv_heads;
  const int64_t chunks = (group + kMaxGroupChunk - 1) / kMaxGroupChunk;
  const int64_t decode_rows = layout.tiles.empty() ? p.num_tokens : layout.decode.size();
  const PrefillTileShape shape = PrefillTiles(group, l.head_dim);
  return (decode_rows * chunks + static_cast<int64_t>(layout.num_tiles()) * shape.chunks) *
         l.num_kv_heads;
}

}  // namespace

AttentionBatchLayout PlanAttentionBatch(const PagedAttentionParams& p) {
  AttentionBatchLayout layout;
  const KvLayout& l = p.cache.layout;
  if (l.num_kv_heads <= 0) return layout;
  layout.tile_tokens = PrefillTiles(p.num_heads / l.num_kv_heads, l.head_dim).tokens;
  if (!p.host_token_seq) return layout;  // batch layout unknown: every token decodes
  const int32_t* seq = p.host_token_seq;
  for (int32_t t = 0; t < p.num_tokens;) {
    int32_t end = t + 1;
    while (end < p.num_tokens && seq[end] == seq[t]) ++end;
    if (end - t >= kPrefillMinRun) {
      for (int32_t first = t; first < end; first += layout.tile_tokens) {
        layout.tiles.push_back(first);
        layout.tiles.push_back(std::min(layout.tile_tokens, end - first));
      }
    } else {
      for (int32_t i = t; i < end; ++i) layout.decode.push_back(i);
    }
    t = end;
  }
  return layout;
}

AttentionPlan PlanAttention(const PagedAttentionParams& p, int32_t num_sms) {
  return PlanAttention(p, num_sms, AttentionBatchLayout{});
}

AttentionPlan PlanAttention(const PagedAttentionParams& p, int32_t num_sms,
                            const AttentionBatchLayout& layout) {
  const KvLayout& l = p.cache.layout;
  const int64_t tasks = BlocksPerSplit(p, layout);
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

void LaunchPagedAttention(const PagedAttentionParams& p, const TqCodecArrays* tq,
                          const AttentionPlan& plan, float* workspace, cudaStream_t stream,
                          const AttentionBatchLayout& layout, const int32_t* device_layout) {
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
  const PrefillTileShape shape = PrefillTiles(a.group, l.head_dim);
  a.tile_tokens = shape.tokens;
  a.tile_heads = shape.heads;
  a.tile_chunks = shape.chunks;
  const bool tiled = !layout.tiles.empty() && device_layout;
  int32_t decode_rows = p.num_tokens;
  if (tiled) {
    a.tiles = device_layout;
    a.token_index = device_layout + layout.tiles.size();
    decode_rows = static_cast<int32_t>(layout.decode.size());
  }
  DispatchValuesPerLane(l.head_dim, [&](auto vpl) {
    constexpr int kVpl = decltype(vpl)::value;
    if (decode_rows > 0) LaunchDecode<kVpl>(a, decode_rows, l.num_kv_heads, stream);
    if (tiled) LaunchPrefill<kVpl>(a, layout.num_tiles(), l.num_kv_heads, stream);
    if (a.splits > 1) LaunchMerge<kVpl>(a, p.num_tokens, stream);
  });
}

}  // namespace tq::kernels::cuda
