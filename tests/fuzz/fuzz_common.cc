// Shared pieces of the fuzz targets (fuzz_common.h).
#include "tests/fuzz/fuzz_common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

namespace tq::fuzz {

const ModelFiles& BundledFiles() {
  static const ModelFiles files = LoadModelFiles(TQ_MODEL_DIR);
  return files;
}

const Tokenizer& BundledTokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::Load(TQ_MODEL_DIR, BundledFiles().tokenizer);
  return *tokenizer;
}

const Tokenizer& ByteLevelTokenizer() {
  // A directory with only tokenizer.json: Tokenizer::Load picks it.
  static const std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::Load(TQ_FUZZ_DATA_DIR "/byte_level", TokenizerSettings{});
  return *tokenizer;
}

std::vector<std::string_view> SplitParts(const uint8_t* data, size_t size, size_t max_parts) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = rest.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kPartSeparator.size());
  }
  parts.push_back(rest);
  return parts;
}

namespace {

struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    path = std::filesystem::temp_directory_path() / ("tq-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

std::string ScratchPath(const std::string& name) {
  static const ScratchDir dir;
  return (dir.path / name).string();
}

void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

void Expected(const std::exception& e) {
  static const bool verbose = std::getenv("TQ_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "fuzz: expected error: %s\n", e.what());
}

void Unexpected(const char* where, const std::exception& e) {
  std::fprintf(stderr, "fuzz: %s threw an unexpected exception: %s\n", where, e.what());
  std::abort();
}

}  // namespace tq::fuzz
