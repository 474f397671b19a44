// Weight-only int8/int4 GEMM kernels (see quant_gemm.h). Both kernels
// dequantize exactly as the CPU backend does, (float(code) - zero) * scale,
// and accumulate a·w in fp32; only the summation order differs.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/quant_gemm.h"

namespace tq::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kGemvRows = 8;                          // rows of a per GEMV warp
constexpr int kGemvWarps = 4;                         // output features per GEMV block
constexpr int kChunk = 8;                             // weights per lane per step in the GEMV
constexpr int kTileM = 64, kTileN = 64, kTileK = 16;  // tiled GEMM
constexpr int kGemmThreads = 256;                     // 16 x 16, each 4 x 4 outputs

__device__ __forceinline__ float HalfBits(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// Code of weight (o, i) from its row.
template <int kBits>
__device__ __forceinline__ int Code(const uint8_t* row, int64_t i) {
  if constexpr (kBits == 8) {
    return row[i];
  } else {
    const uint8_t b = row[i >> 1];
    return (i & 1) ? (b >> 4) : (b & 0x0f);
  }
}

template <int kBits>
__device__ __forceinline__ float Dequant(const QuantGemmParams& p, const uint8_t* row, int64_t o,
                                         int64_t i) {
  const int64_t q = o * (p.k / p.group_size) + i / p.group_size;
  const float zero = p.zeros ? HalfBits(p.zeros[q]) : static_cast<float>(1 << (kBits - 1));
  return (static_cast<float>(Code<kBits>(row, i)) - zero) * HalfBits(p.scales[q]);
}

// GEMV: one warp per output feature o, for up to kGemvRows rows of a. With
// kVec (k and group_size multiples of kChunk, 16-byte aligned rows) each lane
// reads kChunk weights at once (one 32-bit word of int4, 8 bytes of int8) and
// 8 fp16 activations per row as one 16-byte load; otherwise element by element.
template <int kBits, bool kVec>
__global__ void QuantGemvKernel(QuantGemmParams p) {
  const int lane = threadIdx.x % kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / kWarp;
  const int r0 = blockIdx.y * kGemvRows;
  if (o >= p.n) return;
  const int rows = min(kGemvRows, p.m - r0);
  const int64_t k = p.k;
  const uint8_t* row = p.weight + o * (kBits == 8 ? k : k / 2);
  float acc[kGemvRows] = {};
  if constexpr (kVec) {
    for (int64_t i = static_cast<int64_t>(lane) * kChunk; i < k; i += kWarp * kChunk) {
      int codes[kChunk];
      if constexpr (kBits == 4) {
        const uint32_t word = *reinterpret_cast<const uint32_t*>(row + i / 2);
#pragma unroll
        for (int j = 0; j < kChunk; ++j) codes[j] = (word >> (4 * j)) & 0x0f;
      } else {
        const uint2 bytes = *reinterpret_cast<const uint2*>(row + i);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          codes[j] = (bytes.x >> (8 * j)) & 0xff;
          codes[j + 4] = (bytes.y >> (8 * j)) & 0xff;
        }
      }
      const int64_t q = o * (k / p.group_size) + i / p.group_size;  // one group per chunk
      const float scale = HalfBits(p.scales[q]);
      const float zero = p.zeros ? HalfBits(p.zeros[q]) : static_cast<float>(1 << (kBits - 1));
      float w[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j) w[j] = (static_cast<float>(codes[j]) - zero) * scale;
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) {
        if (r >= rows) break;
        const uint4 raw = *reinterpret_cast<const uint4*>(p.a + (r0 + r) * k + i);
        const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
        for (int j = 0; j < kChunk / 2; ++j) {
          const float2 f = __half22float2(h[j]);
          acc[r] += f.x * w[2 * j] + f.y * w[2 * j + 1];
        }
      }
    }
  } else {
    for (int64_t i = lane; i < k; i += kWarp) {
      const float w = Dequant<kBits>(p, row, o, i);
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) {
        if (r >= rows) break;
        acc[r] += HalfBits(p.a[(r0 + r) * k + i]) * w;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) {
    float v = acc[r];
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
      v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0 && r < rows) {
      uint16_t* dst = p.out + static_cast<int64_t>(r0 + r) * p.n + o;
      if (p.accumulate) v += HalfBits(*dst);
      *dst = __half_as_ushort(__float2half_rn(v));
    }
  }
}

// Tiled GEMM: a block computes a kTileM x kTileN tile of out, stepping over k
// by kTileK: activations and dequantized weights go to shared memory as fp32,
// then each thread accumulates a 4 x 4 sub-tile. Out-of-range rows, columns
// and k are zero-filled.
template <int kBits>
__global__ void __launch_bounds__(kGemmThreads) QuantGemmKernel(QuantGemmParams p) {
  __shared__ float as[kTileK][kTileM + 4];
  __shared__ float ws[kTileK][kTileN + 4];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const int64_t k = p.k;
  const int64_t row_bytes = kBits == 8 ? k : k / 2;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    // 64 x 16 elements of each operand, 4 per thread; kk fastest, so a warp
    // reads two runs of 16 consecutive k for each of 16 rows.
    for (int e = tid; e < kTileM * kTileK; e += kGemmThreads) {
      const int kk = e % kTileK, mm = e / kTileK;
      const int64_t gi = k0 + kk;
      as[kk][mm] = (m0 + mm < p.m && gi < k) ? HalfBits(p.a[(m0 + mm) * k + gi]) : 0.0f;
      const int64_t o = n0 + mm;
      ws[kk][mm] = (o < p.n && gi < k) ? Dequant<kBits>(p, p.weight + o * row_bytes, o, gi) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float av[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = as[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) wv[j] = ws[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * wv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = m0 + ty * 4 + i;
    if (r >= p.m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = n0 + tx * 4 + j;
      if (c >= p.n) continue;
      uint16_t* dst = p.out + r * p.n + c;
      float v = acc[i][j];
      if (p.accumulate) v += HalfBits(*dst);
      *dst = __half_as_ushort(__float2half_rn(v));
    }
  }
}

bool Aligned(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

template <int kBits>
void Launch(const QuantGemmParams& p, cudaStream_t stream) {
  if (p.m <= kGemvRows) {
    const dim3 grid((p.n + kGemvWarps - 1) / kGemvWarps, (p.m + kGemvRows - 1) / kGemvRows);
    const bool vec = p.k % kChunk == 0 && p.group_size % kChunk == 0 && Aligned(p.a, 16) &&
                     Aligned(p.weight, kBits == 8 ? 8 : 4);
    if (vec) {
      QuantGemvKernel<kBits, true><<<grid, kGemvWarps * kWarp, 0, stream>>>(p);
    } else {
      QuantGemvKernel<kBits, false><<<grid, kGemvWarps * kWarp, 0, stream>>>(p);
    }
  } else {
    const dim3 grid((p.n + kTileN - 1) / kTileN, (p.m + kTileM - 1) / kTileM);
    QuantGemmKernel<kBits><<<grid, kGemmThreads, 0, stream>>>(p);
  }
}

}  // namespace

void ValidateQuantGemm(const QuantGemmParams& p) {
  const std::string where = "cuda QuantGemm: ";
  if (p.dtype != WeightDtype::kInt8 && p.dtype != WeightDtype::kInt4) {
    throw std::invalid_argument(where + "weight dtype must be int8 or int4");
  }
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) {
    throw std::invalid_argument(where + "m, n, k must be positive (got " + std::to_string(p.m) +
                                ", " + std::to_string(p.n) + ", " + std::to_string(p.k) + ")");
  }
  if (!p.a || !p.weight || !p.scales || !p.out) {
    throw std::invalid_argument(where +
                                std::string(!p.a        ? "a"
                                            : !p.weight ? "weight"
                                            : !p.scales ? "scales"
                                                        : "out") +
                                " is null");
  }
  if (p.group_size <= 0 || p.k % p.group_size != 0) {
    throw std::invalid_argument(where + "group_size " + std::to_string(p.group_size) +
                                " does not divide k " + std::to_string(p.k));
  }
  if (p.dtype == WeightDtype::kInt4 && p.group_size % 2 != 0) {
    throw std::invalid_argument(where + "int4 group_size " + std::to_string(p.group_size) +
                                " is odd (two codes per byte)");
  }
}

cudaError_t QuantGemm(const QuantGemmParams& p, cudaStream_t stream) {
  ValidateQuantGemm(p);
  if (p.dtype == WeightDtype::kInt8) {
    Launch<8>(p, stream);
  } else {
    Launch<4>(p, stream);
  }
  return cudaGetLastError();
}

}  // namespace tq::kernels::cuda
