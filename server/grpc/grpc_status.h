// gRPC status codes of the tqserve.v1 API: the errors request handling
// throws, and the code names the metrics and logs use.
#pragma once

#include <grpcpp/support/status.h>

#include <stdexcept>
#include <string>

#include "server/guard/request_limits.h"

namespace tq::grpc_api {

/// A request that cannot be served, with the status the client gets. Thrown
/// by request parsing and the handlers; the service turns it into the RPC's
/// status. For INVALID_ARGUMENT the message starts with the field at fault
/// ("sampling.top_p must be in (0, 1], got 2").
class RpcError : public std::runtime_error {
 public:
  /// `reason`: the tqserve_requests_refused_total label when a request limit
  /// refused the call (request_limits.h); "" otherwise.
  RpcError(grpc::StatusCode code, const std::string& message, std::string reason = "")
      : std::runtime_error(message), code_(code), reason_(std::move(reason)) {}
  grpc::StatusCode code() const { return code_; }
  const std::string& reason() const { return reason_; }
  grpc::Status status() const { return grpc::Status(code_, what()); }

 private:
  grpc::StatusCode code_;
  std::string reason_;
};

/// INVALID_ARGUMENT "<field> <refusal message>" carrying the refusal's reason.
RpcError Refused(const std::string& field, const guard::Refusal& refusal);

/// INVALID_ARGUMENT "<field> <problem>", e.g. InvalidArgument("sampling.top_p",
/// "must be in (0, 1], got 2").
RpcError InvalidArgument(const std::string& field, const std::string& problem);
/// NOT_FOUND for a model name other than the served one (OpenAI's 404
/// model_not_found, as the HTTP API answers it).
RpcError ModelNotFound(const std::string& model);
/// UNAVAILABLE: loading, draining, engine stopped or failed.
RpcError Unavailable(const std::string& message);

/// The canonical name of a status code ("OK", "INVALID_ARGUMENT", ...: the
/// names of grpc/doc/statuscodes.md), used as the metrics' `code` label;
/// "UNKNOWN" for a value outside 0..16.
const char* StatusCodeName(grpc::StatusCode code);

}  // namespace tq::grpc_api
