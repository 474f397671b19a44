// The checks every HTTP request passes before its body is read (issue 20):
// a plain function of the request's method, path and headers, so that the
// HTTP transport (the Beast connection, server/http/connection.cc) calls it at
// one place, right after the headers are parsed.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/guard/api_keys.h"

namespace tq::guard {

/// What the guard enforces (`tqserve serve` flags; immutable once serving).
struct HttpGuardOptions {
  /// Largest request body (--max-body-bytes): a larger Content-Length is 413
  /// before a byte of the body is read.
  size_t max_body_bytes = size_t{64} << 20;
  /// Keys for /v1/*, /tokenize and /detokenize (none: open).
  ApiKeys api_keys;
  /// --allowed-origins: browser origins ("https://app.example", or "*") that
  /// may call the API cross-origin (CORS). Empty (the default): no CORS
  /// headers, so browsers keep pages from reading responses or sending
  /// preflighted (JSON) requests.
  std::vector<std::string> allowed_origins;
  /// --allowed-hosts: accepted Host header names (without the port; against
  /// DNS rebinding). Empty (the default): any Host.
  std::vector<std::string> allowed_hosts;
};

/// The parts of a request the guard looks at. `header` returns a header's
/// value by case-insensitive name (the first one when repeated), nullopt when
/// absent.
struct RequestHead {
  std::string_view method;
  std::string_view path;
  std::function<std::optional<std::string>(std::string_view name)> header;
  /// The HTTP version as Beast writes it: 11 for HTTP/1.1, 10 for HTTP/1.0.
  int version = 11;
  /// How many Host header field lines the request has.
  size_t host_fields = 0;
  /// The authority ("host:port") of an absolute-form request-target
  /// (ParseRequestTarget); empty for the origin form.
  std::string_view authority;
};

/// A request-target split as RFC 9112 section 3.2 reads it: the origin form
/// ("/v1/models?x") or the absolute form ("http://host:8000/v1/models?x",
/// scheme http or https, case-insensitive), which a server must accept
/// (section 3.2.2). Anything else (the asterisk form, a bare word) is kept
/// as its own path, which no route has (404).
struct RequestTarget {
  std::string path;       // without the query; "/" for an absolute form without a path
  std::string authority;  // the absolute form's "host[:port]"; empty for the origin form
  bool valid = true;      // false: an absolute form with userinfo or no host (400)
};

/// Splits `target` (see RequestTarget). Never throws for any bytes.
RequestTarget ParseRequestTarget(std::string_view target);

/// A request the guard answers itself: the HTTP status, the OpenAI error
/// fields (no body for a 204), the metrics reason
/// (tqserve_requests_refused_total; "" for a CORS preflight, which is not a
/// refusal) and headers to add to the answer.
struct HttpRefusal {
  int status = 400;
  std::string message;
  std::string code;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// Whether `path` needs an API key when keys are set: /v1/*, /tokenize,
/// /detokenize. /health, /livez, /metrics and /version stay open (probes and
/// scrapers), as does any unknown path (its 404 says nothing).
bool NeedsApiKey(std::string_view path);

/// Checks `head` against `options`; nullopt when the request may go on (its
/// body is then read and routed). Answers, in this order:
///  - RFC 9112 section 3.2: more than one Host line, none in an HTTP/1.1
///    request, or a Host value that is no uri-host[:port]: 400 (reason
///    "host_header"), whatever options.allowed_hosts says;
///  - a host outside options.allowed_hosts (when set): 403 (reason "host").
///    The host is the absolute-form target's authority when there is one
///    (RFC 9112 section 3.2.2: the server ignores Host then), else Host's;
///  - with options.allowed_origins set: an Origin outside them, 403 (reason
///    "origin"); a CORS preflight (OPTIONS with Origin and
///    Access-Control-Request-Method) from an allowed one, 204 with the
///    Access-Control-* headers;
///  - a protected path (NeedsApiKey) without an accepted
///    `Authorization: Bearer KEY` when keys are set: 401 with OpenAI's
///    invalid_api_key error and `WWW-Authenticate: Bearer` (reason
///    "unauthorized");
///  - a body the transport cannot bound before reading it: a request with
///    Transfer-Encoding (chunked) gets 411 "send a Content-Length" (reason
///    "body_chunked": cpp-httplib 0.11 reads chunked bodies without its
///    payload limit);
///  - Content-Length above options.max_body_bytes or not a number: 413
///    (reason "body_too_large") / 400 (reason "bad_content_length");
///  - a POST with a body whose Content-Type is not application/json: 415
///    (reason "content_type": a web page can post text/plain cross-site
///    without a preflight, never application/json).
/// Thread-safe (reads only). Never throws for any header bytes.
std::optional<HttpRefusal> CheckRequestHead(const HttpGuardOptions& options,
                                            const RequestHead& head);

/// Headers every response to `head` carries, the guard's own answers
/// included (the transport adds them): with options.allowed_origins set and
/// an allowed Origin, Access-Control-Allow-Origin and Vary: Origin; nothing
/// otherwise.
std::vector<std::pair<std::string, std::string>> ResponseHeaders(const HttpGuardOptions& options,
                                                                 const RequestHead& head);

}  // namespace tq::guard
