// One API request's life on the engine (see request_session.h).
#include "server/session/request_session.h"

#include <algorithm>
#include <mutex>

#include "engine/runtime/engine.h"

namespace tq {

SessionEngine SessionEngine::Of(Engine& engine) {
  return {[&engine](EngineRequest r) { return engine.Submit(std::move(r)); },
          [&engine](const std::string& id, FinishReason reason) { engine.Abort(id, reason); }};
}

struct RequestSession::Choice {
  Choice(EngineRequest r, const Tokenizer& tokenizer, const std::vector<std::string>& stop)
      : request(std::move(r)), decoder(tokenizer, request, stop) {}

  EngineRequest request;
  ChoiceDecoder decoder;
  std::shared_ptr<RequestStream> stream;
  bool finished = false;  // no more deltas; the engine request is done or aborted
};

// Wakes the owner when any choice's stream has output: a flag and the
// owner's notify. Lives as long as the longest-lived stream listener.
struct RequestSession::Signal {
  std::mutex mu;
  bool ready = false;
  std::function<void()> notify;

  void Raise() {
    std::lock_guard<std::mutex> lock(mu);
    ready = true;
    if (notify) notify();  // under the lock: SetNotify({}) waits for it
  }
};

RequestSession::RequestSession(SessionEngine engine, const Tokenizer& tokenizer,
                               std::vector<EngineRequest> requests, std::vector<std::string> stop)
    : engine_(std::move(engine)), tokenizer_(tokenizer), signal_(std::make_shared<Signal>()) {
  choices_.reserve(requests.size());
  for (EngineRequest& r : requests) {
    choices_.push_back(std::make_unique<Choice>(std::move(r), tokenizer_, stop));
  }
}

RequestSession::~RequestSession() {
  SetNotify({});
  for (auto& c : choices_) {
    if (c->stream) c->stream->SetListener({});
  }
  AbortAll();
}

void RequestSession::Submit() {
  for (auto& c : choices_) {
    try {
      c->stream = engine_.submit(c->request);
    } catch (...) {
      AbortAll();
      throw;
    }
    c->stream->SetListener([signal = signal_] { signal->Raise(); });
  }
}

void RequestSession::SetNotify(std::function<void()> notify) {
  std::lock_guard<std::mutex> lock(signal_->mu);
  signal_->notify = std::move(notify);
  if (signal_->notify && signal_->ready) signal_->notify();
}

bool RequestSession::done() const {
  if (failure_) return true;
  return std::all_of(choices_.begin(), choices_.end(), [](const auto& c) { return c->finished; });
}

void RequestSession::AbortAll() {
  for (auto& c : choices_) {
    if (!c->finished && c->stream) engine_.abort(c->request.request_id, FinishReason::kAbort);
    c->finished = true;
  }
}

void RequestSession::Fail(SessionFailure failure) {
  if (!failure_) failure_ = std::move(failure);
  AbortAll();
}

int32_t RequestSession::completion_tokens(size_t choice) const {
  return choices_[choice]->decoder.completion_tokens();
}

int32_t RequestSession::cached_tokens(size_t choice) const {
  return choices_[choice]->decoder.cached_tokens();
}

std::vector<SessionDelta> RequestSession::Take() {
  {
    std::lock_guard<std::mutex> lock(signal_->mu);
    signal_->ready = false;  // outputs pushed from now on raise it again
  }
  std::vector<SessionDelta> deltas;
  for (size_t i = 0; i < choices_.size() && !failure_; ++i) {
    Choice& c = *choices_[i];
    if (c.finished || !c.stream) continue;
    std::optional<EngineOutput> out = c.stream->Next(std::chrono::milliseconds(0));
    if (!out) continue;
    if (out->finish == FinishReason::kError) {
      c.finished = true;
      Fail({SessionFailure::Kind::kEngineError, "the engine failed: " + out->error});
      break;
    }
    if (out->finish == FinishReason::kAbort) {
      // Our own aborts (stop string, disconnect) are never read back, so this
      // one came from the server: the drain timeout or shutdown.
      c.finished = true;
      Fail({SessionFailure::Kind::kServerAborted,
            "the request was aborted: the server is shutting down"});
      break;
    }
    const bool engine_finished = out->finished();
    SessionDelta delta = c.decoder.Add(std::move(*out));
    delta.choice = i;
    if (c.decoder.finished()) {
      c.finished = true;
      if (c.decoder.stopped_by_string() && !engine_finished) {
        engine_.abort(c.request.request_id, FinishReason::kStop);
      }
    }
    if (!delta.empty()) deltas.push_back(std::move(delta));
  }
  if (failure_) deltas.clear();
  return deltas;
}

}  // namespace tq
