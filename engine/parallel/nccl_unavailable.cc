// The NCCL communicator's functions in builds without NCCL (TQ_CUDA=OFF, or
// nccl.h / libnccl not found at configure time): tensor parallelism then runs
// on the CPU only, and asking for NCCL is a one-line error.
#include <string>

#include "engine/common/error.h"
#include "engine/parallel/nccl_communicator.h"

namespace tq {
namespace {

[[noreturn]] void NoNccl() {
  throw Error(
      "this build has no NCCL communicator (configured without TQ_CUDA or without "
      "nccl.h/libnccl); tensor parallelism on GPUs needs it");
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> CreateNcclCommunicators(const std::vector<int>&) {
  NoNccl();
}

std::vector<std::unique_ptr<Communicator>> CreateNcclCommunicators(const std::vector<int>&,
                                                                   const std::vector<void*>&) {
  NoNccl();
}

bool NcclBuilt() {
  return false;
}

int NcclVersion() {
  NoNccl();
}

}  // namespace tq
