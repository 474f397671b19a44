// Where the ranks of --tensor-parallel-size N run: N CUDA devices, or the CPU.
#pragma once

#include <string>

#include "kernels/backend_factory.h"

namespace tq {

/// The devices of a tensor-parallel group of world_size > 1 ranks.
struct TpDevices {
  bool cuda = false;  // rank r on CUDA device r (else every rank a CPU backend)
  std::string note;   // why --device auto runs on the CPU; "" otherwise
};

/// Chooses the ranks' devices from what the machine has (pure; the loader
/// passes kernels::CudaDeviceCount and NcclBuilt, tests pass any counts):
///   - `--device cpu`: the CPU.
///   - `--device cuda`: CUDA devices 0..world_size-1. Throws tq::Error when
///     fewer than world_size devices exist ("--tensor-parallel-size 4 needs 4
///     CUDA devices, found 1", with `why_no_cuda` when none) or the build has
///     no NCCL communicator.
///   - `--device auto`: CUDA when both hold, else the CPU with `note` saying
///     which one did not.
/// Devices are the CUDA runtime's indices (CUDA_VISIBLE_DEVICES selects them).
TpDevices ChooseTpDevices(kernels::DeviceKind kind, int world_size, int cuda_devices,
                          bool nccl_built, const std::string& why_no_cuda = "");

}  // namespace tq
