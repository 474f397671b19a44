// Runs the choices of one OpenAI API request on a RequestSession and turns
// its deltas into the API's choice deltas (echo, logprob text offsets,
// finish and stop reasons, usage).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/request.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/http/choice_output.h"
#include "server/http/openai_errors.h"
#include "server/session/request_session.h"

namespace tq::http {

/// One choice to generate.
struct ChoiceSpec {
  int32_t index = 0;         // OpenAI choices[].index (prompt_index * n + i)
  int32_t prompt_index = 0;  // usage counts each prompt once
  EngineRequest request;     // request_id unique among live requests
  bool echo = false;         // completions echo: prompt text (and logprobs) first
  std::string echo_text;
};

/// The choices of one request. Not thread-safe: one owner (the connection
/// serving it); the engine thread only pushes into the streams. Destroying it
/// aborts every choice that has not finished (RequestSession).
///
/// Stop strings end a choice with finish_reason "stop" and stop_reason the
/// matched string (as reported by the session's OutputTextStream); an engine
/// finish kStop/kLength is "stop"/"length" (stop_reason: the stop token id
/// when one of stop_token_ids ended it). An engine error (500) or a server
/// abort (503, drain timeout) ends the whole request with error().
class RequestRunner {
 public:
  /// `want_logprobs`: fill ChoiceDelta::logprobs (the requests' num_logprobs
  /// must be >= 0 then). `tokenizer` must outlive the runner.
  RequestRunner(SessionEngine engine, const Tokenizer& tokenizer, std::vector<ChoiceSpec> choices,
                std::vector<std::string> stop, bool want_logprobs);
  RequestRunner(const RequestRunner&) = delete;
  RequestRunner& operator=(const RequestRunner&) = delete;

  /// Submits every choice. When one is refused, aborts those already
  /// submitted and rethrows (EngineUnavailable -> 503, tq::Error -> 400).
  void Submit();

  /// What the unfinished choices produced since the last call, without
  /// waiting (after a SetNotify wake-up; possibly nothing). A finished
  /// choice's last delta has its finish_reason. After an error, returns
  /// nothing more.
  std::vector<ChoiceDelta> Take();
  /// See RequestSession::SetNotify (event-loop front ends).
  void SetNotify(std::function<void()> notify) { session_.SetNotify(std::move(notify)); }

  /// Every choice finished, or the request failed.
  bool done() const { return session_.done(); }
  /// Why the request failed (500 engine error, 503 aborted by the server).
  std::optional<ApiError> error() const;
  /// Aborts every unfinished choice (client gone); done() afterwards.
  void AbortAll() { session_.AbortAll(); }

  /// Usage so far (final once done()).
  Usage usage() const;
  size_t num_choices() const { return specs_.size(); }

 private:
  std::vector<ChoiceDelta> Convert(std::vector<SessionDelta> deltas);
  void Echo(const ChoiceSpec& spec, const SessionDelta& d, ChoiceDelta& out, int64_t& chars) const;

  const Tokenizer& tokenizer_;
  bool want_logprobs_;
  std::vector<ChoiceSpec> specs_;  // echo, indexes (requests moved into the session)
  std::vector<int64_t> emitted_;   // code points of each choice's text so far (echo included)
  RequestSession session_;
};

}  // namespace tq::http
