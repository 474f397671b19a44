// The gRPC server: service, health, reflection (see grpc_server.h).
#include "server/grpc/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "engine/common/error.h"

namespace tq::grpc_api {
namespace {

// "host:port", IPv6 literals in brackets ("[::]:50051"), as gRPC's URI wants.
std::string ListenAddress(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

constexpr std::chrono::milliseconds kHealthPeriod(100);
// Threads of gRPC's synchronous server (reflection calls).
constexpr int kMaxSyncThreads = 16;

// Plaintext, or TLS with the daemon's certificate (--ssl-certfile/--ssl-keyfile);
// with --ssl-ca-certs every client must present a certificate those CAs signed.
std::shared_ptr<grpc::ServerCredentials> Credentials(const tls::TlsCredentials& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      tls.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.client_ca_pem;
  options.pem_key_cert_pairs.push_back({tls.private_key_pem, tls.cert_chain_pem});
  return grpc::SslServerCredentials(options);
}

}  // namespace

GrpcServer::GrpcServer(GrpcOptions options, ServerMetrics* metrics)
    : options_(std::move(options)),
      service_(std::make_unique<GenerationServiceImpl>(options_, metrics)) {}

GrpcServer::~GrpcServer() {
  Stop();
}

int GrpcServer::Start() {
  // Process-wide switches, read when a server is built.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string address = ListenAddress(options_.host, options_.port);
  builder.AddListeningPort(address, Credentials(options_.tls), &port);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  // gRPC sets SO_REUSEPORT by default, so a second daemon on the same port
  // would start and silently take half the connections: fail instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // GenerationService runs on the callback API (no thread per call); only
  // server reflection still uses the synchronous API, one thread per call:
  // bound those. gRPC answers calls it has no thread for with
  // RESOURCE_EXHAUSTED.
  grpc::ResourceQuota quota("tqserve-grpc");
  quota.SetMaxThreads(kMaxSyncThreads);
  builder.SetResourceQuota(quota);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    server_.reset();
    throw Error("gRPC: cannot listen on " + address);
  }
  // The default health service starts out SERVING; nothing can have asked
  // yet (a client needs a connection first), and until SetEngine it is not.
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", false);
  health->SetServingStatus(kGenerationServiceName, false);
  monitor_ = std::thread([this] { MonitorHealth(); });
  return port;
}

void GrpcServer::SetEngine(Engine* engine) {
  service_->SetEngine(engine);
  cv_.notify_all();  // SERVING now rather than at the next period
}

void GrpcServer::StartDraining() {
  service_->StartDraining();
  cv_.notify_all();
}

bool GrpcServer::Serving() const {
  const Engine* engine = service_->engine();
  if (engine == nullptr || service_->draining()) return false;
  const EngineStats stats = engine->Stats();
  return stats.alive && !stats.draining;
}

void GrpcServer::MonitorHealth() {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  bool serving = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (const bool now = Serving(); now != serving) {
      serving = now;
      health->SetServingStatus("", serving);
      health->SetServingStatus(kGenerationServiceName, serving);
    }
    cv_.wait_for(lock, kHealthPeriod);
  }
}

void GrpcServer::Stop(std::chrono::milliseconds grace) {
  if (server_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (monitor_.joinable()) monitor_.join();
  service_->StartDraining();
  // NOT_SERVING for every service, and later status changes are ignored.
  server_->GetHealthCheckService()->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
  server_.reset();
}

}  // namespace tq::grpc_api
