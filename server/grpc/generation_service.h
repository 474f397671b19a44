// tqserve.v1.GenerationService on gRPC's callback API with raw (ByteBuffer)
// methods: the service parses requests itself (a malformed one gets
// INVALID_ARGUMENT), no thread is held per call, the engine reached through
// Engine (no scheduling here).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "engine/runtime/engine.h"
#include "server/grpc/generate_request.h"
#include "server/grpc/generate_stream.h"
#include "server/guard/api_keys.h"
#include "server/metrics/server_metrics.h"
#include "server/tls/tls_credentials.h"
#include "tqserve/v1/generation.grpc.pb.h"

namespace tq::grpc_api {

/// Options of the gRPC front end (`tqserve serve --grpc-port ...`).
struct GrpcOptions {
  std::string host = "0.0.0.0";
  int port = 50051;                  // 0: any free port (tests)
  std::string served_model_name;     // requests' `model` must be "" or this
  int max_concurrent_streams = 512;  // open Generate calls; more: RESOURCE_EXHAUSTED
  int max_message_bytes = 64 << 20;  // largest request (prompt) accepted
  bool log_requests = true;          // one info line per Generate
  guard::ApiKeys api_keys;           // --api-key: every call but health needs one
  bool server_details = false;       // --expose-server-details: GetServerInfo's versions, model_dir
  tls::TlsCredentials tls;           // --ssl-certfile/--ssl-keyfile: TLS on the gRPC port too
  // Whether the daemon is alive (the health service "liveness": serve passes
  // the HTTP server's /livez verdict, server/guard/liveness.h). Unset: alive
  // unless a loaded engine's loop has died. Called on the health monitor thread.
  std::function<bool()> liveness;
};

namespace detail {
namespace pb = tqserve::v1;
/// Every method raw and on the callback API.
using RawCallbackService = pb::GenerationService::WithRawCallbackMethod_Generate<
    pb::GenerationService::WithRawCallbackMethod_Tokenize<
        pb::GenerationService::WithRawCallbackMethod_Detokenize<
            pb::GenerationService::WithRawCallbackMethod_ListModels<
                pb::GenerationService::WithRawCallbackMethod_GetServerInfo<
                    pb::GenerationService::Service>>>>>;
}  // namespace detail

/// The service. Thread-safe: handlers run on gRPC's callback threads (unary
/// calls answer there; they are short), SetEngine and StartDraining come from
/// the serving thread. Every call is counted in
/// ServerMetrics::OnApiRequest("grpc", <method>, <status code name>),
/// malformed requests (INVALID_ARGUMENT "malformed <Type>: ...") too.
///
/// Generate submits one EngineRequest and returns a GenerateStream reactor
/// that the engine's output wakes (through one StreamWaker thread): no thread
/// is held per stream. A cancelled call, an expired deadline or a failed
/// write (client gone) aborts the engine request, which frees its KV blocks
/// in the engine's next step.
class GenerationServiceImpl final : public detail::RawCallbackService {
 public:
  /// `metrics` may be null (no counting); it must outlive the service.
  GenerationServiceImpl(GrpcOptions options, ServerMetrics* metrics);

  /// Publishes the loaded engine (not owned; must outlive the service's
  /// calls). Until then every call gets UNAVAILABLE.
  void SetEngine(Engine* engine);
  /// Null while loading.
  Engine* engine() const { return engine_.load(std::memory_order_acquire); }

  /// New calls get UNAVAILABLE from now on (GetServerInfo still answers);
  /// Generate calls in flight continue.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  /// Waits until no Generate call is in flight or `deadline`; true when idle.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  /// Generate calls in flight.
  int64_t in_flight() const;

  /// The handlers: `request` holds the serialized request message;
  /// `response` receives the serialized response.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;

 private:
  class InFlight;

  // One unary call: parses `bytes` as Request, runs body(request, &response)
  // (which may throw RpcError), serializes the response into `out`, counts
  // the call and finishes it.
  template <typename Request, typename Response, typename Body>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, const char* method,
                                  const grpc::ByteBuffer* bytes, grpc::ByteBuffer* out,
                                  Body&& body);

  // The engine for a call; throws RpcError UNAVAILABLE while loading or
  // draining (or, with allow_draining, only while loading).
  Engine& ReadyEngine(bool allow_draining = false) const;
  // Counts the call in the metrics and returns `status`.
  grpc::Status Record(const char* method, const grpc::Status& status) const;
  // Counts and logs one finished Generate call.
  void EndGenerate(const std::string& id, int32_t prompt_tokens, const StreamEnd& end,
                   std::chrono::steady_clock::time_point start) const;

  const GrpcOptions options_;
  ServerMetrics* const metrics_;
  std::atomic<Engine*> engine_{nullptr};
  guard::ModelLimits limits_;   // set before engine_ is published
  int64_t created_unix_s_ = 0;  // when SetEngine ran (ModelCard.created)
  std::atomic<bool> draining_{false};
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  int64_t in_flight_ = 0;
  StreamWaker waker_;  // last: its thread stops before the rest goes
};

}  // namespace tq::grpc_api
