// The gRPC server: service, health, reflection (see grpc_server.h).
#include "server/grpc/grpc_server.h"

#include <grpc/support/log.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/common/error.h"
#include "server/guard/liveness.h"

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

// gRPC's own log (gpr_log; ERROR and above unless GRPC_VERBOSITY says
// otherwise) goes through spdlog, one line per message, so that it reads as
// the daemon's log. While a server starts, messages are held instead
// (g_held): a port that cannot be bound then becomes one error line with
// the reason rather than gRPC's multi-line internal status.
std::mutex g_log_mu;
std::vector<std::string>* g_held = nullptr;  // guarded by g_log_mu

void LogThroughSpdlog(gpr_log_func_args* args) {
  std::string message = args->message != nullptr ? args->message : "";
  std::replace(message.begin(), message.end(), '\n', ' ');
  {
    std::lock_guard<std::mutex> lock(g_log_mu);
    if (g_held != nullptr) {
      g_held->push_back(std::move(message));
      return;
    }
  }
  const spdlog::level::level_enum level =
      args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
      : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                : spdlog::level::debug;
  spdlog::log(level, "gRPC: {}", message);
}

// Why `host`:`port` cannot be bound, asked of the kernel directly (as gRPC
// binds it: SO_REUSEADDR, no SO_REUSEPORT): strerror's text ("Address already
// in use"), or "" when a test bind succeeds (the reason is elsewhere).
std::string BindFailure(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string name = host.size() > 1 && host.front() == '[' && host.back() == ']'
                               ? host.substr(1, host.size() - 2)
                               : host;
  if (const int rc = getaddrinfo(name.empty() ? nullptr : name.c_str(),
                                 std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    return gai_strerror(rc);
  }
  std::string why;
  for (addrinfo* a = found; a != nullptr && why.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return why;
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
  std::vector<std::string> held;
  {
    std::lock_guard<std::mutex> lock(g_log_mu);
    gpr_set_log_function(&LogThroughSpdlog);
    g_held = &held;
  }
  server_ = builder.BuildAndStart();
  {
    std::lock_guard<std::mutex> lock(g_log_mu);
    g_held = nullptr;
  }
  if (server_ == nullptr || port == 0) {
    server_.reset();
    std::string why = BindFailure(options_.host, options_.port);
    if (why.empty() && !held.empty()) why = held.front();  // gRPC's own words, on one line
    throw Error("--grpc-port " + std::to_string(options_.port) + ": cannot listen on " + address +
                (why.empty() ? "" : " (" + why + ")"));
  }
  for (const std::string& message : held) spdlog::warn("gRPC: {}", message);
  // The default health service starts out SERVING; nothing can have asked
  // yet (a client needs a connection first), and until SetEngine it is not.
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", false);
  health->SetServingStatus(kGenerationServiceName, false);
  alive_at_start_ = Alive();
  health->SetServingStatus(kLivenessServiceName, alive_at_start_);
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

bool GrpcServer::Alive() const {
  if (options_.liveness) return options_.liveness();
  const Engine* engine = service_->engine();
  if (engine == nullptr) return true;
  const EngineStats stats = engine->Stats();
  return guard::JudgeLiveness(&stats, service_->draining(), 0.0, 0.0).alive;
}

void GrpcServer::MonitorHealth() {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  bool serving = false;
  bool alive = alive_at_start_;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (const bool now = Serving(); now != serving) {
      serving = now;
      health->SetServingStatus("", serving);
      health->SetServingStatus(kGenerationServiceName, serving);
    }
    if (const bool now = Alive(); now != alive) {
      alive = now;
      health->SetServingStatus(kLivenessServiceName, alive);
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
