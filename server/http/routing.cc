// Route table, handler guard and JSON helpers of the HTTP API (see routing.h, routes.h).
#include "server/http/routing.h"

#include <spdlog/spdlog.h>

#include <boost/beast/core/string.hpp>
#include <vector>

#include "engine/common/error.h"
#include "engine/runtime/engine.h"
#include "server/guard/log_field.h"
#include "server/http/json_fields.h"

namespace tq::http {
namespace {

using nlohmann::json;

const std::vector<Route>& Routes() {
  static const std::vector<Route> routes = {
      {"POST", "/v1/completions", HandleCompletions, false},
      {"POST", "/v1/chat/completions", HandleChatCompletions, false},
      {"GET", "/v1/models", HandleModels, true},
      {"POST", "/tokenize", HandleTokenize, false},
      {"POST", "/detokenize", HandleDetokenize, false},
      {"GET", "/health", HandleHealth, true},
      {"GET", "/livez", HandleLivez, true},
      {"GET", "/metrics", HandleMetrics, true},
      {"GET", "/version", HandleVersion, true},
  };
  return routes;
}

}  // namespace

std::string RouteLabel(const std::string& path) {
  for (const Route& r : Routes()) {
    if (path == r.path) return path;
  }
  return "other";
}

const Route* FindRoute(const HttpRequest& req, HttpResponse& res) {
  std::string allowed;
  for (const Route& r : Routes()) {
    if (req.path != r.path) continue;
    if (req.method == r.method) {
      if (req.method == "POST" && !req.has_header("Content-Length") &&
          !req.has_header("Transfer-Encoding")) {
        SendError(res,
                  BadRequest("the request has no body: send a JSON body with a Content-Length"));
        return nullptr;
      }
      return &r;
    }
    allowed += (allowed.empty() ? "" : ", ") + std::string(r.method);
  }
  ApiError error;
  error.status = 404;
  if (!allowed.empty()) {
    error.status = 405;
    error.message = "Method " + req.method + " not allowed for " + req.path;
    error.code = "method_not_allowed";
    res.set_header("Allow", allowed);
  } else {
    error.message = "Invalid URL (" + req.method + " " + req.path + ")";
    error.code = "not_found";
  }
  SendError(res, error);
  return nullptr;
}

void SendJson(HttpResponse& res, const json& body, int status) {
  res.status = status;
  res.set_content(DumpJson(body), "application/json");
}

void SendError(HttpResponse& res, const ApiError& error) {
  SendJson(res, ErrorJson(error), error.status);
  if (error.retry_after_s > 0) res.set_header("Retry-After", std::to_string(error.retry_after_s));
}

json ParseJsonBody(const HttpRequest& req) {
  // nlohmann parses any depth, but copying or printing a value recurses:
  // refuse absurd nesting before it can reach such code.
  if (JsonNestingDepth(req.body) > kMaxJsonDepth) {
    throw ApiException(BadRequest("the request body is nested more than " +
                                  std::to_string(kMaxJsonDepth) + " levels deep"));
  }
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::parse_error& e) {
    // nlohmann's message quotes the input, which may not be UTF-8 itself:
    // say which rule broke and at which byte (0-based; e.byte counts the
    // bytes read, the failing one included), nothing more. JSON text is
    // UTF-8 (RFC 8259 section 8.1).
    const bool utf8 = std::string_view(e.what()).find("UTF-8") != std::string_view::npos;
    throw ApiException(BadRequest(std::string("the request body is not valid ") +
                                  (utf8 ? "UTF-8" : "JSON") + " (at byte " +
                                  std::to_string(e.byte > 0 ? e.byte - 1 : 0) + ")"));
  } catch (const json::out_of_range&) {  // 406: a number past double's range, 1e999
    throw ApiException(
        BadRequest("the request body is not valid JSON (a number beyond the "
                   "range of a double)"));
  }
  if (!body.is_object()) {
    throw ApiException(
        BadRequest("the request body must be a JSON object, got " + JsonTypeName(body)));
  }
  return body;
}

void Guarded(ServerState& state, const RouteHandler& handler, const HttpRequest& req,
             HttpResponse& res) {
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
    // Engine::Submit validates too; what it refuses is the request's fault.
    SendError(res, BadRequest(e.what()));
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", guard::LogField(req.method), guard::LogField(req.path),
                  guard::LogField(e.what()));
    SendError(res, InternalError(std::string("internal error: ") + e.what()));
  }
}

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (boost::beast::iequals(key, {name.data(), name.size()})) return std::string_view(value);
  }
  return std::nullopt;
}

size_t HttpRequest::header_count(std::string_view name) const {
  size_t n = 0;
  for (const auto& [key, value] : headers) {
    if (boost::beast::iequals(key, {name.data(), name.size()})) ++n;
  }
  return n;
}

}  // namespace tq::http
