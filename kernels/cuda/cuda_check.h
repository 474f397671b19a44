// Error checks for CUDA runtime and cuBLAS calls (host code): a failed call
// throws std::runtime_error naming the call, the file and line, and the
// runtime's message, so a bad launch surfaces as a clear error, never as a
// silent wrong result.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace tq::kernels::cuda {

[[noreturn]] inline void ThrowCudaError(cudaError_t err, const char* what, const char* file,
                                        int line) {
  throw std::runtime_error(std::string("cuda: ") + what + " failed at " + file + ":" +
                           std::to_string(line) + ": " + cudaGetErrorString(err));
}

[[noreturn]] inline void ThrowCublasError(cublasStatus_t st, const char* what, const char* file,
                                          int line) {
  throw std::runtime_error(std::string("cublas: ") + what + " failed at " + file + ":" +
                           std::to_string(line) + ": status " +
                           std::to_string(static_cast<int>(st)));
}

}  // namespace tq::kernels::cuda

#define TQ_CUDA_CHECK(call)                                                    \
  do {                                                                         \
    const cudaError_t tq_err_ = (call);                                        \
    if (tq_err_ != cudaSuccess)                                                \
      ::tq::kernels::cuda::ThrowCudaError(tq_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors (too many threads, too
// much shared memory) are reported by cudaGetLastError.
#define TQ_CUDA_CHECK_LAUNCH() TQ_CUDA_CHECK(cudaGetLastError())

#define TQ_CUBLAS_CHECK(call)                                                   \
  do {                                                                          \
    const cublasStatus_t tq_st_ = (call);                                       \
    if (tq_st_ != CUBLAS_STATUS_SUCCESS)                                        \
      ::tq::kernels::cuda::ThrowCublasError(tq_st_, #call, __FILE__, __LINE__); \
  } while (0)
