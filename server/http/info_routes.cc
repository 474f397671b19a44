// The non-generation routes: models, tokenize/detokenize (vLLM), health,
// metrics, version.
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/cpu_isa.h"
#include "server/http/chat_request.h"
#include "server/http/json_fields.h"
#include "server/http/openai_responses.h"
#include "server/http/routes.h"
#include "server/http/tool_request.h"

#ifndef TQ_VERSION
#define TQ_VERSION "0.0.0"
#endif

namespace tq::http {

using nlohmann::json;

void HandleModels(ServerState& state, const HttpRequest&, HttpResponse& res) {
  state.ReadyEngine();  // 503 while loading or draining
  // OpenAI's list shape; max_model_len, root and parent as vLLM adds them.
  static const int64_t created = UnixSeconds();
  json model = {{"id", state.model().served_model_name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "tqserve"},
                {"root", state.model().served_model_name},  // not the directory path (issue 20)
                {"parent", nullptr},
                {"max_model_len", state.model().max_model_len}};
  SendJson(res, {{"object", "list"}, {"data", json::array({std::move(model)})}});
}

void HandleTokenize(ServerState& state, const HttpRequest& req, HttpResponse& res) {
  Engine& engine = state.ReadyEngine();
  const json body = ParseJsonBody(req);
  CheckModelName(body, state.model().served_model_name);
  std::vector<int32_t> tokens;
  if (FindField(body, "messages") != nullptr) {
    // vLLM's chat form: the rendered template (add_generation_prompt default true).
    const std::vector<ChatMessage> messages = ParseChatMessages(body);
    const bool add_generation_prompt = GetBool(body, "add_generation_prompt").value_or(true);
    const ChatTemplate& chat = state.chat_template();
    const nlohmann::ordered_json tools = TemplateTools(req.body, ParseToolSettings(body), chat);
    try {
      const std::string prompt =
          chat.Render(messages, add_generation_prompt, tools.is_null() ? nullptr : &tools);
      CheckPromptText(prompt, state.model(), "messages");
      tokens = chat.Tokenize(prompt);
    } catch (const ChatTemplateError& e) {
      throw ApiException(BadRequest(e.what(), "messages"));
    }
  } else {
    const auto prompt = GetString(body, "prompt");
    if (!prompt) throw ApiException(BadRequest("'prompt' or 'messages' is required", "prompt"));
    CheckPromptText(*prompt, state.model(), "prompt");
    const bool add_special = GetBool(body, "add_special_tokens").value_or(true);
    tokens = engine.tokenizer().Encode(*prompt, add_special);
  }
  SendJson(res, {{"count", tokens.size()},
                 {"max_model_len", state.model().max_model_len},
                 {"tokens", tokens}});
}

void HandleDetokenize(ServerState& state, const HttpRequest& req, HttpResponse& res) {
  Engine& engine = state.ReadyEngine();
  const json body = ParseJsonBody(req);
  CheckModelName(body, state.model().served_model_name);
  if (FindField(body, "tokens") == nullptr) {
    throw ApiException(BadRequest("'tokens' is required", "tokens"));
  }
  const std::vector<int32_t> tokens =
      GetIntList(body, "tokens", 0, engine.tokenizer().vocab_size() - 1);
  SendJson(res, {{"prompt", engine.tokenizer().Decode(tokens)}});
}

void HandleHealth(ServerState& state, const HttpRequest&, HttpResponse& res) {
  // 200 only when loaded, the engine loop alive and not draining (issue 4).
  const Engine* engine = state.engine();
  const char* status = "ok";
  if (engine == nullptr) {
    status = "loading";
  } else if (state.draining() || engine->Stats().draining) {
    status = "draining";
  } else if (!engine->Stats().alive) {
    status = "unhealthy";
  }
  SendJson(res, {{"status", status}}, std::string_view(status) == "ok" ? 200 : 503);
}

void HandleLivez(ServerState& state, const HttpRequest&, HttpResponse& res) {
  // Liveness (Kubernetes livenessProbe): fails only in the states a restart
  // fixes: a loaded engine's loop has died, or the engine or the worker pool
  // is wedged past --stall-timeout (server/guard/liveness.h). Loading,
  // draining and being busy are alive: /health (readiness) covers those.
  const guard::Liveness live = state.Liveness();
  json body = {{"status", live.status}};
  if (!live.reason.empty()) body["reason"] = live.reason;
  SendJson(res, body, live.alive ? 200 : 503);
}

void HandleMetrics(ServerState& state, const HttpRequest&, HttpResponse& res) {
  if (state.metrics() == nullptr) throw ApiException(ApiError{404, "no metrics", "", "", ""});
  const Engine* engine = state.engine();
  static const EngineInfo kNoInfo;
  const std::string text =
      state.metrics()->Render(engine ? engine->Stats() : EngineStats{},
                              engine ? engine->info() : kNoInfo, state.options().served_model_name);
  res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
}

void HandleVersion(ServerState&, const HttpRequest&, HttpResponse& res) {
  // cpu_isa: the CPU kernels' level (kernels/cpu/cpu_isa.h), so a slow
  // deployment shows from outside whether it runs the baseline code.
  SendJson(res, {{"version", TQ_VERSION},
                 {"cpu_isa", kernels::cpu::CpuIsaName(kernels::cpu::ActiveCpuIsa())}});
}

}  // namespace tq::http
