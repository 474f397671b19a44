#include "engine/runtime/request.h"

#include <iterator>

namespace tq {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

void EngineOutput::Merge(EngineOutput&& later) {
  token_ids.insert(token_ids.end(), later.token_ids.begin(), later.token_ids.end());
  logprobs.insert(logprobs.end(), std::make_move_iterator(later.logprobs.begin()),
                  std::make_move_iterator(later.logprobs.end()));
  prompt_logprobs.insert(prompt_logprobs.end(),
                         std::make_move_iterator(later.prompt_logprobs.begin()),
                         std::make_move_iterator(later.prompt_logprobs.end()));
  if (later.finish != FinishReason::kNone) {
    finish = later.finish;
    error = std::move(later.error);
  }
  num_prompt_tokens = later.num_prompt_tokens;
  num_output_tokens = later.num_output_tokens;
  num_cached_tokens = later.num_cached_tokens;
}

}  // namespace tq
