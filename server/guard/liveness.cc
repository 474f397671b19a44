// Liveness verdicts and the worker pool's wait watch (see liveness.h).
#include "server/guard/liveness.h"

#include <cstdio>

namespace tq::guard {
namespace {

std::string Seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", s);
  return text;
}

}  // namespace

uint64_t WaitWatch::Enqueued(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t ticket = next_++;
  waiting_.emplace(ticket, now);
  return ticket;
}

void WaitWatch::Started(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.erase(ticket);
}

double WaitWatch::OldestWaitSeconds(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (waiting_.empty()) return 0.0;
  // Tickets grow with time, so the first is the oldest.
  const double s = std::chrono::duration<double>(now - waiting_.begin()->second).count();
  return s > 0 ? s : 0.0;
}

Liveness JudgeLiveness(const EngineStats* engine, bool draining, double oldest_wait_s,
                       double stall_timeout_s) {
  Liveness out;
  if (engine != nullptr && !draining && !engine->alive && !engine->draining) {
    out.alive = false;
    out.status = "dead";
    return out;
  }
  if (stall_timeout_s <= 0) return out;
  const std::string bound = " (--stall-timeout " + Seconds(stall_timeout_s) + ")";
  if (engine != nullptr && engine->busy_seconds > stall_timeout_s) {
    out.reason =
        "the engine has been in one step for " + Seconds(engine->busy_seconds) + " s" + bound;
  } else if (oldest_wait_s > stall_timeout_s) {
    out.reason =
        "a request has waited " + Seconds(oldest_wait_s) + " s for an HTTP worker thread" + bound;
  } else {
    return out;
  }
  out.alive = false;
  out.status = "stalled";
  return out;
}

}  // namespace tq::guard
