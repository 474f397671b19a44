// PCRE2 wrapper (see hf_regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer/hf_regex.h"

#include <pcre2.h>

#include "engine/common/error.h"
#include "engine/tokenizer/utf8.h"

namespace tq::hf {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
};

namespace {

// One match-data block per thread, grown to the largest pattern seen.
struct MatchData {
  pcre2_match_data* data = nullptr;
  ~MatchData() { pcre2_match_data_free(data); }
};

pcre2_match_data* ThreadMatchData() {
  thread_local MatchData md;
  if (md.data == nullptr) md.data = pcre2_match_data_create(32, nullptr);
  return md.data;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& what) : impl_(new Impl) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (impl_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(what + ": invalid regex at offset " + std::to_string(offset) + ": " +
                reinterpret_cast<const char*>(msg));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  pcre2_code_free(impl_->code);
}

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  pcre2_match_data* md = ThreadMatchData();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    const int rc =
        impl_->jit
            ? pcre2_jit_match(impl_->code, subject, text.size(), pos, 0, md, nullptr)
            : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) {
      if (rc == PCRE2_ERROR_NOMATCH) return;
      throw Error("tokenizer: regex match failed (PCRE2 error " + std::to_string(rc) + ")");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      pos = end;
    } else {
      if (begin >= text.size()) return;
      pos = begin + utf8::SeqLen(static_cast<unsigned char>(text[begin]));
    }
  }
}

}  // namespace tq::hf
