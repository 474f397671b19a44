// CUDA device discovery (host API; safe to call without a GPU or driver).
#pragma once

#include <cstddef>
#include <string>

namespace tq::kernels::cuda {

/// Number of usable CUDA devices; 0 when there is no GPU or no driver (the
/// CUDA runtime's error is returned in *why when given).
int DeviceCount(std::string* why = nullptr);

/// "NVIDIA H200 (sm_90, 139 GiB)" for device `index`; "" when absent.
std::string DeviceDescription(int index);

/// Free and total memory of device `index` in bytes (cudaMemGetInfo: the
/// whole device, other processes included). False when absent.
bool DeviceMemory(int index, size_t* free_bytes, size_t* total_bytes);

}  // namespace tq::kernels::cuda
