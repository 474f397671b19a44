// The OpenAI-compatible HTTP server of `tqserve serve`: event-driven
// HTTP/1.1 on Boost.Beast + Asio.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "server/http/http_message.h"
#include "server/http/openai_errors.h"
#include "server/http/server_state.h"

namespace tq::http {

/// A check run on every request before routing (issue 20's guards: API key,
/// content type, limits): an error answers the request instead of the route.
using RequestGuard = std::function<std::optional<ApiError>(const HttpRequest&)>;

/// Routes (docs/api.md): POST /v1/completions, POST /v1/chat/completions,
/// GET /v1/models, POST /tokenize, POST /detokenize, GET /health, GET
/// /livez, GET /metrics, GET /version; anything else 404 (405 for a known
/// path with another method), OpenAI error JSON. Every response is counted
/// in ServerMetrics::OnApiRequest once written.
///
/// Threads: options.io_threads run the event loop: accepting, every
/// connection's state machine (connection.h), the GET routes (probes and
/// /metrics are answered there, never queued behind generation work) and the
/// SSE writes. options.worker_threads run the POST routes (JSON parsing, chat
/// templates, tokenization, submitting to the engine). No thread waits on
/// the engine: its outputs wake the connection.
///
/// Start-up order: Bind, Start (API calls get 503 "loading"),
/// state().SetEngine when the model is loaded. Drain: StartDraining (closes
/// idle connections; /health and new requests 503), state().WaitIdle, Stop.
class HttpServer {
 public:
  /// `metrics` must outlive the server.
  HttpServer(HttpOptions options, ServerMetrics* metrics);
  /// Stops (closes every connection, joins the threads).
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds the listening socket on options.host:options.port; returns the
  /// bound port (the real one when options.port is 0). Throws tq::Error when
  /// the address cannot be bound.
  int Bind();
  /// Starts the I/O and worker threads (after Bind).
  void Start();
  /// Adds a guard (before Start); guards run in the order added.
  void AddGuard(RequestGuard guard);
  /// The drain's first step: close idle keep-alive and half-read
  /// connections, answer new requests 503 with Connection: close (the
  /// listener stays open for that); responses under way continue. Idempotent.
  void StartDraining();
  /// Closes every connection (responses under way are cut and their engine
  /// requests aborted) and joins every thread. Idempotent.
  void Stop();

  /// Connections open now.
  int64_t num_connections() const;

  ServerState& state();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq::http
