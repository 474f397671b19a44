// The OpenAI-compatible HTTP server of `tqserve serve` (cpp-httplib).
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "server/http/server_state.h"

namespace httplib {
class Server;
}

namespace tq::http {

/// Routes (docs/api.md): POST /v1/completions, POST /v1/chat/completions,
/// GET /v1/models, POST /tokenize, POST /detokenize, GET /health, GET
/// /metrics, GET /version; anything else 404 (405 for a known path with
/// another method), OpenAI error JSON. Every response is counted in
/// ServerMetrics::OnApiRequest.
///
/// Threads: Start() runs httplib's accept loop on its own thread; requests
/// run on a pool of HttpOptions::max_connections workers (an open stream
/// holds one for its whole life). Start-up order: Bind, Start (API calls get
/// 503 "loading"), state().SetEngine when the model is loaded. Drain:
/// state().StartDraining, state().WaitIdle, Stop.
class HttpServer {
 public:
  /// `metrics` must outlive the server.
  HttpServer(HttpOptions options, ServerMetrics* metrics);
  /// Stops (joins the accept loop and the workers).
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds the listening socket on options.host:options.port; returns the
  /// bound port (the real one when options.port is 0). Throws tq::Error when
  /// the address cannot be bound.
  int Bind();
  /// Serves on a background thread (after Bind).
  void Start();
  /// Stops accepting, ends keep-alive connections and joins every thread.
  /// Streams still open are cut: drain first. Idempotent.
  void Stop();

  ServerState& state() { return state_; }

 private:
  void RegisterRoutes();

  ServerState state_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  int listen_fd_ = -1;  // the listening socket, seen in httplib's socket-options hook
};

}  // namespace tq::http
