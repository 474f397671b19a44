// Fuzz target: a POST /v1/completions body through the route's steps before
// the engine (HandleCompletions, server/http/generation_routes.cc): JSON
// body, ParseCompletionRequest, the structured-output grammar, prompt
// tokenization, max_tokens and the logprob volume. Bad input must end in
// ApiException (a 4xx) or tq::Error (400), nothing else.
#include <cstddef>
#include <cstdint>

#include "engine/common/error.h"
#include "server/http/completion_request.h"
#include "server/http/openai_errors.h"
#include "server/http/routes.h"
#include "tests/fuzz/fuzz_http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  using namespace tq::http;
  const guard::ModelLimits& ctx = fuzz::BundledContext();
  const Tokenizer& tokenizer = fuzz::BundledTokenizer();
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body.assign(reinterpret_cast<const char*>(data), size);
  try {
    CompletionRequest r = ParseCompletionRequest(ParseJsonBody(req), ctx);
    if (r.params.constraint) {
      auto grammars = fuzz::BundledGrammars();
      r.params.sampling.grammar = CompileConstraint(*r.params.constraint, *grammars);
    }
    int64_t output_tokens = 0;
    for (const PromptInput& prompt : r.prompts) {
      const std::vector<int32_t> ids = PromptIds(prompt, tokenizer);
      const int32_t max_tokens = ResolveMaxTokens(static_cast<int32_t>(ids.size()),
                                                  r.params.max_tokens, ctx.max_model_len, "prompt");
      output_tokens += static_cast<int64_t>(max_tokens) * r.params.n;
      if (r.echo && !prompt.is_text) (void)tokenizer.Decode(ids);
    }
    CheckLogprobVolume(output_tokens, r.logprobs);
  } catch (const ApiException& e) {
    fuzz::Expected(e);
  } catch (const Error& e) {
    fuzz::Expected(e);
  } catch (const std::exception& e) {
    fuzz::Unexpected("completion request", e);
  }
  return 0;
}
