// One Generate call on gRPC's callback API: a ServerWriteReactor that relays
// a RequestSession's deltas as the engine produces them, without a thread of
// its own; and the StreamWaker thread that turns the engine's "new output"
// notifications into writes.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "server/grpc/generate_request.h"
#include "server/grpc/generate_response.h"
#include "server/grpc/tsan_handoff.h"
#include "server/session/request_session.h"
#include "tqserve/v1/generation.pb.h"

namespace grpc {
class CallbackServerContext;
}  // namespace grpc

namespace tq::grpc_api {

class GenerateStream;

/// How a Generate call ended, for the service's metrics and log.
struct StreamEnd {
  grpc::Status status;  // what the client gets (or, cancelled, what is counted)
  int32_t completion_tokens = 0;
  tqserve::v1::FinishReason finish = tqserve::v1::FINISH_REASON_UNSPECIFIED;
};

/// One thread that runs GenerateStream::Pump for streams the engine woke
/// (RequestSession::SetNotify runs on the engine thread, which must only
/// post work). Each stream is queued at most once at a time. Thread-safe.
class StreamWaker {
 public:
  StreamWaker();
  /// Joins the thread (streams still queued are pumped first).
  ~StreamWaker();
  StreamWaker(const StreamWaker&) = delete;
  StreamWaker& operator=(const StreamWaker&) = delete;

  /// Queues `stream` unless it is queued already.
  void Wake(std::shared_ptr<GenerateStream> stream);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<GenerateStream>> ready_;
  bool stop_ = false;
  std::thread thread_;
};

/// The reactor of one Generate call. At most one write is in flight; deltas
/// the engine produces meanwhile merge in the session (a slow reader never
/// blocks the engine). Writes start from the waker thread (new output) or
/// from gRPC's OnWriteDone (the next message). A client cancel, an expired
/// deadline, a failed write or a server shutdown (OnCancel) destroys the
/// session, which aborts the engine request and frees its KV blocks in the
/// engine's next step. Owns itself: alive until OnDone and until the waker
/// has dropped it.
class GenerateStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  /// Runs once, with the final status, when the stream finishes the call
  /// (on a gRPC or the waker thread).
  using Finished = std::function<void(const StreamEnd&)>;

  /// Starts relaying `session` (submitted already; its tokenizer, like
  /// `tokenizer`, outlives the call) with messages built from `params` and
  /// request `id`. `done` runs when gRPC is done with the call (OnDone).
  /// Returns the reactor for the handler to return.
  static GenerateStream* Start(grpc::CallbackServerContext* context, StreamWaker* waker,
                               std::unique_ptr<RequestSession> session, const Tokenizer& tokenizer,
                               const GenerateParams& params, Finished finished,
                               std::function<void()> done);

  /// Writes what the session has, or finishes the call; a no-op while a
  /// write is in flight or once finished. Thread-safe.
  void Pump();

 private:
  friend class StreamWaker;

  GenerateStream(grpc::CallbackServerContext* context, StreamWaker* waker,
                 std::unique_ptr<RequestSession> session, const Tokenizer& tokenizer,
                 const GenerateParams& params, Finished finished, std::function<void()> done);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  void PumpLocked();
  void FinishLocked(grpc::Status status);
  grpc::Status CancelStatus() const;

  grpc::CallbackServerContext* const context_;
  StreamWaker* const waker_;
  std::mutex mu_;
  std::unique_ptr<RequestSession> session_;  // null once finished
  GenerateResponder responder_;
  tqserve::v1::GenerateResponse message_;  // the message being built
  std::deque<grpc::ByteBuffer> outbox_;    // front: in flight when writing_
  bool writing_ = false;
  bool finished_ = false;
  std::optional<grpc::Status> cancelled_;  // OnCancel came while a write was in flight
  tqserve::v1::FinishReason finish_ = tqserve::v1::FINISH_REASON_UNSPECIFIED;
  Finished on_finished_;
  std::function<void()> on_done_;
  std::atomic<bool> queued_{false};       // in the waker's queue
  std::shared_ptr<GenerateStream> self_;  // keeps the reactor alive until OnDone
};

/// A Generate call refused before it started: finishes with `status`, then
/// deletes itself.
class RefusedStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const grpc::Status& status) {
    TsanHandToGrpc(this);
    Finish(status);
  }
  void OnDone() override {
    TsanCalledByGrpc(this);
    delete this;
  }
};

}  // namespace tq::grpc_api
