// Normalizers of tokenizer.json (see hf_normalizers.h).
#include "engine/tokenizer/hf_normalizers.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/common/error.h"
#include "engine/tokenizer/hf_pattern.h"

namespace tq::hf {
namespace {

using json = nlohmann::json;

// Unicode canonical composition (UAX #15 NFC) through utf8proc.
class Nfc final : public Normalizer {
 public:
  void Normalize(std::string& text) const override {
    bool ascii = true;
    for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
    if (ascii) return;  // ASCII is NFC already
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &out,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) return;  // not reached: the input is valid UTF-8
    text.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }
};

// Prepends a string to non-empty text (the "▁" of Llama/Mistral BPE).
class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

// Replaces every match of a pattern by `content`.
class Replace final : public Normalizer {
 public:
  Replace(const json& spec, const std::string& where)
      : pattern_(spec.at("pattern"), where + ": normalizer Replace"),
        content_(spec.at("content").get<std::string>()) {}
  void Normalize(std::string& text) const override { text = pattern_.ReplaceAll(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void Normalize(std::string& text) const override {
    for (const auto& s : steps_) s->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> MakeNormalizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  if (type == "NFC") return std::make_unique<Nfc>();
  if (type == "Prepend") return std::make_unique<Prepend>(spec.at("prepend").get<std::string>());
  if (type == "Replace") return std::make_unique<Replace>(spec, where);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& s : spec.at("normalizers")) {
      if (auto n = MakeNormalizer(s, where)) steps.push_back(std::move(n));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw Error(where + ": unsupported normalizer \"" + type + "\"");
}

}  // namespace tq::hf
