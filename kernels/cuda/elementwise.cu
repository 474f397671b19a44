// Row-wise and elementwise kernels: embedding gather, RMSNorm, RoPE, SwiGLU and
// the fp32 -> fp16/bf16 activation conversion in front of 16-bit GEMMs. Each
// follows the CPU reference (kernels/cpu/cpu_backend.cc) operation by
// operation where that is cheap (double accumulation in RMSNorm, double angles
// in RoPE), so results differ from the CPU only by FMA contraction and expf.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace tq::kernels::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned GridFor(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  // Grid-stride loops below cover the rest; 2^20 blocks saturate any GPU.
  return static_cast<unsigned>(blocks < (1 << 20) ? (blocks > 0 ? blocks : 1) : (1 << 20));
}

__global__ void EmbeddingKernel(const int32_t* ids, const void* table, float* out,
                                int32_t num_tokens, int32_t vocab, int32_t hidden,
                                WeightDtype dtype) {
  const int64_t n = static_cast<int64_t>(num_tokens) * hidden;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / hidden;
    const int64_t i = e % hidden;
    const int32_t id = ids[t];
    if (id < 0 || id >= vocab) {
      out[e] = __int_as_float(0x7fc00000);  // NaN: the engine checks ids before this
      continue;
    }
    const int64_t at = static_cast<int64_t>(id) * hidden + i;
    switch (dtype) {
      case WeightDtype::kF16:
        out[e] = __half2float(static_cast<const __half*>(table)[at]);
        break;
      case WeightDtype::kBF16:
        out[e] = __bfloat162float(static_cast<const __nv_bfloat16*>(table)[at]);
        break;
      default:
        out[e] = static_cast<const float*>(table)[at];
    }
  }
}

// One block per row; sum of squares in double as the CPU reference.
__global__ void RmsNormKernel(const float* x, const float* weight, float* out, int32_t dim,
                              float eps) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* outr = out + static_cast<int64_t>(blockIdx.x) * dim;
  double sum = 0.0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) sum += static_cast<double>(xr[i]) * xr[i];
  __shared__ double partial[kThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  __shared__ float inv;
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += partial[w];
    inv = 1.0f / sqrtf(static_cast<float>(total / dim) + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < dim; i += blockDim.x) outr[i] = xr[i] * inv * weight[i];
}

// One thread per (token, frequency): angle in double as the CPU reference
// (pos · inv_freq reaches 1e5 rad at long contexts).
__global__ void RopeKernel(float* x, const int32_t* positions, const float* inv_freq,
                           int32_t num_tokens, int32_t num_heads, int32_t head_dim,
                           float attention_scaling) {
  const int32_t half = head_dim / 2;
  const int64_t n = static_cast<int64_t>(num_tokens) * half;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / half;
    const int32_t i = static_cast<int32_t>(e % half);
    const double angle = static_cast<double>(static_cast<float>(positions[t])) * inv_freq[i];
    double sd, cd;
    sincos(angle, &sd, &cd);
    const float c = static_cast<float>(cd) * attention_scaling;
    const float s = static_cast<float>(sd) * attention_scaling;
    for (int32_t h = 0; h < num_heads; ++h) {
      float* head = x + (t * num_heads + h) * head_dim;
      const float x1 = head[i];
      const float x2 = head[i + half];
      head[i] = x1 * c - x2 * s;
      head[i + half] = x2 * c + x1 * s;
    }
  }
}

__global__ void SiluMulKernel(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[e];
    out[e] = g / (1.0f + expf(-g)) * up[e];
  }
}

__global__ void ToHalfKernel(const float* src, uint16_t* dst, int64_t n, bool to_bf16) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[e] = to_bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(src[e]))
                     : __half_as_ushort(__float2half_rn(src[e]));
  }
}

__global__ void FromHalfKernel(const uint16_t* src, float* dst, int64_t n, bool accumulate) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = __half2float(__ushort_as_half(src[e]));
    dst[e] = accumulate ? dst[e] + v : v;
  }
}

__global__ void AddBiasKernel(float* out, const float* bias, int64_t n, int32_t cols) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[e] += bias[e % cols];
  }
}

}  // namespace

void LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(p.num_tokens) * p.hidden;
  if (n == 0) return;
  EmbeddingKernel<<<GridFor(n), kThreads, 0, stream>>>(p.ids, p.table, p.out, p.num_tokens, p.vocab,
                                                       p.hidden, p.table_dtype);
  TQ_CUDA_CHECK_LAUNCH();
}

void LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  // rows <= 2^31 - 1 is the grid's x limit; checked by CheckRmsNorm (int32_t).
  RmsNormKernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p.x, p.weight, p.out, p.dim,
                                                                        p.eps);
  TQ_CUDA_CHECK_LAUNCH();
}

void LaunchRope(const RopeParams& p, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(p.num_tokens) * (p.head_dim / 2);
  if (n == 0) return;
  RopeKernel<<<GridFor(n), kThreads, 0, stream>>>(p.x, p.positions, p.inv_freq, p.num_tokens,
                                                  p.num_heads, p.head_dim, p.attention_scaling);
  TQ_CUDA_CHECK_LAUNCH();
}

void LaunchSiluMul(const SiluMulParams& p, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(p.rows) * p.dim;
  if (n == 0) return;
  SiluMulKernel<<<GridFor(n), kThreads, 0, stream>>>(p.gate, p.up, p.out, n);
  TQ_CUDA_CHECK_LAUNCH();
}

void LaunchToHalf(const float* src, uint16_t* dst, int64_t n, bool to_bf16, cudaStream_t stream) {
  if (n == 0) return;
  ToHalfKernel<<<GridFor(n), kThreads, 0, stream>>>(src, dst, n, to_bf16);
  TQ_CUDA_CHECK_LAUNCH();
}

void LaunchFromHalf(const uint16_t* src, float* dst, int64_t n, bool accumulate,
                    cudaStream_t stream) {
  if (n == 0) return;
  FromHalfKernel<<<GridFor(n), kThreads, 0, stream>>>(src, dst, n, accumulate);
  TQ_CUDA_CHECK_LAUNCH();
}

void LaunchAddBias(float* out, const float* bias, int32_t rows, int32_t cols, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (n == 0) return;
  AddBiasKernel<<<GridFor(n), kThreads, 0, stream>>>(out, bias, n, cols);
  TQ_CUDA_CHECK_LAUNCH();
}

}  // namespace tq::kernels::cuda
