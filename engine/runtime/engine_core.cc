#include "engine/runtime/engine_core.h"

#include <atomic>
#include <vector>

#include "engine/common/error.h"
#include "engine/runtime/engine_options.h"
#include "engine/runtime/model_loader.h"

namespace tq {
namespace {

// A run-time seam rather than an #ifdef: the same Release and ASan builds
// that `make test` and `make test-asan` run carry the fault test, with no
// second build of the engine, while the shipped binary cannot reach it (see
// SetStepFaultHookForTesting). Costs one relaxed load per step.
std::atomic<StepFaultHook> g_step_fault_hook{nullptr};

}  // namespace

void SetStepFaultHookForTesting(StepFaultHook hook) {
  g_step_fault_hook.store(hook, std::memory_order_relaxed);
}

EngineCore::EngineCore(const SchedulerConfig& config, std::unique_ptr<ModelRunner> runner,
                       EngineObserver* observer)
    : scheduler_(config), runner_(std::move(runner)), observer_(observer) {}

std::unique_ptr<EngineCore> MakeEngineCore(const EngineOptions& options, LoadedModel& model,
                                           EngineObserver* observer) {
  const kernels::KvLayout& layout = model.executor->cache().layout();
  SchedulerConfig config;
  config.max_num_seqs = options.max_num_seqs;
  config.max_num_batched_tokens = options.max_num_batched_tokens;
  config.max_model_len = model.max_model_len;
  config.block_size = layout.block_size;
  config.num_blocks = layout.num_blocks;
  config.eos_token_ids = model.files.config.eos_token_ids;
  config.enable_prefix_caching = options.enable_prefix_caching;
  config.prefix_cache_seed =
      PrefixCacheSeed(std::string(kernels::KvDtypeName(layout.dtype)), model.kv_fingerprint);
  return std::make_unique<EngineCore>(
      config, std::make_unique<LlamaModelRunner>(model.executor.get()), observer);
}

BlockPool& EngineCore::idle_block_pool() {
  if (scheduler_.has_work()) throw Error("the engine core has live requests");
  return scheduler_.mutable_block_pool();
}

void EngineCore::AddRequest(EngineRequest request, std::shared_ptr<RequestStream> stream,
                            Clock::time_point arrival) {
  streams_[request.request_id] = std::move(stream);
  scheduler_.AddRequest(std::move(request), arrival);
}

void EngineCore::Abort(const std::string& request_id, FinishReason reason) {
  if (std::optional<RequestUpdate> update = scheduler_.Abort(request_id, Clock::now(), reason)) {
    Deliver(*update);
  }
}

void EngineCore::AbortAll(FinishReason reason, const std::string& error) {
  for (const std::string& id : scheduler_.LiveRequestIds()) {
    std::optional<RequestUpdate> update = scheduler_.Abort(id, Clock::now(), reason);
    if (!update) continue;
    update->output.error = error;
    Deliver(*update);
  }
}

void EngineCore::Deliver(RequestUpdate& update) {
  if (observer_ != nullptr) {
    if (update.ttft_seconds) observer_->OnFirstToken(*update.ttft_seconds);
    if (update.itl_seconds) observer_->OnInterToken(*update.itl_seconds);
    if (update.finished) observer_->OnRequestFinished(*update.finished);
  }
  auto it = streams_.find(update.request_id);
  if (it == streams_.end()) return;
  const bool finished = update.output.finished();
  it->second->Push(std::move(update.output));
  if (finished) streams_.erase(it);
}

bool EngineCore::Step(const std::function<void()>& before_delivery) {
  if (!scheduler_.has_work()) return false;
  ScheduleOutput scheduled = scheduler_.Schedule(Clock::now());
  if (observer_ != nullptr) {
    for (size_t i = 0; i < scheduled.preempted_ids.size(); ++i) observer_->OnPreemption();
    if (scheduled.prefix_cache_queries > 0) {
      observer_->OnPrefixCache(scheduled.prefix_cache_queries, scheduled.prefix_cache_hits);
    }
  }
  if (scheduled.empty()) return false;
  if (StepFaultHook hook = g_step_fault_hook.load(std::memory_order_relaxed)) hook(num_steps_ + 1);
  const ModelOutput output = runner_->Execute(scheduled);
  ++num_steps_;
  std::vector<RequestUpdate> updates = scheduler_.Update(scheduled, output, Clock::now());
  if (observer_ != nullptr) {
    int32_t prompt_tokens = 0;
    int32_t generated = 0;
    for (const ScheduledSequence& s : scheduled.sequences) prompt_tokens += s.num_new_prompt_tokens;
    for (const RequestUpdate& u : updates) {
      generated += static_cast<int32_t>(u.output.token_ids.size());
    }
    observer_->OnStep(prompt_tokens, generated);
  }
  if (before_delivery) before_delivery();
  for (RequestUpdate& u : updates) Deliver(u);
  return true;
}

EngineStats EngineCore::Stats() const {
  EngineStats s;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  s.kv_blocks_used = scheduler_.block_pool().num_used();
  s.kv_blocks_cached = scheduler_.block_pool().num_cached();
  s.kv_blocks_free = scheduler_.block_pool().num_uncached_free();
  s.num_steps = num_steps_;
  return s;
}

}  // namespace tq
