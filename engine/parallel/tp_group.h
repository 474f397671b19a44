// The ranks 1..N-1 of a tensor-parallel model in one process.
#pragma once

#include <memory>
#include <vector>

#include "engine/model/llama_model.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/rank_executor.h"
#include "kernels/backend.h"

namespace tq {

/// What a process holds for tensor parallelism besides rank 0's backend,
/// model and cache (which the runtime uses as for one rank): every rank's
/// Communicator, the other ranks' backends and model shards, and the rank
/// threads. Members are declared so that destruction runs threads, models,
/// backends, communicators (each outlives its users). Thread ownership: built
/// and destroyed by the loading thread; the shards are driven only from
/// their rank's thread through rank 0's LlamaModel::Forward.
struct TensorParallelGroup {
  std::vector<std::unique_ptr<Communicator>> comms;  // [world_size]
  // Ranks 1..N-1 (CPU, or CUDA device r). NCCL communicators enqueue on
  // these backends' streams without owning them.
  std::vector<std::unique_ptr<kernels::Backend>> backends;
  std::vector<std::unique_ptr<LlamaModel>> models;  // ranks 1..N-1
  std::unique_ptr<RankExecutor> executor;

  int world_size() const { return static_cast<int>(comms.size()); }
};

}  // namespace tq
