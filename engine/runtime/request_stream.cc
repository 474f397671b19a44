#include "engine/runtime/request_stream.h"

namespace tq {

void RequestStream::Push(EngineOutput output) {
  std::shared_ptr<const std::function<void()>> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_) {
      pending_->Merge(std::move(output));
    } else {
      pending_ = std::move(output);
    }
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) (*listener)();
}

void RequestStream::SetListener(std::function<void()> on_ready) {
  std::shared_ptr<const std::function<void()>> now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    listener_.reset();
    if (on_ready) listener_ = std::make_shared<const std::function<void()>>(std::move(on_ready));
    if (pending_ && !delivered_final_) now = listener_;
  }
  if (now) (*now)();
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
