// LoadTokenizerJson in builds configured with -DTQ_TOKENIZER_JSON=OFF (no
// PCRE2 or utf8proc): a tokenizer.json is refused with one error line.
#include "engine/common/error.h"
#include "engine/tokenizer/hf_tokenizer.h"

namespace tq {

std::unique_ptr<Tokenizer> LoadTokenizerJson(const std::string& path, const TokenizerSettings&) {
  throw Error(path +
              ": this build has no tokenizer.json support (configured with "
              "-DTQ_TOKENIZER_JSON=OFF; install libpcre2-dev and libutf8proc-dev)");
}

}  // namespace tq
