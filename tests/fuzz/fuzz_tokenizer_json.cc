// Fuzz target: a tokenizer.json loaded and used as Tokenizer::Load does for
// a model directory that has one (engine/tokenizer/hf_tokenizer.h). Parts
// (fuzz_common.h kPartSeparator): the tokenizer.json, then the text to
// encode. A bad file must end in tq::Error at load; a loaded tokenizer must
// encode any bytes and decode any ids without throwing.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <vector>

#include "engine/common/error.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  static const std::string path = fuzz::ScratchPath("tokenizer.json");
  const std::vector<std::string_view> parts = fuzz::SplitParts(data, size, 2);
  fuzz::WriteFile(path, parts[0]);
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = LoadTokenizerJson(path, TokenizerSettings{});
  } catch (const Error& e) {
    fuzz::Expected(e);
    return 0;
  } catch (const std::exception& e) {
    fuzz::Unexpected("tokenizer.json load", e);
  }
  const std::string_view text = parts.size() > 1 ? parts[1] : std::string_view("Hello world");
  try {
    const std::vector<int32_t> ids = tokenizer->Encode(text, /*add_special=*/true);
    for (const int32_t id : ids) {
      if (id < 0 || id >= tokenizer->vocab_size()) {
        std::fprintf(stderr, "fuzz: Encode gave id %d outside [0, %d)\n", id,
                     tokenizer->vocab_size());
        std::abort();
      }
    }
    (void)tokenizer->Decode(ids);
    for (const int32_t id : ids) (void)tokenizer->TokenBytes(id);
    (void)tokenizer->Encode(text, /*add_special=*/false);
    const int32_t probe[] = {-1, tokenizer->vocab_size(), 0};
    (void)tokenizer->Decode(probe);
  } catch (const std::exception& e) {
    fuzz::Unexpected("tokenizer.json encode/decode", e);
  }
  return 0;
}
