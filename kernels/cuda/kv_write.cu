// KV write: encodes each token's K and V head vectors into their slot of the
// paged pool in every KvDtype, byte for byte as the CPU reference
// (kernels/cpu/kv_codec.cc EncodeRecord; docs/kv-cache.md). One block per
// (token, KV head): warp 0 writes the key record, warp 1 the value record.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/warp_ops.cuh"

namespace tq::kernels::cuda {
namespace {

struct KvWriteArgs {
  const float* k;
  const float* v;
  const int32_t* slot_mapping;
  const int32_t* positions;
  uint8_t* kpool;
  uint8_t* vpool;
  KvPoolArgs pool;
};

// Asymmetric per-vector integer codes (EncodeInt): x ≈ scale·q + zero with
// fp16 scale and zero rounded before q is chosen.
template <int VPL>
__device__ void EncodeInt(const float (&x)[VPL], int d, int bits, uint8_t* code, uint8_t* param) {
  const int lane = LaneId();
  float lo = INFINITY, hi = -INFINITY;
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    if (lane + 32 * r < d) {
      lo = fminf(lo, x[r]);
      hi = fmaxf(hi, x[r]);
    }
  }
  lo = WarpMin(lo);
  hi = WarpMax(hi);
  const float levels = static_cast<float>((1 << bits) - 1);
  const float zero = __half2float(__float2half_rn(lo));
  float scale = __half2float(__float2half_rn((hi - zero) / levels));
  if (!(scale > 0.0f)) scale = 1.0f;
  if (lane == 0) {
    StoreHalfBytes(param, scale);
    StoreHalfBytes(param + 2, zero);
  }
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    const int i = lane + 32 * r;
    const float q = fminf(fmaxf(rintf((x[r] - zero) / scale), 0.0f), levels);
    const uint32_t u = i < d ? static_cast<uint32_t>(q) : 0u;
    if (bits == 8) {
      if (i < d) code[i] = static_cast<uint8_t>(u);
    } else {
      // Element 2j in the low nibble, 2j + 1 in the high one; i and i + 1 sit
      // in neighbouring lanes (32 is even, so pairs never straddle r).
      const uint32_t next = __shfl_down_sync(kFullMask, u, 1);
      if ((i & 1) == 0 && i < d) {
        code[i / 2] = static_cast<uint8_t>(u | ((i + 1 < d ? next : 0u) << 4));
      }
    }
  }
}

// tq (TurboQuant-style) record: norm, randomized Hadamard rotation of the unit
// vector, Lloyd–Max indices as bit-planes, fp16 norm / |ĉ|.
template <int VPL>
__device__ void EncodeTq(float (&x)[VPL], int d, int bits, const float* boundaries,
                         const float* centroids, const float* signs, uint8_t* code,
                         uint8_t* param) {
  const int lane = LaneId();
  double sum_sq = 0.0;
#pragma unroll
  for (int r = 0; r < VPL; ++r) sum_sq += static_cast<double>(x[r]) * x[r];
  sum_sq = WarpSumDouble(sum_sq);
  const float norm = static_cast<float>(sqrt(sum_sq));
  const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
  const float inv_sqrt_d = static_cast<float>(1.0 / sqrt(static_cast<double>(d)));
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    const int i = lane + 32 * r;
    x[r] = i < d ? (x[r] * inv) * signs[i] : 0.0f;
  }
  WarpWalshHadamard<VPL>(x, d);
  const int levels = 1 << bits;
  uint32_t idx[VPL];
  double c2 = 0.0;
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    const int i = lane + 32 * r;
    const float y = x[r] * inv_sqrt_d;
    uint32_t q = 0;
    for (int b = 0; b < levels - 1; ++b) q += y >= boundaries[b];
    idx[r] = i < d ? q : 0u;
    if (i < d) c2 += static_cast<double>(centroids[q]) * centroids[q];
  }
  c2 = WarpSumDouble(c2);
  // Bit-planes: a ballot over the 32 lanes of run r is word p of that run.
  const int runs = d >> 5;
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    if (32 * r >= d) break;
    for (int p = 0; p < bits; ++p) {
      const uint32_t word = __ballot_sync(kFullMask, (idx[r] >> p) & 1u);
      if (r < runs) {
        if (lane < 4) code[4 * bits * r + 4 * p + lane] = static_cast<uint8_t>(word >> (8 * lane));
      } else {
        const int tail_bytes = ((d - 32 * runs) + 7) >> 3;
        if (lane < tail_bytes) {
          code[4 * bits * runs + p * tail_bytes + lane] = static_cast<uint8_t>(word >> (8 * lane));
        }
      }
    }
  }
  if (lane == 0) {
    const float stored = c2 > 0.0 ? static_cast<float>(static_cast<double>(norm) / sqrt(c2)) : 0.0f;
    StoreHalfBytes(param, stored);
  }
}

template <int VPL>
__global__ void KvWriteKernel(KvWriteArgs a) {
  const int t = blockIdx.x;
  const int head = blockIdx.y;
  const int warp = threadIdx.x >> 5;
  const int lane = LaneId();
  const int64_t slot = a.slot_mapping[t];
  if (slot < 0) return;
  const bool key = warp == 0;
  const int d = a.pool.head_dim;
  const int64_t row = static_cast<int64_t>(gridDim.y) * d;
  const float* src = (key ? a.k : a.v) + t * row + static_cast<int64_t>(head) * d;
  float x[VPL];
#pragma unroll
  for (int r = 0; r < VPL; ++r) {
    const int i = lane + 32 * r;
    x[r] = i < d ? src[i] : 0.0f;
  }
  // Attention sink: positions < sink_tokens are also kept exact (fp32).
  if (a.pool.sink_k != nullptr && a.positions != nullptr && a.positions[t] < a.pool.sink_tokens) {
    const PoolShape& s = a.pool.kshape;
    float* sink = (key ? a.pool.sink_k : a.pool.sink_v) +
                  ((slot / s.block_size) * a.pool.sink_tokens + a.positions[t]) * row +
                  static_cast<int64_t>(head) * d;
#pragma unroll
    for (int r = 0; r < VPL; ++r) {
      if (lane + 32 * r < d) sink[lane + 32 * r] = x[r];
    }
  }
  const PoolShape& shape = key ? a.pool.kshape : a.pool.vshape;
  uint8_t* pool = key ? a.kpool : a.vpool;
  uint8_t* code = pool + CodeOffset(shape, slot, head);
  uint8_t* param = pool + ParamOffset(shape, slot, head);
  switch (a.pool.dtype) {
    case KvDtype::kF32:
#pragma unroll
      for (int r = 0; r < VPL; ++r) {
        if (lane + 32 * r < d) reinterpret_cast<float*>(code)[lane + 32 * r] = x[r];
      }
      return;
    case KvDtype::kF16:
    case KvDtype::kBF16:
#pragma unroll
      for (int r = 0; r < VPL; ++r) {
        if (lane + 32 * r >= d) continue;
        const uint16_t h = a.pool.dtype == KvDtype::kF16
                               ? __half_as_ushort(__float2half_rn(x[r]))
                               : __bfloat16_as_ushort(__float2bfloat16_rn(x[r]));
        reinterpret_cast<uint16_t*>(code)[lane + 32 * r] = h;
      }
      return;
    case KvDtype::kInt8:
      EncodeInt<VPL>(x, d, 8, code, param);
      return;
    case KvDtype::kInt4:
      EncodeInt<VPL>(x, d, 4, code, param);
      return;
    case KvDtype::kTq3:
    case KvDtype::kTq4:
    case KvDtype::kTqK3V2:  // refused by CudaBackend::CheckKvLimits before any launch
      break;
  }
  if (key) {  // per-channel normalization of the pre-RoPE key (KVQuant)
#pragma unroll
    for (int r = 0; r < VPL; ++r) {
      const int i = lane + 32 * r;
      if (i >= d) continue;
      const int64_t c = static_cast<int64_t>(head) * d + i;
      if (a.pool.tq.k_mean) x[r] -= a.pool.tq.k_mean[c];
      if (a.pool.tq.k_scale) x[r] /= a.pool.tq.k_scale[c];
    }
  }
  EncodeTq<VPL>(x, d, key ? a.pool.key_bits : a.pool.value_bits,
                key ? a.pool.tq.k_boundaries : a.pool.tq.v_boundaries,
                key ? a.pool.tq.k_centroids : a.pool.tq.v_centroids, a.pool.tq.signs, code, param);
}

}  // namespace

void LaunchKvWrite(const KvWriteParams& p, const TqCodecArrays* tq, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const KvLayout& l = p.cache.layout;
  KvWriteArgs a{};
  a.k = p.k;
  a.v = p.v;
  a.slot_mapping = p.slot_mapping;
  a.positions = p.positions;
  a.kpool = static_cast<uint8_t*>(p.cache.k);
  a.vpool = static_cast<uint8_t*>(p.cache.v);
  a.pool = MakeKvPoolArgs(p.cache, tq);
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(l.num_kv_heads));
  DispatchValuesPerLane(l.head_dim, [&](auto vpl) {
    KvWriteKernel<decltype(vpl)::value><<<grid, 64, 0, stream>>>(a);
  });
  TQ_CUDA_CHECK_LAUNCH();
}

}  // namespace tq::kernels::cuda
