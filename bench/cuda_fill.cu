// Device-side random fill for the CUDA benchmarks (weights, K/V, queries):
// a counter-based hash, so gigabytes are filled in milliseconds.
#include <cuda_runtime.h>

#include <cstdint>

namespace tq::bench {
namespace {

__global__ void FillKernel(float* dst, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9e3779b9u ^ seed ^ static_cast<uint32_t>(i >> 32);
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    dst[i] = lo + (hi - lo) * static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
  }
}

}  // namespace

/// dst[0..n) = uniform values in [lo, hi) (deterministic from seed), on `stream`.
void FillUniform(float* dst, int64_t n, uint32_t seed, float lo, float hi, cudaStream_t stream) {
  FillKernel<<<4096, 256, 0, stream>>>(dst, n, seed, lo, hi);
}

}  // namespace tq::bench
