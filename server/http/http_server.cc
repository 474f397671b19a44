// The event-driven HTTP server: acceptor, I/O and worker threads, request
// dispatch and accounting (see http_server.h).
#include "server/http/http_server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "engine/common/error.h"
#include "server/guard/http_guard.h"
#include "server/guard/log_field.h"
#include "server/guard/request_limits.h"
#include "server/http/connection.h"
#include "server/http/json_fields.h"
#include "server/http/routing.h"
#include "server/http/tls_context.h"

namespace tq::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

HttpOptions WithGuardLimits(HttpOptions options) {
  options.guard.max_body_bytes = options.max_body_bytes;
  return options;
}

// The guards' view of a request head (server/guard/http_guard.h); borrows
// `req`, which must outlive it.
guard::RequestHead GuardView(const HttpRequest& req) {
  return guard::RequestHead{req.method,
                            req.path,
                            [&req](std::string_view name) -> std::optional<std::string> {
                              const auto value = req.header(name);
                              if (!value) return std::nullopt;
                              return std::string(*value);
                            },
                            req.version,
                            req.header_count("Host"),
                            req.authority};
}

}  // namespace

class HttpServer::Impl final : public ConnectionHost {
 public:
  Impl(HttpOptions options, ServerMetrics* metrics)
      : state_(WithGuardLimits(std::move(options)), metrics),
        tls_(state_.options().tls.enabled() ? MakeServerTlsContext(state_.options().tls) : nullptr),
        io_(std::max(1, state_.options().io_threads)),
        acceptor_(asio::make_strand(io_)),
        work_guard_(asio::make_work_guard(io_)) {}

  ~Impl() override { Stop(); }

  int Bind() {
    const HttpOptions& o = state_.options();
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(o.host == "localhost" ? "127.0.0.1" : o.host, ec);
    if (!ec) {
      const tcp::endpoint endpoint(address, static_cast<unsigned short>(o.port));
      acceptor_.open(endpoint.protocol(), ec);
      // SO_REUSEADDR (a restart while old connections sit in TIME_WAIT), never
      // SO_REUSEPORT (a second daemon would silently share the port).
      if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) acceptor_.bind(endpoint, ec);
      if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    }
    if (ec) {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      throw Error("--host " + o.host + " --port " + std::to_string(o.port) +
                  ": cannot listen there (" + ec.message() + ")");
    }
    return acceptor_.local_endpoint().port();
  }

  void Start() {
    const HttpOptions& o = state_.options();
    pool_.emplace(static_cast<size_t>(std::max(1, o.worker_threads)));
    Accept();
    for (int i = 0; i < std::max(1, o.io_threads); ++i) {
      threads_.emplace_back([this] { io_.run(); });
    }
  }

  void StartDraining() {
    // The listener stays open so that probes and late clients get an
    // explicit 503 (with Connection: close) instead of a refused connection;
    // Stop closes it.
    state_.StartDraining();
    for (const auto& c : Snapshot()) c->CloseIfIdle();
  }

  void Stop() {
    if (stopped_.exchange(true)) return;
    state_.StartDraining();
    asio::post(acceptor_.get_executor(), [this] {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
    });
    for (const auto& c : Snapshot()) c->CloseNow();
    work_guard_.reset();
    // Give the closes a moment to run on the loop, then stop it.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (num_connections() > 0 && std::chrono::steady_clock::now() < until && !threads_.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    io_.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    if (pool_) pool_->join();
    std::lock_guard<std::mutex> lock(mu_);
    connections_.clear();  // the loop is gone: drop what it still held
  }

  void AddGuard(RequestGuard guard) { guards_.push_back(std::move(guard)); }

  int64_t num_connections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(connections_.size());
  }

  ServerState& state() { return state_; }

  // ConnectionHost.
  void Handle(HttpRequest&& request, std::function<void(HttpResponse&&)> original_done) override {
    // CORS headers (--allowed-origins) go on every response to an allowed Origin.
    auto cors = guard::ResponseHeaders(state_.options().guard, GuardView(request));
    std::function<void(HttpResponse &&)> done =
        cors.empty()
            ? std::move(original_done)
            : [cors = std::move(cors), inner = std::move(original_done)](HttpResponse&& r) {
                for (const auto& [name, value] : cors) r.set_header(name, value);
                inner(std::move(r));
              };
    HttpResponse res;
    for (const RequestGuard& guard : guards_) {
      // Request guards (issue 20: API keys, content types, limits) run here,
      // before any route.
      if (std::optional<ApiError> error = guard(request)) {
        SendError(res, *error);
        done(std::move(res));
        return;
      }
    }
    const Route* route = FindRoute(request, res);
    if (route == nullptr || route->on_io_thread) {
      if (route != nullptr) Guarded(state_, route->handler, request, res);
      done(std::move(res));
      return;
    }
    const uint64_t ticket = state_.worker_queue().Enqueued();  // for /livez's pool bound
    asio::post(*pool_, [this, route, ticket, request = std::move(request),
                        done = std::move(done)]() mutable {
      state_.worker_queue().Started(ticket);
      const size_t bytes = request.body.size();
      {
        const HttpRequest local = std::move(request);
        HttpResponse res;
        Guarded(state_, route->handler, local, res);
        done(std::move(res));
      }
      guard::ReleaseFreedMemory(bytes);  // a big prompt's freed heap
    });
  }

  std::optional<HttpResponse> CheckHead(const HttpRequest& head) override {
    // Before the body is read: the request guards (server/guard/http_guard.h).
    const guard::RequestHead view = GuardView(head);
    const std::optional<guard::HttpRefusal> refusal =
        guard::CheckRequestHead(state_.options().guard, view);
    if (!refusal) return std::nullopt;
    if (state_.metrics() != nullptr && !refusal->reason.empty()) {
      state_.metrics()->OnRefused("http", refusal->reason);
    }
    HttpResponse res;
    for (const auto& [name, value] : guard::ResponseHeaders(state_.options().guard, view)) {
      res.set_header(name, value);
    }
    for (const auto& [name, value] : refusal->headers) res.set_header(name, value);
    if (refusal->status == 204) {
      res.status = 204;  // a CORS preflight: headers only
    } else {
      SendError(res, ApiError{refusal->status, refusal->message, "", "", refusal->code});
    }
    return res;
  }

  void OnResponseWritten(const HttpRequest& request, int status) override {
    if (state_.metrics() != nullptr) {
      state_.metrics()->OnApiRequest("http", RouteLabel(request.path), std::to_string(status));
    }
    if (state_.options().log_requests) {
      // The method and path are the client's bytes: bounded (guard/log_field.h).
      spdlog::info("{}:{} \"{} {}\" {}", request.remote_addr, request.remote_port,
                   guard::LogField(request.method), guard::LogField(request.path), status);
    }
  }

  void OnClosed(Connection* connection) override {
    std::lock_guard<std::mutex> lock(mu_);
    connections_.erase(connection);
  }

  const HttpOptions& options() const override { return state_.options(); }
  bool draining() const override { return state_.draining(); }

 private:
  std::vector<std::shared_ptr<Connection>> Snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<Connection>> out;
    out.reserve(connections_.size());
    for (auto& [raw, c] : connections_) out.push_back(c);
    return out;
  }

  void Accept() {
    acceptor_.async_accept(
        asio::make_strand(io_), [this](boost::system::error_code ec, tcp::socket socket) {
          if (ec) {
            if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;  // drain/stop
            // EMFILE and friends: keep accepting (the backlog holds the rest).
            spdlog::warn("accept: {}", ec.message());
          } else if (num_connections() >= state_.options().max_connections) {
            Refuse(std::move(socket));
          } else {
            auto connection = std::make_shared<Connection>(std::move(socket), this, tls_.get());
            {
              std::lock_guard<std::mutex> lock(mu_);
              connections_.emplace(connection.get(), connection);
            }
            connection->Start();
          }
          if (acceptor_.is_open()) Accept();
        });
  }

  // Over --max-connections: one 503 written without waiting, then closed.
  // With TLS it is closed at once (a plaintext 503 is no answer to a
  // ClientHello, and a handshake per refusal would cost the work the cap saves).
  void Refuse(tcp::socket socket) {
    if (state_.metrics() != nullptr) state_.metrics()->OnRefused("http", "max_connections");
    boost::system::error_code ignored;
    if (tls_) {
      socket.close(ignored);
      return;
    }
    ApiError error = Unavailable("too many open connections (--max-connections " +
                                 std::to_string(state_.options().max_connections) + ")");
    error.retry_after_s = 1;
    const std::string body = DumpJson(ErrorJson(error));
    const std::string reply =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: "
        "1\r\nConnection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    socket.non_blocking(true, ignored);
    socket.write_some(asio::buffer(reply), ignored);
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
  }

  ServerState state_;
  std::unique_ptr<asio::ssl::context> tls_;  // null: plaintext; shared by the connections
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::executor_work_guard<asio::io_context::executor_type> work_guard_;
  std::optional<asio::thread_pool> pool_;
  std::vector<std::thread> threads_;
  std::vector<RequestGuard> guards_;
  mutable std::mutex mu_;  // guards connections_
  std::unordered_map<Connection*, std::shared_ptr<Connection>> connections_;
  std::atomic<bool> stopped_{false};
};

HttpServer::HttpServer(HttpOptions options, ServerMetrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), metrics)) {}

HttpServer::~HttpServer() = default;

int HttpServer::Bind() {
  return impl_->Bind();
}
void HttpServer::Start() {
  impl_->Start();
}
void HttpServer::AddGuard(RequestGuard guard) {
  impl_->AddGuard(std::move(guard));
}
void HttpServer::StartDraining() {
  impl_->StartDraining();
}
void HttpServer::Stop() {
  impl_->Stop();
}
int64_t HttpServer::num_connections() const {
  return impl_->num_connections();
}
ServerState& HttpServer::state() {
  return impl_->state();
}

}  // namespace tq::http
