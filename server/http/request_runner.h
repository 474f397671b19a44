// Runs the choices of one API request on the engine and turns their token
// streams into text deltas (stop strings, logprobs, usage).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/request.h"
#include "engine/runtime/request_stream.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/http/choice_output.h"
#include "server/http/openai_errors.h"
#include "server/text/output_text.h"

namespace tq::http {

/// How a runner reaches the engine: EngineClient::Submit / Abort in the
/// daemon, a fake in tests. submit may throw EngineUnavailable or tq::Error;
/// abort gets kStop for a stop string (counted as a stop, as vLLM does) and
/// kAbort for a client that went away.
struct EngineCalls {
  std::function<std::shared_ptr<RequestStream>(EngineRequest)> submit;
  std::function<void(const std::string&, FinishReason)> abort;
};

/// One choice to generate.
struct ChoiceSpec {
  int32_t index = 0;         // OpenAI choices[].index (prompt_index * n + i)
  int32_t prompt_index = 0;  // usage counts each prompt once
  EngineRequest request;     // request_id unique among live requests
  bool echo = false;         // completions echo: prompt text (and logprobs) first
  std::string echo_text;
};

/// The choices of one request. Not thread-safe: one HTTP worker thread owns
/// it (the engine thread only pushes into the RequestStreams). Destroying it
/// aborts every choice that has not finished, so a dropped connection or an
/// exception frees the engine's KV blocks.
///
/// Per choice an OutputTextStream applies the stop strings; when one matches,
/// the runner aborts that engine request and ends the choice with
/// finish_reason "stop", stop_reason the matched string and completion tokens
/// counted up to the token that completed it (as vLLM). An engine finish
/// kStop/kLength is "stop"/"length" (stop_reason: the stop token id when one
/// of stop_token_ids ended it). kError, or a kAbort the runner did not ask for
/// (drain timeout), ends the whole request with error().
class RequestRunner {
 public:
  /// `want_logprobs`: fill ChoiceDelta::logprobs (the requests' num_logprobs
  /// must be >= 0 then). `tokenizer` must outlive the runner.
  RequestRunner(EngineCalls engine, const Tokenizer& tokenizer, std::vector<ChoiceSpec> choices,
                std::vector<std::string> stop, bool want_logprobs);
  ~RequestRunner();
  RequestRunner(const RequestRunner&) = delete;
  RequestRunner& operator=(const RequestRunner&) = delete;

  /// Submits every choice. When one is refused, aborts those already
  /// submitted and rethrows (EngineUnavailable -> 503, tq::Error -> 400).
  void Submit();

  /// Waits up to `timeout` for output of the unfinished choices and returns
  /// what they produced (possibly nothing). A finished choice's last delta has
  /// its finish_reason. After an error, returns nothing more.
  std::vector<ChoiceDelta> Poll(std::chrono::milliseconds timeout);

  /// Every choice finished, or the request failed.
  bool done() const;
  /// Why the request failed (500 engine error, 503 aborted by the server).
  const std::optional<ApiError>& error() const { return error_; }
  /// Aborts every unfinished choice (client gone); done() afterwards.
  void AbortAll();

  /// Usage so far (final once done()).
  Usage usage() const;
  size_t num_choices() const { return choices_.size(); }

 private:
  struct Choice;
  void Handle(Choice& c, EngineOutput&& out, ChoiceDelta& delta);
  void PushToken(Choice& c, int32_t token, const PositionLogprobs* lp, ChoiceDelta& delta);
  void Fail(ApiError error);

  EngineCalls engine_;
  const Tokenizer& tokenizer_;
  std::vector<std::string> stop_;
  bool want_logprobs_;
  std::vector<std::unique_ptr<Choice>> choices_;
  std::optional<ApiError> error_;
};

}  // namespace tq::http
