// POST /v1/completions and POST /v1/chat/completions: validate, submit the
// choices, then answer with one JSON body or a server-sent-event stream.
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>

#include "server/http/chat_request.h"
#include "server/http/completion_request.h"
#include "server/http/openai_responses.h"
#include "server/http/peer_socket.h"
#include "server/http/request_runner.h"
#include "server/http/routes.h"

namespace tq::http {
namespace {

using nlohmann::json;

// How long a handler waits on the engine before looking at the connection
// again: bounds how late a disconnect is noticed (and its blocks freed).
constexpr std::chrono::milliseconds kPollInterval(50);

// The endpoint-specific shapes of one request's response.
struct Endpoint {
  ResponseMeta meta;
  std::string chunk_object;  // "text_completion" or "chat.completion.chunk"
  bool include_usage = false;
  std::function<void(std::vector<json>&)> open;                        // first chunks
  std::function<void(const ChoiceDelta&, std::vector<json>&)> chunks;  // per delta
  std::function<json(const std::vector<ChoiceResult>&, const Usage&)> body;
};

EngineCalls CallsFor(EngineClient& engine) {
  return {[&engine](EngineRequest r) { return engine.Submit(std::move(r)); },
          [&engine](const std::string& id, FinishReason reason) { engine.Abort(id, reason); }};
}

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

// A streamed response: owned by httplib's content provider, so the runner
// (and with it every engine request it has not finished) goes away with the
// connection.
struct StreamState {
  std::unique_ptr<RequestRunner> runner;
  std::shared_ptr<const Endpoint> endpoint;
  std::unique_ptr<ServerState::InFlight> in_flight;
  bool opened = false;

  static bool Write(httplib::DataSink& sink, const std::string& data) {
    // An empty write would end httplib's chunked loop; never send one.
    return data.empty() || sink.write(data.data(), data.size());
  }

  // One provider call: waits up to kPollInterval for output, sends it.
  bool Step(httplib::DataSink& sink) {
    std::vector<json> chunks;
    if (!opened) {
      opened = true;
      endpoint->open(chunks);
    }
    if (!runner->done()) {
      for (const ChoiceDelta& delta : runner->Poll(kPollInterval)) endpoint->chunks(delta, chunks);
    }
    std::string data;
    for (const json& chunk : chunks) data += SseEvent(chunk);
    if (!runner->done()) return Write(sink, data) && sink.is_writable();
    if (runner->error()) {
      // The status line is gone already: an error event, then [DONE] (vLLM).
      data += SseEvent(ErrorJson(*runner->error()));
    } else if (endpoint->include_usage) {
      data += SseEvent(UsageChunkJson(endpoint->meta, endpoint->chunk_object, runner->usage()));
    }
    data += kSseDone;
    if (!Write(sink, data)) return false;
    sink.done();
    return true;
  }
};

void Stream(httplib::Response& res, std::unique_ptr<RequestRunner> runner,
            std::shared_ptr<const Endpoint> endpoint,
            std::unique_ptr<ServerState::InFlight> in_flight) {
  auto state = std::make_shared<StreamState>();
  state->runner = std::move(runner);
  state->endpoint = std::move(endpoint);
  state->in_flight = std::move(in_flight);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t /*offset*/, httplib::DataSink& sink) {
        try {
          return state->Step(sink);
        } catch (const std::exception& e) {
          // Nothing may escape into httplib's writer; end the connection.
          spdlog::error("{}: stream failed: {}", state->endpoint->meta.id, e.what());
          return false;
        }
      },
      [state](bool success) {
        // httplib calls this with false when the client went away (a failed
        // write or a dead socket before a provider call): free the blocks now.
        if (!success) state->runner->AbortAll();
      });
}

// A non-streamed response: waits for every choice, watching the connection.
void Complete(const httplib::Request& req, httplib::Response& res, RequestRunner& runner,
              const Endpoint& endpoint) {
  const PeerSocket peer(req.remote_addr, req.remote_port, req.local_port);
  std::vector<ChoiceResult> results(runner.num_choices());
  while (!runner.done()) {
    for (ChoiceDelta& delta : runner.Poll(kPollInterval)) {
      results[delta.index].Append(std::move(delta));
    }
    if (!runner.done() && peer.Closed()) {
      runner.AbortAll();
      spdlog::info("{}: client disconnected; aborted", endpoint.meta.id);
      SendError(res, ApiError{499, "client closed the connection", "", "", "client_closed"});
      return;
    }
  }
  if (runner.error()) throw ApiException(*runner.error());
  SendJson(res, endpoint.body(results, runner.usage()));
}

void Run(ServerState& state, const httplib::Request& req, httplib::Response& res,
         EngineClient& engine, std::vector<ChoiceSpec> choices, const GenerationParams& params,
         bool want_logprobs, std::shared_ptr<const Endpoint> endpoint) {
  int64_t output_tokens = 0;  // request limits (server/guard): the response's size
  for (const ChoiceSpec& c : choices) output_tokens += c.request.sampling.max_tokens;
  CheckLogprobVolume(output_tokens, choices.front().request.num_logprobs);
  if (state.options().log_requests) {
    const ChoiceSpec& first = choices.front();
    spdlog::info("{}: {} choice(s), prompt {} tokens, max_tokens {}, temperature {}, stream {}{}",
                 endpoint->meta.id, choices.size(), first.request.prompt_ids.size(),
                 first.request.sampling.max_tokens, params.sampling.temperature, params.stream,
                 params.user.empty() ? "" : ", user " + DumpJson(params.user));  // quoted, escaped
  }
  auto in_flight = std::make_unique<ServerState::InFlight>(&state);
  auto runner = std::make_unique<RequestRunner>(CallsFor(engine), engine.tokenizer(),
                                                std::move(choices), params.stop, want_logprobs);
  runner->Submit();
  if (params.stream) {
    Stream(res, std::move(runner), std::move(endpoint), std::move(in_flight));
  } else {
    Complete(req, res, *runner, *endpoint);
  }
}

}  // namespace

void HandleCompletions(ServerState& state, const httplib::Request& req, httplib::Response& res) {
  EngineClient& engine = state.ReadyEngine();
  const CompletionRequest r = ParseCompletionRequest(ParseJsonBody(req), state.model());
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
  Run(state, req, res, engine, std::move(choices), r.params, logprobs, std::move(endpoint));
}

void HandleChatCompletions(ServerState& state, const httplib::Request& req,
                           httplib::Response& res) {
  EngineClient& engine = state.ReadyEngine();
  const ChatRequest r = ParseChatRequest(ParseJsonBody(req), state.model());
  const Tokenizer& tokenizer = engine.tokenizer();
  std::vector<int32_t> ids;
  try {
    const ChatTemplate& chat = state.chat_template();
    const std::string prompt = chat.Render(r.messages, r.add_generation_prompt);
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
  endpoint->chunk_object = "chat.completion.chunk";
  endpoint->include_usage = r.params.include_usage;
  endpoint->open = [e = endpoint.get(), n](std::vector<json>& out) {
    for (int32_t i = 0; i < n; ++i) {
      out.push_back(ChatChunkJson(e->meta, i, {{"role", "assistant"}, {"content", ""}}, nullptr, "",
                                  nullptr, e->include_usage));
    }
  };
  endpoint->chunks = [e = endpoint.get(), &tokenizer, logprobs, top](const ChoiceDelta& d,
                                                                     std::vector<json>& out) {
    if (!d.text.empty() || !d.logprobs.empty()) {
      out.push_back(
          ChatChunkJson(e->meta, d.index, {{"content", d.text}},
                        logprobs ? ChatLogprobsJson(d.logprobs, tokenizer, top) : json(nullptr), "",
                        nullptr, e->include_usage));
    }
    if (d.finished()) {
      out.push_back(ChatChunkJson(e->meta, d.index, json::object(), nullptr, d.finish_reason,
                                  d.stop_reason, e->include_usage));
    }
  };
  endpoint->body = [e = endpoint.get(), &tokenizer, logprobs, top](
                       const std::vector<ChoiceResult>& results, const Usage& usage) {
    return ChatResponseJson(e->meta, results, usage, tokenizer, logprobs, top);
  };
  Run(state, req, res, engine, std::move(choices), r.params, logprobs, std::move(endpoint));
}

}  // namespace tq::http
