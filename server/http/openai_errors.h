// OpenAI error responses: {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "server/guard/request_limits.h"

namespace tq::http {

/// One API error as OpenAI reports it (platform.openai.com/docs/guides/
/// error-codes): an HTTP status and the body's fields. `type` follows the
/// status (see ErrorTypeForStatus); `param` names the request field at fault
/// ("" = null); `code` is a short machine-readable reason ("" = null), e.g.
/// "model_not_found", "context_length_exceeded".
struct ApiError {
  int status = 400;
  std::string message;
  std::string type;
  std::string param;
  std::string code;
  int retry_after_s = 0;  // > 0: sent as a Retry-After header (RFC 9110 10.2.3)
};

/// Thrown by request parsing and handlers; the HTTP layer turns it into the
/// error response (or, once a stream has started, an SSE error event).
class ApiException : public std::runtime_error {
 public:
  /// `reason`: the tqserve_requests_refused_total label when a request limit
  /// or guard refused the request (request_limits.h); "" otherwise.
  explicit ApiException(ApiError error, std::string reason = "")
      : std::runtime_error(error.message), error_(std::move(error)), reason_(std::move(reason)) {}
  const ApiError& error() const { return error_; }
  const std::string& reason() const { return reason_; }

 private:
  ApiError error_;
  std::string reason_;
};

/// OpenAI's error type for an HTTP status: 4xx -> "invalid_request_error"
/// (OpenAI's name; vLLM says "BadRequestError"; we follow OpenAI so that
/// clients written for it branch correctly), 5xx -> "server_error".
std::string ErrorTypeForStatus(int status);

/// A 400 invalid_request_error naming `param` (may be "").
ApiError BadRequest(std::string message, std::string param = "", std::string code = "");
/// The 400 of a request limit's refusal (its param and reason; code
/// "context_length_exceeded" for a prompt too long).
ApiException Refused(const guard::Refusal& refusal);
/// A 503 server_error (loading, draining, engine stopped).
ApiError Unavailable(std::string message);
/// A 500 server_error.
ApiError InternalError(std::string message);

/// The error body {"error": {...}}; an empty param/code is null. The type is
/// ErrorTypeForStatus(status) when error.type is empty.
nlohmann::json ErrorJson(const ApiError& error);

/// Serializes a response body. Invalid UTF-8 (which nlohmann rejects with an
/// exception by default) is replaced by U+FFFD so that no output can throw.
std::string DumpJson(const nlohmann::json& value);

}  // namespace tq::http
