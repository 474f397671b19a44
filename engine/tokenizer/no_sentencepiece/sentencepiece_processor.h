// Stand-in for <sentencepiece_processor.h> in builds configured with
// -DTQ_SENTENCEPIECE=OFF (the GPU test machine has CUDA, CMake and a compiler
// only; tests/cuda/run_device.sh). It declares the part of the sentencepiece
// API that tokenizer.cc and random_model.cc use; Load always fails with a
// message naming the option, so a tokenizer.model is a clear error there
// (tq::Error "<dir>/tokenizer.model: not a valid SentencePiece model: ...").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace absl {
using string_view = std::string_view;
}  // namespace absl

namespace sentencepiece {
namespace util {

class Status {
 public:
  bool ok() const { return false; }
  std::string ToString() const {
    return "this build has no sentencepiece (configured with -DTQ_SENTENCEPIECE=OFF)";
  }
};

}  // namespace util

class SentencePieceProcessor {
 public:
  util::Status Load(std::string_view) { return {}; }
  util::Status Encode(absl::string_view, std::vector<int>*) const { return {}; }
  util::Status Decode(const std::vector<int>&, std::string*) const { return {}; }
  int GetPieceSize() const { return 0; }
  bool IsControl(int) const { return false; }
  bool IsUnknown(int) const { return false; }
  bool IsUnused(int) const { return false; }
  bool IsByte(int) const { return false; }
  std::string IdToPiece(int) const { return ""; }
  int bos_id() const { return -1; }
  int eos_id() const { return -1; }
};

}  // namespace sentencepiece
