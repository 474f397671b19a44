// Sliding-window perplexity of a model over tokenized documents: the engine
// behind `tqserve eval`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/offline_engine.h"

namespace tq {

struct PerplexityResult {
  double nll_sum = 0.0;       // sum of -ln p(token | context) over scored tokens (nats)
  int64_t num_predicted = 0;  // tokens scored
  double perplexity = 0.0;    // exp(nll_sum / num_predicted); NaN when num_predicted == 0
  int32_t num_windows = 0;    // model calls (windows that scored at least one token)
  int32_t context = 0;
  int32_t stride = 0;
};

/// -ln softmax(row)[target] of one logits row [vocab], in double with the max subtracted.
double NegLogProb(const float* row, int32_t vocab, int32_t target);

/// Documents of an evaluation text: maximal runs of non-blank lines (a blank
/// line holds only spaces, tabs or CR), each joined with '\n'; a line's
/// trailing '\r' is dropped. Empty or all-blank text gives no documents.
std::vector<std::string> SplitDocuments(std::string_view text);

/// Standard sliding-window perplexity (Hugging Face, "Perplexity of
/// fixed-length models"), per document. Each document (token ids, BOS first
/// as the caller wants it) is cut into windows [b, min(b + context, n)) for
/// b = 0, stride, 2*stride, ... until a window reaches the end; each window
/// is one prompt-scoring request (OfflineEngine::ScorePrompts: prompt
/// logprobs, all windows batched by the engine's scheduler) and scores only
/// the tokens after the previous window's end, each conditioned on the earlier tokens of its window
/// (at most context - 1; at least context - stride after the first window). The first token of a
/// document is never scored, so with stride < context every other token is scored exactly once
/// (num_predicted = sum(n - 1)); with stride == context (disjoint windows) the first token of each
/// later window has no context inside its window and is skipped, as in the HF recipe. Documents
/// shorter than 2 tokens contribute nothing. Log-softmax is taken in double. Throws tq::Error
/// unless context >= 2 and 1 <= stride <= context, and (from ScorePrompts) when context exceeds
/// engine.max_model_len() for a document that long or an id is outside the vocabulary.

PerplexityResult EvaluatePerplexity(OfflineEngine& engine,
                                    std::span<const std::vector<int32_t>> documents,
                                    int32_t context, int32_t stride);

}  // namespace tq
