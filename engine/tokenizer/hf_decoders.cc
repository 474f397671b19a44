// Decoders of tokenizer.json (see hf_decoders.h).
#include "engine/tokenizer/hf_decoders.h"

#include <array>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "engine/common/error.h"
#include "engine/tokenizer/hf_pattern.h"
#include "engine/tokenizer/hf_pre_tokenizers.h"
#include "engine/tokenizer/utf8.h"

namespace tq::hf {
namespace {

using json = nlohmann::json;
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// GPT-2 byte-level alphabet back to bytes; the whole text is then made valid
// UTF-8 (from_utf8_lossy). A token with a character outside the alphabet
// (an added token such as "<|im_start|>" is inside; one with a space is not)
// contributes its own bytes.
class ByteLevel final : public Decoder {
 public:
  ByteLevel() {
    for (int b = 0; b < 256; ++b) {
      const std::string& s = ByteLevelChar(static_cast<unsigned char>(b));
      size_t i = 0;
      byte_of_[utf8::Next(s, i)] = static_cast<unsigned char>(b);
    }
  }
  void DecodeChain(std::vector<std::string>& tokens, bool raw) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool all = true;
      for (size_t i = 0; i < t.size() && all;) {
        const auto it = byte_of_.find(utf8::Next(t, i));
        if (it == byte_of_.end()) {
          all = false;
        } else {
          bytes += static_cast<char>(it->second);
        }
      }
      if (!all) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, raw ? std::move(bytes) : utf8::Lossy(bytes));
  }

 private:
  std::unordered_map<char32_t, unsigned char> byte_of_;
};

// "▁" -> " "; in the first token of a text (prepend_scheme not "never") the
// replacement character is dropped instead.
class Metaspace final : public Decoder {
 public:
  explicit Metaspace(const json& spec) {
    replacement_ = spec.value("replacement", std::string("\xE2\x96\x81"));
    if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string()) {
      strip_first_ = spec["prepend_scheme"].get<std::string>() != "never";
    } else {
      strip_first_ = spec.value("add_prefix_space", true);
    }
  }
  void DecodeChain(std::vector<std::string>& tokens, bool raw) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool drop = i == 0 && strip_first_ && !raw;
      std::string out;
      const std::string& t = tokens[i];
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!drop) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_ = true;
};

class Replace final : public Decoder {
 public:
  Replace(const json& spec, const std::string& where)
      : pattern_(spec.at("pattern"), where + ": decoder Replace"),
        content_(spec.at("content").get<std::string>()) {}
  void DecodeChain(std::vector<std::string>& tokens, bool) const override {
    for (std::string& t : tokens) t = pattern_.ReplaceAll(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Runs of "<0xNN>" tokens become their bytes when those form valid UTF-8,
// else one U+FFFD per byte (HF's ByteFallback).
class ByteFallback final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens, bool raw) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    const auto flush = [&] {
      if (run.empty()) return;
      if (raw || utf8::Valid(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run.size(); ++i) out.emplace_back(kReplacement);
      }
      run.clear();
    };
    for (std::string& t : tokens) {
      int byte = ByteOf(t);
      if (byte >= 0) {
        run += static_cast<char>(byte);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int ByteOf(const std::string& t) {
    if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
    const int hi = utf8::HexDigit(t[3]), lo = utf8::HexDigit(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class Fuse final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens, bool) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters of
// each token (after Fuse: of the text).
class Strip final : public Decoder {
 public:
  explicit Strip(const json& spec) : start_(spec.value("start", 0)), stop_(spec.value("stop", 0)) {
    const std::string c = spec.value("content", std::string(" "));
    size_t i = 0;
    content_ = c.empty() ? U' ' : utf8::Next(c, i);
  }
  void DecodeChain(std::vector<std::string>& tokens, bool raw) const override {
    if (raw) return;
    std::string content;
    utf8::Append(content, content_);
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && t.compare(b, content.size(), content) == 0 && b < e; ++k) {
        b += content.size();
      }
      for (size_t k = 0; k < stop_ && e >= b + content.size() &&
                         t.compare(e - content.size(), content.size(), content) == 0;
           ++k) {
        e -= content.size();
      }
      t = t.substr(b, e - b);
    }
  }

 private:
  size_t start_, stop_;
  char32_t content_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>& tokens, bool raw) const override {
    for (const auto& s : steps_) s->DecodeChain(tokens, raw);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> MakeDecoder(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") return std::make_unique<Metaspace>(spec);
  if (type == "Replace") return std::make_unique<Replace>(spec, where);
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") return std::make_unique<Strip>(spec);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& s : spec.at("decoders")) {
      if (auto d = MakeDecoder(s, where)) steps.push_back(std::move(d));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw Error(where + ": unsupported decoder \"" + type + "\"");
}

}  // namespace tq::hf
