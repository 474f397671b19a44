// Shared handler state (see server_state.h).
#include "server/http/server_state.h"

#include <optional>

#include "server/guard/request_limits.h"
#include "server/http/openai_errors.h"

namespace tq::http {

void ServerState::SetEngine(Engine* engine) {
  model_ = guard::ServedModelLimits(*engine, options_.served_model_name);
  chat_template_ = std::make_unique<ChatTemplate>(engine->files(), engine->tokenizer());
  engine_.store(engine, std::memory_order_release);
}

Engine& ServerState::ReadyEngine() const {
  if (draining()) throw ApiException(Unavailable("the server is shutting down"));
  Engine* engine = this->engine();
  if (engine == nullptr) throw ApiException(Unavailable("the model is loading; retry shortly"));
  return *engine;
}

ServerState::InFlight::InFlight(ServerState* state, int64_t sequences)
    : state_(state), sequences_(sequences) {
  std::lock_guard<std::mutex> lock(state_->mu_);
  const int64_t limit = state_->options_.max_admitted_sequences;
  if (limit > 0 && state_->sequences_ > 0 && state_->sequences_ + sequences_ > limit) {
    if (state_->metrics_ != nullptr) state_->metrics_->OnRefused("http", "overloaded");
    ApiError error = Unavailable("the server is at capacity (" + std::to_string(limit) +
                                 " sequences running or waiting); retry shortly");
    error.code = "overloaded";
    error.retry_after_s = 1;
    throw ApiException(std::move(error));
  }
  ++state_->in_flight_;
  state_->sequences_ += sequences_;
}

ServerState::InFlight::~InFlight() {
  std::lock_guard<std::mutex> lock(state_->mu_);
  state_->sequences_ -= sequences_;
  if (--state_->in_flight_ == 0) state_->idle_cv_.notify_all();
}

bool ServerState::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [this] { return in_flight_ == 0; });
}

guard::Liveness ServerState::Liveness() const {
  const Engine* engine = this->engine();
  std::optional<EngineStats> stats;
  if (engine != nullptr) stats = engine->Stats();  // one snapshot (a lock and a copy)
  return guard::JudgeLiveness(stats ? &*stats : nullptr, draining(),
                              worker_queue_.OldestWaitSeconds(), options_.stall_timeout_s);
}

int64_t ServerState::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

}  // namespace tq::http
