// State shared by the HTTP route handlers: options, the engine once loaded,
// the drain flag and the count of generation requests in flight.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/runtime/engine.h"
#include "server/guard/http_guard.h"
#include "server/guard/liveness.h"
#include "server/http/generation_params.h"
#include "server/metrics/server_metrics.h"
#include "server/text/chat_template.h"
#include "server/tls/tls_credentials.h"

namespace tq::http {

/// Options of the HTTP front end (`tqserve serve` flags).
struct HttpOptions {
  std::string host = "0.0.0.0";
  int port = 8000;                // 0: any free port
  std::string served_model_name;  // requests' "model" must equal it
  int max_connections = 8192;     // open connections; more get 503 and are closed
  bool log_requests = true;       // one info line per request
  size_t max_body_bytes = 64 << 20;
  // Checks before the body is read (server/guard/http_guard.h); its
  // max_body_bytes is set from the field above.
  guard::HttpGuardOptions guard;
  int io_threads = 2;               // event-loop threads (connections, probes, SSE writes)
  int worker_threads = 2;           // threads that parse, template and tokenize POST requests
  double read_timeout_s = 30;       // whole request head + body, from its first byte
  double keep_alive_timeout_s = 5;  // idle keep-alive connection
  double write_timeout_s = 30;      // a write making no progress (reader stopped)
  // --stall-timeout: /livez fails when the engine is in one step, or a
  // request waits for a worker thread, longer than this (0: never).
  double stall_timeout_s = 60;
  // Admission: engine sequences admitted at once (running + waiting); beyond
  // it generation requests get 503 + Retry-After. 0: no limit.
  int64_t max_admitted_sequences = 0;
  // --ssl-certfile/--ssl-keyfile/--ssl-ca-certs: HTTPS on the same port
  // (every route, /metrics and the probes included); not enabled: plain HTTP.
  tls::TlsCredentials tls;
};

/// Thread-safe: handlers on the I/O and worker threads read it; SetEngine
/// and StartDraining come from the serve thread.
class ServerState {
 public:
  ServerState(HttpOptions options, ServerMetrics* metrics)
      : options_(std::move(options)), metrics_(metrics) {}

  /// The options the server was started with (immutable).
  const HttpOptions& options() const { return options_; }
  /// Where responses are counted and /metrics is rendered from (may be null in tests).
  ServerMetrics* metrics() const { return metrics_; }

  /// Publishes the loaded engine (not owned; it must outlive the server):
  /// builds the model context and the chat template first (throws tq::Error
  /// for a template that does not parse), then makes the API available.
  void SetEngine(Engine* engine);
  /// Null while loading.
  Engine* engine() const { return engine_.load(std::memory_order_acquire); }
  /// The engine for an API call; throws ApiException 503 while loading or draining.
  Engine& ReadyEngine() const;
  /// The served model's limits and defaults; valid once engine() is non-null.
  const guard::ModelLimits& model() const { return model_; }
  /// The model's chat template (or the fallback); valid once engine() is non-null.
  const ChatTemplate& chat_template() const { return *chat_template_; }

  /// New API requests get 503 from now on (/health too).
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  /// Counts one generation request of `sequences` choices while alive (for
  /// the drain and admission control). Throws ApiException 503 with
  /// Retry-After when options.max_admitted_sequences would be exceeded (a
  /// request alone over the limit is still admitted when nothing else runs).
  class InFlight {
   public:
    explicit InFlight(ServerState* state, int64_t sequences = 1);
    ~InFlight();
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    ServerState* state_;
    int64_t sequences_;
  };
  /// Waits until no generation request is in flight or `deadline`; true when idle.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  /// Generation requests in flight now (for the drain's log lines).
  int64_t in_flight() const;

  /// The HTTP worker pool's queue (the server enqueues and starts its tasks here).
  guard::WaitWatch& worker_queue() { return worker_queue_; }
  /// What /livez (and gRPC health "liveness") answers now
  /// (guard::JudgeLiveness with options.stall_timeout_s). Thread-safe.
  guard::Liveness Liveness() const;

 private:
  const HttpOptions options_;
  ServerMetrics* const metrics_;
  std::atomic<Engine*> engine_{nullptr};
  guard::ModelLimits model_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::atomic<bool> draining_{false};
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  int64_t in_flight_ = 0;
  int64_t sequences_ = 0;  // choices of the requests in flight
  guard::WaitWatch worker_queue_;
};

}  // namespace tq::http
