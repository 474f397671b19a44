// Generate on gRPC's callback API (see generate_stream.h).
#include "server/grpc/generate_stream.h"

#include <grpcpp/server_context.h>

#include <chrono>
#include <exception>

#include "server/grpc/tsan_handoff.h"
#include "server/grpc/wire_request.h"

namespace tq::grpc_api {

namespace pb = tqserve::v1;

StreamWaker::StreamWaker() : thread_([this] { Run(); }) {}

StreamWaker::~StreamWaker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StreamWaker::Wake(std::shared_ptr<GenerateStream> stream) {
  if (stream->queued_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(std::move(stream));
  }
  cv_.notify_one();
}

void StreamWaker::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !ready_.empty(); });
    if (ready_.empty()) return;  // stop_
    std::shared_ptr<GenerateStream> stream = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    // Cleared first: output that arrives during Pump queues it again.
    stream->queued_.store(false);
    stream->Pump();
    stream.reset();  // may free a finished stream, outside the lock
    lock.lock();
  }
}

GenerateStream* GenerateStream::Start(grpc::CallbackServerContext* context, StreamWaker* waker,
                                      std::unique_ptr<RequestSession> session,
                                      const Tokenizer& tokenizer, const GenerateParams& params,
                                      Finished finished, std::function<void()> done) {
  std::shared_ptr<GenerateStream> stream(new GenerateStream(
      context, waker, std::move(session), tokenizer, params, std::move(finished), std::move(done)));
  stream->self_ = stream;
  // From now on the engine thread wakes the stream (at once when output is
  // pending). A weak pointer: the notifier may outlive the stream.
  std::weak_ptr<GenerateStream> weak = stream;
  std::lock_guard<std::mutex> lock(stream->mu_);
  stream->session_->SetNotify([waker, weak] {
    if (std::shared_ptr<GenerateStream> s = weak.lock()) waker->Wake(std::move(s));
  });
  TsanHandToGrpc(stream.get());
  return stream.get();
}

GenerateStream::GenerateStream(grpc::CallbackServerContext* context, StreamWaker* waker,
                               std::unique_ptr<RequestSession> session, const Tokenizer& tokenizer,
                               const GenerateParams& params, Finished finished,
                               std::function<void()> done)
    : context_(context),
      waker_(waker),
      session_(std::move(session)),
      responder_(tokenizer, params.request.request_id, params),
      on_finished_(std::move(finished)),
      on_done_(std::move(done)) {}

void GenerateStream::Pump() {
  std::lock_guard<std::mutex> lock(mu_);
  PumpLocked();
}

void GenerateStream::PumpLocked() {
  if (finished_ || writing_) return;
  if (outbox_.empty()) {
    try {
      for (const SessionDelta& delta : session_->Take()) {
        if (!responder_.Build(delta, &message_)) continue;
        finish_ = message_.finish_reason();
        outbox_.emplace_back();
        SerializeResponse(message_, &outbox_.back());
      }
    } catch (const std::exception& e) {
      // A bug or out of memory: this call fails (the session's destruction
      // aborts the engine request), the server keeps serving. Nothing may
      // escape to the waker's or gRPC's thread.
      outbox_.clear();
      FinishLocked(grpc::Status(grpc::StatusCode::INTERNAL, e.what()));
      return;
    }
  }
  if (!outbox_.empty()) {
    writing_ = true;
    TsanHandToGrpc(this);
    StartWrite(&outbox_.front());
    return;
  }
  if (const auto& failure = session_->failure()) {
    FinishLocked(grpc::Status(failure->kind == SessionFailure::Kind::kServerAborted
                                  ? grpc::StatusCode::UNAVAILABLE
                                  : grpc::StatusCode::INTERNAL,
                              failure->message));
  } else if (responder_.finished()) {
    FinishLocked(grpc::Status::OK);
  }
}

void GenerateStream::OnWriteDone(bool ok) {
  const TsanGrpcCallback tsan(this);
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
  outbox_.pop_front();
  if (finished_) return;
  if (cancelled_) {
    FinishLocked(*cancelled_);
  } else if (!ok) {
    // The call broke (client gone, or its deadline passed mid-write).
    FinishLocked(context_->deadline() <= std::chrono::system_clock::now()
                     ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded")
                     : grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
  } else {
    PumpLocked();
  }
}

grpc::Status GenerateStream::CancelStatus() const {
  // The status is not sent (the call is over); it is what the metrics count.
  const bool expired = context_->deadline() <= std::chrono::system_clock::now();
  return expired ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded")
                 : grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
}

void GenerateStream::OnCancel() {
  const TsanGrpcCallback tsan(this);
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  // Abort at once (frees the KV blocks even while a write is stuck).
  session_->AbortAll();
  if (writing_) {
    cancelled_ = CancelStatus();  // Finish once the write is done
  } else {
    FinishLocked(CancelStatus());
  }
}

void GenerateStream::FinishLocked(grpc::Status status) {
  finished_ = true;
  // Destroying the session stops its notifications and aborts the engine
  // request unless it ended.
  session_.reset();
  if (on_finished_) on_finished_({status, responder_.completion_tokens(), finish_});
  TsanHandToGrpc(this);
  Finish(status);
}

void GenerateStream::OnDone() {
  TsanCalledByGrpc(this);
  if (on_done_) on_done_();
  // The last reference unless the waker holds one: may delete this.
  std::shared_ptr<GenerateStream> self = std::move(self_);
}

}  // namespace tq::grpc_api
