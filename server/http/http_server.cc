// Routing, errors and request accounting of the HTTP server (see http_server.h).
#include "server/http/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <chrono>

#include "engine/common/error.h"
#include "server/guard/request_limits.h"
#include "server/http/json_fields.h"
#include "server/http/routes.h"

namespace tq::http {
namespace {

using nlohmann::json;

struct Route {
  const char* method;
  const char* path;
  RouteHandler handler;
};

const std::vector<Route>& Routes() {
  static const std::vector<Route> routes = {
      {"POST", "/v1/completions", HandleCompletions},
      {"POST", "/v1/chat/completions", HandleChatCompletions},
      {"GET", "/v1/models", HandleModels},
      {"POST", "/tokenize", HandleTokenize},
      {"POST", "/detokenize", HandleDetokenize},
      {"GET", "/health", HandleHealth},
      {"GET", "/livez", HandleLivez},
      {"GET", "/metrics", HandleMetrics},
      {"GET", "/version", HandleVersion},
  };
  return routes;
}

// The metrics label of a path: a known route, else "other" (bounded cardinality).
std::string RouteLabel(const std::string& path) {
  for (const Route& r : Routes()) {
    if (path == r.path) return path;
  }
  return "other";
}

// 404 and 405 (httplib answers both as 404 without a body), and httplib's
// own errors (400 malformed request, 413 body too large, ...), as OpenAI JSON.
httplib::Server::HandlerResponse OnError(const httplib::Request& req, httplib::Response& res,
                                         ServerMetrics* metrics) {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours already
  ApiError error;
  error.status = res.status;
  if (res.status == 404) {
    std::string allowed;
    for (const Route& r : Routes()) {
      if (req.path == r.path) allowed += (allowed.empty() ? "" : ", ") + std::string(r.method);
    }
    if (!allowed.empty()) {
      error.status = 405;
      error.message = "Method " + req.method + " not allowed for " + req.path;
      error.code = "method_not_allowed";
      res.set_header("Allow", allowed);
    } else {
      error.message = "Invalid URL (" + req.method + " " + req.path + ")";
      error.code = "not_found";
    }
  } else if (res.status == 413) {
    // httplib refuses a Content-Length over the limit before reading the body.
    error.message = "request body too large";
    if (metrics != nullptr) metrics->OnRefused("http", "body_too_large");
  } else if (res.status == 400 && req.method == "POST" && !req.has_header("Content-Length") &&
             !req.has_header("Transfer-Encoding")) {
    // httplib refuses a POST without a length before any route runs.
    error.message = "the request has no body: send a JSON body with a Content-Length";
  } else {
    error.message = "HTTP error " + std::to_string(res.status);
  }
  SendError(res, error);
  return httplib::Server::HandlerResponse::Handled;
}

HttpOptions WithGuardLimits(HttpOptions options) {
  options.guard.max_body_bytes = options.max_body_bytes;
  return options;
}

// Before the body is read: the request guards (server/guard/http_guard.h).
httplib::Server::HandlerResponse PreRouting(const ServerState& state, const httplib::Request& req,
                                            httplib::Response& res) {
  const guard::RequestHead head{req.method, req.path,
                                [&req](std::string_view name) -> std::optional<std::string> {
                                  const std::string key(name);
                                  if (!req.has_header(key)) return std::nullopt;
                                  return req.get_header_value(key);
                                }};
  for (const auto& [name, value] : guard::ResponseHeaders(state.options().guard, head)) {
    res.set_header(name, value);
  }
  const std::optional<guard::HttpRefusal> refusal =
      guard::CheckRequestHead(state.options().guard, head);
  if (!refusal) return httplib::Server::HandlerResponse::Unhandled;
  if (state.metrics() != nullptr && !refusal->reason.empty()) {
    state.metrics()->OnRefused("http", refusal->reason);
  }
  for (const auto& [name, value] : refusal->headers) res.set_header(name, value);
  res.set_header("Connection", "close");  // the body, if any, is not read
  if (refusal->status == 204) {
    res.status = 204;  // a CORS preflight: headers only
  } else {
    SendError(res, ApiError{refusal->status, refusal->message, "", "", refusal->code});
  }
  return httplib::Server::HandlerResponse::Handled;
}

}  // namespace

void SendJson(httplib::Response& res, const json& body, int status) {
  res.status = status;
  res.set_content(DumpJson(body), "application/json");
}

void SendError(httplib::Response& res, const ApiError& error) {
  SendJson(res, ErrorJson(error), error.status);
}

json ParseJsonBody(const httplib::Request& req) {
  // nlohmann parses any depth, but copying or printing a value recurses:
  // refuse absurd nesting before it can reach such code.
  if (JsonNestingDepth(req.body) > kMaxJsonDepth) {
    throw ApiException(BadRequest("the request body is nested more than " +
                                  std::to_string(kMaxJsonDepth) + " levels deep"));
  }
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    throw ApiException(BadRequest("the request body is not valid JSON"));
  }
  if (!body.is_object()) {
    throw ApiException(
        BadRequest("the request body must be a JSON object, got " + JsonTypeName(body)));
  }
  return body;
}

httplib::Server::Handler Guarded(ServerState& state, RouteHandler handler) {
  return
      [&state, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
        try {
          handler(state, req, res);
        } catch (const ApiException& e) {
          if (state.metrics() != nullptr && !e.reason().empty()) {
            state.metrics()->OnRefused("http", e.reason());
          }
          SendError(res, e.error());
        } catch (const EngineUnavailable& e) {
          SendError(res, Unavailable(std::string("the engine takes no requests: ") + e.what()));
        } catch (const Error& e) {
          // EngineClient::Submit validates too; what it refuses is the request's fault.
          SendError(res, BadRequest(e.what()));
        } catch (const std::exception& e) {
          spdlog::error("{} {}: {}", req.method, req.path, e.what());
          SendError(res, InternalError(std::string("internal error: ") + e.what()));
        }
      };
}

HttpServer::HttpServer(HttpOptions options, ServerMetrics* metrics)
    : state_(WithGuardLimits(std::move(options)), metrics),
      server_(std::make_unique<httplib::Server>()) {
  const size_t workers = static_cast<size_t>(std::max(1, state_.options().max_connections));
  server_->new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  server_->set_payload_max_length(state_.options().max_body_bytes);
  // httplib's default sets SO_REUSEPORT, which lets a second daemon bind the
  // same port and silently share its traffic; SO_REUSEADDR alone still allows
  // a restart while old connections sit in TIME_WAIT, and refuses a port in use.
  server_->set_socket_options([this](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd_ = sock;  // the last socket created is the one that bound
  });
  RegisterRoutes();
}

HttpServer::~HttpServer() {
  Stop();
}

void HttpServer::RegisterRoutes() {
  for (const Route& r : Routes()) {
    const std::string pattern = r.path;
    if (std::string_view(r.method) == "POST") {
      server_->Post(pattern, Guarded(state_, r.handler));
    } else {
      server_->Get(pattern, Guarded(state_, r.handler));
    }
  }
  server_->set_pre_routing_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        return PreRouting(state_, req, res);
      }));
  server_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        return OnError(req, res, state_.metrics());
      }));
  // Called once per response, after it was written (for a stream: at its end).
  server_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (state_.metrics() != nullptr) {
      state_.metrics()->OnApiRequest("http", RouteLabel(req.path), std::to_string(res.status));
    }
    if (state_.options().log_requests) {
      spdlog::info("{}:{} \"{} {}\" {}", req.remote_addr, req.remote_port, req.method, req.path,
                   res.status);
    }
    guard::ReleaseFreedMemory(req.body.size());  // a big prompt's freed heap
  });
}

int HttpServer::Bind() {
  const HttpOptions& o = state_.options();
  int port = o.port;
  const bool ok = port == 0 ? (port = server_->bind_to_any_port(o.host)) > 0
                            : server_->bind_to_port(o.host, port);
  if (!ok) {
    throw Error("--host " + o.host + " --port " + std::to_string(o.port) +
                ": cannot listen there (address in use or not available)");
  }
  // httplib 0.11.4 listens with a backlog of 5, so a burst of connections
  // stalls in SYN retries for seconds. listen(2) again on a listening socket
  // only updates its backlog (Linux), capped by net.core.somaxconn.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  return port;
}

void HttpServer::Start() {
  listen_returned_ = false;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_ = true;
  });
  // httplib's stop() does nothing until the accept loop has marked itself
  // running; a Stop right after Start would otherwise leave it in accept().
  while (!server_->is_running() && !listen_returned_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace tq::http
