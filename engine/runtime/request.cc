#include "engine/runtime/request.h"

#include <iterator>
#include <string>

#include "engine/common/error.h"

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

void CheckPromptIds(std::span<const int32_t> prompt, int32_t max_model_len, int32_t vocab_size) {
  if (prompt.empty()) throw Error("prompt is empty");
  if (static_cast<int32_t>(prompt.size()) > max_model_len) {
    throw Error("prompt has " + std::to_string(prompt.size()) +
                " tokens, more than max_model_len " + std::to_string(max_model_len));
  }
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab_size) {
      throw Error("token id " + std::to_string(id) + " out of range [0, " +
                  std::to_string(vocab_size) + ")");
    }
  }
}

void CheckRequestIds(std::span<const int32_t> prompt, const SamplingParams& params,
                     int32_t max_model_len, int32_t vocab_size) {
  CheckPromptIds(prompt, max_model_len, vocab_size);
  if (std::string err = params.Validate(); !err.empty()) throw Error(err);
  for (int32_t id : params.stop_token_ids) {
    if (id >= vocab_size) {
      throw Error("stop_token_ids: " + std::to_string(id) + " is not below the vocabulary size " +
                  std::to_string(vocab_size));
    }
  }
}

}  // namespace tq
