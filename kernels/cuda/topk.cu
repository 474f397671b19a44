// LogitsTopK on the GPU (kernels/op_params.h): one block per row.
//  1. max of the row (order-preserving uint32 keys of the floats);
//  2. radix select of the k-th largest key T, most significant byte first,
//     on 256-bin shared-memory histograms (4 passes; the first also
//     accumulates the two exp sums in double);
//  3. compaction: every key > T (order irrelevant), plus the first
//     k - count(> T) keys == T in id order (a block-wide ballot scan), so
//     ties go to the lower ids as on the CPU;
//  4. bitonic sort of the <= 1024 (key, ~id) pairs in shared memory.
// Radix select for top-k as in Dr. Top-k (Gaihre et al., SC'21) and
// PyTorch's topk; the row is read 6 times, from L2 for rows that fit it.
// One block per row keeps a row's work on one SM: 256 rows fill an H200,
// a single row does not (a multi-block split with a merge would).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace tq::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float Clean(float x) {
  return isnan(x) ? -INFINITY : x;
}

// Larger float -> larger key; NaN reads as -inf and -0.0 as +0.0 (they
// compare equal as floats, so ties between them go by id).
__device__ __forceinline__ uint32_t Key(float x) {
  uint32_t b = __float_as_uint(Clean(x));
  if ((b << 1) == 0) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float KeyToFloat(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Block reductions through warp shuffles; every thread gets the result.
// `scratch` holds kWarps values; callers separate consecutive uses with the
// __syncthreads inside.
template <typename T, typename Op>
__device__ T BlockReduce(T v, T* scratch, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kWarps; ++w) v = op(v, scratch[w]);
  __syncthreads();
  return v;
}

__global__ void __launch_bounds__(kThreads) LogitsTopKKernel(LogitsTopKParams p) {
  __shared__ uint32_t hist[256];
  __shared__ unsigned long long cand[kMaxLogitsTopK];
  __shared__ uint32_t u_scratch[kWarps];
  __shared__ double d_scratch[kWarps];
  __shared__ int warp_gt[kWarps], warp_eq[kWarps];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int32_t vocab = p.vocab, k = p.k;
  const float* x = p.logits + static_cast<size_t>(blockIdx.x) * vocab;
  const float inv_t = p.inv_temperature[blockIdx.x];

  // 1. The maximum.
  uint32_t local_max = 0;
  for (int32_t i = tid; i < vocab; i += kThreads) local_max = max(local_max, Key(x[i]));
  const uint32_t max_key =
      BlockReduce(local_max, u_scratch, [](uint32_t a, uint32_t b) { return max(a, b); });
  const float max_value = KeyToFloat(max_key);
  const double m = max_value;
  const double ms = __fmul_rn(max_value, inv_t);  // the float product, as the CPU

  // 2. Radix select; pass 1 also sums exp(l - m) and exp(float(l·inv_t) - ms).
  uint32_t prefix = 0, mask = 0;
  int need = k;  // rank of T among the keys that match prefix under mask
  double sum = 0.0, sum_scaled = 0.0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int j = tid; j < 256; j += kThreads) hist[j] = 0;
    __syncthreads();
    // Whole tiles, so every lane of a warp reaches the match below.
    for (int32_t base = 0; base < vocab; base += kThreads) {
      const int32_t i = base + tid;
      const bool valid = i < vocab;
      const float l = valid ? Clean(x[i]) : 0.0f;
      if (shift == 24 && valid) {
        sum += exp(static_cast<double>(l) - m);
        sum_scaled += exp(static_cast<double>(__fmul_rn(l, inv_t)) - ms);
      }
      const uint32_t key = Key(l);
      // 256 = no bin; lanes with the same bin add once (warp-aggregated).
      const uint32_t bin = valid && (key & mask) == prefix ? (key >> shift) & 255u : 256u;
      const unsigned peers = __match_any_sync(kFullMask, bin);
      if (bin != 256u && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
    }
    __syncthreads();
    if (tid == 0) {
      int cum = 0, d = 255;
      for (; d > 0; --d) {
        if (cum + static_cast<int>(hist[d]) >= need) break;
        cum += static_cast<int>(hist[d]);
      }
      s_need = need - cum;
      s_prefix = prefix | (static_cast<uint32_t>(d) << shift);
    }
    __syncthreads();
    prefix = s_prefix;
    need = s_need;
    mask |= 255u << shift;
  }
  sum = BlockReduce(sum, d_scratch, [](double a, double b) { return a + b; });
  sum_scaled = BlockReduce(sum_scaled, d_scratch, [](double a, double b) { return a + b; });

  // 3. Compaction: keys > T go to [0, gt), the first `need` keys == T by id
  // to [gt, k); slots from block-wide ballot ranks, so no atomics and the
  // loop ends uniformly once both are complete.
  const uint32_t t_key = prefix;
  const int gt = k - need;
  for (int j = tid; j < kMaxLogitsTopK; j += kThreads) cand[j] = 0;  // below every real pair
  __syncthreads();
  int gt_base = 0, eq_base = 0;  // found before this tile (same in every thread)
  for (int32_t base = 0; base < vocab && (gt_base < gt || eq_base < need); base += kThreads) {
    const int32_t i = base + tid;
    const uint32_t key = i < vocab ? Key(x[i]) : 0u;
    const bool is_gt = i < vocab && key > t_key, is_eq = i < vocab && key == t_key;
    const unsigned ballot_gt = __ballot_sync(kFullMask, is_gt);
    const unsigned ballot_eq = __ballot_sync(kFullMask, is_eq);
    if (lane == 0) {
      warp_gt[warp] = __popc(ballot_gt);
      warp_eq[warp] = __popc(ballot_eq);
    }
    __syncthreads();
    int before_gt = 0, before_eq = 0, total_gt = 0, total_eq = 0;
    for (int w = 0; w < kWarps; ++w) {
      before_gt += w < warp ? warp_gt[w] : 0;
      before_eq += w < warp ? warp_eq[w] : 0;
      total_gt += warp_gt[w];
      total_eq += warp_eq[w];
    }
    const unsigned below = (1u << lane) - 1u;
    const auto pair =
        (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
    if (is_gt) cand[gt_base + before_gt + __popc(ballot_gt & below)] = pair;
    const int rank = eq_base + before_eq + __popc(ballot_eq & below);
    if (is_eq && rank < need) cand[gt + rank] = pair;
    gt_base += total_gt;
    eq_base += total_eq;
    __syncthreads();  // warp counts are rewritten by the next tile
  }

  // 4. Bitonic sort, descending, of the next power of two >= k entries.
  int n2 = 1;
  while (n2 < k) n2 <<= 1;
  for (int size = 2; size <= n2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < n2; i += kThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const unsigned long long a = cand[i], b = cand[j];
          const bool descending = (i & size) == 0;
          if (descending ? a < b : a > b) {
            cand[i] = b;
            cand[j] = a;
          }
        }
      }
      __syncthreads();
    }
  }

  const size_t out = static_cast<size_t>(blockIdx.x) * k;
  for (int j = tid; j < k; j += kThreads) {
    const int32_t id = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(cand[j]));
    p.ids[out + j] = id;
    p.values[out + j] = Clean(x[id]);
  }
  if (tid == 0) {
    p.sum_exp[blockIdx.x] = sum;
    p.sum_exp_scaled[blockIdx.x] = sum_scaled;
  }
}

}  // namespace

void LaunchLogitsTopK(const LogitsTopKParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  LogitsTopKKernel<<<p.rows, kThreads, 0, stream>>>(p);
  TQ_CUDA_CHECK_LAUNCH();
}

}  // namespace tq::kernels::cuda
