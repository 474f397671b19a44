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
#include "server/session/choice_decoder.h"
#include "tqserve/v1/generation.pb.h"

namespace tq::grpc_api {

/// The text of one token as bytes for TokenLogprob.token: Tokenizer::TokenBytes
/// (the SentencePiece piece with "▁" (U+2581) as a space, a byte-fallback piece
/// "<0xNN>" as that byte), the piece itself for control tokens and <unk>; ""
/// for an id outside the vocabulary.
std::string TokenBytes(const Tokenizer& tokenizer, int32_t token);

/// Builds the messages of one Generate stream from a RequestSession's
/// deltas (Build), or from raw engine outputs through its own ChoiceDecoder
/// (Add: the same text rules, for callers without a session). Text is valid
/// UTF-8 only, nothing of a stop string; when a stop string matches, tokens
/// after the one that completed it are dropped and the message is the last
/// one (finish STOP, stop_string as the decoder matched it). Not
/// thread-safe: one per call.
class GenerateResponder {
 public:
  /// `tokenizer` must outlive the responder; `params` is the parsed request
  /// (prompt ids, stop strings, stop token ids, logprobs).
  GenerateResponder(const Tokenizer& tokenizer, std::string id, const GenerateParams& params);

  /// Turns one session delta into the next message (overwriting `message`).
  /// Returns false when the message carries nothing worth sending (no text,
  /// no tokens, not the last).
  bool Build(const SessionDelta& delta, tqserve::v1::GenerateResponse* message);
  /// Decodes one engine delta (finish kNone, kStop or kLength; aborts and
  /// engine errors are the caller's to report as a status), then Build. The
  /// caller must abort the engine request once stopped_by_string().
  bool Add(EngineOutput&& output, tqserve::v1::GenerateResponse* message);

  /// The last message has been built.
  bool finished() const { return finished_; }
  /// A stop string ended the request (through Add).
  bool stopped_by_string() const { return decoder_.stopped_by_string(); }
  /// Tokens sent so far (usage.completion_tokens once finished).
  int32_t completion_tokens() const { return completion_tokens_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }

 private:
  void AddLogprobs(const PositionLogprobs& lp, tqserve::v1::GenerateResponse* message) const;

  const Tokenizer& tokenizer_;
  const std::string id_;
  const int32_t prompt_tokens_;
  const bool want_logprobs_;
  ChoiceDecoder decoder_;  // Add's
  int32_t completion_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace tq::grpc_api
