// Generated token ids -> text deltas for clients, with stop strings.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "server/text/detokenizer.h"

namespace tq {

/// The text of one generated sequence as it streams. Wraps
/// IncrementalDetokenizer (never emits part of a UTF-8 character) and applies
/// OpenAI `stop` strings: text is emitted only once it cannot be the start of
/// a stop string; when a stop string appears, the text before it is the last
/// emitted (the stop string itself is not, as in OpenAI and vLLM) and the
/// stream is stopped. The concatenation of every Push and Finish equals the
/// non-streamed text of the same tokens. Not thread-safe; one per sequence.
class OutputTextStream {
 public:
  /// `prompt_ids` give context for spacing (see IncrementalDetokenizer).
  /// Empty and repeated strings in `stop` are ignored; stop strings are
  /// matched as UTF-8 bytes in the generated text only (never in the
  /// prompt), so they must be valid UTF-8, as JSON strings are.
  OutputTextStream(const Tokenizer* tokenizer, std::vector<int32_t> prompt_ids,
                   std::vector<std::string> stop);

  /// Appends generated tokens; returns the text that is safe to send now.
  /// Stop strings are checked after each token, so the first token whose
  /// text completes one ends the stream even within one call; after
  /// stopped(), further tokens are ignored and "" is returned.
  std::string Push(std::span<const int32_t> token_ids);
  /// The sequence ended without a stop string: returns the held-back text
  /// (an incomplete stop-string prefix, incomplete UTF-8 as U+FFFD). "" when
  /// stopped().
  std::string Finish();

  /// A stop string was found.
  bool stopped() const { return stopped_; }
  /// The stop string that ended the text ("" unless stopped()): the one that
  /// starts first; of several starting there, the shortest.
  const std::string& stop_string() const { return stop_string_; }
  /// Tokens consumed up to and including the one that completed the stop
  /// string (usage.completion_tokens of a stopped sequence); else all pushed.
  int32_t num_tokens() const { return num_tokens_; }

 private:
  IncrementalDetokenizer detokenizer_;
  std::vector<std::string> stop_;
  std::string held_;  // decoded but not yet emitted (could start a stop string)
  bool stopped_ = false;
  std::string stop_string_;  // the match, once stopped_
  int32_t num_tokens_ = 0;

  // Cuts held_ at the first stop string (setting stopped_), or returns all
  // of it but the longest suffix that could still become one; `final`
  // returns everything when no stop string is present.
  std::string Release(bool final);
};

}  // namespace tq
