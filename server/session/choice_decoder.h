// One generated sequence's engine outputs -> text deltas with stop strings:
// the front-end-neutral part of streaming a choice (HTTP and gRPC share it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/request.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/text/output_text.h"

namespace tq {

/// How a choice ended, as the client sees it (aborts and engine errors are
/// RequestSession failures, never a finish).
enum class ChoiceFinish { kNone, kStop, kLength };

/// One generated token of a delta.
struct TokenStep {
  int32_t id = -1;
  std::optional<PositionLogprobs> logprobs;  // when the request asked for them
  std::string text;                          // text this token released (may be "")
};

/// What one choice produced since its previous delta.
struct SessionDelta {
  size_t choice = 0;                              // index into the session's choices
  bool first = false;                             // the choice's first delta (echo goes before it)
  std::vector<PositionLogprobs> prompt_logprobs;  // with `first`: entry i is for prompt token i + 1
  std::vector<TokenStep> tokens;                  // tokens sent (none after a stop string)
  std::string text;  // every token's text, then at the end any held-back tail
  ChoiceFinish finish = ChoiceFinish::kNone;
  std::string stop_string;               // the stop string that ended it ("" if none)
  std::optional<int32_t> stop_token_id;  // one of stop_token_ids ended it (not EOS)
  int32_t completion_tokens = 0;         // tokens of the choice so far (final once finished)
  int32_t cached_tokens = 0;             // prompt tokens from the prefix cache (usage)

  bool finished() const { return finish != ChoiceFinish::kNone; }
  /// Something for the client: tokens, text, the end, or the first delta.
  bool empty() const { return !first && tokens.empty() && text.empty() && !finished(); }
};

/// Decodes one choice. An OutputTextStream makes the text (never part of a
/// UTF-8 character, never any of a stop string); when a stop string matches,
/// the tokens after the one that completed it are dropped, the delta is the
/// last (kStop, stop_string from the stream itself, completion tokens
/// counted up to that token, as vLLM) and the caller must end the engine
/// request (RequestSession does: Abort with FinishReason::kStop). Not
/// thread-safe: one owner.
class ChoiceDecoder {
 public:
  /// `tokenizer` must outlive the decoder.
  ChoiceDecoder(const Tokenizer& tokenizer, const EngineRequest& request,
                std::vector<std::string> stop);

  /// One engine output (finish kNone, kStop or kLength) -> its delta. After
  /// the last delta, returns empty deltas.
  SessionDelta Add(EngineOutput&& output);

  /// The last delta has been returned.
  bool finished() const { return finished_; }
  /// A stop string ended the choice (the engine request may still be live).
  bool stopped_by_string() const { return text_.stopped(); }
  /// Tokens sent so far (the stream's: up to the one that completed a stop string).
  int32_t completion_tokens() const { return text_.num_tokens(); }
  /// Prompt tokens whose KV came from the prefix cache (EngineOutput::num_cached_tokens).
  int32_t cached_tokens() const { return cached_tokens_; }

 private:
  OutputTextStream text_;
  const std::vector<int32_t> stop_token_ids_;
  bool started_ = false;
  bool finished_ = false;
  int32_t last_token_ = -1;
  int32_t cached_tokens_ = 0;
};

}  // namespace tq
