// The in-process Communicator: the ranks are threads of one process sharing
// host memory, so tensor parallelism runs (and is tested) on the CPU backend.
#pragma once

#include <memory>
#include <vector>

#include "engine/parallel/communicator.h"

namespace tq {

/// Creates the world_size endpoints of one in-process group (element r is
/// rank r); hand each to its rank's thread. The ranks exchange pointers to
/// their host buffers and copy between them, synchronised by a barrier
/// (spinning briefly, then sleeping on a futex).
///
/// Deterministic: an all-reduce adds the ranks' values in rank order
/// 0, 1, ..., world_size-1 for every element (fp16/bf16 in fp32, rounded
/// once), whichever thread computes it, so results never depend on thread
/// timing. Each all-reduce costs two barriers: rank r sums elements
/// [r*count/W, (r+1)*count/W) of all ranks into its scratch, then every rank
/// copies all scratch chunks into its buffer (a reduce-scatter + all-gather).
/// Throws std::invalid_argument for world_size < 1.
std::vector<std::unique_ptr<Communicator>> CreateCpuCommunicators(int world_size);

}  // namespace tq
