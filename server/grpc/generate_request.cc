// Generate request validation (see generate_request.h).
#include "server/grpc/generate_request.h"

#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/common/json_limits.h"
#include "engine/structured/grammar.h"
#include "engine/structured/json_schema.h"
#include "server/grpc/grpc_status.h"

namespace tq::grpc_api {
namespace {

std::string Range(int32_t end) {
  return "[0, " + std::to_string(end) + ")";
}

SamplingParams ReadSampling(const tqserve::v1::SamplingParameters& s,
                            const GenerationDefaults& defaults) {
  SamplingParams p;
  p.temperature = s.has_temperature() ? s.temperature() : defaults.temperature;
  p.top_p = s.has_top_p() ? s.top_p() : defaults.top_p;
  p.top_k = s.has_top_k() ? s.top_k() : defaults.top_k;
  p.min_p = s.min_p();
  p.repetition_penalty =
      s.has_repetition_penalty() ? s.repetition_penalty() : defaults.repetition_penalty;
  p.presence_penalty = s.presence_penalty();
  p.frequency_penalty = s.frequency_penalty();
  // Two's complement, as the HTTP API reads a JSON seed: the same seed gives
  // the same output on both.
  if (s.has_seed()) p.seed = static_cast<uint64_t>(s.seed());
  p.max_tokens = s.has_max_tokens() ? s.max_tokens() : kDefaultMaxTokens;
  p.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  p.ignore_eos = s.ignore_eos();
  // SamplingParams::Validate messages start with the field name ("top_p must
  // be ..."), so the request's path is that name under "sampling.".
  if (const std::string error = p.Validate(); !error.empty()) {
    throw RpcError(grpc::StatusCode::INVALID_ARGUMENT, "sampling." + error);
  }
  return p;
}

// The prompt's token ids and the name of the field they came from.
std::vector<int32_t> ReadPrompt(const tqserve::v1::GenerateRequest& request,
                                const guard::ModelLimits& limits, const Tokenizer& tokenizer,
                                std::string* field) {
  using Request = tqserve::v1::GenerateRequest;
  switch (request.input_case()) {
    case Request::kText: {
      *field = "text";
      if (request.text().empty()) throw InvalidArgument("text", "must not be empty");
      CheckPromptText(request.text(), limits, *field);
      return tokenizer.Encode(
          request.text(), request.has_add_special_tokens() ? request.add_special_tokens() : true);
    }
    case Request::kTokenIds: {
      *field = "token_ids.ids";
      const auto& ids = request.token_ids().ids();
      if (ids.empty()) throw InvalidArgument(*field, "must not be empty");
      CheckTokenIds(std::span<const int32_t>(ids.data(), static_cast<size_t>(ids.size())),
                    limits.vocab_size, *field);
      return std::vector<int32_t>(ids.begin(), ids.end());
    }
    case Request::INPUT_NOT_SET:
      break;
  }
  throw InvalidArgument("input", "is required: set text or token_ids");
}

}  // namespace

void CheckPromptText(const std::string& text, const guard::ModelLimits& limits,
                     const std::string& field) {
  if (auto refusal =
          guard::CheckPromptBytes(text, limits.max_prompt_bytes, limits.max_model_len, field)) {
    throw Refused(field, *refusal);
  }
}

void CheckModel(const std::string& model, const guard::ModelLimits& limits) {
  if (!model.empty() && model != limits.served_model_name) throw ModelNotFound(model);
}

void CheckTokenIds(std::span<const int32_t> ids, int32_t vocab_size, const std::string& field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      throw InvalidArgument(field + "[" + std::to_string(i) + "]",
                            "must be in " + Range(vocab_size) + ", got " + std::to_string(ids[i]));
    }
  }
}

GenerateParams ParseGenerateRequest(const tqserve::v1::GenerateRequest& request,
                                    const guard::ModelLimits& limits, const Tokenizer& tokenizer) {
  CheckModel(request.model(), limits);
  const tqserve::v1::SamplingParameters& s = request.sampling();
  GenerateParams out;
  out.request.sampling = ReadSampling(s, limits.defaults);
  const auto& stop_ids = out.request.sampling.stop_token_ids;
  CheckTokenIds(stop_ids, limits.vocab_size, "sampling.stop_token_ids");
  const std::vector<std::string> stops(s.stop().begin(), s.stop().end());
  if (auto refusal = guard::CheckStopStrings(stops, "stop")) {
    throw Refused("sampling.stop", *refusal);
  }
  for (const std::string& stop : stops) {
    if (!stop.empty()) out.stop.push_back(stop);
  }
  if (s.has_logprobs()) {
    if (s.logprobs() < 0 || s.logprobs() > limits.max_logprobs) {
      throw InvalidArgument("sampling.logprobs", "must be in [0, " +
                                                     std::to_string(limits.max_logprobs) +
                                                     "], got " + std::to_string(s.logprobs()));
    }
    out.request.num_logprobs = s.logprobs();
    out.want_logprobs = true;
  }
  out.request.priority = request.priority();

  std::string field;
  out.request.prompt_ids = ReadPrompt(request, limits, tokenizer, &field);
  const int64_t prompt_len = static_cast<int64_t>(out.request.prompt_ids.size());
  const std::string context =
      "the model's context length is " + std::to_string(limits.max_model_len) + " tokens";
  if (prompt_len > limits.max_model_len) {
    throw InvalidArgument(field, "has " + std::to_string(prompt_len) + " tokens, but " + context);
  }
  const int64_t max_tokens = out.request.sampling.max_tokens;
  if (prompt_len + max_tokens > limits.max_model_len) {
    throw InvalidArgument("sampling.max_tokens", "is " + std::to_string(max_tokens) +
                                                     " and the prompt has " +
                                                     std::to_string(prompt_len) + " tokens, but " +
                                                     context + " (prompt + max_tokens must fit)");
  }
  if (auto refusal = guard::CheckLogprobVolume(max_tokens, out.request.num_logprobs)) {
    throw Refused("sampling.logprobs", *refusal);
  }
  return out;
}

void ReadStructuredOutput(const tqserve::v1::GenerateRequest& request,
                          structured::GrammarCache& cache, GenerateParams* params) {
  if (!request.sampling().has_structured_output()) return;
  using Out = tqserve::v1::StructuredOutput;
  using Kind = structured::ConstraintSpec::Kind;
  const Out& so = request.sampling().structured_output();
  structured::ConstraintSpec spec;
  std::string field = "sampling.structured_output.";
  switch (so.kind_case()) {
    case Out::kJsonSchema: {
      field += "json_schema";
      nlohmann::json schema;
      try {
        schema = ParseJsonBounded<nlohmann::json>(so.json_schema(), field,
                                                  structured::kMaxConstraintBytes);
      } catch (const JsonLimitError& e) {
        throw InvalidArgument(field, e.problem());
      }
      if (!schema.is_object() && !schema.is_boolean()) {
        throw InvalidArgument(field, "must be a JSON Schema object as JSON text");
      }
      spec.kind = Kind::kJsonSchema;
      spec.text = schema.dump();
      break;
    }
    case Out::kJsonObject:
      field += "json_object";
      if (!so.json_object()) return;
      spec.kind = Kind::kJsonObject;
      spec.text = "";
      break;
    case Out::kRegex:
      field += "regex";
      spec.kind = Kind::kRegex;
      spec.text = so.regex();
      break;
    case Out::kChoice: {
      field += "choice";
      if (so.choice().choices().empty()) throw InvalidArgument(field, "must not be empty");
      nlohmann::json list = nlohmann::json::array();
      for (const std::string& c : so.choice().choices()) list.push_back(c);
      spec.kind = Kind::kChoice;
      spec.text = list.dump();
      break;
    }
    case Out::kGrammar:
      field += "grammar";
      spec.kind = Kind::kGrammar;
      spec.text = so.grammar();
      break;
    case Out::KIND_NOT_SET:
      throw InvalidArgument("sampling.structured_output", "must set one constraint");
  }
  try {
    params->request.sampling.grammar = cache.Get(spec);
  } catch (const structured::UnsupportedConstraint& e) {
    throw InvalidArgument(field, std::string(e.what()) + " (unsupported: '" + e.keyword() + "')");
  } catch (const Error& e) {
    throw InvalidArgument(field, e.what());
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(field, e.what());
  }
}

}  // namespace tq::grpc_api
