#include "engine/parallel/rank_executor.h"

#include <atomic>
#include <exception>

namespace tq {

RankExecutor::RankExecutor(int world_size, std::vector<Communicator*> comms)
    : pool_(world_size < 1 ? 1 : world_size), comms_(std::move(comms)) {}

void RankExecutor::Run(const std::function<void(int rank)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(pool_.size()));
  std::atomic<int> first_failed{-1};
  pool_.Run([&](int rank, int) {
    try {
      fn(rank);
    } catch (...) {
      errors[static_cast<size_t>(rank)] = std::current_exception();
      int none = -1;
      // The first failure is the cause; the others are the aborted collectives.
      if (first_failed.compare_exchange_strong(none, rank)) {
        for (Communicator* c : comms_) c->Abort();
      }
    }
  });
  const int failed = first_failed.load();
  if (failed < 0) return;
  for (Communicator* c : comms_) c->ResetAfterAbort();
  std::rethrow_exception(errors[static_cast<size_t>(failed)]);
}

}  // namespace tq
