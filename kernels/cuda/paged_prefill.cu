// Query-tiled paged attention for prefill / chunked prefill (the CPU reference
// is kernels/cpu/cpu_attention.cc; the decode kernel is paged_attention.cu).
// One thread block (4 warps) per (tile of up to `tile_tokens` consecutive
// query tokens of one sequence, KV head, chunk of the GQA group, context
// split): its rows are the tile's (token, query head) pairs, up to 64 (32 for
// head_dim > 128). The context is walked in chunks of kKeys positions; each
// chunk's keys and values are decoded ONCE per tile into shared memory, by
// the decode kernel's own LoadKeyValue (tq: indices from the bit-planes,
// × norm, inverse randomized Hadamard, × σ + μ, RoPE at the key's position;
// values in the rotated space), instead of once per query token. Then, as in
// FlashAttention (Dao et al. 2022) on CUDA cores in fp32:
//   S = Q·Kᵀ·scale for rows × keys (each thread a 4×4 or 2×2 register tile),
//   masked causally per row by the row's own token_pos,
//   online softmax per row (Milakov & Gimelshein 2018),
//   O = O·corr + P·V with O in registers (warp w owns rows w, w + 4, ...;
//   a row lives in a warp as a head vector does everywhere else, so the final
//   Rᵀ of tq values is the decode kernel's StoreHeadRow).
// Split-K partials use the decode kernel's workspace layout and merge kernel.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"

namespace tq::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarpsPerBlock = kThreads / 32;

// Compile-time shape of the kernel for VPL values per lane (head_dim ≤ 32·VPL)
// and the shared-memory carve-up (floats; padded strides avoid bank conflicts
// where a warp writes a column).
template <int VPL>
struct PrefillShape {
  static constexpr int kD = 32 * VPL;
  static constexpr int kRows = PrefillRowsForHeadDim(kD);
  static constexpr int kKeys = VPL >= 8 ? 16 : 32;   // positions per chunk
  static constexpr int kRowsPerThread = kRows / 16;  // score tile: 16 row groups
  static constexpr int kKeysPerThread = kKeys / 8;   // × 8 key groups = 128 threads
  static constexpr int kRowsPerWarp = kRows / kWarpsPerBlock;
  static constexpr int kQStride = kRows + 1;  // q_s[dim][row]
  static constexpr int kKStride = kKeys + 1;  // k_s[dim][key]
  static constexpr int kSStride = kKeys + 1;  // s_s[row][key]
  static constexpr int kQFloats = kD * kQStride;
  static constexpr int kKFloats = kD * kKStride;
  static constexpr int kVFloats = kKeys * kD;  // v_s[key][dim]
  static constexpr int kSFloats = kRows * kSStride;
  // q, k, v, s, then per row: corr, m, l, context; then 2 × 16 centroids.
  static constexpr int kFloats = kQFloats + kKFloats + kVFloats + kSFloats + 4 * kRows + 32;
  static constexpr size_t kBytes = sizeof(float) * kFloats;
  static_assert(kRows % 16 == 0 && kKeys % 8 == 0 && kRows % kWarpsPerBlock == 0);
};

template <int VPL>
__global__ void __launch_bounds__(kThreads) PrefillAttentionKernel(AttnArgs a) {
  using S = PrefillShape<VPL>;
  extern __shared__ float smem[];
  float* q_s = smem;
  float* k_s = q_s + S::kQFloats;
  float* v_s = k_s + S::kKFloats;
  float* s_s = v_s + S::kVFloats;
  float* corr_s = s_s + S::kSFloats;
  float* m_s = corr_s + S::kRows;
  float* l_s = m_s + S::kRows;
  int* ctx_s = reinterpret_cast<int*>(l_s + S::kRows);
  float* kc_s = reinterpret_cast<float*>(ctx_s + S::kRows);
  float* vc_s = kc_s + 16;

  const int d = a.pool.head_dim;
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = LaneId();
  const int t0 = a.tiles[2 * blockIdx.x];
  const int count = a.tiles[2 * blockIdx.x + 1];
  const int kv_head = blockIdx.y / a.tile_chunks;
  const int g0 = (blockIdx.y % a.tile_chunks) * a.tile_heads;
  const int heads = min(a.tile_heads, a.group - g0);
  const int head0 = kv_head * a.group + g0;
  const int split = blockIdx.z;
  const int max_ctx = a.max_blocks_per_seq * a.pool.kshape.block_size;

  // Row r is (token t0 + r / tile_heads, query head head0 + r % tile_heads).
  auto row_valid = [&](int r) { return r / a.tile_heads < count && r % a.tile_heads < heads; };
  auto head_row = [&](int r) {
    return static_cast<int64_t>(t0 + r / a.tile_heads) * a.num_heads + head0 + r % a.tile_heads;
  };
  for (int e = tid; e < S::kRows * S::kD; e += kThreads) {
    const int r = e / S::kD;
    const int i = e % S::kD;
    q_s[i * S::kQStride + r] = (row_valid(r) && i < d) ? a.q[head_row(r) * d + i] : 0.0f;
  }
  for (int r = tid; r < S::kRows; r += kThreads) {
    ctx_s[r] = row_valid(r) ? min(a.token_pos[t0 + r / a.tile_heads] + 1, max_ctx) : 0;
  }
  LoadCentroids(a.pool, kc_s, vc_s);
  __syncthreads();

  KeyRebuild<VPL> kr;
  kr.Load(a.pool, kv_head);
  int tile_ctx = 0;  // positions any row of the tile attends to
  for (int r = 0; r < S::kRows; ++r) tile_ctx = max(tile_ctx, ctx_s[r]);
  const int j_begin = split * a.split_len;
  const int j_split_end = j_begin + a.split_len;
  const int j_end = min(tile_ctx, j_split_end);
  const int32_t* table =
      a.block_tables + static_cast<int64_t>(a.token_seq[t0]) * a.max_blocks_per_seq;
  const int sink_count = a.pool.sink_k ? min(a.pool.sink_tokens, tile_ctx) : 0;

  // Thread tid < kRows keeps row tid's running max and sum.
  float m_row = -INFINITY, l_row = 0.0f;
  float acc[S::kRowsPerWarp][VPL];
#pragma unroll
  for (int i = 0; i < S::kRowsPerWarp; ++i) {
#pragma unroll
    for (int r = 0; r < VPL; ++r) acc[i][r] = 0.0f;
  }
  const int ty = tid / 8;  // score tile: rows ty + 16·i
  const int tx = tid % 8;  //             keys tx + 8·c

  for (int j0 = j_begin; j0 < j_end; j0 += S::kKeys) {
    // 1. Each warp decodes every 4th key/value of the chunk (zero past the end).
    for (int jj = warp; jj < S::kKeys; jj += kWarpsPerBlock) {
      const int j = j0 + jj;
      float k[VPL], v[VPL];
      if (j < j_end) {
        LoadKeyValue<VPL>(a, kr, kc_s, vc_s, table, kv_head, j, sink_count, k, v);
      } else {
#pragma unroll
        for (int r = 0; r < VPL; ++r) k[r] = v[r] = 0.0f;
      }
#pragma unroll
      for (int r = 0; r < VPL; ++r) {
        k_s[(lane + 32 * r) * S::kKStride + jj] = k[r];
        v_s[jj * S::kD + lane + 32 * r] = v[r];
      }
    }
    __syncthreads();

    // 2. Scores, masked per row by its own causal context and the split.
    {
      float dot[S::kRowsPerThread][S::kKeysPerThread] = {};
#pragma unroll 4
      for (int i = 0; i < d; ++i) {
        float qv[S::kRowsPerThread], kv[S::kKeysPerThread];
#pragma unroll
        for (int y = 0; y < S::kRowsPerThread; ++y) qv[y] = q_s[i * S::kQStride + ty + 16 * y];
#pragma unroll
        for (int c = 0; c < S::kKeysPerThread; ++c) kv[c] = k_s[i * S::kKStride + tx + 8 * c];
#pragma unroll
        for (int y = 0; y < S::kRowsPerThread; ++y) {
#pragma unroll
          for (int c = 0; c < S::kKeysPerThread; ++c) dot[y][c] += qv[y] * kv[c];
        }
      }
#pragma unroll
      for (int y = 0; y < S::kRowsPerThread; ++y) {
        const int row = ty + 16 * y;
        const int limit = min(ctx_s[row], j_split_end);
#pragma unroll
        for (int c = 0; c < S::kKeysPerThread; ++c) {
          const int key = tx + 8 * c;
          s_s[row * S::kSStride + key] = j0 + key < limit ? dot[y][c] * a.scale : -INFINITY;
        }
      }
    }
    __syncthreads();

    // 3. Online softmax per row: scores become probabilities, corr rescales O.
    if (tid < S::kRows) {
      float* srow = s_s + tid * S::kSStride;
      float big = m_row;
      for (int c = 0; c < S::kKeys; ++c) big = fmaxf(big, srow[c]);
      float corr = 1.0f;
      if (big == -INFINITY) {  // no position of this row yet
        for (int c = 0; c < S::kKeys; ++c) srow[c] = 0.0f;
      } else {
        corr = expf(m_row - big);
        float sum = 0.0f;
        for (int c = 0; c < S::kKeys; ++c) {
          const float p = expf(srow[c] - big);
          srow[c] = p;
          sum += p;
        }
        l_row = l_row * corr + sum;
        m_row = big;
      }
      corr_s[tid] = corr;
    }
    __syncthreads();

    // 4. O = O·corr + P·V; warp w owns rows w + 4·i, lane l coordinates l + 32·r.
#pragma unroll
    for (int i = 0; i < S::kRowsPerWarp; ++i) {
      const float corr = corr_s[warp + kWarpsPerBlock * i];
#pragma unroll
      for (int r = 0; r < VPL; ++r) acc[i][r] *= corr;
    }
    for (int jj = 0; jj < S::kKeys; ++jj) {
      float v[VPL];
#pragma unroll
      for (int r = 0; r < VPL; ++r) v[r] = v_s[jj * S::kD + lane + 32 * r];
#pragma unroll
      for (int i = 0; i < S::kRowsPerWarp; ++i) {
        const float p = s_s[(warp + kWarpsPerBlock * i) * S::kSStride + jj];
#pragma unroll
        for (int r = 0; r < VPL; ++r) acc[i][r] += p * v[r];
      }
    }
    __syncthreads();  // k_s, v_s, s_s are rewritten by the next chunk
  }

  if (tid < S::kRows) {
    m_s[tid] = m_row;
    l_s[tid] = l_row;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < S::kRowsPerWarp; ++i) {
    const int row = warp + kWarpsPerBlock * i;
    if (row_valid(row)) StoreHeadRow<VPL>(a, kr, head_row(row), split, m_s[row], l_s[row], acc[i]);
  }
}

}  // namespace

template <int VPL>
void LaunchPrefill(const AttnArgs& a, int32_t num_tiles, int32_t num_kv_heads,
                   cudaStream_t stream) {
  using S = PrefillShape<VPL>;
  // Above 48 KiB of dynamic shared memory needs the opt-in (sm_80: 163 KiB,
  // sm_90: 227 KiB per block); set per launch, the attribute is per device.
  TQ_CUDA_CHECK(cudaFuncSetAttribute(PrefillAttentionKernel<VPL>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(S::kBytes)));
  const dim3 grid(static_cast<unsigned>(num_tiles),
                  static_cast<unsigned>(num_kv_heads * a.tile_chunks),
                  static_cast<unsigned>(a.splits));
  PrefillAttentionKernel<VPL><<<grid, kThreads, S::kBytes, stream>>>(a);
  TQ_CUDA_CHECK_LAUNCH();
}

template void LaunchPrefill<1>(const AttnArgs&, int32_t, int32_t, cudaStream_t);
template void LaunchPrefill<2>(const AttnArgs&, int32_t, int32_t, cudaStream_t);
template void LaunchPrefill<4>(const AttnArgs&, int32_t, int32_t, cudaStream_t);
template void LaunchPrefill<8>(const AttnArgs&, int32_t, int32_t, cudaStream_t);

}  // namespace tq::kernels::cuda
