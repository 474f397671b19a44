// Fuzz target: the bundled SentencePiece tokenizer (models/stories260K) on
// arbitrary bytes, as prompts reach it: Encode with and without special
// tokens, Decode of the result, and Decode / IdToPiece / TokenBytes of ids
// read from the input (in range and out of range, which Decode skips).
// Nothing may throw.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  const Tokenizer& tokenizer = fuzz::BundledTokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<int32_t> ids = tokenizer.Encode(text, /*add_special=*/true);
    (void)tokenizer.Decode(ids);
    (void)tokenizer.Encode(text, /*add_special=*/false);
    // The input as 16-bit ids around the vocabulary (out-of-range ones too).
    fuzz::ByteReader reader(data, size);
    std::vector<int32_t> raw;
    while (reader.remaining() >= 2) {
      const int32_t id = static_cast<int32_t>(reader.U16() % (tokenizer.vocab_size() + 16)) - 8;
      raw.push_back(id);
      (void)tokenizer.IdToPiece(id);
      (void)tokenizer.TokenBytes(id);
    }
    (void)tokenizer.Decode(raw);
  } catch (const std::exception& e) {
    fuzz::Unexpected("SentencePiece tokenizer", e);
  }
  return 0;
}
