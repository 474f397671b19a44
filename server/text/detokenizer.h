// Incremental detokenization for streaming output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace tq {

/// Turns a stream of generated token ids into text deltas that are always
/// valid UTF-8: a byte-fallback sequence split across tokens (é, 中, 😀) is
/// held back until complete. Convention (vLLM's): the concatenated deltas plus
/// Flush() equal Decode(prompt + output) minus Decode(prompt). So the first
/// output piece "▁Once" after a prompt "Hello" gives " Once", while after an
/// empty or BOS-only prompt SentencePiece's start-of-text rule drops the space
/// and the deltas equal Decode(output). Prefix-window approach as in vLLM's
/// detokenize_incrementally, so each step costs O(window), not O(length).
/// Not thread-safe; one per sequence.
class IncrementalDetokenizer {
 public:
  /// `prompt_ids` give context for the first output token's spacing.
  IncrementalDetokenizer(const Tokenizer* tokenizer, std::vector<int32_t> prompt_ids);

  /// Appends one token and returns the new text ("" while UTF-8 is incomplete).
  std::string Push(int32_t token_id);
  /// Text still held back (incomplete UTF-8 at end of stream), decoded with
  /// replacement characters.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // start of the context window
  size_t read_offset_ = 0;    // tokens before this are already emitted

  std::string DecodeWindow(size_t begin, size_t end) const;
  std::string Emit(bool final);
};

}  // namespace tq
