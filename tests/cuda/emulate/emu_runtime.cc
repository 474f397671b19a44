// The CUDA runtime calls the emulated tests make themselves
// (tests/cuda/test_quant_gemm.cc: allocation, copies, synchronization), on
// host memory: the emulator's device memory is host memory and every kernel
// has finished when its launch returns. Linked instead of libcudart.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::malloc(bytes > 0 ? bytes : 1);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  return cudaSuccess;
}
const char* cudaGetErrorString(cudaError_t) {
  return "emulated CUDA error";
}
}
