// Shared request fields (see generation_params.h).
#include "server/http/generation_params.h"

#include "server/http/json_fields.h"
#include "server/http/openai_errors.h"
#include "server/http/unsupported_fields.h"

namespace tq::http {
namespace {

using nlohmann::json;

// SamplingParams::Validate messages start with the field name ("top_p must
// be ...", "stop_token_ids[2] must be ..."), which is also the OpenAI param.
std::string ParamOfMessage(const std::string& message) {
  const size_t end = message.find_first_of(" [");
  return message.substr(0, end);
}

void RejectUnsupported(const json& body) {
  // Known OpenAI fields we do not implement: rejected rather than silently
  // ignored, because they would change the output (docs/api.md).
  if (const json* v = FindField(body, "logit_bias"); v != nullptr && !v->empty()) {
    throw ApiException(BadRequest("'logit_bias' is not supported", "logit_bias"));
  }
  if (const json* v = FindField(body, "suffix"); v != nullptr) {
    throw ApiException(BadRequest("'suffix' is not supported", "suffix"));
  }
}

}  // namespace

GenerationParams ParseGenerationParams(const json& body, const guard::ModelLimits& ctx,
                                       std::optional<int32_t> default_max_tokens) {
  if (!body.is_object()) {
    throw ApiException(
        BadRequest("the request body must be a JSON object, got " + JsonTypeName(body)));
  }
  GenerationParams p;
  CheckModelName(body, ctx.served_model_name);
  p.model = GetString(body, "model").value_or("");
  RejectUnsupported(body);

  // max_completion_tokens is OpenAI's newer name; it wins when both are sent (vLLM).
  const auto max_completion = GetInt(body, "max_completion_tokens", 0);
  const auto max_tokens = GetInt(body, "max_tokens", 0);
  if (max_completion) {
    p.max_tokens = static_cast<int32_t>(*max_completion);
  } else if (max_tokens) {
    p.max_tokens = static_cast<int32_t>(*max_tokens);
  } else if (body.contains("max_tokens") || body.contains("max_completion_tokens")) {
    p.max_tokens = std::nullopt;  // explicit null: up to max_model_len
  } else {
    p.max_tokens = default_max_tokens;
  }

  SamplingParams& s = p.sampling;
  s.temperature = GetNumber(body, "temperature").value_or(ctx.defaults.temperature);
  s.top_p = GetNumber(body, "top_p").value_or(ctx.defaults.top_p);
  s.top_k = static_cast<int32_t>(GetInt(body, "top_k").value_or(ctx.defaults.top_k));
  s.min_p = GetNumber(body, "min_p").value_or(0.0);
  s.repetition_penalty =
      GetNumber(body, "repetition_penalty").value_or(ctx.defaults.repetition_penalty);
  s.presence_penalty = GetNumber(body, "presence_penalty").value_or(0.0);
  s.frequency_penalty = GetNumber(body, "frequency_penalty").value_or(0.0);
  if (const auto seed = GetInt(body, "seed", std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);  // two's complement: negative seeds are distinct too
  }
  s.stop_token_ids = GetIntList(body, "stop_token_ids", 0, ctx.vocab_size - 1);
  s.ignore_eos = GetBool(body, "ignore_eos").value_or(false);
  s.max_tokens = 0;  // per prompt: ResolveMaxTokens
  if (const std::string error = s.Validate(); !error.empty()) {
    throw ApiException(BadRequest(error, ParamOfMessage(error)));
  }

  p.n = static_cast<int32_t>(GetInt(body, "n", 1, kMaxN).value_or(1));
  RejectUnimplementedFields(body, p.n);
  p.constraint = ParseConstraint(body);
  if (const json* stop = FindField(body, "stop"); stop != nullptr && stop->is_array()) {
    if (auto refusal = guard::CheckStopCount(stop->size(), "stop")) throw Refused(*refusal);
  }
  std::vector<std::string> stops = GetStringOrList(body, "stop", guard::kMaxStopStrings);
  if (auto refusal = guard::CheckStopStrings(stops, "stop")) {
    throw Refused(*refusal);
  }
  for (std::string& stop : stops) {
    if (!stop.empty()) p.stop.push_back(std::move(stop));
  }
  p.stream = GetBool(body, "stream").value_or(false);
  if (const json* options = FindField(body, "stream_options")) {
    if (!options->is_object()) {
      throw ApiException(BadRequest(
          "'stream_options' must be an object, got " + JsonTypeName(*options), "stream_options"));
    }
    if (!p.stream) {
      throw ApiException(
          BadRequest("'stream_options' can only be set when 'stream' is true", "stream_options"));
    }
    p.include_usage =
        GetBool(*options, "include_usage", "stream_options.include_usage").value_or(false);
  }
  p.priority = static_cast<int32_t>(GetInt(body, "priority").value_or(0));
  p.user = GetString(body, "user").value_or("");
  return p;
}

void CheckModelName(const json& body, const std::string& served_name) {
  const auto model = GetString(body, "model");
  if (model && *model != served_name) {
    // 404 as OpenAI's API and vLLM answer it (the openai clients' NotFoundError).
    ApiError e =
        BadRequest("The model `" + *model + "` does not exist.", "model", "model_not_found");
    e.status = 404;
    throw ApiException(std::move(e));
  }
}

void CheckPromptText(std::string_view text, const guard::ModelLimits& ctx,
                     const std::string& param) {
  if (auto refusal =
          guard::CheckPromptBytes(text, ctx.max_prompt_bytes, ctx.max_model_len, param)) {
    throw Refused(*refusal);
  }
}

void CheckLogprobVolume(int64_t output_tokens, int32_t num_logprobs) {
  if (auto refusal = guard::CheckLogprobVolume(output_tokens, num_logprobs)) {
    throw Refused(*refusal);
  }
}

std::optional<uint64_t> ChoiceSeed(const std::optional<uint64_t>& seed, int32_t i) {
  if (!seed) return std::nullopt;
  return *seed + static_cast<uint64_t>(i);
}

int32_t ResolveMaxTokens(int32_t prompt_len, std::optional<int32_t> max_tokens,
                         int32_t max_model_len, const std::string& input_name) {
  const std::string limit =
      "This model's maximum context length is " + std::to_string(max_model_len) + " tokens. ";
  if (prompt_len > max_model_len || (!max_tokens && prompt_len >= max_model_len)) {
    throw ApiException(
        BadRequest(limit + "However, your request has " + std::to_string(prompt_len) +
                       " input tokens. Please reduce the length of the " + input_name + ".",
                   input_name, "context_length_exceeded"));
  }
  if (!max_tokens) return max_model_len - prompt_len;
  const int64_t total = static_cast<int64_t>(prompt_len) + *max_tokens;
  if (total > max_model_len) {
    throw ApiException(BadRequest(limit + "However, you requested " + std::to_string(total) +
                                      " tokens (" + std::to_string(prompt_len) + " in the " +
                                      input_name + ", " + std::to_string(*max_tokens) +
                                      " in the completion). Please reduce the length of the " +
                                      input_name + " or completion.",
                                  "max_tokens", "context_length_exceeded"));
  }
  return *max_tokens;
}

}  // namespace tq::http
