// Liveness that tells the truth (issue 41): GET /livez and the gRPC health
// service "liveness" fail when a loaded engine's loop has died, when the
// engine thread has been in one step for longer than --stall-timeout while
// it has work (a wedged step), or when a request has waited that long for a
// free HTTP worker thread (a saturated pool). An orchestrator restarts the
// daemon then; readiness (/health) keeps its own meaning.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/runtime/engine_stats.h"

namespace tq::guard {

/// The age of the oldest task waiting for a thread of a pool (the HTTP
/// worker pool): Enqueued when a task is posted, Started when a thread takes
/// it. Thread-safe (one mutex; a map insert and erase per task).
class WaitWatch {
 public:
  using Clock = std::chrono::steady_clock;

  /// A task was posted at `now`; returns its ticket for Started.
  uint64_t Enqueued(Clock::time_point now = Clock::now());
  /// The task of `ticket` got its thread (unknown tickets are ignored).
  void Started(uint64_t ticket);
  /// Seconds the oldest task still waiting has waited at `now`; 0 when none.
  double OldestWaitSeconds(Clock::time_point now = Clock::now()) const;

 private:
  mutable std::mutex mu_;
  uint64_t next_ = 0;                              // guarded by mu_
  std::map<uint64_t, Clock::time_point> waiting_;  // ticket -> posted; guarded by mu_
};

/// What a liveness probe answers.
struct Liveness {
  bool alive = true;
  /// "alive"; "dead" (the engine loop failed); "stalled" (a bound passed).
  std::string status = "alive";
  /// For "stalled": which bound, with the seconds measured, e.g. "the engine
  /// has been in one step for 61.2 s (--stall-timeout 60)". "" otherwise.
  std::string reason;
};

/// Judges liveness. `engine`: the engine's stats, null while the model loads
/// (alive); `draining`: the server drains (alive unless stalled: a drain is
/// no reason to restart); `oldest_wait_s`: WaitWatch::OldestWaitSeconds of the
/// worker pool; `stall_timeout_s`: --stall-timeout, 0 = no stall checks.
/// Dead when a loaded engine's loop has stopped without a drain; stalled
/// when engine->busy_seconds or oldest_wait_s exceeds stall_timeout_s.
Liveness JudgeLiveness(const EngineStats* engine, bool draining, double oldest_wait_s,
                       double stall_timeout_s);

}  // namespace tq::guard
