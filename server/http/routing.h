// The route table of the HTTP API and its error answers (404, 405, 400 for a
// POST without a body), independent of the transport.
#pragma once

#include <string>

#include "server/http/http_message.h"
#include "server/http/routes.h"

namespace tq::http {

/// A route: method, exact path, handler and where it runs.
struct Route {
  const char* method;
  const char* path;
  RouteHandler handler;
  bool on_io_thread;  // cheap and never waits (probes, /metrics): answered on the event loop
};

/// The route for `req`, or null after filling `res` with the OpenAI error
/// (404 unknown path, 405 + Allow for another method, 400 for a POST that
/// has neither Content-Length nor Transfer-Encoding).
const Route* FindRoute(const HttpRequest& req, HttpResponse& res);

/// The metrics label of a path: a known route, else "other" (bounded cardinality).
std::string RouteLabel(const std::string& path);

}  // namespace tq::http
