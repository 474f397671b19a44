// OpenAI error responses: {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

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
};

/// Thrown by request parsing and handlers; the HTTP layer turns it into the
/// error response (or, once a stream has started, an SSE error event).
class ApiException : public std::runtime_error {
 public:
  explicit ApiException(ApiError error)
      : std::runtime_error(error.message), error_(std::move(error)) {}
  const ApiError& error() const { return error_; }

 private:
  ApiError error_;
};

/// OpenAI's error type for an HTTP status: 4xx -> "invalid_request_error"
/// (OpenAI's name; vLLM says "BadRequestError"; we follow OpenAI so that
/// clients written for it branch correctly), 5xx -> "server_error".
std::string ErrorTypeForStatus(int status);

/// A 400 invalid_request_error naming `param` (may be "").
ApiError BadRequest(std::string message, std::string param = "", std::string code = "");
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
