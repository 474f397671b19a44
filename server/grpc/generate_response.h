// One Generate call's engine outputs -> its stream of GenerateResponse
// messages (text deltas with stop strings, token ids, logprobs, the finish
// reason and usage).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/request.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/grpc/generate_request.h"
#include "server/text/output_text.h"
#include "tqserve/v1/generation.pb.h"

namespace tq::grpc_api {

/// The text of one token as bytes for TokenLogprob.token: the SentencePiece
/// piece with "▁" (U+2581) as a space, a byte-fallback piece "<0xNN>" as that
/// byte; "" for an id outside the vocabulary.
std::string TokenBytes(const Tokenizer& tokenizer, int32_t token);

/// Builds the messages of one Generate stream. Text goes through an
/// OutputTextStream (valid UTF-8 only, nothing of a stop string); when a stop
/// string matches, tokens after the one that completed it are dropped, the
/// message is the last one (finish STOP, stop_string) and the caller must
/// abort the engine request (EngineClient::Abort(id, FinishReason::kStop)).
/// Not thread-safe: one per call, used by its handler thread.
class GenerateResponder {
 public:
  /// `tokenizer` must outlive the responder; `params` is the parsed request
  /// (prompt ids, stop strings, stop token ids, logprobs).
  GenerateResponder(const Tokenizer& tokenizer, std::string id, const GenerateParams& params);

  /// Turns one engine delta into the next message (overwriting `message`).
  /// `output.finish` must be kNone, kStop or kLength (aborts and engine errors
  /// are the caller's to report as a status). Returns false when the message
  /// carries nothing worth sending (no text, no tokens, not the last).
  bool Add(EngineOutput&& output, tqserve::v1::GenerateResponse* message);

  /// The last message has been built.
  bool finished() const { return finished_; }
  /// A stop string ended the request (the engine request is still live).
  bool stopped_by_string() const { return text_.stopped(); }
  /// Tokens sent so far (usage.completion_tokens once finished).
  int32_t completion_tokens() const { return static_cast<int32_t>(generated_.size()); }
  int32_t prompt_tokens() const { return static_cast<int32_t>(prompt_ids_.size()); }

 private:
  void AddLogprobs(const PositionLogprobs& lp, tqserve::v1::GenerateResponse* message) const;
  void Finish(tqserve::v1::FinishReason reason, tqserve::v1::GenerateResponse* message);
  std::string MatchedStopString() const;

  const Tokenizer& tokenizer_;
  const std::string id_;
  const std::vector<int32_t> prompt_ids_;
  const std::vector<std::string> stop_;
  const std::vector<int32_t> stop_token_ids_;
  const bool want_logprobs_;
  OutputTextStream text_;
  std::vector<int32_t> generated_;  // tokens sent (pushed into text_)
  size_t emitted_bytes_ = 0;        // bytes of text sent
  bool finished_ = false;
};

}  // namespace tq::grpc_api
