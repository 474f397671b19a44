// Shared pieces of the libFuzzer targets (tests/fuzz/fuzz_*.cc): the bundled
// model loaded once per process, input splitting and scratch files.
// Single-threaded, as libFuzzer and the corpus replay call the targets.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::fuzz {

/// The model files of models/stories260K (TQ_MODEL_DIR), read on first use
/// and kept for the process.
const ModelFiles& BundledFiles();

/// Its SentencePiece tokenizer (vocabulary 512), loaded on first use.
const Tokenizer& BundledTokenizer();

/// The byte-level BPE tokenizer.json of tests/fuzz/data (written for the
/// fuzz targets, not a model's), loaded on first use.
const Tokenizer& ByteLevelTokenizer();

/// The separator between the parts of a multi-part input (a template and its
/// messages, a tokenizer.json and its text, ...): a line "=====".
inline constexpr std::string_view kPartSeparator = "\n=====\n";

/// Splits `data` at kPartSeparator into at most `max_parts` parts (the last
/// part keeps any further separators). Always at least one part.
std::vector<std::string_view> SplitParts(const uint8_t* data, size_t size, size_t max_parts);

/// A file path inside this process's scratch directory (/tmp/tq-fuzz-<pid>/,
/// created on first use, removed at exit).
std::string ScratchPath(const std::string& name);

/// Writes `bytes` to `path`, replacing it; aborts when it cannot.
void WriteFile(const std::string& path, std::string_view bytes);

/// An exception the code under test documents for bad input: ignored, or
/// printed when TQ_FUZZ_VERBOSE is set (to see what a corpus exercises).
void Expected(const std::exception& e);

/// Reports an exception the code under test must not throw for bad input
/// (anything but its documented error type) and aborts, so that libFuzzer
/// records the input as a crash.
[[noreturn]] void Unexpected(const char* where, const std::exception& e);

/// Little-endian reader of fuzz bytes: integers for choices, then the rest.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  /// The next byte, 0 once the input is used up.
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  /// The next two bytes as an unsigned 16-bit value.
  uint16_t U16() {
    const uint16_t lo = Byte();
    return static_cast<uint16_t>(lo | (Byte() << 8));
  }
  /// The next `n` bytes (fewer at the end) as text.
  std::string_view Take(size_t n) {
    n = std::min(n, size_ - pos_);
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace tq::fuzz
