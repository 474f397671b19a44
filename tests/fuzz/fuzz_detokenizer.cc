// Fuzz target: the streamed output text of one sequence (OutputTextStream
// over IncrementalDetokenizer, server/text/output_text.h) with stop strings,
// as the request runner feeds it generated tokens. Input: byte 0 picks the
// tokenizer (bundled SentencePiece or the byte-level BPE of tests/fuzz/data,
// whose tokens split UTF-8 characters), byte 1 the number of stop strings
// (0..3), each then a length byte (0..15) and its bytes, then the prompt
// length (a byte, 0..7), then 16-bit token ids (taken modulo the vocabulary,
// as the engine only emits ids below it) pushed in groups of 1..4.
// Checks the contract: no emitted text contains a stop string, and
// nothing is emitted after stopped().
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "server/text/output_text.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz: detokenizer: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  fuzz::ByteReader in(data, size);
  const Tokenizer& tokenizer =
      in.Byte() % 2 == 0 ? fuzz::BundledTokenizer() : fuzz::ByteLevelTokenizer();
  std::vector<std::string> stop;
  const int num_stop = in.Byte() % 4;
  for (int i = 0; i < num_stop; ++i) stop.emplace_back(in.Take(in.Byte() % 16));
  const auto vocab = static_cast<uint32_t>(tokenizer.vocab_size());
  std::vector<int32_t> prompt;
  const int prompt_len = in.Byte() % 8;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back(static_cast<int32_t>(in.U16() % vocab));
  try {
    OutputTextStream stream(&tokenizer, prompt, stop);
    std::string text;
    while (in.remaining() > 0) {
      std::vector<int32_t> group(1 + in.Byte() % 4);
      for (int32_t& id : group) id = static_cast<int32_t>(in.U16() % vocab);
      const bool was_stopped = stream.stopped();
      const std::string delta = stream.Push(group);
      if (was_stopped && !delta.empty()) Fail("text after stopped()");
      text += delta;
    }
    text += stream.Finish();
    for (const std::string& s : stop) {
      if (!s.empty() && text.find(s) != std::string::npos) Fail("emitted text holds a stop string");
    }
  } catch (const std::exception& e) {
    fuzz::Unexpected("OutputTextStream", e);
  }
  return 0;
}
