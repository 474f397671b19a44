#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/cuda/device_info.h"

namespace tq::kernels::cuda {

int DeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error for later calls
    return 0;
  }
  return count;
}

std::string DeviceDescription(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  char gib[32];
  std::snprintf(gib, sizeof(gib), "%.0f", static_cast<double>(prop.totalGlobalMem) / (1u << 30));
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + gib + " GiB)";
}

}  // namespace tq::kernels::cuda

namespace tq::kernels::cuda {

bool DeviceMemory(int index, size_t* free_bytes, size_t* total_bytes) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(index) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const cudaError_t err = cudaMemGetInfo(free_bytes, total_bytes);
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

}  // namespace tq::kernels::cuda
