// Status helpers (see grpc_status.h).
#include "server/grpc/grpc_status.h"

namespace tq::grpc_api {

RpcError Refused(const std::string& field, const guard::Refusal& refusal) {
  return RpcError(grpc::StatusCode::INVALID_ARGUMENT, field + ": " + refusal.message,
                  refusal.reason);
}

RpcError InvalidArgument(const std::string& field, const std::string& problem) {
  return RpcError(grpc::StatusCode::INVALID_ARGUMENT, field + " " + problem);
}

RpcError ModelNotFound(const std::string& model) {
  return RpcError(grpc::StatusCode::NOT_FOUND, "model: the model `" + model + "` does not exist");
}

RpcError Unavailable(const std::string& message) {
  return RpcError(grpc::StatusCode::UNAVAILABLE, message);
}

const char* StatusCodeName(grpc::StatusCode code) {
  // Indexed by the code's number (grpc/include/grpc/impl/codegen/status.h).
  static constexpr const char* kNames[] = {
      "OK",
      "CANCELLED",
      "UNKNOWN",
      "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED",
      "NOT_FOUND",
      "ALREADY_EXISTS",
      "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION",
      "ABORTED",
      "OUT_OF_RANGE",
      "UNIMPLEMENTED",
      "INTERNAL",
      "UNAVAILABLE",
      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  const int index = static_cast<int>(code);
  if (index < 0 || index >= static_cast<int>(std::size(kNames))) return "UNKNOWN";
  return kNames[index];
}

}  // namespace tq::grpc_api
