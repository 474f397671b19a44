// The checks every HTTP request passes before its body is read (issue 20):
// a plain function of the request's method, path and headers, so that any
// HTTP transport (cpp-httplib's pre-routing handler today, the Beast session
// of issue 19 next) calls it at one place, right after the headers are parsed.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tq::guard {

/// What the guard enforces (`tqserve serve` flags; immutable once serving).
struct HttpGuardOptions {
  /// Largest request body (--max-body-bytes): a larger Content-Length is 413
  /// before a byte of the body is read.
  size_t max_body_bytes = size_t{64} << 20;
};

/// The parts of a request the guard looks at. `header` returns a header's
/// value by case-insensitive name (the first one when repeated), nullopt when
/// absent.
struct RequestHead {
  std::string_view method;
  std::string_view path;
  std::function<std::optional<std::string>(std::string_view name)> header;
};

/// A refused request: the HTTP status, the OpenAI error fields, the metrics
/// reason (tqserve_requests_refused_total) and headers to add to the answer.
struct HttpRefusal {
  int status = 400;
  std::string message;
  std::string code;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// Checks `head` against `options`; nullopt when the request may go on (its
/// body is then read and routed). Refuses, in this order:
///  - a body the transport cannot bound before reading it: a request with
///    Transfer-Encoding (chunked) gets 411 "send a Content-Length" (reason
///    "body_chunked": cpp-httplib 0.11 reads chunked bodies without its
///    payload limit);
///  - Content-Length above options.max_body_bytes or not a number: 413
///    (reason "body_too_large") / 400.
/// Thread-safe (reads only). Never throws for any header bytes.
std::optional<HttpRefusal> CheckRequestHead(const HttpGuardOptions& options,
                                            const RequestHead& head);

}  // namespace tq::guard
