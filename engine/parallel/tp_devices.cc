#include "engine/parallel/tp_devices.h"

#include "engine/common/error.h"

namespace tq {

TpDevices ChooseTpDevices(kernels::DeviceKind kind, int world_size, int cuda_devices,
                          bool nccl_built, const std::string& why_no_cuda) {
  TpDevices out;
  if (kind == kernels::DeviceKind::kCpu) return out;
  const std::string flag = "--tensor-parallel-size " + std::to_string(world_size);
  std::string missing;
  if (cuda_devices < world_size) {
    missing = flag + " needs " + std::to_string(world_size) + " CUDA devices, found " +
              std::to_string(cuda_devices);
    if (cuda_devices == 0 && !why_no_cuda.empty()) missing += " (" + why_no_cuda + ")";
  } else if (!nccl_built) {
    missing = flag +
              " on CUDA needs NCCL, and this build has none (nccl.h/libnccl not found "
              "when configured)";
  }
  if (kind == kernels::DeviceKind::kCuda) {
    if (!missing.empty()) throw Error("--device cuda: " + missing);
    out.cuda = true;
    return out;
  }
  out.cuda = missing.empty();
  if (!out.cuda) out.note = "--device auto: " + missing + "; running on the CPU";
  return out;
}

}  // namespace tq
