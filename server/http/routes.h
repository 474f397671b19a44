// HTTP route handlers of the OpenAI-compatible API and their shared helpers.
// Each handler runs on an httplib worker thread; errors are thrown as
// ApiException and turned into OpenAI error JSON by Guarded().
#pragma once

#include <httplib.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "server/http/openai_errors.h"
#include "server/http/server_state.h"

namespace tq::http {

using RouteHandler = std::function<void(ServerState&, const httplib::Request&, httplib::Response&)>;

/// Wraps a handler: ApiException -> its error JSON; tq::Error (the engine
/// refused the request) -> 400; EngineUnavailable -> 503; anything else -> 500.
httplib::Server::Handler Guarded(ServerState& state, RouteHandler handler);

/// Sets an application/json body.
void SendJson(httplib::Response& res, const nlohmann::json& body, int status = 200);
/// Sets the OpenAI error body and status.
void SendError(httplib::Response& res, const ApiError& error);
/// The request body as a JSON object; 400 for invalid JSON or another type.
nlohmann::json ParseJsonBody(const httplib::Request& req);

// POST /v1/completions and /v1/chat/completions (generation_routes.cc).
void HandleCompletions(ServerState& state, const httplib::Request& req, httplib::Response& res);
void HandleChatCompletions(ServerState& state, const httplib::Request& req, httplib::Response& res);

// GET /v1/models, POST /tokenize, POST /detokenize, GET /health (readiness),
// GET /livez (liveness), GET /metrics, GET /version (info_routes.cc).
void HandleModels(ServerState& state, const httplib::Request& req, httplib::Response& res);
void HandleTokenize(ServerState& state, const httplib::Request& req, httplib::Response& res);
void HandleDetokenize(ServerState& state, const httplib::Request& req, httplib::Response& res);
void HandleHealth(ServerState& state, const httplib::Request& req, httplib::Response& res);
void HandleLivez(ServerState& state, const httplib::Request& req, httplib::Response& res);
void HandleMetrics(ServerState& state, const httplib::Request& req, httplib::Response& res);
void HandleVersion(ServerState& state, const httplib::Request& req, httplib::Response& res);

}  // namespace tq::http
