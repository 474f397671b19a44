// The gRPC server of `tqserve serve`: tqserve.v1.GenerationService,
// grpc.health.v1 (gRPC's built-in health service) and server reflection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/runtime/engine.h"
#include "server/grpc/generation_service.h"
#include "server/metrics/server_metrics.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tq::grpc_api {

/// Fully qualified name of the service, as health checks and reflection name it.
inline constexpr const char* kGenerationServiceName = "tqserve.v1.GenerationService";
/// The health service name of liveness (HTTP /livez's meaning), for
/// Kubernetes' `grpc: {port: 50051, service: liveness}` livenessProbe.
inline constexpr const char* kLivenessServiceName = "liveness";

/// Owns the gRPC server. Health: grpc.health.v1 reports SERVING for "" (the
/// whole server) and for kGenerationServiceName only while an engine is set,
/// alive (EngineStats::alive) and not draining (readiness, HTTP /health's
/// meaning); for kLivenessServiceName while options.liveness says alive
/// (HTTP /livez's meaning: SERVING while loading and draining). A monitor
/// thread re-checks every 100 ms, so an engine failure or stall turns them
/// NOT_SERVING. Reflection
/// (grpc.reflection.v1alpha, what grpcurl and Postman use) lists the service.
/// Start, SetEngine, StartDraining, service().WaitIdle and Stop are called
/// from one serving thread; the calls themselves run on gRPC's threads.
class GrpcServer {
 public:
  /// `metrics` may be null; it must outlive the server.
  GrpcServer(GrpcOptions options, ServerMetrics* metrics);
  /// Stops the server (Stop with no grace) if it runs.
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  /// Listens on options.host:options.port and starts serving (UNAVAILABLE and
  /// NOT_SERVING until SetEngine). Returns the port (the one picked when the
  /// option is 0). Throws tq::Error when it cannot listen.
  int Start();
  /// Publishes the loaded engine (not owned; it must outlive the server);
  /// health turns SERVING.
  void SetEngine(Engine* engine);
  /// Health NOT_SERVING and new calls UNAVAILABLE; Generate calls in flight
  /// continue (the caller drains the engine: Engine::StartDraining).
  void StartDraining();
  /// Shuts down: calls still running after `grace` are cancelled (a
  /// cancelled Generate aborts its engine request), then waits for their
  /// handlers. Idempotent.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));

  /// The service: Generate calls in flight (in_flight, WaitIdle).
  GenerationServiceImpl& service() { return *service_; }

 private:
  void MonitorHealth();
  // The "liveness" health status now (options_.liveness, or the engine's loop).
  bool Alive() const;
  bool alive_at_start_ = true;  // the liveness status Start set (before the monitor runs)
  bool Serving() const;

  const GrpcOptions options_;
  std::unique_ptr<GenerationServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::thread monitor_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

}  // namespace tq::grpc_api
