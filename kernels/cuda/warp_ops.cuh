// Device helpers shared by the KV write and attention kernels. A head vector
// of head_dim d lives in one warp: lane l holds coordinates i = l + 32·r for
// r < VPL (values per lane), so a coalesced row load is one instruction per r
// and the Walsh–Hadamard butterflies for h < 32 are lane shuffles, those for
// h >= 32 register pairs inside a lane.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kv_layout.h"

namespace tq::kernels::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ int LaneId() {
  return static_cast<int>(threadIdx.x & 31u);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ double WarpSumDouble(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
__device__ __forceinline__ float WarpMin(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

/// Unnormalized fast Walsh–Hadamard transform of the warp's vector, d a power
/// of two with d == 32·VPL (d >= 32) or VPL == 1 (d <= 32). Stages run in the
/// order h = 1, 2, ..., d/2 with the butterflies (a + b, a − b) of
/// FastWalshHadamard (kernels/tq/rotation.h), so each element is computed by
/// the same float operations as on the CPU.
template <int VPL>
__device__ __forceinline__ void WarpWalshHadamard(float (&x)[VPL], int d) {
  const int lane = LaneId();
  const int lane_stages = d < 32 ? d : 32;
  for (int h = 1; h < lane_stages; h <<= 1) {
#pragma unroll
    for (int r = 0; r < VPL; ++r) {
      const float other = __shfl_xor_sync(kFullMask, x[r], h);
      x[r] = (lane & h) ? other - x[r] : x[r] + other;
    }
  }
#pragma unroll
  for (int hr = 1; hr < VPL; hr <<= 1) {
#pragma unroll
    for (int r = 0; r < VPL; ++r) {
      if ((r & hr) == 0) {
        const float a = x[r];
        const float b = x[r + hr];
        x[r] = a + b;
        x[r + hr] = a - b;
      }
    }
  }
}

/// In-place RoPE (HF rotate_half) of the warp's vector at table row `pos`:
/// (x_i, x_{i+d/2}) -> (x_i c − x_{i+d/2} s, x_{i+d/2} c + x_i s), c/s of
/// coordinate i mod d/2. d a power of two laid out as in WarpWalshHadamard.
template <int VPL>
__device__ __forceinline__ void WarpRope(float (&x)[VPL], int d, const float* cos_row,
                                         const float* sin_row) {
  const int lane = LaneId();
  const int half = d / 2;
  if constexpr (VPL >= 2) {  // partner in the same lane, register r ± VPL/2
#pragma unroll
    for (int r = 0; r < VPL / 2; ++r) {
      const int i = lane + 32 * r;
      const float c = cos_row[i];
      const float s = sin_row[i];
      const float x1 = x[r];
      const float x2 = x[r + VPL / 2];
      x[r] = x1 * c - x2 * s;
      x[r + VPL / 2] = x2 * c + x1 * s;
    }
  } else {  // d <= 32: partner lane ^ half
    const float other = __shfl_xor_sync(kFullMask, x[0], half > 0 ? half : 1);
    if (lane < d && half > 0) {
      const int k = lane & (half - 1);
      const float c = cos_row[k];
      const float s = sin_row[k];
      x[0] = lane < half ? x[0] * c - other * s : x[0] * c + other * s;
    }
  }
}

/// Index of coordinate i from tq bit-planes (kernels/tq/bitplanes.h layout),
/// read byte by byte: records have no alignment guarantee.
__device__ __forceinline__ uint32_t PlaneIndex(const uint8_t* code, int d, int bits, int i) {
  const int runs = d >> 5;
  const uint8_t* src;
  int stride;
  int bit;
  if ((i >> 5) < runs) {
    src = code + 4 * bits * (i >> 5) + ((i & 31) >> 3);
    stride = 4;
    bit = i & 7;
  } else {
    const int rem = d - 32 * runs;
    const int j = i - 32 * runs;
    src = code + 4 * bits * runs + (j >> 3);
    stride = (rem + 7) >> 3;
    bit = j & 7;
  }
  uint32_t v = 0;
  for (int p = 0; p < bits; ++p) v |= ((static_cast<uint32_t>(src[p * stride]) >> bit) & 1u) << p;
  return v;
}

/// Little-endian fp16 at an unaligned address.
__device__ __forceinline__ float LoadHalfBytes(const uint8_t* p) {
  const uint16_t bits = static_cast<uint16_t>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ void StoreHalfBytes(uint8_t* p, float v) {
  const uint16_t bits = __half_as_ushort(__float2half_rn(v));
  p[0] = static_cast<uint8_t>(bits & 0xffu);
  p[1] = static_cast<uint8_t>(bits >> 8);
}
__device__ __forceinline__ float Bf16BitsToFloat(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

/// Byte address of the codes / parameters of (slot, head) in a pool
/// (kernels/kv_layout.h RecordAddress).
struct PoolShape {
  int block_size;
  int num_kv_heads;
  uint32_t code_bytes;
  uint32_t param_bytes;
};
__device__ __forceinline__ size_t RecordTile(const PoolShape& s, int64_t slot, int head) {
  const int64_t block = slot / s.block_size;
  return (static_cast<size_t>(block) * s.num_kv_heads + head) * static_cast<size_t>(s.block_size) *
         (s.code_bytes + s.param_bytes);
}
__device__ __forceinline__ size_t CodeOffset(const PoolShape& s, int64_t slot, int head) {
  return RecordTile(s, slot, head) + static_cast<size_t>(slot % s.block_size) * s.code_bytes;
}
__device__ __forceinline__ size_t ParamOffset(const PoolShape& s, int64_t slot, int head) {
  return RecordTile(s, slot, head) + static_cast<size_t>(s.block_size) * s.code_bytes +
         static_cast<size_t>(slot % s.block_size) * s.param_bytes;
}

/// What the KV kernels need to know about one layer's pools besides their
/// addresses (passed by value to the kernels).
struct KvPoolArgs {
  PoolShape kshape;
  PoolShape vshape;
  KvDtype dtype;
  int32_t head_dim;
  int32_t key_bits;    // tq formats; 0 otherwise
  int32_t value_bits;  // tq formats; 0 otherwise
  TqCodecArrays tq;    // tq formats; empty otherwise
  int32_t sink_tokens;
  float* sink_k;  // [num_blocks][sink_tokens][num_kv_heads][head_dim] or null
  float* sink_v;
};

inline KvPoolArgs MakeKvPoolArgs(const KvLayerView& cache, const TqCodecArrays* tq) {
  const KvLayout& l = cache.layout;
  const KvRecord kr = l.KRecord();
  const KvRecord vr = l.VRecord();
  KvPoolArgs a{};
  a.kshape = {l.block_size, l.num_kv_heads, kr.code_bytes, kr.param_bytes};
  a.vshape = {l.block_size, l.num_kv_heads, vr.code_bytes, vr.param_bytes};
  a.dtype = l.dtype;
  a.head_dim = l.head_dim;
  a.key_bits = TqKeyBits(l.dtype);
  a.value_bits = TqValueBits(l.dtype);
  if (tq) a.tq = *tq;
  a.sink_tokens = cache.sink_tokens;
  a.sink_k = cache.sink_k;
  a.sink_v = cache.sink_v;
  return a;
}

/// Calls f(std::integral_constant<int, VPL>) with the values per lane that
/// cover head_dim (1, 2, 4 or 8; head_dim <= kMaxHeadDim is checked before).
template <typename F>
void DispatchValuesPerLane(int32_t head_dim, F&& f) {
  const int32_t vpl = (head_dim + 31) / 32;
  if (vpl <= 1) {
    f(std::integral_constant<int, 1>{});
  } else if (vpl <= 2) {
    f(std::integral_constant<int, 2>{});
  } else if (vpl <= 4) {
    f(std::integral_constant<int, 4>{});
  } else {
    f(std::integral_constant<int, 8>{});
  }
}

}  // namespace tq::kernels::cuda
