// Runs one function on every rank of a tensor-parallel group, one thread per rank.
#pragma once

#include <functional>
#include <vector>

#include "engine/parallel/communicator.h"
#include "kernels/cpu/thread_pool.h"

namespace tq {

/// The rank threads of one process (as LMDeploy TurboMind runs its TP ranks):
/// rank 0 is the calling thread (the engine thread), ranks 1..N-1 are
/// persistent workers that spin briefly between steps and then sleep
/// (kernels::ThreadPool). Each rank's thread is the only one that drives that
/// rank's backend, model shard and Communicator.
///
/// Thread ownership: Run() is called by one thread at a time (the engine
/// thread) and returns when every rank has finished.
class RankExecutor {
 public:
  /// `comms` (may be empty for world_size 1) are aborted when a rank throws, so
  /// the other ranks leave their collectives instead of waiting forever.
  RankExecutor(int world_size, std::vector<Communicator*> comms);

  int world_size() const { return pool_.size(); }

  /// Runs fn(rank) on every rank concurrently. If a rank throws, the others'
  /// collectives are aborted, and after all ranks returned the first failure
  /// is rethrown (the group is reset first, so the next Run works).
  void Run(const std::function<void(int rank)>& fn);

 private:
  kernels::ThreadPool pool_;
  std::vector<Communicator*> comms_;
};

}  // namespace tq
