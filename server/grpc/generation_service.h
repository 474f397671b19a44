// tqserve.v1.GenerationService on gRPC's synchronous API: one handler thread
// per call, the engine reached through EngineClient (no scheduling here).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "engine/runtime/engine_client.h"
#include "server/grpc/generate_request.h"
#include "server/guard/api_keys.h"
#include "server/metrics/server_metrics.h"
#include "server/tls/tls_credentials.h"
#include "tqserve/v1/generation.grpc.pb.h"

namespace tq::grpc_api {

/// Options of the gRPC front end (`tqserve serve --grpc-port ...`).
struct GrpcOptions {
  std::string host = "0.0.0.0";
  int port = 50051;                           // 0: any free port (tests)
  std::string served_model_name;              // requests' `model` must be "" or this
  int max_concurrent_streams = 512;           // open Generate calls; more: RESOURCE_EXHAUSTED
  int max_message_bytes = 64 << 20;           // largest request (prompt) accepted
  std::chrono::milliseconds cancel_poll{10};  // how often a stream checks for cancellation
  bool log_requests = true;                   // one info line per Generate
  guard::ApiKeys api_keys;                    // --api-key: every call but health needs one
  bool server_details = false;  // --expose-server-details: GetServerInfo's versions, model_dir
  tls::TlsCredentials tls;      // --ssl-certfile/--ssl-keyfile: TLS on the gRPC port too
};

/// The service. Thread-safe: gRPC runs each call on its own thread; SetEngine
/// and StartDraining come from the serving thread. Every call is counted in
/// ServerMetrics::OnApiRequest("grpc", <method>, <status code name>).
///
/// Generate submits one EngineRequest and relays its RequestStream, checking
/// ServerContext::IsCancelled between outputs (every options.cancel_poll): a
/// cancelled call, an expired deadline or a failed write (client gone) aborts
/// the engine request, which frees its KV blocks in the engine's next step.
class GenerationServiceImpl final : public tqserve::v1::GenerationService::Service {
 public:
  /// `metrics` may be null (no counting); it must outlive the service.
  GenerationServiceImpl(GrpcOptions options, ServerMetrics* metrics);

  /// Publishes the loaded engine (not owned; must outlive the service's
  /// calls). Until then every call gets UNAVAILABLE.
  void SetEngine(EngineClient* engine);
  /// Null while loading.
  EngineClient* engine() const { return engine_.load(std::memory_order_acquire); }

  /// New calls get UNAVAILABLE from now on (GetServerInfo still answers);
  /// Generate calls in flight continue.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  /// Waits until no Generate call is in flight or `deadline`; true when idle.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  /// Generate calls in flight.
  int64_t in_flight() const;

  grpc::Status Generate(grpc::ServerContext* context, const tqserve::v1::GenerateRequest* request,
                        grpc::ServerWriter<tqserve::v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const tqserve::v1::TokenizeRequest* request,
                        tqserve::v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context,
                          const tqserve::v1::DetokenizeRequest* request,
                          tqserve::v1::DetokenizeResponse* response) override;
  grpc::Status ListModels(grpc::ServerContext* context,
                          const tqserve::v1::ListModelsRequest* request,
                          tqserve::v1::ListModelsResponse* response) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context,
                             const tqserve::v1::GetServerInfoRequest* request,
                             tqserve::v1::GetServerInfoResponse* response) override;

 private:
  class InFlight;
  struct StreamResult;

  // The engine for a call; throws RpcError UNAVAILABLE while loading or
  // draining (or, with allow_draining, only while loading).
  EngineClient& ReadyEngine(bool allow_draining = false) const;
  // Counts the call in the metrics and returns `status`.
  grpc::Status Record(const char* method, const grpc::Status& status) const;
  // Relays one submitted request's outputs to the client.
  StreamResult RunStream(grpc::ServerContext* context, EngineClient& engine,
                         const GenerateParams& params,
                         grpc::ServerWriter<tqserve::v1::GenerateResponse>* writer);

  const GrpcOptions options_;
  ServerMetrics* const metrics_;
  std::atomic<EngineClient*> engine_{nullptr};
  ModelLimits limits_;          // set before engine_ is published
  int64_t created_unix_s_ = 0;  // when SetEngine ran (ModelCard.created)
  std::atomic<bool> draining_{false};
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  int64_t in_flight_ = 0;
};

}  // namespace tq::grpc_api
