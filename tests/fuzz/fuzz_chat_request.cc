// Fuzz target: a POST /v1/chat/completions body through the route's steps
// before the engine (HandleChatCompletions, server/http/generation_routes.cc):
// JSON body, ParseChatRequest, the template's tools, the structured-output or
// tool-call grammar, rendering, the prompt byte bound, tokenization and
// max_tokens. The first byte picks the chat template (fuzz_http.h
// ChatTemplates), the rest is the body. Bad input must end in ApiException
// (a 4xx) or tq::Error (400), nothing else.
#include <cstddef>
#include <cstdint>

#include "engine/common/error.h"
#include "server/http/chat_request.h"
#include "server/http/openai_errors.h"
#include "server/http/routes.h"
#include "server/http/tool_request.h"
#include "tests/fuzz/fuzz_http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  using namespace tq::http;
  if (size == 0) return 0;
  const guard::ModelLimits& ctx = fuzz::BundledContext();
  const auto& templates = fuzz::ChatTemplates();
  const ChatTemplate& chat = *templates[data[0] % templates.size()];
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    ChatRequest r = ParseChatRequest(ParseJsonBody(req), ctx);
    const nlohmann::ordered_json tools = TemplateTools(req.body, r.tools, chat);
    auto grammars = fuzz::BundledGrammars();
    if (r.params.constraint) {
      r.params.sampling.grammar = CompileConstraint(*r.params.constraint, *grammars);
    } else if (r.tools.constrained()) {
      RequestConstraint c;
      c.spec.kind = structured::ConstraintSpec::Kind::kGrammar;
      c.spec.text = ToolCallGrammar(chat.tool_call_format(), r.tools);
      c.param = "tools";
      r.params.sampling.grammar = CompileConstraint(c, *grammars);
    }
    std::vector<int32_t> ids;
    try {
      const std::string prompt =
          chat.Render(r.messages, r.add_generation_prompt, tools.is_null() ? nullptr : &tools);
      CheckPromptText(prompt, ctx, "messages");
      ids = chat.Tokenize(prompt);
    } catch (const ChatTemplateError& e) {
      throw ApiException(BadRequest(e.what(), "messages"));
    }
    const int32_t max_tokens = ResolveMaxTokens(static_cast<int32_t>(ids.size()),
                                                r.params.max_tokens, ctx.max_model_len, "messages");
    CheckLogprobVolume(static_cast<int64_t>(max_tokens) * r.params.n,
                       r.logprobs ? r.top_logprobs : -1);
  } catch (const ApiException& e) {
    fuzz::Expected(e);
  } catch (const Error& e) {
    fuzz::Expected(e);
  } catch (const std::exception& e) {
    fuzz::Unexpected("chat request", e);
  }
  return 0;
}
