// Generate's stream messages (see generate_response.h).
#include "server/grpc/generate_response.h"

#include <algorithm>
#include <span>
#include <string_view>

namespace tq::grpc_api {

std::string TokenBytes(const Tokenizer& tokenizer, int32_t token) {
  std::string bytes = tokenizer.TokenBytes(token);
  // Control tokens (BOS/EOS) and <unk> carry no text: their piece names them.
  return bytes.empty() ? tokenizer.IdToPiece(token) : bytes;
}

GenerateResponder::GenerateResponder(const Tokenizer& tokenizer, std::string id,
                                     const GenerateParams& params)
    : tokenizer_(tokenizer),
      id_(std::move(id)),
      prompt_tokens_(static_cast<int32_t>(params.request.prompt_ids.size())),
      want_logprobs_(params.want_logprobs),
      decoder_(tokenizer, params.request, params.stop) {}

bool GenerateResponder::Add(EngineOutput&& output, tqserve::v1::GenerateResponse* message) {
  return Build(decoder_.Add(std::move(output)), message);
}

bool GenerateResponder::Build(const SessionDelta& delta, tqserve::v1::GenerateResponse* message) {
  message->Clear();
  message->set_id(id_);
  if (finished_) return false;
  for (const TokenStep& t : delta.tokens) {
    message->add_token_ids(t.id);
    if (want_logprobs_ && t.logprobs) AddLogprobs(*t.logprobs, message);
  }
  message->set_text(delta.text);
  completion_tokens_ = delta.completion_tokens;
  if (!delta.finished()) return !message->text().empty() || message->token_ids_size() > 0;
  finished_ = true;
  message->set_finish_reason(delta.finish == ChoiceFinish::kLength
                                 ? tqserve::v1::FINISH_REASON_LENGTH
                                 : tqserve::v1::FINISH_REASON_STOP);
  if (!delta.stop_string.empty()) message->set_stop_string(delta.stop_string);
  // vLLM's stop_reason: one of stop_token_ids (never EOS).
  if (delta.stop_token_id) message->set_stop_token_id(*delta.stop_token_id);
  tqserve::v1::Usage* usage = message->mutable_usage();
  usage->set_prompt_tokens(prompt_tokens());
  usage->set_completion_tokens(completion_tokens());
  usage->set_total_tokens(prompt_tokens() + completion_tokens());
  usage->set_cached_tokens(delta.cached_tokens);
  return true;
}

void GenerateResponder::AddLogprobs(const PositionLogprobs& lp,
                                    tqserve::v1::GenerateResponse* message) const {
  const auto fill = [this](const TokenLogprob& from, tqserve::v1::TokenLogprob* to) {
    to->set_token_id(from.token);
    to->set_logprob(from.logprob);
    to->set_token(TokenBytes(tokenizer_, from.token));
  };
  tqserve::v1::PositionLogprobs* position = message->add_logprobs();
  fill(lp.chosen, position->mutable_chosen());
  for (const TokenLogprob& top : lp.top) fill(top, position->add_top_logprobs());
}

}  // namespace tq::grpc_api
