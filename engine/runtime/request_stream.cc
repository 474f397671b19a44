#include "engine/runtime/request_stream.h"

namespace tq {

void RequestStream::Push(EngineOutput output) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_) {
      pending_->Merge(std::move(output));
    } else {
      pending_ = std::move(output);
    }
  }
  cv_.notify_all();
}

std::optional<EngineOutput> RequestStream::Next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (delivered_final_) return std::nullopt;
  if (!cv_.wait_for(lock, timeout, [this] { return pending_.has_value(); })) return std::nullopt;
  std::optional<EngineOutput> out = std::move(pending_);
  pending_.reset();
  delivered_final_ = out->finished();
  return out;
}

}  // namespace tq
