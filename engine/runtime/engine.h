// The serving engine: owns the engine thread and the model; a thread-safe
// interface to submit, stream, abort and observe.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "engine/runtime/engine_stats.h"
#include "engine/runtime/request.h"
#include "engine/runtime/request_stream.h"

namespace tq {

class Tokenizer;
namespace structured {
class GrammarCache;
}
struct EngineOptions;
struct ModelFiles;

/// Thrown by Submit when the engine takes no new requests: draining after
/// SIGTERM, stopped, or failed. Front ends answer 503 / UNAVAILABLE.
class EngineUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Owns the engine loop thread and everything it drives (scheduler, KV block
/// pool, model runner: DESIGN.md "Data flow"). Every public method is
/// thread-safe and returns without waiting for a step, except Shutdown.
///
/// Threads: the engine thread alone touches the scheduler, the KV cache and
/// the model; callers only enqueue commands (submit, abort) under a mutex and
/// read outputs from their RequestStream and stats from a snapshot.
class Engine {
 public:
  /// Loads the model (throws tq::Error on bad files or flags, as LoadModel)
  /// and starts the engine thread. `observer` (may be null) must outlive this.
  explicit Engine(const EngineOptions& options, EngineObserver* observer = nullptr);
  /// Aborts what is left and joins the engine thread (Shutdown).
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Validates the request (throws tq::Error with a message naming the field:
  /// empty prompt, id out of range, prompt longer than max_model_len, bad
  /// sampling params, num_logprobs outside [-1, 20], duplicate request_id) and
  /// queues it. Throws EngineUnavailable while draining, after Shutdown or an
  /// engine failure. The stream ends with exactly one finished output.
  std::shared_ptr<RequestStream> Submit(EngineRequest request);

  /// Ends a request at any point: the engine frees all its KV blocks in its
  /// next step and ends its stream with `reason` — kAbort for a client that
  /// went away, kStop when the front end found a stop string (so metrics
  /// count it as vLLM does). Unknown or already finished ids are ignored.
  void Abort(const std::string& request_id, FinishReason reason = FinishReason::kAbort);
  /// Aborts every live request (drain timeout).
  void AbortAll();

  /// Stops taking new requests (Submit throws EngineUnavailable); requests
  /// already accepted keep running.
  void StartDraining();
  /// Aborts what is left, stops and joins the engine thread. Idempotent.
  void Shutdown();

  /// Gauges as of the last step (never blocks on a step); busy_seconds as of
  /// now. Thread-safe.
  EngineStats Stats() const;
  /// Fixed facts (model, KV pool, limits).
  const EngineInfo& info() const;
  /// The model's tokenizer and files (thread-safe to read).
  const Tokenizer& tokenizer() const;
  const ModelFiles& files() const;
  /// Compiled structured-output constraints for this model's vocabulary
  /// (built on first use; thread-safe). Front ends compile a request's
  /// constraint here, on their own thread, before Submit.
  structured::GrammarCache& grammars() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tq
