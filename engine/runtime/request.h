// What a client asks the engine for, and what the engine streams back.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampling/sampling_params.h"

namespace tq {

/// Why a request ended. kStop and kLength are OpenAI's finish_reason "stop"
/// (EOS or a stop token) and "length" (max_tokens or max_model_len). kAbort:
/// aborted by Engine::Abort (client disconnect, a stop string found by
/// the front end, drain timeout). kError: the engine failed (message in
/// EngineOutput::error).
enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

/// "stop", "length", "abort", "error" ("" for kNone): the Prometheus
/// finish_reason label and, for stop/length, OpenAI's finish_reason.
const char* FinishReasonName(FinishReason reason);

/// One token with its log-probability (natural log) under the model's raw
/// distribution: log_softmax of the logits before penalties, temperature and
/// top-k/p (vLLM v1's default "raw logprobs").
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

/// Log-probabilities at one position: the token that was chosen (sampled, or
/// the prompt token for prompt logprobs) and the `num_logprobs` most likely
/// tokens, descending (ties: lower id first).
struct PositionLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
  // chosen.logprob before its rounding to the float the APIs carry, so that
  // a sum over many positions (perplexity, `tqserve eval`) keeps double
  // precision.
  double chosen_logprob = 0.0;
};

/// A generation request as the engine sees it: token ids in, token ids out.
/// Text (chat templates, stop strings, detokenization) is the front end's job.
struct EngineRequest {
  std::string request_id;           // unique among live requests (the front end picks it)
  std::vector<int32_t> prompt_ids;  // BOS included when wanted; 1..max_model_len ids
  SamplingParams sampling;          // max_tokens, stop_token_ids and ignore_eos inside
  int32_t num_logprobs = -1;        // -1: none; 0..20: chosen token + this many top tokens
  bool prompt_logprobs = false;     // also logprobs of prompt tokens 1.. (OpenAI echo)
  int32_t priority = 0;             // lower runs first (vLLM); ties first-come first-served
};

/// Output of one request since its previous output (a delta). The last output
/// of every request has finish != kNone; none follows it.
struct EngineOutput {
  std::vector<int32_t> token_ids;          // new generated tokens
  std::vector<PositionLogprobs> logprobs;  // one per token_ids entry when requested
  // Prompt logprobs, in the first output that has any: entry i is for prompt
  // token i + 1 (token 0 has none, as OpenAI's echo shows null).
  std::vector<PositionLogprobs> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;              // finish == kError: what failed
  int32_t num_prompt_tokens = 0;  // usage.prompt_tokens
  int32_t num_output_tokens = 0;  // usage.completion_tokens so far (cumulative)
  // usage.prompt_tokens_details.cached_tokens: prompt tokens whose K/V came
  // from the prefix cache when the request was first admitted (0 before).
  int32_t num_cached_tokens = 0;

  bool finished() const { return finish != FinishReason::kNone; }
  /// Appends a later delta of the same request (token ids, logprobs; the later
  /// finish, error and counts win).
  void Merge(EngineOutput&& later);
};

/// Throws tq::Error when `prompt` is empty, longer than max_model_len or has
/// an id outside [0, vocab_size).
void CheckPromptIds(std::span<const int32_t> prompt, int32_t max_model_len, int32_t vocab_size);
/// CheckPromptIds, SamplingParams::Validate and stop token ids below
/// vocab_size: what every engine front end rejects before submitting a
/// request; throws tq::Error with a message naming the field.
void CheckRequestIds(std::span<const int32_t> prompt, const SamplingParams& params,
                     int32_t max_model_len, int32_t vocab_size);

}  // namespace tq
