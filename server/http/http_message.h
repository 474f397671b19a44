// The HTTP request and response as route handlers see them (independent of
// the transport: server/http/connection.cc reads and writes them with
// Boost.Beast).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tq::http {

/// One parsed request. Header names compare case-insensitively (RFC 9110).
/// The body is already decoded (chunked framing removed, gzip inflated).
struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent, with the query
  std::string path;    // target without the query (and, absolute form, without scheme://authority)
  /// The authority ("host:port") of an absolute-form target
  /// ("GET http://host:port/path", RFC 9112 section 3.2.2); empty for the origin form.
  std::string authority;
  int version = 11;  // 11: HTTP/1.1, 10: HTTP/1.0
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_addr;
  int remote_port = 0;

  /// The first value of header `name`, or nullopt.
  std::optional<std::string_view> header(std::string_view name) const;
  /// How many field lines named `name` the request has.
  size_t header_count(std::string_view name) const;
  bool has_header(std::string_view name) const { return header(name).has_value(); }
};

class DeferredBody;

/// A response. Either complete when the handler returns (status, headers,
/// body), or `deferred`: produced later by the engine (a stream of SSE
/// events, or a JSON body once every choice finished).
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type/Length
  std::string body;
  std::unique_ptr<DeferredBody> deferred;

  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
};

/// A response body the engine produces over time. Owned by the connection
/// and used only on its strand; the engine reaches it through `wake` alone.
class DeferredBody {
 public:
  virtual ~DeferredBody() = default;

  /// True: a chunked text/event-stream (status 200, headers sent at once,
  /// then Pull's bytes as they come). False: one whole response once done.
  virtual bool streamed() const = 0;
  /// `wake` may be called from any thread (the engine's) whenever Pull has
  /// something new; it only posts to the connection's strand.
  virtual void Start(std::function<void()> wake) = 0;
  /// Streamed: appends the bytes ready now to `*data`. Whole: once the body
  /// is complete, fills `*whole` (status, headers, body). Returns true when
  /// nothing more will come.
  virtual bool Pull(std::string* data, HttpResponse* whole) = 0;
  /// The client went away or stopped reading: aborts the engine work (its KV
  /// blocks are freed in the engine's next step). For a stream, returns the
  /// final bytes worth trying to send (an error event and [DONE]).
  virtual std::string Abort(std::string_view why) = 0;
};

}  // namespace tq::http
