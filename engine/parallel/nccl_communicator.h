// The NCCL Communicator: one rank per GPU of this process (built with TQ_CUDA).
#pragma once

#include <memory>
#include <vector>

#include "engine/parallel/communicator.h"

namespace tq {

/// Creates one Communicator per device of this process with ncclCommInitAll
/// (element r is rank r on devices[r]; NCCL user guide, "Creating a
/// communicator: ncclCommInitAll", which wraps per-device init in
/// ncclGroupStart/ncclGroupEnd). Each collective makes its device current,
/// runs on the rank's own CUDA stream and synchronises it before returning,
/// so it is blocking as the interface requires; buffers are device memory of
/// the rank's GPU and the caller's kernels writing them must have finished
/// (the backend's ops are synchronous from the caller's view). Abort() calls
/// ncclCommAbort so ranks stuck in a collective return.
///
/// Thread ownership: rank r's communicator is driven by rank r's thread
/// (concurrent calls on the different communicators of one clique are how
/// NCCL is meant to be used from one thread per GPU). Throws tq::Error with
/// NCCL's or CUDA's message on failure (e.g. a device index that does not exist).
std::vector<std::unique_ptr<Communicator>> CreateNcclCommunicators(const std::vector<int>& devices);

/// ncclGetVersion, e.g. 22805 for 2.28.5.
int NcclVersion();

}  // namespace tq
