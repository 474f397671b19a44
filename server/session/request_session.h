// One API request's life on the engine, shared by the HTTP and gRPC front
// ends: submit its choices, stream their deltas, end it (stop strings,
// finish, abort, error). The front ends keep only their wire formats.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/request.h"
#include "engine/runtime/request_stream.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/session/choice_decoder.h"

namespace tq {

class Engine;

/// How a session reaches the engine: Engine::Submit / Abort in the
/// daemon, a fake in tests. submit may throw EngineUnavailable or tq::Error;
/// abort gets kStop for a stop string (counted as a stop, as vLLM does) and
/// kAbort for a client that went away.
struct SessionEngine {
  std::function<std::shared_ptr<RequestStream>(EngineRequest)> submit;
  std::function<void(const std::string&, FinishReason)> abort;

  /// `engine`'s Submit and Abort (thread-safe; `engine` must outlive the session).
  static SessionEngine Of(Engine& engine);
};

/// Why a session failed (the front end picks the status: HTTP 500/503, gRPC
/// INTERNAL/UNAVAILABLE).
struct SessionFailure {
  enum class Kind {
    kEngineError,    // the engine failed the request (FinishReason::kError)
    kServerAborted,  // the server aborted it (drain timeout, shutdown)
  };
  Kind kind = Kind::kEngineError;
  std::string message;  // for the client
};

/// The choices of one request. Not thread-safe: one front-end owner (an HTTP
/// connection, a gRPC call); the engine thread only pushes into the streams.
/// Destroying it aborts every choice that has not finished, so a dropped
/// connection or an exception frees the engine's KV blocks.
///
/// Each choice runs through a ChoiceDecoder; a stop string aborts that
/// engine request with kStop. An engine error, or a kAbort the session did
/// not ask for, fails the whole request: failure() is set, the other choices
/// are aborted and no more deltas come.
class RequestSession {
 public:
  /// `requests` (one per choice; ids unique among live requests) share the
  /// `stop` strings. `tokenizer` must outlive the session.
  RequestSession(SessionEngine engine, const Tokenizer& tokenizer,
                 std::vector<EngineRequest> requests, std::vector<std::string> stop);
  ~RequestSession();
  RequestSession(const RequestSession&) = delete;
  RequestSession& operator=(const RequestSession&) = delete;

  /// Submits every choice. When one is refused, aborts those already
  /// submitted and rethrows.
  void Submit();

  /// For event loops: `notify` runs on the engine thread whenever a choice
  /// has new output (also right away if some is pending, and possibly
  /// spuriously); it must only post work (e.g. to an Asio strand) and then
  /// the owner calls Take(). Never called after the session is destroyed
  /// or SetNotify({}) returned. Call after Submit.
  void SetNotify(std::function<void()> notify);

  /// Everything the unfinished choices produced since the last call, without
  /// waiting (empty deltas dropped).
  std::vector<SessionDelta> Take();

  /// Every choice finished, or the request failed.
  bool done() const;
  const std::optional<SessionFailure>& failure() const { return failure_; }
  /// Aborts every unfinished choice (client gone): done() afterwards.
  void AbortAll();

  /// Tokens choice `choice` produced (final once it finished).
  int32_t completion_tokens(size_t choice) const;
  /// Prompt tokens of choice `choice` found in the prefix cache (usage).
  int32_t cached_tokens(size_t choice) const;

 private:
  struct Choice;
  struct Signal;

  void Fail(SessionFailure failure);

  SessionEngine engine_;
  const Tokenizer& tokenizer_;
  std::vector<std::unique_ptr<Choice>> choices_;
  std::shared_ptr<Signal> signal_;  // shared with the streams' listeners
  std::optional<SessionFailure> failure_;
};

}  // namespace tq
