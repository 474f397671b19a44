// One choice's engine outputs -> text deltas (see choice_decoder.h).
#include "server/session/choice_decoder.h"

#include <algorithm>
#include <span>

namespace tq {

ChoiceDecoder::ChoiceDecoder(const Tokenizer& tokenizer, const EngineRequest& request,
                             std::vector<std::string> stop)
    : text_(&tokenizer, request.prompt_ids, std::move(stop)),
      stop_token_ids_(request.sampling.stop_token_ids) {}

SessionDelta ChoiceDecoder::Add(EngineOutput&& output) {
  SessionDelta delta;
  if (finished_) return delta;
  cached_tokens_ = output.num_cached_tokens;
  delta.cached_tokens = cached_tokens_;
  if (!started_) {
    started_ = true;
    delta.first = true;
    delta.prompt_logprobs = std::move(output.prompt_logprobs);
  }
  for (size_t i = 0; i < output.token_ids.size() && !text_.stopped(); ++i) {
    TokenStep step;
    step.id = output.token_ids[i];
    if (i < output.logprobs.size()) step.logprobs = std::move(output.logprobs[i]);
    step.text = text_.Push(std::span<const int32_t>(&step.id, 1));
    delta.text += step.text;
    last_token_ = step.id;
    delta.tokens.push_back(std::move(step));
  }
  delta.completion_tokens = completion_tokens();
  if (text_.stopped()) {
    finished_ = true;
    delta.finish = ChoiceFinish::kStop;
    delta.stop_string = text_.stop_string();
    return delta;
  }
  if (!output.finished()) return delta;
  delta.text += text_.Finish();
  finished_ = true;
  if (output.finish == FinishReason::kLength) {
    delta.finish = ChoiceFinish::kLength;
    return delta;
  }
  delta.finish = ChoiceFinish::kStop;  // EOS or one of stop_token_ids
  if (completion_tokens() > 0 && std::find(stop_token_ids_.begin(), stop_token_ids_.end(),
                                           last_token_) != stop_token_ids_.end()) {
    delta.stop_token_id = last_token_;
  }
  return delta;
}

}  // namespace tq
