// Pre-body HTTP request checks (see http_guard.h).
#include "server/guard/http_guard.h"

#include <charconv>

namespace tq::guard {
namespace {

std::optional<HttpRefusal> CheckBodySize(const HttpGuardOptions& options, const RequestHead& head) {
  if (head.header("Transfer-Encoding")) {
    return HttpRefusal{411,
                       "chunked request bodies are not accepted: send a Content-Length",
                       "length_required",
                       "body_chunked",
                       {}};
  }
  const std::optional<std::string> length = head.header("Content-Length");
  if (!length) return std::nullopt;  // no body (a POST without one is the route's 400)
  uint64_t bytes = 0;
  const char* end = length->data() + length->size();
  const auto [ptr, ec] = std::from_chars(length->data(), end, bytes);
  if (ec == std::errc::result_out_of_range) bytes = UINT64_MAX;
  if ((ec != std::errc() && ec != std::errc::result_out_of_range) || ptr != end) {
    return HttpRefusal{400, "Content-Length is not a number", "", "bad_content_length", {}};
  }
  if (bytes > options.max_body_bytes) {
    return HttpRefusal{413,
                       "request body too large: " + *length + " bytes, the limit is " +
                           std::to_string(options.max_body_bytes) + " (--max-body-bytes)",
                       "",
                       "body_too_large",
                       {}};
  }
  return std::nullopt;
}

}  // namespace

std::optional<HttpRefusal> CheckRequestHead(const HttpGuardOptions& options,
                                            const RequestHead& head) {
  if (auto refusal = CheckBodySize(options, head)) return refusal;
  return std::nullopt;
}

}  // namespace tq::guard
