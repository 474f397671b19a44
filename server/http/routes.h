// HTTP route handlers of the OpenAI-compatible API and their shared helpers.
// Probes run on the I/O threads, POST routes on the worker threads (see
// http_server.h); errors are thrown as ApiException and turned into OpenAI
// error JSON by Guarded().
#pragma once

#include <functional>
#include <nlohmann/json.hpp>

#include "server/http/http_message.h"
#include "server/http/openai_errors.h"
#include "server/http/server_state.h"

namespace tq::http {

using RouteHandler = std::function<void(ServerState&, const HttpRequest&, HttpResponse&)>;

/// Runs a handler: ApiException -> its error JSON; tq::Error (the engine
/// refused the request) -> 400; EngineUnavailable -> 503; anything else -> 500.
void Guarded(ServerState& state, const RouteHandler& handler, const HttpRequest& req,
             HttpResponse& res);

/// Sets an application/json body.
void SendJson(HttpResponse& res, const nlohmann::json& body, int status = 200);
/// Sets the OpenAI error body and status (and Retry-After when the error has one).
void SendError(HttpResponse& res, const ApiError& error);
/// The request body as a JSON object; 400 for invalid JSON or another type.
nlohmann::json ParseJsonBody(const HttpRequest& req);

// POST /v1/completions and /v1/chat/completions (generation_routes.cc).
void HandleCompletions(ServerState& state, const HttpRequest& req, HttpResponse& res);
void HandleChatCompletions(ServerState& state, const HttpRequest& req, HttpResponse& res);

// GET /v1/models, POST /tokenize, POST /detokenize, GET /health (readiness),
// GET /livez (liveness), GET /metrics, GET /version (info_routes.cc).
void HandleModels(ServerState& state, const HttpRequest& req, HttpResponse& res);
void HandleTokenize(ServerState& state, const HttpRequest& req, HttpResponse& res);
void HandleDetokenize(ServerState& state, const HttpRequest& req, HttpResponse& res);
void HandleHealth(ServerState& state, const HttpRequest& req, HttpResponse& res);
void HandleLivez(ServerState& state, const HttpRequest& req, HttpResponse& res);
void HandleMetrics(ServerState& state, const HttpRequest& req, HttpResponse& res);
void HandleVersion(ServerState& state, const HttpRequest& req, HttpResponse& res);

}  // namespace tq::http
