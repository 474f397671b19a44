// The per-request channel from the engine thread to a front-end thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "engine/runtime/request.h"

namespace tq {

/// Outputs of one request, produced by the engine thread (Push) and consumed
/// by one front-end thread (Next). Deltas that arrive between two Next calls
/// are merged into one, so a slow reader never blocks the engine and never
/// loses tokens. A front end on an event loop sets a listener instead of
/// blocking in Next: it is told that output is ready and reads it with
/// Next(0). Thread-safe; shared (std::shared_ptr) by both sides.
class RequestStream {
 public:
  /// Engine side: appends a delta (merged with any not yet read).
  void Push(EngineOutput output);

  /// Front-end side: waits up to `timeout` for output; returns everything
  /// pushed since the previous call, or nullopt on timeout. After the output
  /// with finished() has been returned, every call returns nullopt at once.
  std::optional<EngineOutput> Next(std::chrono::milliseconds timeout);

  /// Front-end side: `on_ready` runs after every Push (on the engine thread,
  /// outside the stream's lock), and once right away when output is already
  /// pending. It must be quick and must not block (post to an event loop).
  /// Replaces any earlier listener; an empty function removes it. A call
  /// already under way when the listener is replaced may still finish: the
  /// listener must stay callable until the stream is gone (hold its state by
  /// std::shared_ptr).
  void SetListener(std::function<void()> on_ready);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<EngineOutput> pending_;
  std::shared_ptr<const std::function<void()>> listener_;
  bool delivered_final_ = false;
};

}  // namespace tq
