// Backend selection (--device cpu|cuda|auto) and device memory queries, for
// builds with and without CUDA (TQ_CUDA=OFF builds answer "no CUDA").
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/backend.h"

namespace tq::kernels {

enum class DeviceKind : uint8_t { kAuto, kCpu, kCuda };

/// Parses "auto", "cpu" or "cuda"; false otherwise.
bool ParseDeviceKind(std::string_view name, DeviceKind* out);

/// Creates the backend for `kind`: kCpu -> CreateCpuBackend(num_threads);
/// kCuda -> the CUDA backend on device 0 (throws std::runtime_error naming
/// --device when the build has no CUDA or no device is present); kAuto -> CUDA
/// when built and a device is present, else the CPU backend with *why_cpu set
/// to one line saying why (left empty otherwise).
std::unique_ptr<Backend> CreateBackend(DeviceKind kind, int num_threads, std::string* why_cpu);

/// Throws the std::runtime_error CreateBackend(kind, ...) would throw for a
/// missing CUDA backend or device, without creating anything (serve checks
/// before it opens its ports); returns for kCpu and kAuto.
void CheckDeviceAvailable(DeviceKind kind);

/// Number of usable CUDA devices (0 without CUDA in the build, a driver or a
/// GPU; *why, when given, then says which). Any thread.
int CudaDeviceCount(std::string* why = nullptr);

/// The CUDA backend on device `device` (tensor-parallel rank r uses device r).
/// Throws std::runtime_error naming --device when the build has no CUDA or the
/// device cannot be initialized.
std::unique_ptr<Backend> CreateCudaBackendOn(int device);

/// The CUDA device index `backend` computes on; -1 for any other backend.
int CudaDeviceOf(const Backend& backend);

/// The cudaStream_t (as void*) a CUDA backend enqueues its ops on, for work
/// that must be ordered with them (NCCL collectives); nullptr for any other
/// backend.
void* CudaStreamOf(Backend& backend);

/// True when CreateBackend(kind) would pick the CUDA backend (kCuda, or
/// kAuto with CUDA built and a device present); for choosing defaults that
/// differ by device before the backend exists.
bool ResolvesToCuda(DeviceKind kind);

/// Memory of the device a backend computes on, in bytes.
struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
/// cudaMemGetInfo of the CUDA backend's device; false for the CPU backend
/// (host memory is reported by the server from /proc).
bool QueryDeviceMemory(const Backend& backend, DeviceMemoryInfo* out);
/// cudaMemGetInfo of CUDA device `device` (the whole device, other processes
/// included); false without CUDA, a driver or that device. Any thread.
bool QueryCudaDeviceMemory(int device, DeviceMemoryInfo* out);

}  // namespace tq::kernels
