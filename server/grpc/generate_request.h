// Generate's request message -> a validated engine request (tokenized prompt,
// sampling parameters, stop strings), with the status codes of the tqserve.v1
// API for bad input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/request.h"
#include "engine/structured/grammar_cache.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/guard/request_limits.h"
#include "tqserve/v1/generation.pb.h"

namespace tq::grpc_api {

/// Limits and defaults shared with the HTTP API (docs/api.md, docs/grpc.md).
inline constexpr int32_t kDefaultMaxTokens = 16;  // OpenAI's and vLLM's completions default

/// A validated Generate request.
struct GenerateParams {
  EngineRequest request;          // request_id left empty: the service picks one
  std::vector<std::string> stop;  // non-empty stop strings
  bool want_logprobs = false;     // request.num_logprobs >= 0
};

/// Throws ModelNotFound (NOT_FOUND) unless `model` is "" or the served name.
void CheckModel(const std::string& model, const guard::ModelLimits& limits);

/// Throws InvalidArgument naming `field` ("token_ids.ids[3] must be in [0,
/// 512), got 9999") when an id is outside [0, vocab_size).
void CheckTokenIds(std::span<const int32_t> ids, int32_t vocab_size, const std::string& field);

/// Throws INVALID_ARGUMENT (with the refusal's reason) for a text of more
/// than limits.max_prompt_bytes (guard::CheckPromptBytes): it cannot fit.
void CheckPromptText(const std::string& text, const guard::ModelLimits& limits,
                     const std::string& field);

/// Validates `request` and tokenizes its prompt (text with BOS unless
/// add_special_tokens is false; token ids as they are). Unset sampling fields
/// take `limits.defaults`, then OpenAI's; max_tokens defaults to 16 and the
/// prompt plus max_tokens must fit max_model_len (vLLM's rule). Throws
/// RpcError: NOT_FOUND for another model, INVALID_ARGUMENT with the field's
/// path first ("text", "token_ids.ids[2]", "sampling.top_p", ...) for empty
/// input, out-of-range values or a prompt too long.
GenerateParams ParseGenerateRequest(const tqserve::v1::GenerateRequest& request,
                                    const guard::ModelLimits& limits, const Tokenizer& tokenizer);

/// Compiles `request.sampling.structured_output` (when set) through `cache`
/// into sampling.grammar; a non-empty kind is required. Throws RpcError
/// INVALID_ARGUMENT "sampling.structured_output.<kind> ..." naming the
/// unsupported schema keyword or the grammar problem.
void ReadStructuredOutput(const tqserve::v1::GenerateRequest& request,
                          structured::GrammarCache& cache, GenerateParams* params);

}  // namespace tq::grpc_api
