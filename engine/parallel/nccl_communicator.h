// The NCCL Communicator: one rank per GPU of this process (built with TQ_CUDA
// and NCCL; other builds link nccl_unavailable.cc, whose functions throw).
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

/// As above, but rank r's collectives are enqueued on streams[r] (a
/// cudaStream_t of devices[r], passed as void*: the stream of rank r's CUDA
/// backend, kernels::CudaStreamOf), so each starts after every op the backend
/// enqueued before it — the partial sums it reads are complete — and the
/// stream is then synchronised before the call returns. The wait keeps the
/// collectives blocking and also means a rank's GPU never holds an NCCL
/// kernel while its thread runs other CUDA calls: calls that synchronise
/// implicitly (cudaFree, cudaMalloc in a workspace growth) while another
/// thread's NCCL kernel waits for its peers are a known way to hang NCCL in
/// one multi-GPU process. This is how tensor parallelism drives NCCL
/// (docs/parallelism.md, "On CUDA"); the streams are not owned and must
/// outlive the communicators' last collective. A null stream means one of the
/// communicator's own. Throws tq::Error when the sizes differ.
std::vector<std::unique_ptr<Communicator>> CreateNcclCommunicators(
    const std::vector<int>& devices, const std::vector<void*>& streams);

/// True when this build has the NCCL communicator (TQ_CUDA and NCCL found at
/// configure time); otherwise CreateNcclCommunicators and NcclVersion throw
/// tq::Error.
bool NcclBuilt();

/// ncclGetVersion, e.g. 22805 for 2.28.5.
int NcclVersion();

}  // namespace tq
