// Fuzz target: tqserve.v1 request messages as the gRPC service converts them
// (server/grpc/generation_service.cc). The first byte picks the method:
// Generate (ParseGenerateRequest, then ReadStructuredOutput), Tokenize or
// Detokenize; the rest is the serialized message (ParseFromArray, as gRPC's
// deserializer). Bad input must end in RpcError (a status code), nothing else.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>

#include "server/grpc/generate_request.h"
#include "server/grpc/grpc_status.h"
#include "tests/fuzz/fuzz_http.h"

namespace {

// GenerationServiceImpl::SetEngine: the same limits as the HTTP side's.
const tq::guard::ModelLimits& Limits() {
  return tq::fuzz::BundledContext();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  using namespace tq::grpc_api;
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 strings log an error each
    return true;
  }();
  (void)quiet;
  if (size == 0) return 0;
  const Tokenizer& tokenizer = fuzz::BundledTokenizer();
  const int method = data[0] % 3;
  const void* message = data + 1;
  const int length = static_cast<int>(size - 1);
  try {
    if (method == 0) {
      tqserve::v1::GenerateRequest request;
      if (!request.ParseFromArray(message, length)) return 0;  // gRPC: INTERNAL, not ours
      GenerateParams params = ParseGenerateRequest(request, Limits(), tokenizer);
      auto grammars = fuzz::BundledGrammars();
      ReadStructuredOutput(request, *grammars, &params);
    } else if (method == 1) {
      tqserve::v1::TokenizeRequest request;
      if (!request.ParseFromArray(message, length)) return 0;
      CheckModel(request.model(), Limits());
      CheckPromptText(request.text(), Limits(), "text");
      const bool add_special =
          request.has_add_special_tokens() ? request.add_special_tokens() : true;
      (void)tokenizer.Encode(request.text(), add_special);
    } else {
      tqserve::v1::DetokenizeRequest request;
      if (!request.ParseFromArray(message, length)) return 0;
      CheckModel(request.model(), Limits());
      const auto& ids = request.token_ids();
      const std::span<const int32_t> span(ids.data(), static_cast<size_t>(ids.size()));
      CheckTokenIds(span, Limits().vocab_size, "token_ids");
      (void)tokenizer.Decode(span);
    }
  } catch (const RpcError& e) {
    fuzz::Expected(e);
  } catch (const std::exception& e) {
    fuzz::Unexpected("gRPC request", e);
  }
  return 0;
}
