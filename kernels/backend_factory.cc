#include "kernels/backend_factory.h"

#include <stdexcept>
#include <string>

#if defined(TQ_WITH_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#endif

namespace tq::kernels {

bool ParseDeviceKind(std::string_view name, DeviceKind* out) {
  if (name == "auto") {
    *out = DeviceKind::kAuto;
  } else if (name == "cpu") {
    *out = DeviceKind::kCpu;
  } else if (name == "cuda") {
    *out = DeviceKind::kCuda;
  } else {
    return false;
  }
  return true;
}

bool ResolvesToCuda(DeviceKind kind) {
  if (kind == DeviceKind::kCuda) return true;
#if defined(TQ_WITH_CUDA)
  return kind == DeviceKind::kAuto && cuda::DeviceCount() > 0;
#else
  return false;
#endif
}

void CheckDeviceAvailable(DeviceKind kind) {
  if (kind != DeviceKind::kCuda) return;
#if defined(TQ_WITH_CUDA)
  std::string why;
  if (cuda::DeviceCount(&why) == 0) {
    throw std::runtime_error("--device cuda: no CUDA device (" + why + ")");
  }
#else
  throw std::runtime_error(
      "--device cuda: this build has no CUDA backend (configured with TQ_CUDA=OFF)");
#endif
}

std::unique_ptr<Backend> CreateBackend(DeviceKind kind, int num_threads, std::string* why_cpu) {
  if (why_cpu) why_cpu->clear();
  if (kind == DeviceKind::kCpu) return CreateCpuBackend(num_threads);
  CheckDeviceAvailable(kind);
#if defined(TQ_WITH_CUDA)
  std::string why;
  if (cuda::DeviceCount(&why) > 0) return CreateCudaBackend(0);
  if (why_cpu) *why_cpu = "--device auto: no CUDA device (" + why + "); running on the CPU";
#else
  if (why_cpu) *why_cpu = "--device auto: built without CUDA (TQ_CUDA=OFF); running on the CPU";
#endif
  return CreateCpuBackend(num_threads);
}

int CudaDeviceCount(std::string* why) {
#if defined(TQ_WITH_CUDA)
  return cuda::DeviceCount(why);
#else
  if (why) *why = "built without CUDA (TQ_CUDA=OFF)";
  return 0;
#endif
}

std::unique_ptr<Backend> CreateCudaBackendOn(int device) {
#if defined(TQ_WITH_CUDA)
  try {
    return CreateCudaBackend(device);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("--device cuda: cannot use CUDA device " + std::to_string(device) +
                             ": " + e.what());
  }
#else
  throw std::runtime_error("--device cuda: this build has no CUDA backend (device " +
                           std::to_string(device) + "; configured with TQ_CUDA=OFF)");
#endif
}

int CudaDeviceOf(const Backend& backend) {
#if defined(TQ_WITH_CUDA)
  return CudaBackendDevice(backend);
#else
  (void)backend;
  return -1;
#endif
}

void* CudaStreamOf(Backend& backend) {
#if defined(TQ_WITH_CUDA)
  return CudaBackendStream(backend);
#else
  (void)backend;
  return nullptr;
#endif
}

bool QueryDeviceMemory(const Backend& backend, DeviceMemoryInfo* out) {
  const int device = CudaDeviceOf(backend);
  return device >= 0 && QueryCudaDeviceMemory(device, out);
}

bool QueryCudaDeviceMemory(int device, DeviceMemoryInfo* out) {
#if defined(TQ_WITH_CUDA)
  return cuda::DeviceMemory(device, &out->free_bytes, &out->total_bytes);
#else
  (void)device;
  (void)out;
  return false;
#endif
}

}  // namespace tq::kernels
