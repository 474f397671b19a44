// OpenAI error responses (see openai_errors.h).
#include "server/http/openai_errors.h"

namespace tq::http {

std::string ErrorTypeForStatus(int status) {
  return status >= 500 ? "server_error" : "invalid_request_error";
}

ApiError BadRequest(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "", std::move(param), std::move(code)};
}

ApiException Refused(const guard::Refusal& refusal) {
  return ApiException(
      BadRequest(refusal.message, refusal.param,
                 refusal.reason == "prompt_too_long" ? "context_length_exceeded" : ""),
      refusal.reason);
}

ApiError Unavailable(std::string message) {
  return ApiError{503, std::move(message), "", "", "service_unavailable"};
}

ApiError InternalError(std::string message) {
  return ApiError{500, std::move(message), "", "", "internal_error"};
}

nlohmann::json ErrorJson(const ApiError& error) {
  const auto or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
  };
  return {{"error",
           {{"message", error.message},
            {"type", error.type.empty() ? ErrorTypeForStatus(error.status) : error.type},
            {"param", or_null(error.param)},
            {"code", or_null(error.code)}}}};
}

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tq::http
