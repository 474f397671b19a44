// One engine step at a time: scheduler + model runner + output routing.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "engine/runtime/engine_stats.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/request_stream.h"
#include "engine/runtime/scheduler.h"

namespace tq {

struct EngineOptions;
struct LoadedModel;

/// A test-only fault (issue 20 item 9): called by EngineCore::Step on the
/// engine thread with the 1-based number of the step, after scheduling and
/// before the model runs (mid-step: blocks are allocated, nothing computed);
/// it may throw to make that step fail as a real engine failure would.
using StepFaultHook = void (*)(int64_t step);

/// Installs `hook` for every EngineCore of the process (nullptr: none, the
/// default). Call before any engine thread starts. Only the test binary
/// tqserve_fault_inject (tests/integration/fault_inject_main.cc) calls this;
/// the tqserve binary never does, so a release daemon cannot be made to fail
/// by any flag, environment variable or request.
void SetStepFaultHookForTesting(StepFaultHook hook);

/// The synchronous engine that Engine's thread drives (vLLM's
/// EngineCore): AddRequest / Abort / Step, all on one thread. Owns the
/// scheduler and routes each RequestUpdate to its request's stream and to the
/// observer. Tests drive it directly with a fake ModelRunner.
class EngineCore {
 public:
  using Clock = Scheduler::Clock;

  /// `runner` executes the steps; `observer` may be null.
  EngineCore(const SchedulerConfig& config, std::unique_ptr<ModelRunner> runner,
             EngineObserver* observer);

  /// Queues a validated request whose outputs go to `stream`.
  void AddRequest(EngineRequest request, std::shared_ptr<RequestStream> stream,
                  Clock::time_point arrival);
  /// Ends a live request now with `reason` (its blocks are free when this
  /// returns).
  void Abort(const std::string& request_id, FinishReason reason = FinishReason::kAbort);
  /// Ends every live request with `reason`: kAbort on a drain timeout or
  /// shutdown, kError with `error` as its message on an engine failure.
  void AbortAll(FinishReason reason = FinishReason::kAbort, const std::string& error = "");

  /// One step: Schedule, Execute, Update, deliver outputs. Returns false when
  /// there was nothing to run. `before_delivery`, when set, runs after the
  /// scheduler's update and before the first output is pushed, so gauges
  /// taken there (Stats) already count a request whose last event a client
  /// may be reading as finished.
  bool Step(const std::function<void()>& before_delivery = {});

  bool has_work() const { return scheduler_.has_work(); }
  /// The scheduler's KV block pool, for a forward pass outside the scheduler
  /// (OfflineEngine::PromptLogits) while no request is live: blocks taken
  /// must be released before the next AddRequest or Step. Throws tq::Error
  /// while a request is live.
  BlockPool& idle_block_pool();
  /// Gauges of this moment.
  EngineStats Stats() const;
  const Scheduler& scheduler() const { return scheduler_; }

 private:
  void Deliver(RequestUpdate& update);

  Scheduler scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  EngineObserver* observer_;
  std::unordered_map<std::string, std::shared_ptr<RequestStream>> streams_;
  int64_t num_steps_ = 0;
};

/// The engine core that runs `model` with `options`' scheduler limits (max
/// sequences, token budget, prefix caching) over the model's KV pool: what
/// Engine (serve) and OfflineEngine (generate, eval, tests) both drive.
/// `model` and `observer` (may be null) must outlive it.
std::unique_ptr<EngineCore> MakeEngineCore(const EngineOptions& options, LoadedModel& model,
                                           EngineObserver* observer);

}  // namespace tq
