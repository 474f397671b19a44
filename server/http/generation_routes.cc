// POST /v1/completions and POST /v1/chat/completions: validate, submit the
// choices, then answer with one JSON body or a server-sent-event stream.
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>

#include "server/guard/log_field.h"
#include "server/http/chat_request.h"
#include "server/http/completion_request.h"
#include "server/http/openai_responses.h"
#include "server/http/request_runner.h"
#include "server/http/routes.h"
#include "server/http/tool_request.h"
#include "server/http/tool_response.h"

namespace tq::http {
namespace {

using nlohmann::json;

// The endpoint-specific shapes of one request's response.
struct Endpoint {
  ResponseMeta meta;
  std::string chunk_object;  // "text_completion" or "chat.completion.chunk"
  bool include_usage = false;
  std::function<void(std::vector<json>&)> open;                        // first chunks
  std::function<void(const ChoiceDelta&, std::vector<json>&)> chunks;  // per delta
  std::function<json(const std::vector<ChoiceResult>&, const Usage&)> body;
};

// The n choices of one prompt; choice i gets seed + i (generation_params.h).
void AddChoices(const std::string& response_id, int32_t prompt_index,
                const std::vector<int32_t>& prompt_ids, const GenerationParams& params,
                int32_t max_tokens, int32_t num_logprobs, bool echo, const std::string& echo_text,
                std::vector<ChoiceSpec>* out) {
  for (int32_t i = 0; i < params.n; ++i) {
    ChoiceSpec spec;
    spec.index = prompt_index * params.n + i;
    spec.prompt_index = prompt_index;
    spec.request.request_id = response_id + "-" + std::to_string(spec.index);
    spec.request.prompt_ids = prompt_ids;
    spec.request.sampling = params.sampling;
    spec.request.sampling.max_tokens = max_tokens;
    spec.request.sampling.seed = ChoiceSeed(params.sampling.seed, i);
    spec.request.num_logprobs = num_logprobs;
    spec.request.prompt_logprobs = echo && num_logprobs >= 0;
    spec.request.priority = params.priority;
    spec.echo = echo;
    spec.echo_text = echo_text;
    out->push_back(std::move(spec));
  }
}

// The response of one generation request, produced as the engine runs it:
// owned by the connection, so the runner (and with it every engine request
// it has not finished) goes away with the connection. Used on the
// connection's strand only; the engine thread reaches it through the wake
// function alone (RequestRunner::SetNotify).
class GenerationBody final : public DeferredBody {
 public:
  GenerationBody(std::unique_ptr<RequestRunner> runner, std::shared_ptr<const Endpoint> endpoint,
                 std::unique_ptr<ServerState::InFlight> in_flight, bool streamed)
      : runner_(std::move(runner)),
        endpoint_(std::move(endpoint)),
        in_flight_(std::move(in_flight)),
        streamed_(streamed),
        results_(runner_->num_choices()) {}

  bool streamed() const override { return streamed_; }

  void Start(std::function<void()> wake) override { runner_->SetNotify(std::move(wake)); }

  bool Pull(std::string* data, HttpResponse* whole) override {
    try {
      return streamed_ ? PullStream(*data) : PullWhole(*whole);
    } catch (const std::exception& e) {
      // Nothing may escape into the connection; end the request.
      spdlog::error("{}: response failed: {}", endpoint_->meta.id, guard::LogField(e.what()));
      runner_->AbortAll();
      if (streamed_) {
        *data += SseEvent(ErrorJson(InternalError(e.what())));
        *data += kSseDone;
      } else {
        SendError(*whole, InternalError(std::string("internal error: ") + e.what()));
      }
      return true;
    }
  }

  std::string Abort(std::string_view why) override {
    if (!runner_->done()) {
      runner_->AbortAll();
      spdlog::info("{}: {}; aborted", endpoint_->meta.id, why);
    }
    if (!streamed_) return "";
    // The status line is gone already: an error event, then [DONE] (vLLM).
    std::string tail =
        SseEvent(ErrorJson(Unavailable("the request was aborted: " + std::string(why))));
    tail += kSseDone;
    return tail;
  }

 private:
  bool PullStream(std::string& data) {
    std::vector<json> chunks;
    if (!opened_) {
      opened_ = true;
      endpoint_->open(chunks);
    }
    if (!runner_->done()) {
      for (const ChoiceDelta& delta : runner_->Take()) endpoint_->chunks(delta, chunks);
    }
    for (const json& chunk : chunks) data += SseEvent(chunk);
    if (!runner_->done()) return false;
    if (runner_->error()) {
      data += SseEvent(ErrorJson(*runner_->error()));
    } else if (endpoint_->include_usage) {
      data += SseEvent(UsageChunkJson(endpoint_->meta, endpoint_->chunk_object, runner_->usage()));
    }
    data += kSseDone;
    return true;
  }

  bool PullWhole(HttpResponse& whole) {
    for (ChoiceDelta& delta : runner_->Take()) results_[delta.index].Append(std::move(delta));
    if (!runner_->done()) return false;
    if (runner_->error()) {
      SendError(whole, *runner_->error());
    } else {
      SendJson(whole, endpoint_->body(results_, runner_->usage()));
    }
    return true;
  }

  std::unique_ptr<RequestRunner> runner_;
  std::shared_ptr<const Endpoint> endpoint_;
  std::unique_ptr<ServerState::InFlight> in_flight_;
  const bool streamed_;
  std::vector<ChoiceResult> results_;
  bool opened_ = false;
};

void Run(ServerState& state, HttpResponse& res, Engine& engine, std::vector<ChoiceSpec> choices,
         const GenerationParams& params, bool want_logprobs,
         std::shared_ptr<const Endpoint> endpoint) {
  int64_t output_tokens = 0;  // request limits (server/guard): the response's size
  for (const ChoiceSpec& c : choices) output_tokens += c.request.sampling.max_tokens;
  CheckLogprobVolume(output_tokens, choices.front().request.num_logprobs);
  // Admission next: a refused request costs no engine work.
  auto in_flight =
      std::make_unique<ServerState::InFlight>(&state, static_cast<int64_t>(choices.size()));
  if (state.options().log_requests) {
    const ChoiceSpec& first = choices.front();
    spdlog::info(
        "{}: {} choice(s), prompt {} tokens, max_tokens {}, temperature {}, stream {}{}",
        endpoint->meta.id, choices.size(), first.request.prompt_ids.size(),
        first.request.sampling.max_tokens, params.sampling.temperature, params.stream,
        params.user.empty()
            ? ""
            : ", user " + DumpJson(guard::LogField(params.user)));  // quoted, escaped, bounded
  }
  auto runner = std::make_unique<RequestRunner>(SessionEngine::Of(engine), engine.tokenizer(),
                                                std::move(choices), params.stop, want_logprobs);
  runner->Submit();
  res.deferred = std::make_unique<GenerationBody>(std::move(runner), std::move(endpoint),
                                                  std::move(in_flight), params.stream);
}

}  // namespace

void HandleCompletions(ServerState& state, const HttpRequest& req, HttpResponse& res) {
  Engine& engine = state.ReadyEngine();
  CompletionRequest r = ParseCompletionRequest(ParseJsonBody(req), state.model());
  if (r.params.constraint) {
    r.params.sampling.grammar = CompileConstraint(*r.params.constraint, engine.grammars());
  }
  const Tokenizer& tokenizer = engine.tokenizer();

  auto endpoint = std::make_shared<Endpoint>();
  endpoint->meta = {NewResponseId("cmpl-"), UnixSeconds(), state.model().served_model_name};
  std::vector<ChoiceSpec> choices;
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    const std::vector<int32_t> ids = PromptIds(r.prompts[p], tokenizer);
    const int32_t max_tokens =
        ResolveMaxTokens(static_cast<int32_t>(ids.size()), r.params.max_tokens,
                         state.model().max_model_len, "prompt");
    // vLLM echoes a text prompt as sent and token ids decoded.
    const std::string echo_text =
        !r.echo ? "" : (r.prompts[p].is_text ? r.prompts[p].text : tokenizer.Decode(ids));
    AddChoices(endpoint->meta.id, static_cast<int32_t>(p), ids, r.params, max_tokens, r.logprobs,
               r.echo, echo_text, &choices);
  }

  const bool logprobs = r.logprobs >= 0;
  endpoint->chunk_object = "text_completion";
  endpoint->include_usage = r.params.include_usage;
  endpoint->open = [](std::vector<json>&) {};
  endpoint->chunks = [e = endpoint.get(), &tokenizer, logprobs](const ChoiceDelta& d,
                                                                std::vector<json>& out) {
    out.push_back(CompletionChunkJson(e->meta, d, tokenizer, logprobs, e->include_usage));
  };
  endpoint->body = [e = endpoint.get(), &tokenizer, logprobs](
                       const std::vector<ChoiceResult>& results, const Usage& usage) {
    return CompletionResponseJson(e->meta, results, usage, tokenizer, logprobs);
  };
  Run(state, res, engine, std::move(choices), r.params, logprobs, std::move(endpoint));
}

void HandleChatCompletions(ServerState& state, const HttpRequest& req, HttpResponse& res) {
  Engine& engine = state.ReadyEngine();
  ChatRequest r = ParseChatRequest(ParseJsonBody(req), state.model());
  const ChatTemplate& chat = state.chat_template();
  const nlohmann::ordered_json tools = TemplateTools(req.body, r.tools, chat);
  if (r.params.constraint) {
    r.params.sampling.grammar = CompileConstraint(*r.params.constraint, engine.grammars());
  } else if (r.tools.constrained()) {
    // tool_choice "required" or a named function: decode only calls.
    RequestConstraint c;
    c.spec.kind = structured::ConstraintSpec::Kind::kGrammar;
    c.spec.text = ToolCallGrammar(chat.tool_call_format(), r.tools);
    c.param = "tools";
    r.params.sampling.grammar = CompileConstraint(c, engine.grammars());
  }
  const Tokenizer& tokenizer = engine.tokenizer();
  std::vector<int32_t> ids;
  try {
    const std::string prompt =
        chat.Render(r.messages, r.add_generation_prompt, tools.is_null() ? nullptr : &tools);
    CheckPromptText(prompt, state.model(), "messages");
    ids = chat.Tokenize(prompt);
  } catch (const ChatTemplateError& e) {
    throw ApiException(BadRequest(e.what(), "messages"));
  }
  const int32_t max_tokens = ResolveMaxTokens(static_cast<int32_t>(ids.size()), r.params.max_tokens,
                                              state.model().max_model_len, "messages");

  auto endpoint = std::make_shared<Endpoint>();
  endpoint->meta = {NewResponseId("chatcmpl-"), UnixSeconds(), state.model().served_model_name};
  std::vector<ChoiceSpec> choices;
  AddChoices(endpoint->meta.id, 0, ids, r.params, max_tokens, r.logprobs ? r.top_logprobs : -1,
             /*echo=*/false, "", &choices);

  const bool logprobs = r.logprobs;
  const int32_t top = r.top_logprobs;
  const int32_t n = r.params.n;
  // With tools offered, each choice's text goes through a call parser.
  const ToolCallFormat format =
      r.tools.parse_output() ? chat.tool_call_format() : ToolCallFormat::kNone;
  auto parsers =
      std::make_shared<std::vector<ToolCallStreamParser>>(n, ToolCallStreamParser(format));
  endpoint->chunk_object = "chat.completion.chunk";
  endpoint->include_usage = r.params.include_usage;
  endpoint->open = [e = endpoint.get(), n](std::vector<json>& out) {
    for (int32_t i = 0; i < n; ++i) {
      out.push_back(ChatChunkJson(e->meta, i, {{"role", "assistant"}, {"content", ""}}, nullptr, "",
                                  nullptr, e->include_usage));
    }
  };
  endpoint->chunks = [e = endpoint.get(), &tokenizer, logprobs, top, format, parsers](
                         const ChoiceDelta& d, std::vector<json>& out) {
    ToolCallStreamParser& parser = (*parsers)[static_cast<size_t>(d.index)];
    const std::string text = format == ToolCallFormat::kNone ? d.text : parser.Feed(d.text);
    if (!text.empty() || !d.logprobs.empty()) {
      out.push_back(
          ChatChunkJson(e->meta, d.index, {{"content", text}},
                        logprobs ? ChatLogprobsJson(d.logprobs, tokenizer, top) : json(nullptr), "",
                        nullptr, e->include_usage));
    }
    const auto send_pieces = [&] {
      for (const ToolCallPiece& piece : parser.TakePieces()) {
        out.push_back(ChatChunkJson(e->meta, d.index, ToolCallPieceDelta(piece), nullptr, "",
                                    nullptr, e->include_usage));
      }
    };
    send_pieces();
    if (!d.finished()) return;
    std::string finish_reason = d.finish_reason;
    if (format != ToolCallFormat::kNone) {
      const ParsedToolOutput rest = parser.Finish();
      if (rest.content && !rest.content->empty()) {
        out.push_back(ChatChunkJson(e->meta, d.index, {{"content", *rest.content}}, nullptr, "",
                                    nullptr, e->include_usage));
      }
      send_pieces();
      if (parser.calls_started() > 0) finish_reason = "tool_calls";
    }
    out.push_back(ChatChunkJson(e->meta, d.index, json::object(), nullptr, finish_reason,
                                d.stop_reason, e->include_usage));
  };
  endpoint->body = [e = endpoint.get(), &tokenizer, logprobs, top, format](
                       const std::vector<ChoiceResult>& results, const Usage& usage) {
    json body = ChatResponseJson(e->meta, results, usage, tokenizer, logprobs, top);
    if (format != ToolCallFormat::kNone) ApplyToolCalls(format, body);
    return body;
  };
  Run(state, res, engine, std::move(choices), r.params, logprobs, std::move(endpoint));
}

}  // namespace tq::http
